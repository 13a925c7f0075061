package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/faultnet"
	"github.com/quire-dev/quire/internal/freeport"
)

// broker serve joins the fleet, serves journals, and drains on SIGTERM;
// its admin endpoint is ready once it serves, and not ready from the
// moment it starts draining, before the drain ends.
func TestBrokerServe(t *testing.T) {
	etcd, root := etcdtest.Client(t)
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	adminAddr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	t.Setenv("QUIRE_DIR", t.TempDir()) // Flags fall back to the environment.
	done := make(chan result, 1)
	go func() {
		done <- quire(context.Background(), nil, "broker", "serve", "--etcd", etcdtest.Shared(t).Endpoint(),
			"--prefix", root, "--zone", "z1", "--suffix", "serve", "--listen", addr, "--admin", adminAddr,
			"--store", "file://"+t.TempDir()+"/", "--lease", "3s", "--log-level", "warn")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := awaitKey(ctx, etcd, allocator.MemberKey(root, "z1", "serve")); err != nil {
		t.Fatalf("broker never announced itself: %v", err)
	}
	awaitHealth(t, adminAddr, "ready")
	must(t, addr, strings.NewReader("journals: [{name: served/j, replication: 1}]\n"), "journals", "apply", "-f", "-")
	must(t, addr, strings.NewReader("served"), "journals", "append", "-j", "served/j")
	if got := must(t, addr, nil, "journals", "read", "-j", "served/j").stdout; got != "served" {
		t.Errorf("read %q", got)
	}
	// Drain. Alone, the broker cannot hand its journal to another: the
	// drain waits, and the broker says it is not ready meanwhile. Deleting
	// the journal lets the drain complete.
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	awaitHealth(t, adminAddr, "draining")
	must(t, addr, nil, "journals", "delete", "served/j")
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("broker serve returned %v after draining, want nil", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("broker serve did not exit after SIGTERM")
	}
	resp, err := etcd.Get(context.Background(), allocator.MemberKey(root, "z1", "serve"))
	if err != nil || len(resp.Kvs) != 0 {
		t.Errorf("member key after the drain: %v, %v", resp.Kvs, err)
	}
}

// awaitHealth waits until `quire health` of the admin endpoint at addr
// says want: "ready", or what its error starts with, after "not ready: ".
func awaitHealth(t *testing.T, addr, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := quire(context.Background(), nil, "health", addr)
		switch {
		case want == "ready" && r.err == nil:
			return
		case want != "ready" && r.err != nil && strings.Contains(r.err.Error(), "not ready: "+want):
			return
		case time.Now().After(deadline):
			t.Fatalf("quire health %s: %v, stdout %q; want %s", addr, r.err, r.stdout, want)
		}
		time.Sleep(20 * time.Millisecond) // Polling the server's readiness.
	}
}

func TestBrokerServeFlags(t *testing.T) {
	t.Setenv("QUIRE_DIR", "")
	t.Setenv("QUIRE_STORE", "")
	base := []string{"broker", "serve", "--dir", "/tmp/spools", "--store", "file:///tmp/store/"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--prefix", "quire/"}, `--prefix "quire/"`},
		{[]string{"--zone", "a#b"}, "--zone"},
		{[]string{"--suffix", "a/b"}, "--suffix"},
		{[]string{"--listen", "7700"}, `--listen "7700"`},
		{[]string{"--advertise", "host:port"}, `--advertise "host:port"`},
		{[]string{"--store", "file://relative/"}, `--store "file://relative/"`},
		{[]string{"--store", ""}, "--store is empty"},
		{[]string{"--dir", ""}, "--dir is empty"},
		{[]string{"--limit", "0"}, "--limit 0"},
		{[]string{"--lease", "100ms"}, "--lease 100ms"},
		{[]string{"--drain-timeout", "-1s"}, "--drain-timeout -1s"},
		{[]string{"--isolation-timeout", "5s"}, "--isolation-timeout 5s: want more than --lease 10s"},
		{[]string{"--metrics", "nowhere"}, `--metrics "nowhere"`},
		{[]string{"--admin", "nowhere"}, `--admin "nowhere"`},
		{[]string{"--admin", "127.0.0.1:1", "--metrics", "127.0.0.1:2"}, "give one"},
		{[]string{"--pprof"}, "--pprof without --admin"},
		{[]string{"--etcd", ""}, "--etcd is empty"},
		{[]string{"--limit", "many"}, `"many"`},
	} {
		r := quire(context.Background(), nil, append(base, tc.args...)...)
		if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a usage error naming %q", tc.args, r.err, tc.want)
		}
	}
	// The collector's environment, read by broker serve and dev.
	t.Setenv("AUTOMEMLIMIT", "2")
	for _, args := range [][]string{base, {"dev", "--dir", t.TempDir()}} {
		r := quire(context.Background(), nil, args...)
		if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), `AUTOMEMLIMIT="2"`) || r.stdout != "" {
			t.Errorf("%v with AUTOMEMLIMIT=2: err %v, stdout %q; want a usage error naming it", args, r.err, r.stdout)
		}
	}
}

// A broker cut off from etcd for longer than its lease exits once it
// reaches etcd again, saying that its lease expired and what to do.
func TestBrokerServeLeaseExpired(t *testing.T) {
	etcd, root := etcdtest.Client(t)
	var sw faultnet.Switch
	proxy := sw.Proxy(t, strings.TrimPrefix(etcdtest.Shared(t).Endpoint(), "http://"))
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	done := make(chan result, 1)
	go func() {
		done <- quire(context.Background(), nil, "broker", "serve", "--etcd", "http://"+proxy,
			"--prefix", root, "--zone", "z1", "--suffix", "cut", "--listen", addr, "--dir", t.TempDir(),
			"--store", "file://"+t.TempDir()+"/", "--lease", "1s", "--log-level", "error")
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := allocator.MemberKey(root, "z1", "cut")
	if err := awaitKey(ctx, etcd, key); err != nil {
		t.Fatalf("broker never announced itself: %v", err)
	}
	// Once it allocates a journal, its announcement is done (the partition
	// is then not of the announcement itself, a failure of its own).
	must(t, addr, strings.NewReader("journals: [{name: cut/j, replication: 1}]\n"), "journals", "apply", "-f", "-")
	if err := awaitKey(ctx, etcd, allocator.AssignmentKey(root, "cut/j", "z1", "cut", 0)); err != nil {
		t.Fatalf("the journal was never assigned: %v", err)
	}
	sw.Cut()
	for { // Until its lease expires.
		resp, err := etcd.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond) // Polling for the lease's expiry.
	}
	sw.Heal()
	select {
	case r := <-done:
		if r.err == nil || !strings.Contains(r.err.Error(), "ran out or was revoked") || !strings.Contains(r.err.Error(), "start it again") {
			t.Fatalf("broker serve after its lease expired: %v", r.err)
		}
	case <-ctx.Done():
		t.Fatal("broker serve still runs after its lease expired and the partition healed")
	}
}
