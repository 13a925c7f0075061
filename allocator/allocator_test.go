package allocator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/internal/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// loads returns each member's number of assignments, by "zone/suffix".
func loads(s *State) map[string]int {
	out := make(map[string]int)
	for m, mkv := range s.Members {
		out[mkv.Zone+"/"+mkv.Suffix] = s.Load[m]
	}
	return out
}

func assertSpread(t *testing.T, s *State, wantZones int) {
	t.Helper()
	for _, it := range s.Items {
		zones := make(map[string]bool)
		for _, a := range s.ItemAssignments(it.ID) {
			zones[a.Zone] = true
		}
		if len(zones) < wantZones {
			t.Errorf("item %s spans %d zones, want %d", it.ID, len(zones), wantZones)
		}
	}
}

func assertBalanced(t *testing.T, s *State) {
	t.Helper()
	lo, hi := -1, -1
	for m := range s.Members {
		if lo < 0 || s.Load[m] < lo {
			lo = s.Load[m]
		}
		hi = max(hi, s.Load[m])
	}
	if hi-lo > 1 {
		t.Errorf("loads %v differ by more than one", loads(s))
	}
}

// assertZonesBalanced asserts that members of each zone differ in load by
// at most one. (Across zones, loads follow the even spread of items.)
func assertZonesBalanced(t *testing.T, s *State) {
	t.Helper()
	byZone := make(map[string][]int)
	for m, mkv := range s.Members {
		byZone[mkv.Zone] = append(byZone[mkv.Zone], s.Load[m])
	}
	for zone, ls := range byZone {
		if slices.Max(ls)-slices.Min(ls) > 1 {
			t.Errorf("zone %s: loads %v differ by more than one", zone, ls)
		}
	}
}

func assertReplicas(t *testing.T, s *State, want int) {
	t.Helper()
	for _, it := range s.Items {
		if n := len(s.ItemAssignments(it.ID)); n != want {
			t.Errorf("item %s has %d replicas, want %d", it.ID, n, want)
		}
	}
}

// memberSets maps each item to the set of members holding it.
func memberSets(s *State) map[string]map[string]bool {
	out := make(map[string]map[string]bool)
	for _, a := range s.Assignments {
		if out[a.Item] == nil {
			out[a.Item] = make(map[string]bool)
		}
		out[a.Item][a.Zone+"/"+a.Suffix] = true
	}
	return out
}

// moved counts item replicas present in after but not in before.
func moved(before, after *State) int {
	b, a := memberSets(before), memberSets(after)
	n := 0
	for item, ms := range a {
		for m := range ms {
			if !b[item][m] {
				n++
			}
		}
	}
	return n
}

func startFleet(t *testing.T, zones, perZone, limit, items, replication int) *fleet {
	f := newFleet(t)
	f.items(items, replication)
	for z := range zones {
		for m := range perZone {
			f.join(fmt.Sprintf("z%d", z+1), fmt.Sprintf("m%d", m+1), limit)
		}
	}
	return f
}

func TestFleetStartSpreadsAndBalances(t *testing.T) {
	f := startFleet(t, 3, 2, 20, 20, 3)
	s := f.awaitConverged()
	assertReplicas(t, s, 3)
	assertSpread(t, s, 3)
	assertBalanced(t, s)
}

func TestMemberJoinMovesAFairShare(t *testing.T) {
	f := startFleet(t, 3, 2, 20, 21, 3)
	before := f.awaitConverged()
	f.join("z1", "m9", 20)
	after := f.awaitConverged()
	assertReplicas(t, after, 3)
	assertSpread(t, after, 3)
	assertZonesBalanced(t, after)
	// Each zone holds 21 replicas (items spread evenly over zones); z1's
	// three members now hold 7 each: the newcomer takes 7 and nothing else
	// moves.
	if n := moved(before, after); n != 7 {
		t.Errorf("%d replicas moved on join, want 7", n)
	}
}

func TestMemberLeaveMovesOnlyItsItems(t *testing.T) {
	f := startFleet(t, 3, 3, 20, 24, 3)
	before := f.awaitConverged()
	lost := loads(before)["z2/m2"]
	f.kill("z2", "m2")
	after := f.awaitConverged()
	assertReplicas(t, after, 3)
	assertSpread(t, after, 3)
	if n := moved(before, after); n != lost {
		t.Errorf("%d replicas moved after a member with %d left, want %d", n, lost, lost)
	}
}

func TestWholeZoneLoss(t *testing.T) {
	f := startFleet(t, 3, 2, 30, 20, 3)
	f.awaitConverged()
	f.kill("z3", "m1")
	f.kill("z3", "m2")
	s := f.awaitConverged()
	assertReplicas(t, s, 3)
	assertSpread(t, s, 2)
	assertBalanced(t, s)
}

