// Package brokertest runs real brokers in-process for the tests of the
// layers above journals (messages, recovery logs, consumers): a real etcd
// (internal/etcdtest), real brokers on loopback gRPC listeners, and a file
// fragment store in a temporary directory.
package brokertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/protocol"
)

// Cluster is a set of in-process brokers sharing an etcd prefix and a store.
type Cluster struct {
	t       testing.TB
	Etcd    *clientv3.Client
	Root    string
	Store   string
	Brokers map[string]*Broker
	// SpoolRoot, if set, is where brokers keep their spools (a fresh
	// directory beneath it per broker) instead of the test's temporary
	// directory: benchmarks put it on a memory file system to keep the
	// broker's writes off the disk of what they measure, as a broker on
	// another machine would.
	SpoolRoot string
	// ServerOptions are added to the brokers' gRPC servers', and
	// DialOptions to those of their connections to each other and of
	// Client's: TLS, say. Set them before Start.
	ServerOptions []grpc.ServerOption
	DialOptions   []grpc.DialOption
	// Auth, if set, checks the tokens of the brokers' requests, and
	// Token is then the brokers' own, for each other. Set them before
	// Start.
	Auth  *auth.Authorizer
	Token auth.TokenSource
	// LeaseTTL is the brokers' Config.LeaseTTL; zero is DefaultLeaseTTL.
	// Set it before Start.
	LeaseTTL time.Duration
}

// KeepUnder puts the brokers' spools and the fragment store in fresh
// directories beneath root (such as /dev/shm), removed when the test ends.
// Call it before Start.
func (c *Cluster) KeepUnder(root string) {
	c.t.Helper()
	store, err := os.MkdirTemp(root, "quire-store-")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { os.RemoveAll(store) })
	c.SpoolRoot, c.Store = root, "file://"+store+"/"
}

// Broker is one in-process broker.
type Broker struct {
	Name     string
	Endpoint string
	Dir      string
	srv      *grpc.Server
	cancel   context.CancelFunc
	drain    chan struct{}
	done     chan error
	stopped  atomic.Bool // by Stop, which revokes the broker's lease
}

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// New returns an empty cluster; brokers stop when the test ends.
func New(t testing.TB) *Cluster {
	c, root := etcdtest.Client(t)
	cl := &Cluster{t: t, Etcd: c, Root: root,
		Store: "file://" + filepath.Join(t.TempDir(), "store") + "/", Brokers: map[string]*Broker{}}
	t.Cleanup(func() {
		for _, b := range cl.Brokers {
			cl.Stop(b)
		}
	})
	return cl
}

