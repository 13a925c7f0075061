// Package consumertest runs consumer processes in-process for tests: each
// a consumer.Server with its Shard service on a loopback gRPC listener,
// over a brokertest cluster's etcd and brokers.
package consumertest

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/protocol"
)

// Fleet is a consumer application's in-process processes.
type Fleet struct {
	t        testing.TB
	Etcd     *clientv3.Client
	Journals *client.Client
	Root     string
	App      consumer.Application
	// LeaseTTL of the processes; zero means consumer.DefaultLeaseTTL, as
	// in production: etcd's client gives a lease up once an answer to its
	// keepalive is a TTL late, and under the race detector on a loaded
	// 2-core machine a 3 s lease can be lost so, ending a process that
	// nothing restarts. Tests that wait for a crashed or cut-off process's
	// lease to run out set ShortLeaseTTL.
	LeaseTTL time.Duration
	// Configure, if set, adjusts each process's config before it starts.
	Configure func(*consumer.Config)
	// Auth, if set, checks the tokens of the processes' requests, and
	// Token is then the processes' own (for each other), and that of
	// Client. Set them before Start.
	Auth  *auth.Authorizer
	Token auth.TokenSource
	Procs map[string]*Process
}

// ShortLeaseTTL is the lease of tests that wait for a process's lease to
// run out: short, so that they fail over soon.
const ShortLeaseTTL = 3 * time.Second

// Process is one consumer process.
type Process struct {
	Name, Zone string
	Endpoint   string
	Dir        string // of its replicas' stores
	Server     *consumer.Server
	grpc       *grpc.Server
	cancel     context.CancelFunc
	drain      chan struct{}
	exited     chan struct{} // closed once Run returned err
	err        error
	stopOnce   sync.Once
}

// quiet logs warnings and errors; QUIRE_TEST_LOG=info (or debug) logs more.
var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel()}))

func testLogLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("QUIRE_TEST_LOG"))); err != nil {
		return slog.LevelWarn
	}
	return l
}

// New returns a fleet with no processes, whose keys are under root;
// processes are killed when the test ends.
func New(t testing.TB, etcd *clientv3.Client, journals *client.Client, root string, app consumer.Application) *Fleet {
	f := &Fleet{t: t, Etcd: etcd, Journals: journals, Root: root, App: app, Procs: map[string]*Process{}}
	t.Cleanup(func() {
		for _, p := range f.Procs {
			f.Kill(p)
		}
		// The fleet's keys go with it: they lie outside the test's own
		// etcd prefix, which etcdtest removes, and would show to later
		// tests that look across fleets (a console of a parent prefix).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := etcd.Delete(ctx, root, clientv3.WithPrefix()); err != nil {
			t.Logf("removing the keys of fleet %s: %v", root, err)
		}
	})
	return f
}

// Start runs a process named name in zone. Procs holds one process per
// name; StartUnlisted runs a second of a name.
func (f *Fleet) Start(name, zone string) *Process {
	f.t.Helper()
	p := f.StartUnlisted(name, zone)
	f.Procs[name] = p
	return p
}

// StartUnlisted runs a process named name in zone, which Procs does not
// list: the caller ends it (Crash, Kill), or the test's end does.
func (f *Fleet) StartUnlisted(name, zone string) *Process {
	f.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	ttl := cmp.Or(f.LeaseTTL, consumer.DefaultLeaseTTL)
	p := &Process{Name: name, Zone: zone, Endpoint: lis.Addr().String(),
		grpc:  grpc.NewServer(append(rpcbuf.ServerOptions(), f.Auth.ServerOptions()...)...),
		drain: make(chan struct{}), exited: make(chan struct{})}
	p.Dir = f.t.TempDir()
	cfg := consumer.Config{App: f.App, Etcd: f.Etcd, Journals: f.Journals, Root: f.Root,
		Zone: zone, Suffix: name, Endpoint: p.Endpoint, Dir: p.Dir, LeaseTTL: ttl, Logger: quiet,
		Auth: f.Auth, DialOptions: auth.DialOptions(f.Token)}
	if f.Configure != nil {
		f.Configure(&cfg)
	}
	if p.Server, err = consumer.New(cfg); err != nil {
		f.t.Fatal(err)
	}
	protocol.RegisterShardServer(p.grpc, p.Server)
	if r, ok := f.App.(consumer.Registerer); ok {
		r.Register(p.grpc, p.Server) // The application's own services.
	}
	go p.grpc.Serve(lis)
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(p.exited)
		p.err = p.Server.Run(ctx, p.drain)
	}()
	f.t.Cleanup(func() {
		if f.Procs[p.Name] == p {
			f.Kill(p) // Revoking its lease, for etcd's sake.
		}
		f.Crash(p)
	})
	return p
}

// Exited returns a channel closed once the process's Run returned.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is what the process's Run returned, once Exited is closed.
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// stop ends the process's Run and gRPC server at once, if not done yet,
// and waits for Run to return.
func (p *Process) stop() error {
	p.stopOnce.Do(func() {
		p.cancel()
		p.grpc.Stop()
	})
	return p.Err()
}

// unlist removes p from Procs, and tells whether it was listed.
func (f *Fleet) unlist(p *Process) bool {
	if f.Procs[p.Name] != p {
		return false
	}
	delete(f.Procs, p.Name)
	return true
}

// Kill ends a process at once, as a crash would: its goroutines stop
// without a graceful handoff, and its lease is revoked so that its shards
// fail over now rather than after the lease's TTL.
func (f *Fleet) Kill(p *Process) {
	if !f.unlist(p) {
		return
	}
	f.report(p, p.stop())
	ctx := context.Background()
	if resp, err := f.Etcd.Get(ctx, allocator.MemberKey(f.Root, p.Zone, p.Name)); err == nil && len(resp.Kvs) == 1 {
		f.Etcd.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	}
}

// Drain stops a process gracefully, as SIGTERM does: its shards are
// handed to other processes first. It returns once the process exited.
func (f *Fleet) Drain(p *Process) error {
	f.unlist(p)
	close(p.drain)
	err := p.Err()
	p.stop()
	return err
}

// report logs how a stopped process's Run ended, unless as expected.
func (f *Fleet) report(p *Process, err error) {
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, allocator.ErrMemberGone) {
		f.t.Logf("consumer %s: %v", p.Name, err)
	}
}

// Client returns a Shard client of process p, closed when the test ends.
func (f *Fleet) Client(p *Process) protocol.ShardClient {
	f.t.Helper()
	return f.ClientWith(p, f.Token)
}

// ClientWith returns a Shard client of p sending token (if not nil),
// closed when the test ends.
func (f *Fleet) ClientWith(p *Process, token auth.TokenSource) protocol.ShardClient {
	f.t.Helper()
	conn, err := grpc.NewClient(p.Endpoint, append(auth.DialOptions(token), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return protocol.NewShardClient(conn)
}

// Crash ends a process at once, as a crash would, leaving its lease to
// expire after its TTL: its shards fail over only then.
func (f *Fleet) Crash(p *Process) {
	f.unlist(p)
	select {
	case <-p.exited:
		p.stop() // Its gRPC server, if still serving.
		return   // Reported by whoever saw it exit.
	default:
	}
	f.report(p, p.stop())
}