func TestLimitChangeSheds(t *testing.T) {
	f := startFleet(t, 2, 2, 20, 10, 2)
	f.awaitConverged()
	f.update("z1", "m1", MemberSpec{Limit: 1})
	s := f.awaitConverged()
	if got := loads(s)["z1/m1"]; got != 1 {
		t.Errorf("member with limit 1 holds %d", got)
	}
	assertReplicas(t, s, 2)
	assertSpread(t, s, 2)
}

func TestReplicationChanges(t *testing.T) {
	f := startFleet(t, 3, 1, 20, 6, 3)
	f.awaitConverged()
	for i := range 3 {
		f.item(fmt.Sprintf("item-%03d", i), 1)
	}
	f.item("item-003", 0)
	f.item("item-004", 2)
	del, err := f.client.Delete(context.Background(), ItemKey(f.root, "item-005"))
	if err != nil {
		t.Fatal(err)
	}
	f.lastRev = del.Header.Revision
	s := f.awaitConverged()
	want := map[string]int{"item-000": 1, "item-001": 1, "item-002": 1, "item-003": 0, "item-004": 2, "item-005": 0}
	for id, n := range want {
		if got := len(s.ItemAssignments(id)); got != n {
			t.Errorf("item %s has %d replicas, want %d", id, got, n)
		}
	}
}

func TestUnevenZonesStillSpread(t *testing.T) {
	f := newFleet(t)
	f.items(8, 2)
	f.join("small", "m1", 10)
	for m := range 4 {
		f.join("big", fmt.Sprintf("m%d", m), 10)
	}
	s := f.awaitConverged()
	assertReplicas(t, s, 2)
	assertSpread(t, s, 2)
}

func TestInfeasibleDemandAssignsWhatItCan(t *testing.T) {
	f := startFleet(t, 1, 3, 10, 4, 5)
	s := f.awaitConverged()
	assertReplicas(t, s, 3)
}

func TestLeaderDeathMidConverge(t *testing.T) {
	f := newFleet(t)
	f.items(30, 2)
	f.join("z1", "leader", 100)
	s := f.awaitConverged()
	if got := loads(s)["z1/leader"]; got != 30 {
		t.Fatalf("sole member holds %d, want 30", got)
	}
	f.join("z2", "m1", 100)
	f.join("z2", "m2", 100)
	// Let the leader begin moving replicas, then kill it mid-way.
	deadline := time.After(30 * time.Second)
	for {
		changed := f.ks.Changed()
		if s := f.state(); len(s.MemberAssignments("z2", "m1"))+len(s.MemberAssignments("z2", "m2")) > 0 {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("leader never started converging")
		}
	}
	f.kill("z1", "leader")
	s = f.awaitConverged()
	assertReplicas(t, s, 2)
	assertBalanced(t, s)
}

func TestDrainShedsThenReturns(t *testing.T) {
	f := startFleet(t, 2, 2, 20, 10, 2)
	f.awaitConverged()
	p := f.members["z1/m1"]
	f.update("z1", "m1", MemberSpec{Limit: 20, Exiting: true})
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("draining Allocate returned %v, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("draining member's Allocate did not return")
	}
	s := f.awaitConverged()
	if got := loads(s)["z1/m1"]; got != 0 {
		t.Errorf("drained member holds %d", got)
	}
	assertReplicas(t, s, 2)
}

// A draining member whose items nobody can take keeps them (dropping them
// would leave them no ready replica) until a member joins that can.
func TestDrainWaitsForCapacity(t *testing.T) {
	f := newFleet(t)
	f.items(3, 1)
	p := f.join("z1", "old", 10)
	f.awaitConverged()
	f.update("z1", "old", MemberSpec{Limit: 10, Exiting: true})
	s := f.awaitIdle()
	if got := loads(s)["z1/old"]; got != 3 {
		t.Fatalf("draining member with nowhere to go holds %d, want 3", got)
	}
	select {
	case err := <-p.done:
		t.Fatalf("Allocate returned %v while the member held items", err)
	default:
	}
	f.join("z1", "new", 10)
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("drained Allocate returned %v, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("drain did not finish once capacity joined")
	}
	s = f.awaitConverged()
	if got := loads(s)["z1/new"]; got != 3 {
		t.Errorf("new member holds %d, want 3", got)
	}
}

// A draining member of a fleet as large as its items' replication (three
// brokers, journals of replication 3) gives its replicas up once the
// other members hold theirs ready, rather than wait for capacity that the
// fleet lacks: the items keep every ready replica the rest can hold.
func TestDrainOfAFleetAtFullReplicationFinishes(t *testing.T) {
	f := newFleet(t)
	f.items(4, 3)
	p := f.join("z1", "m1", 10)
	f.join("z1", "m2", 10)
	f.join("z2", "m3", 10)
	f.awaitConverged()
	f.update("z1", "m1", MemberSpec{Limit: 10, Exiting: true})
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("drained Allocate returned %v, want nil", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the drain did not finish")
	}
	f.kill("z1", "m1") // As allocator.Run revokes a drained member's lease.
	s := f.awaitConverged()
	if l := loads(s); l["z1/m2"] != 4 || l["z2/m3"] != 4 {
		t.Errorf("loads after the drain: %v; want every item on both others", l)
	}
}

