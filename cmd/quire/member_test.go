package main

import (
	"context"
	"errors"
	"strconv"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/keyspace"
)

// awaitLoad waits until member zone#suffix holds n assignments.
func awaitLoad(t *testing.T, ks *keyspace.KeySpace, root, zone, suffix string, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := ks.Changed()
		kvs, rev := ks.Snapshot()
		if got := len(allocator.NewState(root, kvs, rev).MemberAssignments(zone, suffix)); got == n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("member %s#%s never held %d assignments", zone, suffix, n)
		}
	}
}

// awaitExiting waits until member zone#suffix is marked exiting.
func awaitExiting(t *testing.T, ks *keyspace.KeySpace, root, zone, suffix string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := ks.Changed()
		kvs, rev := ks.Snapshot()
		s := allocator.NewState(root, kvs, rev)
		if m := s.MemberIndex(zone, suffix); m >= 0 && s.Members[m].Value.IsExiting() {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("member %s#%s never marked exiting", zone, suffix)
		}
	}
}

func watchFleet(t *testing.T, client *clientv3.Client, root string) *keyspace.KeySpace {
	ctx, cancel := context.WithCancel(context.Background())
	ks := keyspace.New(root, allocator.NewDecoder(root, allocator.Decoders{}))
	if err := ks.Load(ctx, client, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); ks.Watch(ctx, client) }()
	t.Cleanup(func() { cancel(); <-done })
	return ks
}

// SIGTERM drains a member: its items move to the other member, and the
// command returns nil once it holds nothing. A second signal exits at once.
func TestMemberDrainsOnSignal(t *testing.T) {
	client, root := etcdtest.Client(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := client.Put(ctx, allocator.ItemKey(root, id), allocator.Encode(allocator.ItemSpec{Replication: 1})); err != nil {
			t.Fatal(err)
		}
	}
	ks := watchFleet(t, client, root)
	flags := memberFlags{etcd: etcdtest.Shared(t).Endpoint(), prefix: root, zone: "z1", suffix: "cmd", limit: 10, leaseTTL: 5 * time.Second}
	flags.admin.Addr = "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	done := make(chan error, 1)
	go func() { done <- runMember(ctx, flags) }()
	awaitLoad(t, ks, root, "z1", "cmd", 3)
	awaitHealth(t, flags.admin.Addr, "ready")

	// A second member, not driven by signals, to take the items.
	otherCtx, cancelOther := context.WithCancel(ctx)
	otherDone := make(chan error, 1)
	go func() {
		otherDone <- allocator.Run(otherCtx, nil, allocator.MemberConfig{
			Config: allocator.Config{Client: client}, Root: root, Zone: "z2", Suffix: "other",
			Spec: allocator.MemberSpec{Limit: 10},
		})
	}()
	defer func() { cancelOther(); <-otherDone }()

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drained member returned %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("member did not exit after draining")
	}
	awaitLoad(t, ks, root, "z2", "other", 3)
	awaitLoad(t, ks, root, "z1", "cmd", 0)
}

func TestMemberSecondSignalExitsAtOnce(t *testing.T) {
	client, root := etcdtest.Client(t)
	ctx := context.Background()
	if _, err := client.Put(ctx, allocator.ItemKey(root, "a"), allocator.Encode(allocator.ItemSpec{Replication: 1})); err != nil {
		t.Fatal(err)
	}
	ks := watchFleet(t, client, root)
	flags := memberFlags{etcd: etcdtest.Shared(t).Endpoint(), prefix: root, zone: "z1", suffix: "alone", limit: 10, leaseTTL: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- runMember(ctx, flags) }()
	awaitLoad(t, ks, root, "z1", "alone", 1)
	// Alone, the member cannot drain: nobody can take its item, and
	// dropping it would lower its readiness. It keeps it.
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	awaitExiting(t, ks, root, "z1", "alone")
	select {
	case err := <-done:
		t.Fatalf("member exited (%v) while it still held an item", err)
	default:
	}
	awaitLoad(t, ks, root, "z1", "alone", 1)
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("after a second signal: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("member did not exit on a second signal")
	}
}

func TestMemberFlagsValidation(t *testing.T) {
	for _, args := range [][]string{
		{"allocator", "member", "--prefix", "nos", "--zone", "z", "--suffix", "m"},
		{"allocator", "member", "--prefix", "/p/", "--zone", "z#", "--suffix", "m"},
		{"allocator", "member", "--prefix", "/p/", "--zone", "z", "--suffix", ""},
		{"allocator", "member", "--prefix", "/p/", "--zone", "z", "--suffix", "m", "--limit", "-1"},
	} {
		if _, err := run(t, args...); !errors.As(err, new(usageError)) {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}
