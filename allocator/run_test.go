package allocator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quire-dev/quire/keyspace"
)

// runMember runs a member of the fleet with Run, with cfg's zone, suffix,
// spec and timeouts (its lease lasts a minute: long enough that expiry
// cannot be what removes it), and an owner that marks its assignments
// ready. It waits until the fleet converges with the member, and returns
// Run's result.
func (f *fleet) runMember(ctx context.Context, drain <-chan struct{}, cfg MemberConfig) <-chan error {
	f.t.Helper()
	ks := keyspace.New(f.root, NewDecoder(f.root, Decoders{}))
	if err := ks.Load(ctx, f.client, 0); err != nil {
		f.t.Fatal(err)
	}
	f.goWatch(ctx, ks)
	cfg.Config = Config{Client: f.client, KeySpace: ks, Ready: testReady, Logger: testLogger}
	cfg.Root, cfg.LeaseTTL = f.root, time.Minute
	done := make(chan error, 1)
	go func() { done <- Run(ctx, drain, cfg) }()
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.own(ctx, ks, &process{zone: cfg.Zone, suffix: cfg.Suffix}) }()
	f.awaitMember(cfg.Zone, cfg.Suffix)
	return done
}

// awaitGone waits for Run's result, checks it with ok, and checks that the
// member's key and assignments are gone from etcd; it returns the state
// of etcd then.
func (f *fleet) awaitGone(done <-chan error, zone, suffix string, ok func(error) bool) *State {
	f.t.Helper()
	select {
	case err := <-done:
		if !ok(err) {
			f.t.Fatalf("Run returned %v", err)
		}
	case <-time.After(30 * time.Second):
		f.t.Fatal("Run did not return")
	}
	now := keyspace.New(f.root, NewDecoder(f.root, Decoders{})) // etcd as of Run's return.
	if err := now.Load(context.Background(), f.client, 0); err != nil {
		f.t.Fatal(err)
	}
	kvs, rev := now.Snapshot()
	s := NewState(f.root, kvs, rev)
	if s.MemberIndex(zone, suffix) >= 0 || len(s.MemberAssignments(zone, suffix)) != 0 {
		f.t.Errorf("the member is still in etcd, with %d assignments", len(s.MemberAssignments(zone, suffix)))
	}
	f.lastRev = rev
	return s
}

