package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/keyspace"
)

// A fleet is several in-process members allocating items through a real
// etcd, as separate processes would: each has its own lease, keyspace and
// Allocate loop, and an owner loop that marks its new assignments ready.
// A checker mirrors the fleet and asserts the allocator's invariants on
// every change it observes.
type fleet struct {
	t       *testing.T
	client  *clientv3.Client
	root    string
	ks      *keyspace.KeySpace // the checker's mirror
	maxOps  int
	members map[string]*process
	logger  *slog.Logger // of the members' Allocate; nil means testLogger

	mu         sync.Mutex
	violations []string
	lastRev    int64 // of the test's last change to the fleet
	idle       chan *State
	rounds     int
	wg         sync.WaitGroup
	cancel     context.CancelFunc
}

// process is one member of a fleet.
type process struct {
	zone, suffix string
	lease        clientv3.LeaseID
	ann          *Announcement
	cancel       context.CancelFunc
	done         chan error // Allocate's result
}

const readyValue = "ready"

var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func testReady(a AssignmentKV, _ []AssignmentKV) bool { return string(a.KV.Value) == readyValue }

func newFleet(t *testing.T) *fleet {
	client, root := etcdtest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{t: t, client: client, root: root, members: make(map[string]*process), cancel: cancel,
		idle: make(chan *State, 1)}
	f.ks = keyspace.New(root, NewDecoder(root, Decoders{}))
	if err := f.ks.Load(ctx, client, 0); err != nil {
		t.Fatal(err)
	}
	var prev *State
	f.ks.Observe(func(kvs keyspace.KeyValues, rev int64) {
		next := NewState(root, kvs, rev)
		if prev != nil {
			f.check(prev, next)
		}
		prev = next
	})
	f.goWatch(ctx, f.ks)
	t.Cleanup(func() {
		for _, p := range f.members {
			p.cancel()
		}
		cancel()
		f.wg.Wait()
		f.assertNoViolations()
	})
	return f
}

func (f *fleet) goWatch(ctx context.Context, ks *keyspace.KeySpace) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := ks.Watch(ctx, f.client); err != nil && !errors.Is(err, context.Canceled) {
			f.violation("keyspace watch: %v", err)
		}
	}()
}

func (f *fleet) violation(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations = append(f.violations, fmt.Sprintf(format, args...))
}

func (f *fleet) assertNoViolations() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		f.t.Error(v)
	}
	f.violations = nil
}

func (f *fleet) put(key, value string) {
	f.t.Helper()
	resp, err := f.client.Put(context.Background(), key, value)
	if err != nil {
		f.t.Fatal(err)
	}
	f.lastRev = resp.Header.Revision
}

// update changes a member's spec.
func (f *fleet) update(zone, suffix string, spec MemberSpec) {
	f.t.Helper()
	rev, err := f.members[zone+"/"+suffix].ann.Update(context.Background(), Encode(spec))
	if err != nil {
		f.t.Fatal(err)
	}
	f.lastRev = rev
}

func (f *fleet) item(id string, replication int) {
	f.put(ItemKey(f.root, id), Encode(ItemSpec{Replication: replication}))
}

func (f *fleet) items(n, replication int) {
	for i := range n {
		f.item(fmt.Sprintf("item-%03d", i), replication)
	}
}

// join starts a member process.
func (f *fleet) join(zone, suffix string, limit int) *process {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{zone: zone, suffix: suffix, cancel: cancel, done: make(chan error, 1)}
	lease, err := f.client.Grant(ctx, 30)
	if err != nil {
		f.t.Fatal(err)
	}
	p.lease = lease.ID
	keepAlive, err := f.client.KeepAlive(ctx, p.lease)
	if err != nil {
		f.t.Fatal(err)
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for range keepAlive {
		}
	}()
	key := MemberKey(f.root, zone, suffix)
	if p.ann, err = Announce(ctx, f.client, key, Encode(MemberSpec{Limit: limit}), p.lease); err != nil {
		f.t.Fatal(err)
	}
	f.lastRev = p.ann.Revision
	ks := keyspace.New(f.root, NewDecoder(f.root, Decoders{}))
	if err := ks.Load(ctx, f.client, 0); err != nil {
		f.t.Fatal(err)
	}
	f.goWatch(ctx, ks)
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		p.done <- Allocate(ctx, Config{
			Client: f.client, KeySpace: ks, Member: key, Ready: testReady,
			MaxTxnOps: f.maxOps, AfterRound: f.afterRound, Idle: f.onIdle, Logger: f.memberLogger(),
		})
	}()
	go func() {
		defer f.wg.Done()
		f.own(ctx, ks, p)
	}()
	f.members[zone+"/"+suffix] = p
	return p
}