func TestSmallTransactionsStillConverge(t *testing.T) {
	f := newFleet(t)
	f.maxOps = 12
	f.items(40, 2)
	f.join("z1", "m1", 100)
	f.join("z2", "m1", 100)
	s := f.awaitConverged()
	assertReplicas(t, s, 2)
}

func TestAnnounceWaitsForTheHolder(t *testing.T) {
	client, root := etcdtest.Client(t)
	ctx := context.Background()
	key := MemberKey(root, "z", "m")
	l1, err := client.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := client.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	first, err := Announce(ctx, client, key, `{"itemLimit":1}`, l1.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Re-announcing under the same lease adopts the key.
	if again, err := Announce(ctx, client, key, `{"itemLimit":1}`, l1.ID); err != nil || again.Revision != first.Revision {
		t.Fatalf("re-announce: %v, revision %v want %d", err, again, first.Revision)
	}
	// Another lease waits, and never overwrites.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := Announce(short, client, key, `{"itemLimit":2}`, l2.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second announce: %v, want deadline exceeded", err)
	}
	resp, err := client.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Kvs[0].Value) != `{"itemLimit":1}` || clientv3.LeaseID(resp.Kvs[0].Lease) != l1.ID {
		t.Fatalf("member key overwritten: %s", resp.Kvs[0])
	}
	done := make(chan error, 1)
	go func() {
		_, err := Announce(ctx, client, key, `{"itemLimit":2}`, l2.ID)
		done <- err
	}()
	if _, err := client.Revoke(ctx, l1.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("second announce after the first went: %v", err)
	}
	if _, err := first.Update(ctx, `{"itemLimit":3}`); !errors.Is(err, ErrMemberGone) {
		t.Fatalf("stale announcement's update: %v, want ErrMemberGone", err)
	}
}

// A member key whose holder keeps renewing its lease is a live process's:
// Announce refuses the name, naming the holder, rather than wait forever.
// One whose lease runs out (a crashed process, restarted) is waited for.
func TestAnnounceRefusesALiveHolder(t *testing.T) {
	client, root := etcdtest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := MemberKey(root, "z", "live")
	live, err := client.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	keepCtx, stopKeeping := context.WithCancel(ctx)
	defer stopKeeping()
	if _, err := client.KeepAlive(keepCtx, live.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := Announce(ctx, client, key, `{"itemLimit":1,"endpoint":"10.0.0.1:8080"}`, live.ID); err != nil {
		t.Fatal(err)
	}
	second, err := client.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Announce(ctx, client, key, `{"itemLimit":2}`, second.ID)
	if !errors.Is(err, ErrMemberHeld) || !strings.Contains(err.Error(), "10.0.0.1:8080") || !strings.Contains(err.Error(), key) {
		t.Fatalf("announcing a live holder's name: %v, want ErrMemberHeld naming the key and the holder", err)
	}
	resp, err := client.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != live.ID {
		t.Fatalf("the live holder's key changed: %v", resp.Kvs)
	}

	// Once the holder stops renewing (it died), its lease runs out and the
	// name is announced under the new lease.
	stopKeeping()
	ann, err := Announce(ctx, client, key, `{"itemLimit":2}`, second.ID)
	if err != nil {
		t.Fatalf("announcing after the holder died: %v", err)
	}
	if ann.Lease != second.ID {
		t.Fatalf("announced under lease %x, want %x", ann.Lease, second.ID)
	}
}

func TestStaleLeaderChangesNothing(t *testing.T) {
	client, root := etcdtest.Client(t)
	ctx := context.Background()
	leader := MemberKey(root, "z", "leader")
	put, err := client.Put(ctx, leader, `{"itemLimit":1}`)
	if err != nil {
		t.Fatal(err)
	}
	observed := put.Header.Revision
	// The leader's key changes (it was deposed and re-announced) after it
	// planned a round.
	if _, err := client.Put(ctx, leader, `{"itemLimit":2}`); err != nil {
		t.Fatal(err)
	}
	b := newBatch(client, 0, clientv3.Compare(clientv3.ModRevision(leader), "=", observed))
	b.Then(clientv3.OpPut(AssignmentKey(root, "a", "z", "leader", 0), ""))
	if err := b.Checkpoint(roundStats{}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Commit(ctx, 1)
	committed := res.committed
	if err != nil || committed != 0 {
		t.Fatalf("stale leader's round: committed %d, %v; want 0", committed, err)
	}
	resp, err := client.Get(ctx, root+AssignmentsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("stale leader wrote %d assignments", len(resp.Kvs))
	}
}