// A member that resigns gives its items up at once: Run revokes its
// lease, so its member key and assignments are gone when Run returns
// ErrResigned, and the items move to the other member.
func TestResignGivesItemsUpAtOnce(t *testing.T) {
	f := newFleet(t)
	f.items(4, 1)
	f.join("z1", "a", 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resign := make(chan struct{})
	done := f.runMember(ctx, nil, MemberConfig{Zone: "z2", Suffix: "r", Spec: MemberSpec{Limit: 4}, Resign: resign})
	if got := loads(f.awaitConverged())["z2/r"]; got != 2 {
		t.Fatalf("the member to resign holds %d items, want 2", got)
	}

	close(resign)
	f.awaitGone(done, "z2", "r", func(err error) bool { return errors.Is(err, ErrResigned) })
	if got := loads(f.awaitConverged())["z1/a"]; got != 4 {
		t.Errorf("the remaining member holds %d items, want 4", got)
	}
}

// A member told to resign while it drains resigns at once, rather than
// holding its items until the drain ends (here, never: it is the only
// member, and a drain gives up no item's last replica).
func TestResignDuringDrain(t *testing.T) {
	f := newFleet(t)
	f.items(3, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drain, resign := make(chan struct{}), make(chan struct{})
	done := f.runMember(ctx, drain, MemberConfig{Zone: "z2", Suffix: "d", Spec: MemberSpec{Limit: 10}, Resign: resign})
	if got := loads(f.awaitConverged())["z2/d"]; got != 3 {
		t.Fatalf("the member to drain holds %d items, want 3", got)
	}
	close(drain) // Nobody can take its items: without DrainTimeout, the drain never ends.
	f.awaitExiting("z2", "d")

	close(resign)
	f.awaitGone(done, "z2", "d", func(err error) bool { return errors.Is(err, ErrResigned) })
}

// awaitExiting waits until the checker's mirror shows the member exiting.
func (f *fleet) awaitExiting(zone, suffix string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		changed := f.ks.Changed()
		s := f.state()
		if i := s.MemberIndex(zone, suffix); i >= 0 && s.Members[i].Value.IsExiting() {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			f.t.Fatalf("member %s/%s never showed exiting", zone, suffix)
		}
	}
}

// A drain whose items no other member can take (it is the only member,
// and a drain gives up no item's last replica) gives them up once its
// DrainTimeout passes: Run returns nil, Drained was called, and its
// member key and assignments are gone.
func TestDrainTimeoutGivesUpWhatNobodyTakes(t *testing.T) {
	f := newFleet(t)
	f.items(3, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drain, drained := make(chan struct{}), make(chan struct{})
	done := f.runMember(ctx, drain, MemberConfig{Zone: "z2", Suffix: "d", Spec: MemberSpec{Limit: 10},
		DrainTimeout: time.Second, Drained: func(context.Context) error { close(drained); return nil }})
	if got := loads(f.awaitConverged())["z2/d"]; got != 3 {
		t.Fatalf("the member to drain holds %d items, want 3", got)
	}

	givenUp := testutil.ToFloat64(drainsGivenUp)
	close(drain)
	f.awaitGone(done, "z2", "d", func(err error) bool { return err == nil })
	select {
	case <-drained:
	default:
		t.Error("Drained was not called")
	}
	if got := testutil.ToFloat64(drainsGivenUp) - givenUp; got != 1 {
		t.Errorf("%v drains given up, want 1", got)
	}
}

// awaitMember waits until the checker's mirror holds the member.
func (f *fleet) awaitMember(zone, suffix string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		changed := f.ks.Changed()
		if f.state().MemberIndex(zone, suffix) >= 0 {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			f.t.Fatalf("member %s/%s never announced", zone, suffix)
		}
	}
}

// A member whose key is deleted while its lease lives (by an operator)
// ends with ErrMemberGone saying so, not blaming its lease.
func TestMemberGoneSaysWhy(t *testing.T) {
	f := newFleet(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := f.runMember(ctx, nil, MemberConfig{Zone: "z1", Suffix: "deleted", Spec: MemberSpec{Limit: 4}})
	if _, err := f.client.Delete(ctx, MemberKey(f.root, "z1", "deleted")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrMemberGone) || !strings.Contains(err.Error(), "deleted while its lease") {
			t.Fatalf("Run after its key was deleted: %v, want ErrMemberGone saying it was deleted", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
}

// The leader's gauges describe its last solve; a member that stops
// leading zeroes them, so that alerts on them (unattainable slots) follow
// the current leader rather than a former one's last view.
func TestLeaderGaugesEndWithLeadership(t *testing.T) {
	f := startFleet(t, 1, 1, 10, 4, 2) // one member: each item's second replica has nowhere to go
	f.awaitConverged()
	gauges := map[string]prometheus.Gauge{"members": membersGauge, "items": itemsGauge,
		"desired slots": desiredSlotsGauge, "unattainable slots": unattainableSlotsGauge}
	want := map[string]float64{"members": 1, "items": 4, "desired slots": 8, "unattainable slots": 4}
	for name, g := range gauges {
		if got := testutil.ToFloat64(g); got != want[name] {
			t.Errorf("leading: %s %v, want %v", name, got, want[name])
		}
	}
	p := f.members["z1/m1"]
	f.kill("z1", "m1")
	<-p.done
	for name, g := range gauges {
		if got := testutil.ToFloat64(g); got != 0 {
			t.Errorf("stopped: %s %v, want 0", name, got)
		}
	}
}
