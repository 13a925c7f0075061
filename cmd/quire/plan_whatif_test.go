package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
)

// holders maps each item to its members (ZONE#SUFFIX), sorted: the
// assignments of a plan, or of a live fleet.
type holders map[string][]string

func (h holders) String() string {
	var s []string
	for _, item := range slices.Sorted(maps.Keys(h)) {
		s = append(s, item+"@"+strings.Join(h[item], ","))
	}
	return strings.Join(s, " ")
}

func holdersOf(as []allocator.ScenarioAssignment) holders {
	h := holders{}
	for _, a := range as {
		h[a.Item] = append(h[a.Item], allocator.MemberName(a.Zone, a.Suffix))
	}
	for _, m := range h {
		sort.Strings(m)
	}
	return h
}

// liveHolders reads the assignments under root from etcd.
func liveHolders(t *testing.T, etcd *clientv3.Client, root string) holders {
	t.Helper()
	resp, err := etcd.Get(context.Background(), root+allocator.AssignmentsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var as []allocator.ScenarioAssignment
	for _, kv := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), root+allocator.AssignmentsPrefix), "#")
		as = append(as, allocator.ScenarioAssignment{Item: parts[0], Zone: parts[1], Suffix: parts[2]})
	}
	return holdersOf(as)
}

// awaitHolders waits until the fleet under root holds what want says.
func awaitHolders(t *testing.T, etcd *clientv3.Client, root string, want holders) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := liveHolders(t, etcd, root)
		if got.String() == want.String() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the allocator converged to\n  %s\nthe plan said\n  %s", got, want)
		}
		time.Sleep(50 * time.Millisecond) // Polling etcd while the allocator moves replicas.
	}
}

// awaitConverged waits until the live fleet under root plans no moves,
// and returns that plan.
func awaitConverged(t *testing.T, root string) allocator.Plan {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := livePlan(t, root)
		if len(p.Added)+len(p.Removed) == 0 && p.Stats.AssignedSlots == p.Stats.DesiredSlots {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("fleet %s does not converge: %+v", root, p)
		}
		time.Sleep(50 * time.Millisecond) // Polling while the fleet starts.
	}
}

// busiest is the member that holds the most assignments of p.
func busiest(p allocator.Plan) string {
	n := map[string]int{}
	best := ""
	for _, a := range p.Assignments {
		name := allocator.MemberName(a.Zone, a.Suffix)
		if n[name]++; best == "" || n[name] > n[best] || n[name] == n[best] && name < best {
			best = name
		}
	}
	return best
}

// A what-if drain of a real broker fleet lists the moves that the
// allocator then makes when that broker drains.
func TestPlanDrainOfBrokersIsWhatTheAllocatorDoes(t *testing.T) {
	c := brokertest.New(t)
	for _, name := range []string{"b1", "b2", "b3"} {
		c.Start(name)
	}
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("plan/j%d", i))
	}
	c.Journals(c.Client(c.Brokers["b1"]), 2, names...)
	now := awaitConverged(t, c.Root)

	drained := busiest(now)
	plan := livePlan(t, c.Root, "--drain", drained)
	if len(plan.Removed) == 0 || len(plan.Added) != len(plan.Removed) {
		t.Fatalf("drain of %s: +%d -%d moves, want its replicas moved one for one", drained, len(plan.Added), len(plan.Removed))
	}
	for _, a := range plan.Removed {
		if allocator.MemberName(a.Zone, a.Suffix) != drained {
			t.Errorf("drain of %s removes %s from %s#%s", drained, a.Item, a.Zone, a.Suffix)
		}
	}
	_, suffix, _ := allocator.ParseMemberName(drained)
	c.Drain(c.Brokers[suffix])
	awaitHolders(t, c.Etcd, c.Root, holdersOf(plan.Assignments))
}

// A what-if drain of a real consumer fleet lists the moves that the
// allocator then makes when that process drains.
func TestPlanDrainOfConsumersIsWhatTheAllocatorDoes(t *testing.T) {
	c := startShardsCluster(t)
	c.fleet.Start("c3", "zc")
	must(t, c.broker, strings.NewReader(shardsTestJournals), "journals", "apply", "-f", "-")
	c.must(strings.NewReader(shardsTestFile(c.root, 1)), "apply", "-f", "-")
	now := awaitConverged(t, c.root)

	drained := busiest(now)
	plan := livePlan(t, c.root, "--drain", drained)
	if len(plan.Removed) == 0 || len(plan.Added) != len(plan.Removed) {
		t.Fatalf("drain of %s: +%d -%d moves, want its replicas moved one for one", drained, len(plan.Added), len(plan.Removed))
	}
	_, suffix, _ := allocator.ParseMemberName(drained)
	if err := c.fleet.Drain(c.fleet.Procs[suffix]); err != nil {
		t.Fatal(err)
	}
	awaitHolders(t, c.fleet.Etcd, c.root, holdersOf(plan.Assignments))
}

// What-ifs and live fleets that cannot be planned are errors of input.
func TestPlanRefusesWhatItCannotPlan(t *testing.T) {
	c := brokertest.New(t)
	c.Start("b1")
	c.Journals(c.Client(c.Brokers["b1"]), 1, "plan/x")
	awaitConverged(t, c.Root)
	etcd := etcdtest.Shared(t).Endpoint()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefix", c.Root + "nothing-here/"}, "holds no fleet"},
		{[]string{"--prefix", c.Root, "--drain", "zb9#b9"}, `"zb9#b9": no such member (members are zb1#b1)`},
		{[]string{"--prefix", c.Root, "--drain", "b9"}, "ZONE#SUFFIX"},
		{[]string{"--prefix", c.Root, "--add", "zb1#b1:5"}, "has that member already"},
		{[]string{"--prefix", c.Root, "--add", "zb2#b2"}, "ZONE#SUFFIX:LIMIT"},
		{[]string{"--prefix", c.Root, "--replication", "plan/y=2"}, `"plan/y": no such item`},
		{[]string{"--prefix", c.Root, "--replication", "plan/x=many"}, `"many" is not a count`},
	} {
		stdout, stderr, code := runBinary(t, append([]string{"allocator", "plan", "--etcd", etcd}, tc.args...)...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("plan %v: exit %d, stdout %q, stderr %q; want 2, nothing, an error saying %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	// A value that does not decode as what the fleet holds.
	if _, err := c.Etcd.Put(context.Background(), c.Root+allocator.ItemsPrefix+"plan/bad", `{"name": 7}`); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runBinary(t, "allocator", "plan", "--etcd", etcd, "--prefix", c.Root, "--fleet", "brokers")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "plan/bad") || !strings.Contains(stderr, "do not decode") {
		t.Errorf("a bad value: exit %d, stdout %q, stderr %q; want 2, nothing, an error naming the key", code, stdout, stderr)
	}
}

// The table lists the moves of a what-if.
func TestPlanTableListsMoves(t *testing.T) {
	stdout, stderr, code := runBinary(t, "allocator", "plan", "-f", "testdata/small.yaml", "--drain", "z1#m1", "--add", "z9#new:100")
	if code != 0 || !strings.Contains(stdout, "MOVE") || !strings.Contains(stdout, "remove") {
		t.Errorf("exit %d, stdout %q, stderr %q; want the moves listed", code, stdout, stderr)
	}
}