func (f *fleet) memberLogger() *slog.Logger {
	if f.logger != nil {
		return f.logger
	}
	return testLogger
}

// own marks the process's new assignments ready, as an owner (a broker
// that joined the route, a standby that caught up) would.
func (f *fleet) own(ctx context.Context, ks *keyspace.KeySpace, p *process) {
	for {
		changed := ks.Changed()
		kvs, rev := ks.Snapshot()
		for _, a := range NewState(f.root, kvs, rev).MemberAssignments(p.zone, p.suffix) {
			if string(a.KV.Value) == readyValue {
				continue
			}
			key := string(a.KV.Key)
			_, err := f.client.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", a.KV.ModRevision)).
				Then(clientv3.OpPut(key, readyValue, clientv3.WithIgnoreLease())).Commit()
			if err != nil && ctx.Err() == nil {
				f.violation("marking %s ready: %v", key, err)
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// kill ends a process abruptly: its lease is revoked, as when it expires.
func (f *fleet) kill(zone, suffix string) {
	f.t.Helper()
	p := f.members[zone+"/"+suffix]
	p.cancel()
	resp, err := f.client.Revoke(context.Background(), p.lease)
	if err != nil {
		f.t.Fatal(err)
	}
	f.lastRev = resp.Header.Revision
	delete(f.members, zone+"/"+suffix)
}

func (f *fleet) afterRound(r Round) {
	f.mu.Lock()
	f.rounds++
	f.mu.Unlock()
	if r.Committed < r.Txns {
		return // A conflicted round: its revision may not be the fleet's.
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.ks.WaitForRevision(ctx, r.Revision); err != nil {
		f.violation("waiting for round at %d (keyspace at %d): %v", r.Revision, f.ks.Revision(), err)
		return
	}
	input, s := r.Input, f.state()
	// Every item holding assignments has exactly one primary, unless a
	// member vanished under it since.
	for _, it := range s.Items {
		as := s.ItemAssignments(it.ID)
		if len(as) == 0 {
			continue
		}
		primaries, orphans := 0, 0
		for _, a := range as {
			if a.Slot == 0 {
				primaries++
			}
			if a.Member < 0 {
				orphans++
			}
		}
		if primaries != 1 && orphans == 0 && !lostMembers(input, s) {
			var in, out []string
			for _, a := range input.ItemAssignments(it.ID) {
				in = append(in, fmt.Sprintf("%s/%s#%d=%s@%d", a.Zone, a.Suffix, a.Slot, a.KV.Value, a.KV.ModRevision))
			}
			for _, a := range as {
				out = append(out, fmt.Sprintf("%s/%s#%d=%s@%d", a.Zone, a.Suffix, a.Slot, a.KV.Value, a.KV.ModRevision))
			}
			f.violation("after round at %d (input %d, now %d): item %s has %d primaries: %v -> %v", r.Revision, input.Revision, s.Revision, it.ID, primaries, in, out)
		}
	}
}

// onIdle keeps the latest state at which the leader found nothing to do.
func (f *fleet) onIdle(s *State) {
	select {
	case <-f.idle:
	default:
	}
	f.idle <- s
}

// awaitIdle waits until the leader finds nothing to do at a revision at
// least that of the test's last change.
func (f *fleet) awaitIdle() *State {
	f.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case s := <-f.idle:
			if s.Revision >= f.lastRev {
				return s
			}
		case <-deadline:
			f.t.Fatalf("leader not idle at revision %d", f.lastRev)
		}
	}
}

// lostMembers tells whether a member of input is gone in output: its
// lease expired after the round was planned, taking a primary with it.
func lostMembers(input, output *State) bool {
	for _, m := range input.Members {
		if output.MemberIndex(m.Zone, m.Suffix) < 0 {
			return true
		}
	}
	return false
}

// check asserts the invariants of the transition from prev to next.
func (f *fleet) check(prev, next *State) {
	seen := make(map[string]bool)
	primaries := make(map[string]int)
	for _, a := range next.Assignments {
		k := a.Item + "#" + a.Zone + "#" + a.Suffix
		if seen[k] {
			f.violation("revision %d: %s assigned twice", next.Revision, k)
		}
		seen[k] = true
		if a.Slot == 0 {
			if primaries[a.Item]++; primaries[a.Item] > 1 {
				f.violation("revision %d: item %s has two primaries", next.Revision, a.Item)
			}
		}
	}
	for m, mkv := range next.Members {
		pm := prev.MemberIndex(mkv.Zone, mkv.Suffix)
		if pm >= 0 && next.Load[m] > prev.Load[pm] && next.Load[m] > mkv.Value.ItemLimit() {
			f.violation("revision %d: member %s/%s grew to %d over its limit %d",
				next.Revision, mkv.Zone, mkv.Suffix, next.Load[m], mkv.Value.ItemLimit())
		}
	}
	f.checkReadiness(prev, next)
}

// checkReadiness asserts that no item loses ready replicas to a removal by
// the allocator (as opposed to a member vanishing) below what it had, or
// what it needs: its replication, bounded by the members able to hold it,
// and at least one if the removed replica was a draining member's (a drain
// never takes an item's last ready replica).
func (f *fleet) checkReadiness(prev, next *State) {
	eligible := 0
	for m := range next.Members {
		if next.limit(m) > 0 {
			eligible++
		}
	}
	prev.groupByItem(func(id string, _ int, before []AssignmentKV) {
		after := next.ItemAssignments(id)
		removed, drained := false, false
		for _, a := range before {
			m := next.MemberIndex(a.Zone, a.Suffix)
			if m >= 0 && !holds(after, m) {
				removed = true
				drained = drained || next.Members[m].Value.IsExiting()
			}
		}
		if !removed {
			return
		}
		need := 0
		if i := next.ItemIndex(id); i >= 0 {
			need = next.Items[i].Value.DesiredReplication()
		}
		if drained && need > 0 {
			need = max(min(need, eligible), 1)
		} else {
			need = min(need, eligible)
		}
		rb, ra := countReady(before), countReady(after)
		if ra < min(rb, need) {
			f.violation("revision %d: item %s went from %d to %d ready replicas (needs %d)", next.Revision, id, rb, ra, need)
		}
	})
}

func countReady(as []AssignmentKV) int {
	n := 0
	for _, a := range as {
		if a.Member >= 0 && string(a.KV.Value) == readyValue {
			n++
		}
	}
	return n
}

// state is the checker's current view.
func (f *fleet) state() *State {
	kvs, rev := f.ks.Snapshot()
	return NewState(f.root, kvs, rev)
}

// awaitConverged waits until every assignment is ready and held by a live
// member, every assigned item has one primary, and the planner, given the
// current assignments, would change nothing.
func (f *fleet) awaitConverged() *State {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.ks.WaitForRevision(ctx, f.lastRev); err != nil {
		f.t.Fatalf("checker's keyspace did not reach revision %d: %v", f.lastRev, err)
	}
	deadline := ctx.Done()
	var why string
	for {
		changed := f.ks.Changed()
		s := f.state()
		if why = converged(s); why == "" {
			f.assertNoViolations()
			return s
		}
		select {
		case <-changed:
		case <-deadline:
			f.t.Fatalf("fleet did not converge: %s", why)
		}
	}
}

func converged(s *State) string {
	for _, a := range s.Assignments {
		if a.Member < 0 || string(a.KV.Value) != readyValue {
			return fmt.Sprintf("assignment %s not ready", a.KV.Key)
		}
	}
	for _, it := range s.Items {
		as := s.ItemAssignments(it.ID)
		if len(as) != 0 && as[0].Slot != 0 {
			return fmt.Sprintf("item %s has no primary", it.ID)
		}
	}
	for _, a := range s.Assignments {
		if s.ItemIndex(a.Item) < 0 {
			return fmt.Sprintf("assignment %s of a deleted item", a.KV.Key)
		}
	}
	sc := ScenarioOf(s)
	if p := PlanScenario(sc); p.Stats.Added != 0 || p.Stats.Removed != 0 {
		return fmt.Sprintf("plan would still add %d and remove %d", p.Stats.Added, p.Stats.Removed)
	}
	return ""
}