// Start runs a broker named name (zone "z"+name) with spools in a fresh
// directory.
func (c *Cluster) Start(name string) *Broker {
	c.t.Helper()
	dir := c.t.TempDir()
	if c.SpoolRoot != "" {
		var err error
		if dir, err = os.MkdirTemp(c.SpoolRoot, "quire-spools-"); err != nil {
			c.t.Fatal(err)
		}
		c.t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return c.run(name, dir, "127.0.0.1:0")
}

// Restart runs a stopped or drained broker again, on its spools and at
// its endpoint, as a supervisor would restart it.
func (c *Cluster) Restart(b *Broker) *Broker {
	c.t.Helper()
	return c.run(b.Name, b.Dir, b.Endpoint)
}

// run runs a broker on dir, listening at addr.
func (c *Cluster) run(name, dir, addr string) *Broker {
	c.t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	b := &Broker{Name: name, Endpoint: lis.Addr().String(), Dir: dir, srv: grpc.NewServer(slices.Concat(rpcbuf.ServerOptions(), c.ServerOptions, c.Auth.ServerOptions())...),
		drain: make(chan struct{}), done: make(chan error, 1)}
	srv, err := broker.New(broker.Config{Etcd: c.Etcd, Root: c.Root, Zone: "z" + name, Suffix: name,
		Endpoint: b.Endpoint, Dir: b.Dir, DefaultStore: c.Store, LeaseTTL: cmp.Or(c.LeaseTTL, DefaultLeaseTTL),
		DrainTimeout: drainTimeout, DialOptions: append(slices.Clip(c.DialOptions), auth.DialOptions(c.Token)...),
		Auth: c.Auth, Logger: quiet})
	if err != nil {
		c.t.Fatal(err)
	}
	protocol.RegisterJournalServer(b.srv, srv)
	go b.srv.Serve(lis)
	var ctx context.Context
	ctx, b.cancel = context.WithCancel(context.Background())
	go func() {
		err := srv.Run(ctx, b.drain)
		switch {
		case b.stopped.Load() || ctx.Err() != nil || err == nil:
		case errors.Is(err, allocator.ErrMemberGone):
			// Its lease ran out (or a test revoked it): its journals have
			// no primary here until another broker takes them.
			quiet.Error("broker stopped: its member key left etcd", "broker", name, "err", err)
		default:
			quiet.Error("broker stopped", "broker", name, "err", err)
		}
		b.done <- err
	}()
	c.Brokers[name] = b
	return b
}

// DefaultLeaseTTL is the brokers' lease when Cluster.LeaseTTL is zero.
// Nothing here waits for a broker's lease to run out (Stop revokes it,
// Drain hands its journals over), so the lease is as long as a
// production broker's: etcd's client gives a lease up once an answer to
// its keepalive is a TTL late, and under the race detector on a loaded
// 2-core machine a 3 s lease was once lost so, stopping its broker and
// leaving journals of replication 3 short of a broker for the rest of the
// test.
const DefaultLeaseTTL = 10 * time.Second

// drainTimeout is the brokers' Config.DrainTimeout: a cluster of fewer
// brokers than its journals' replication drains in a few seconds.
const drainTimeout = 2 * time.Second

// Drain drains a broker, as SIGTERM does: its journals move to the other
// brokers, its spools are persisted, and it stops.
func (c *Cluster) Drain(b *Broker) {
	c.t.Helper()
	close(b.drain)
	if err := <-b.done; err != nil {
		c.t.Fatalf("draining broker %s: %v", b.Name, err)
	}
	b.done <- nil
	c.Stop(b)
}

// Stop ends a broker at once, revoking its lease so its journals fail over
// now.
func (c *Cluster) Stop(b *Broker) {
	if _, ok := c.Brokers[b.Name]; !ok {
		return
	}
	delete(c.Brokers, b.Name)
	b.stopped.Store(true)
	ctx := context.Background()
	if resp, err := c.Etcd.Get(ctx, allocator.MemberKey(c.Root, "z"+b.Name, b.Name)); err == nil && len(resp.Kvs) == 1 {
		c.Etcd.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	}
	b.cancel()
	b.srv.Stop()
	if err := <-b.done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, allocator.ErrMemberGone) {
		c.t.Logf("broker %s: %v", b.Name, err)
	}
}

// Client returns a client whose default broker is b, closed when the test
// ends.
func (c *Cluster) Client(b *Broker) *client.Client {
	c.t.Helper()
	return c.ClientWith(b, c.Token)
}

// ClientWith returns a client whose default broker is b, sending token
// (if not nil) with its requests, closed when the test ends.
func (c *Cluster) ClientWith(b *Broker, token auth.TokenSource) *client.Client {
	c.t.Helper()
	cl, err := client.New(context.Background(), client.Config{Broker: b.Endpoint,
		DialOptions: append(slices.Clip(c.DialOptions), auth.DialOptions(token)...)})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Journals creates journals of replication r, and waits until each takes
// an append (it has a primary).
func (c *Cluster) Journals(cl *client.Client, r int32, names ...string) {
	c.t.Helper()
	specs := make([]*protocol.JournalSpec, len(names))
	for i, n := range names {
		specs[i] = &protocol.JournalSpec{Name: n, Replication: r}
	}
	c.Apply(cl, specs...)
}

// Apply creates or updates journals with the given specs, then waits
// until each has a route.
func (c *Cluster) Apply(cl *client.Client, specs ...*protocol.JournalSpec) {
	c.t.Helper()
	Apply(c.t, cl, specs...)
}

// Apply creates or updates journals with the given specs through cl, of
// any cluster, then waits until each has a route.
func Apply(t testing.TB, cl *client.Client, specs ...*protocol.JournalSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &protocol.ApplyRequest{}
	for _, s := range specs {
		req.Changes = append(req.Changes, &protocol.ApplyRequest_Change{Upsert: s})
	}
	if _, err := cl.Apply(ctx, req); err != nil {
		t.Fatalf("applying journals: %v", err)
	}
	for _, s := range specs {
		for {
			list, err := cl.List(ctx, &protocol.ListRequest{Selector: "name=" + s.Name})
			if err == nil && len(list.Journals) == 1 && len(list.Journals[0].Route.GetMembers()) != 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("journal %s has no route: %v", s.Name, err)
			}
			time.Sleep(10 * time.Millisecond) // Polling the allocator's progress.
		}
	}
}

// String names the cluster in messages.
func (c *Cluster) String() string { return fmt.Sprintf("brokers under %s", c.Root) }

// CPUTime returns the CPU time that the process has used so far: a
// benchmark's, with its in-process brokers' and etcd's.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err) // RUSAGE_SELF with a valid pointer cannot fail.
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
