package allocator

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/flow"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/keyspace"
)

// These benchmarks rebuild Gazette's allocator benchmark scenarios for
// Quire, end to end: one real allocator process (the leader, holding
// nothing itself) converges a simulated fleet whose member keys the
// benchmark writes, through a real etcd. Replicas are ready at once.

var deployN = flag.Int("deploy.n", 1, "scale N of BenchmarkRollingDeploy: 10·N members, 2000·N items")

// benchFleet is the leader process and its view of the fleet.
type benchFleet struct {
	b      *testing.B
	client *clientv3.Client
	root   string
	ks     *keyspace.KeySpace
	lease  clientv3.LeaseID

	mu     sync.Mutex
	idle   chan *State
	totals Round
	solves []time.Duration
	rounds int
}

var benchEtcdFsync = flag.Bool("bench.etcd-fsync", false,
	"run the end-to-end benchmarks against a dedicated etcd that syncs its WAL, as in production (by default, the tests' shared etcd, which does not)")

// benchEtcd returns a client of the benchmarks' etcd and a key prefix.
func benchEtcd(b *testing.B) (*clientv3.Client, string) {
	if !*benchEtcdFsync {
		return etcdtest.Client(b)
	}
	s, err := etcdtest.Start("", etcdtest.Options{Fsync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	c, err := s.Client()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c, "/bench/"
}

func newBenchFleet(b *testing.B) (*benchFleet, func()) {
	client, root := benchEtcd(b)
	ctx, cancel := context.WithCancel(context.Background())
	f := &benchFleet{b: b, client: client, root: root, idle: make(chan *State, 1)}
	lease, err := client.Grant(ctx, 60)
	if err != nil {
		b.Fatal(err)
	}
	f.lease = lease.ID
	leader := MemberKey(root, "leader", "leader")
	if _, err := Announce(ctx, client, leader, Encode(MemberSpec{Limit: 0}), f.lease); err != nil {
		b.Fatal(err)
	}
	f.ks = keyspace.New(root, NewDecoder(root, Decoders{}))
	if err := f.ks.Load(ctx, client, 0); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); f.ks.Watch(ctx, client) }()
	go func() {
		defer wg.Done()
		Allocate(ctx, Config{Client: client, KeySpace: f.ks, Member: leader, AfterRound: f.afterRound, Idle: f.onIdle, Logger: testLogger})
	}()
	keepAlive, err := client.KeepAlive(ctx, f.lease)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range keepAlive {
		}
	}()
	return f, func() { cancel(); wg.Wait() }
}

func (f *benchFleet) afterRound(r Round) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rounds++
	f.totals.Added += r.Added
	f.totals.Removed += r.Removed
	f.totals.Moved += r.Moved
	f.totals.Txns += r.Txns
	f.totals.Committed += r.Committed
	if r.Solved {
		f.solves = append(f.solves, r.Solve)
	}
}

func (f *benchFleet) onIdle(s *State) {
	select {
	case <-f.idle:
	default:
	}
	f.idle <- s
}

// awaitIdle waits until the leader is idle at a revision of at least rev
// and cond holds.
func (f *benchFleet) awaitIdle(rev int64, cond func(*State) bool) *State {
	timeout := time.After(10 * time.Minute)
	for {
		select {
		case s := <-f.idle:
			if s.Revision >= rev && (cond == nil || cond(s)) {
				return s
			}
		case <-timeout:
			f.b.Fatalf("leader not idle at revision %d", rev)
		}
	}
}

// apply commits ops in transactions of at most 128, returning the last
// revision.
func (f *benchFleet) apply(ops []clientv3.Op) int64 {
	var rev int64
	for len(ops) != 0 {
		n := min(len(ops), DefaultMaxTxnOps)
		resp, err := f.client.Txn(context.Background()).Then(ops[:n]...).Commit()
		if err != nil {
			f.b.Fatal(err)
		}
		rev, ops = resp.Header.Revision, ops[n:]
	}
	return rev
}

func (f *benchFleet) putMembers(zone string, from, to, limit int, exiting bool) int64 {
	var ops []clientv3.Op
	for i := from; i < to; i++ {
		ops = append(ops, clientv3.OpPut(MemberKey(f.root, zone, fmt.Sprintf("m%05d", i)),
			Encode(MemberSpec{Limit: limit, Exiting: exiting}), clientv3.WithLease(f.lease)))
	}
	return f.apply(ops)
}

func (f *benchFleet) report(steps int, start time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var total, worst time.Duration
	for _, d := range f.solves {
		total += d
		worst = max(worst, d)
	}
	if len(f.solves) != 0 {
		f.b.ReportMetric(float64(total.Milliseconds())/float64(len(f.solves)), "ms/solve")
		f.b.ReportMetric(float64(worst.Milliseconds()), "max-ms/solve")
	}
	f.b.ReportMetric(time.Since(start).Seconds()/float64(steps), "s/step")
	f.b.ReportMetric(float64(f.totals.Added), "adds")
	f.b.ReportMetric(float64(f.totals.Removed), "removes")
	f.b.ReportMetric(float64(f.totals.Moved), "slot-moves")
	f.b.ReportMetric(float64(f.totals.Txns), "txns")
	f.b.ReportMetric(float64(f.totals.Txns-f.totals.Committed), "conflicts")
	f.b.ReportMetric(float64(f.rounds), "rounds")
}

