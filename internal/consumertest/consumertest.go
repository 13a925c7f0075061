// Package consumertest runs consumer processes in-process for tests: each
// a consumer.Server with its Shard service on a loopback gRPC listener,
// over a brokertest cluster's etcd and brokers.
package consumertest

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/allocator"
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
	// LeaseTTL of the processes; zero means 3s.
	LeaseTTL time.Duration
	// Configure, if set, adjusts each process's config before it starts.
	Configure func(*consumer.Config)
	Procs     map[string]*Process
}

// Process is one consumer process.
type Process struct {
	Name, Zone string
	Endpoint   string
	Server     *consumer.Server
	grpc       *grpc.Server
	cancel     context.CancelFunc
	drain      chan struct{}
	done       chan error
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
	})
	return f
}

// Start runs a process named name in zone.
func (f *Fleet) Start(name, zone string) *Process {
	f.t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	ttl := f.LeaseTTL
	if ttl == 0 {
		ttl = 3 * time.Second
	}
	p := &Process{Name: name, Zone: zone, Endpoint: lis.Addr().String(), grpc: grpc.NewServer(rpcbuf.ServerOptions()...),
		drain: make(chan struct{}), done: make(chan error, 1)}
	cfg := consumer.Config{App: f.App, Etcd: f.Etcd, Journals: f.Journals, Root: f.Root,
		Zone: zone, Suffix: name, Endpoint: p.Endpoint, Dir: f.t.TempDir(), LeaseTTL: ttl, Logger: quiet}
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
	go func() { p.done <- p.Server.Run(ctx, p.drain) }()
	f.Procs[name] = p
	return p
}

// Kill ends a process at once, as a crash would: its goroutines stop
// without a graceful handoff, and its lease is revoked so that its shards
// fail over now rather than after the lease's TTL.
func (f *Fleet) Kill(p *Process) {
	if _, ok := f.Procs[p.Name]; !ok {
		return
	}
	delete(f.Procs, p.Name)
	p.cancel()
	p.grpc.Stop()
	f.wait(p)
	ctx := context.Background()
	if resp, err := f.Etcd.Get(ctx, allocator.MemberKey(f.Root, p.Zone, p.Name)); err == nil && len(resp.Kvs) == 1 {
		f.Etcd.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	}
}

// Drain stops a process gracefully, as SIGTERM does: its shards are
// handed to other processes first. It returns once the process exited.
func (f *Fleet) Drain(p *Process) error {
	delete(f.Procs, p.Name)
	close(p.drain)
	err := <-p.done
	p.cancel()
	p.grpc.Stop()
	return err
}

func (f *Fleet) wait(p *Process) {
	if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, allocator.ErrMemberGone) {
		f.t.Logf("consumer %s: %v", p.Name, err)
	}
}

// Client returns a Shard client of process p, closed when the test ends.
func (f *Fleet) Client(p *Process) protocol.ShardClient {
	f.t.Helper()
	conn, err := grpc.NewClient(p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return protocol.NewShardClient(conn)
}

// Crash ends a process at once, as a crash would, leaving its lease to
// expire after its TTL: its shards fail over only then.
func (f *Fleet) Crash(p *Process) {
	if _, ok := f.Procs[p.Name]; !ok {
		return
	}
	delete(f.Procs, p.Name)
	p.cancel()
	p.grpc.Stop()
	f.wait(p)
}
