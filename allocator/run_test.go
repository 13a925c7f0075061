package allocator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quire-dev/quire/keyspace"
)

// A member that resigns gives its items up at once: Run revokes its lease
// (long enough that expiry cannot be what removes it), so its member key
// and assignments are gone when Run returns ErrResigned, and the items
// move to the other member.
func TestResignGivesItemsUpAtOnce(t *testing.T) {
	f := newFleet(t)
	f.items(4, 1)
	f.join("z1", "a", 4)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ks := keyspace.New(f.root, NewDecoder(f.root, Decoders{}))
	if err := ks.Load(ctx, f.client, 0); err != nil {
		t.Fatal(err)
	}
	f.goWatch(ctx, ks)
	resign := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, nil, MemberConfig{
			Config: Config{Client: f.client, KeySpace: ks, Ready: testReady, Logger: testLogger},
			Root:   f.root, Zone: "z2", Suffix: "r", Spec: MemberSpec{Limit: 4},
			LeaseTTL: time.Minute, Resign: resign,
		})
	}()
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.own(ctx, ks, &process{zone: "z2", suffix: "r"}) }()
	f.awaitMember("z2", "r")
	if got := loads(f.awaitConverged())["z2/r"]; got != 2 {
		t.Fatalf("the member to resign holds %d items, want 2", got)
	}

	close(resign)
	select {
	case err := <-done:
		if !errors.Is(err, ErrResigned) {
			t.Fatalf("Run returned %v, want ErrResigned", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after resigning")
	}
	now := keyspace.New(f.root, NewDecoder(f.root, Decoders{})) // etcd as of Run's return.
	if err := now.Load(context.Background(), f.client, 0); err != nil {
		t.Fatal(err)
	}
	kvs, rev := now.Snapshot()
	s := NewState(f.root, kvs, rev)
	if i := s.MemberIndex("z2", "r"); i >= 0 {
		t.Errorf("the resigned member's key is still in etcd")
	}
	if as := s.MemberAssignments("z2", "r"); len(as) != 0 {
		t.Errorf("the resigned member still holds %d assignments", len(as))
	}
	f.lastRev = rev
	if got := loads(f.awaitConverged())["z1/a"]; got != 4 {
		t.Errorf("the remaining member holds %d items, want 4", got)
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

// A drain whose items no other member can take (the other member holds
// them all already) gives them up once its DrainTimeout passes: Run
// returns nil, its member key and assignments are gone, and the items
// keep their replica on the other member.
func TestDrainTimeoutGivesUpWhatNobodyTakes(t *testing.T) {
	f := newFleet(t)
	f.items(3, 2)
	f.join("z1", "a", 10)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ks := keyspace.New(f.root, NewDecoder(f.root, Decoders{}))
	if err := ks.Load(ctx, f.client, 0); err != nil {
		t.Fatal(err)
	}
	f.goWatch(ctx, ks)
	drain := make(chan struct{})
	done := make(chan error, 1)
	drained := make(chan struct{})
	go func() {
		done <- Run(ctx, drain, MemberConfig{
			Config: Config{Client: f.client, KeySpace: ks, Ready: testReady, Logger: testLogger},
			Root:   f.root, Zone: "z2", Suffix: "d", Spec: MemberSpec{Limit: 10},
			LeaseTTL: time.Minute, DrainTimeout: time.Second,
			Drained: func(context.Context) error { close(drained); return nil },
		})
	}()
	f.wg.Add(1)
	go func() { defer f.wg.Done(); f.own(ctx, ks, &process{zone: "z2", suffix: "d"}) }()
	f.awaitMember("z2", "d")
	if got := loads(f.awaitConverged())["z2/d"]; got != 3 {
		t.Fatalf("the member to drain holds %d items, want 3", got)
	}

	close(drain)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain did not end after its timeout")
	}
	select {
	case <-drained:
	default:
		t.Error("Drained was not called")
	}
	now := keyspace.New(f.root, NewDecoder(f.root, Decoders{}))
	if err := now.Load(context.Background(), f.client, 0); err != nil {
		t.Fatal(err)
	}
	kvs, rev := now.Snapshot()
	s := NewState(f.root, kvs, rev)
	if s.MemberIndex("z2", "d") >= 0 || len(s.MemberAssignments("z2", "d")) != 0 {
		t.Errorf("the drained member is still in etcd, with %d assignments", len(s.MemberAssignments("z2", "d")))
	}
	f.lastRev = rev
	if got := loads(f.awaitConverged())["z1/a"]; got != 3 {
		t.Errorf("the remaining member holds %d items, want 3", got)
	}
}