// BenchmarkRollingDeploy: 10·N members in two zones (3:2) over the run,
// 2000·N items at replication 3. The fleet starts with 5·N members of
// limit 1500; then, in blocks of N, N replacements of limit 1205 join, and
// N original members drain and leave, until all are replaced.
func BenchmarkRollingDeploy(b *testing.B) {
	n := *deployN
	for range b.N {
		// Starting etcd (the first time, in a process) and the leader is not
		// the deploy: it took up to a second of a single run's time.
		b.StopTimer()
		f, stop := newBenchFleet(b)
		b.StartTimer()
		var ops []clientv3.Op
		for i := range 2000 * n {
			ops = append(ops, clientv3.OpPut(ItemKey(f.root, fmt.Sprintf("item-%06d", i)), Encode(ItemSpec{Replication: 3})))
		}
		f.apply(ops)
		zone := func(i int) string { return [5]string{"za", "zb", "za", "zb", "za"}[i%5] }
		// Members are numbered so that block k of originals is [kN, (k+1)N)
		// and block k of replacements is [5N+kN, 5N+(k+1)N).
		// A block of members joins, or changes, in one transaction.
		put := func(from, to, limit int, exiting bool) int64 {
			var ops []clientv3.Op
			for i := from; i < to; i++ {
				ops = append(ops, clientv3.OpPut(MemberKey(f.root, zone(i), fmt.Sprintf("m%05d", i)),
					Encode(MemberSpec{Limit: limit, Exiting: exiting}), clientv3.WithLease(f.lease)))
			}
			return f.apply(ops)
		}
		start := time.Now()
		step := func(what string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			b.Logf("%-28s adds %6d removes %6d slot-moves %6d", what, f.totals.Added, f.totals.Removed, f.totals.Moved)
		}
		f.awaitIdle(put(0, 5*n, 1500, false), nil)
		step("initial members placed")
		for k := range 5 {
			f.awaitIdle(put(5*n+k*n, 5*n+(k+1)*n, 1205, false), nil)
			step(fmt.Sprintf("block %d joined", k))
			rev := put(k*n, (k+1)*n, 1500, true)
			drained := func(s *State) bool {
				for i := k * n; i < (k+1)*n; i++ {
					if m := s.MemberIndex(zone(i), fmt.Sprintf("m%05d", i)); m >= 0 && s.Load[m] != 0 {
						return false
					}
				}
				return true
			}
			f.awaitIdle(rev, drained)
			step(fmt.Sprintf("block %d drained", k))
			var dels []clientv3.Op
			for i := k * n; i < (k+1)*n; i++ {
				dels = append(dels, clientv3.OpDelete(MemberKey(f.root, zone(i), fmt.Sprintf("m%05d", i))))
			}
			f.awaitIdle(f.apply(dels), nil)
		}
		f.report(11, start)
		b.StopTimer()
		stop()
		b.StartTimer()
	}
}

// BenchmarkChangingReplication: 10 members (limit 10,000), 323 items at
// replication 2; each step sets a random run of 1–199 contiguous items to
// a replication of 0, 1 or 3.
func BenchmarkChangingReplication(b *testing.B) {
	f, stop := newBenchFleet(b)
	defer stop()
	const items = 323
	var ops []clientv3.Op
	for i := range items {
		ops = append(ops, clientv3.OpPut(ItemKey(f.root, fmt.Sprintf("item-%03d", i)), Encode(ItemSpec{Replication: 2})))
	}
	f.apply(ops)
	f.awaitIdle(f.putMembers("za", 0, 5, 10000, false), nil)
	f.awaitIdle(f.putMembers("zb", 5, 10, 10000, false), nil)
	f.mu.Lock()
	f.totals, f.solves, f.rounds = Round{}, nil, 0
	f.mu.Unlock()
	rnd := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		run := 1 + rnd.IntN(199)
		from := rnd.IntN(items - run + 1)
		r := [3]int{0, 1, 3}[rnd.IntN(3)]
		ops = ops[:0]
		for i := from; i < from+run; i++ {
			ops = append(ops, clientv3.OpPut(ItemKey(f.root, fmt.Sprintf("item-%03d", i)), Encode(ItemSpec{Replication: r})))
		}
		f.awaitIdle(f.apply(ops), nil)
	}
	f.report(b.N, start)
}

// BenchmarkLeaderRound100k measures the leader's work per round at scale,
// without etcd: index a snapshot of 1,000 members in 3 zones, 100,000 items
// at replication 3 and their 300,000 assignments (converged, except that
// one member has left), solve, and plan the converge round.
func BenchmarkLeaderRound100k(b *testing.B) {
	sc := &Scenario{}
	for m := range 1000 {
		sc.Members = append(sc.Members, ScenarioMember{Zone: fmt.Sprintf("z%d", m%3), Suffix: fmt.Sprintf("m%04d", m), ItemLimit: 400})
	}
	for i := range 100_000 {
		sc.Items = append(sc.Items, ScenarioItem{ID: fmt.Sprintf("item-%06d", i), Replication: 3})
	}
	sc.Assignments = PlanScenario(sc).Assignments
	gone := sc.Members[0]
	sc.Members = sc.Members[1:]
	kept := sc.Assignments[:0]
	for _, a := range sc.Assignments {
		if a.Zone != gone.Zone || a.Suffix != gone.Suffix {
			kept = append(kept, a)
		}
	}
	sc.Assignments = kept
	kvs, rev := sc.keyValues()
	b.ReportAllocs()
	b.ResetTimer()
	var ops int
	for range b.N {
		s := NewState("", kvs, rev)
		var solver flow.Solver
		sol := solver.Solve(s.Problem())
		c := converger{s: s, target: sol.Assigned, ready: AllReady, b: newBatch(nil, 0)}
		if err := c.plan(); err != nil {
			b.Fatal(err)
		}
		c.b.flush()
		ops = 0
		for _, t := range c.b.txns {
			ops += len(t.ops)
		}
	}
	b.ReportMetric(float64(ops), "ops/round")
}
