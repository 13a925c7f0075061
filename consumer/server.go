package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/connpool"
	"github.com/quire-dev/quire/keyspace"
	"github.com/quire-dev/quire/protocol"
)

// Defaults of Config.
//
// DefaultLeaseTTL bounds how long a crashed primary's shards wait to fail
// over: the lease's TTL, then well under a second to promote a standby
// (docs/benchmarks.md), so under 10 seconds in all.
//
// DefaultDrainTimeout is serve's --drain-timeout (a zero Config's
// DrainTimeout waits as long as it takes): under the 30 seconds that
// Kubernetes gives a pod to stop.
const (
	DefaultLimit        = 1024
	DefaultLeaseTTL     = 8 * time.Second
	DefaultHintInterval = time.Minute
	DefaultDrainTimeout = 20 * time.Second
	// DefaultProducerPruneHorizon is Config.ProducerPruneHorizon's
	// default: a day, as long as Kafka keeps an idempotent producer's
	// state by default.
	DefaultProducerPruneHorizon = 24 * time.Hour
)

// Config configures a consumer process.
type Config struct {
	// App is the application whose shards the process serves.
	App Application
	// Etcd is the coordination store; Journals the client of the brokers.
	Etcd     *clientv3.Client
	Journals *client.Client
	// Root is the application's key prefix, ending in '/', e.g.
	// /quire/consumers/wordcount/. Its shard specs are at ROOT/items/ID.
	Root string
	// Zone and Suffix name the process; Endpoint is the address of its
	// gRPC Shard service, host:port, as other processes reach it.
	Zone, Suffix, Endpoint string
	// Dir holds the local directories of the shards' stores. What is
	// there when the process starts is left by an earlier process and is
	// removed: stores are played back from their recovery logs.
	Dir string
	// Limit is the most shard replicas the process holds. Zero means
	// DefaultLimit.
	Limit int
	// LeaseTTL is how long the process's keys outlive it: the time a
	// crashed primary's shards wait before failing over. Zero means
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// HintInterval is how often a primary stores its recovery-log hints.
	// Zero means DefaultHintInterval.
	HintInterval time.Duration
	// ProducerPruneHorizon is how long, by the clocks of a source's
	// messages, a producer with no transaction pending is remembered after
	// its last commit in the source: a message of its that comes again
	// later is delivered again (see message.Sequencer.Prune). Zero means
	// DefaultProducerPruneHorizon; a negative value never forgets one.
	ProducerPruneHorizon time.Duration
	// MaxTxnOps is etcd's --max-txn-ops. Zero means 128.
	MaxTxnOps int
	// UnassignFailedAfter is how long a FAILED replica of the process
	// keeps its assignment before the process removes it, so that the
	// allocator assigns the shard afresh: a restart, here or on another
	// process, as an operator's Unassign would make. Zero means never:
	// FAILED replicas wait for Unassign.
	UnassignFailedAfter time.Duration
	// DrainTimeout bounds a drain: once it passes, the process gives up the
	// shard replicas no other process took (a standby whose shard every
	// other process already holds), which fail over at once rather than
	// after its lease expires. Zero waits as long as it takes. See
	// allocator.MemberConfig.DrainTimeout.
	DrainTimeout time.Duration
	// DialOptions are added to those of the process's connections to
	// other consumer processes (which are plaintext by default):
	// transport credentials, for TLS.
	DialOptions []grpc.DialOption
	// Auth checks the capabilities of each request's token, if set; its
	// ServerOptions must be those of the gRPC server the process serves
	// on. The process's own token, for brokers and its peers, is one of
	// DialOptions (and of Journals's).
	Auth   *auth.Authorizer
	Logger *slog.Logger
}

func (c *Config) validate() error {
	switch {
	case c.App == nil:
		return errors.New("consumer: Config.App is required")
	case c.Etcd == nil:
		return errors.New("consumer: Config.Etcd is required")
	case c.Journals == nil:
		return errors.New("consumer: Config.Journals is required")
	case c.Dir == "":
		return errors.New("consumer: Config.Dir is required")
	case c.Root == "" || c.Root[0] != '/' || c.Root[len(c.Root)-1] != '/':
		return fmt.Errorf("consumer: root %q must begin and end with '/'", c.Root)
	case c.Limit < 0:
		return fmt.Errorf("consumer: limit %d is negative", c.Limit)
	case c.Endpoint == "":
		return errors.New("consumer: Config.Endpoint is required (host:port of the Shard service)")
	}
	if err := allocator.ValidateToken("zone", c.Zone, false); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	if err := allocator.ValidateToken("suffix", c.Suffix, false); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	return nil
}

// Server is a consumer process: a member of its application's fleet that
// serves the shard replicas assigned to it, and the Shard gRPC service.
// Register it with a grpc.Server (protocol.RegisterShardServer), then Run
// it.
type Server struct {
	protocol.UnimplementedShardServer

	cfg      Config
	id       *protocol.ProcessID
	log      *slog.Logger
	ks       *keyspace.KeySpace
	resolver *resolver
	conns    connpool.Pool
	seq      atomic.Int64 // numbers replica directories

	ctx       context.Context     // the server's life
	wg        sync.WaitGroup      // replicas' goroutines
	serving   chan struct{}       // closed once the keyspace is loaded
	lifecycle allocator.Lifecycle // what Ready reports
}

// New returns a consumer process for cfg. It does nothing until Run.
func New(cfg Config) (*Server, error) {
	if cfg.Limit == 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.HintInterval == 0 {
		cfg.HintInterval = DefaultHintInterval
	}
	if cfg.ProducerPruneHorizon == 0 {
		cfg.ProducerPruneHorizon = DefaultProducerPruneHorizon
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, id: &protocol.ProcessID{Zone: cfg.Zone, Suffix: cfg.Suffix},
		log: cfg.Logger.With("consumer", cfg.Zone+"#"+cfg.Suffix), serving: make(chan struct{})}
	s.conns.Options = cfg.DialOptions
	s.resolver = newResolver(s)
	s.ks = keyspace.New(cfg.Root, allocator.NewDecoder(cfg.Root, Decoders))
	return s, nil
}

// Journals is the process's client of the brokers.
func (s *Server) Journals() *client.Client { return s.cfg.Journals }

// ID is the process's zone and suffix.
func (s *Server) ID() *protocol.ProcessID { return s.id }

// Run serves until ctx is done (returning at once: the process's shards
// fail over when its lease expires) or drain is closed (handing its
// shards to other processes, then returning nil). Replicas have stopped
// when it returns.
func (s *Server) Run(ctx context.Context, drain <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	s.ctx = ctx
	defer s.conns.Close()
	defer s.wg.Wait()
	defer cancel()
	defer s.lifecycle.Advance(allocator.Stopped)

	if err := s.resetDir(); err != nil {
		return err
	}
	if err := s.ks.Load(ctx, s.cfg.Etcd, 0); err != nil {
		return fmt.Errorf("consumer: loading keyspace %s: %w", s.cfg.Root, err)
	}
	s.ks.Observe(s.resolver.observe)
	s.resolver.observe(s.ks.Snapshot())
	close(s.serving)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.ks.Watch(ctx, s.cfg.Etcd) }()
	err := allocator.Run(ctx, drain, allocator.MemberConfig{
		Config: allocator.Config{Client: s.cfg.Etcd, KeySpace: s.ks, Ready: Ready,
			MaxTxnOps: s.cfg.MaxTxnOps, Logger: s.log},
		Root: s.cfg.Root, Zone: s.cfg.Zone, Suffix: s.cfg.Suffix, LeaseTTL: s.cfg.LeaseTTL,
		Encode: func(exiting bool) string {
			return allocator.Encode(MemberSpec{Limit: s.cfg.Limit, Exiting: exiting, Endpoint: s.cfg.Endpoint})
		},
		Drained:      func(ctx context.Context) error { return s.resolver.awaitNoReplicas(ctx) },
		DrainTimeout: s.cfg.DrainTimeout,
		Lifecycle:    &s.lifecycle,
		Announced: func(ann *allocator.Announcement) {
			s.log.Info("announced; serving the shards assigned to this process", "member", ann.Key, "lease", fmt.Sprintf("%x", int64(ann.Lease)))
			s.resolver.announced(ann.Lease)
		},
	})
	s.resolver.stopAll()
	return err
}

// resetDir empties the directory of replicas' stores: an earlier
// process's are stale (a store is played back from its recovery log).
func (s *Server) resetDir() error {
	dir := filepath.Join(s.cfg.Dir, "replicas")
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("consumer: removing stale replicas in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	return nil
}

// replicaDir returns a new directory for a replica of shard id.
func (s *Server) replicaDir(id string) string {
	return filepath.Join(s.cfg.Dir, "replicas", fmt.Sprintf("%d", s.seq.Add(1)))
}

// header is the header of this process's responses.
func (s *Server) header() *protocol.Header {
	return &protocol.Header{ProcessId: s.id, Revision: s.ks.Revision()}
}

// awaitRevision waits until the server serves, then (briefly) until its
// keyspace reflects rev.
// syncKeyspace waits (up to 5s) until the process's view of etcd holds
// every write etcd made before the call (see keyspace.Sync): a List then
// shows a shard just created through another process.
func (s *Server) syncKeyspace(ctx context.Context) error {
	if err := s.awaitRevision(ctx, 0); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.ks.Sync(sctx, s.cfg.Etcd); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("answering from a view of etcd that may lag it", "err", err)
	}
	return nil
}

func (s *Server) awaitRevision(ctx context.Context, rev int64) error {
	select {
	case <-s.serving:
	case <-ctx.Done():
		return ctx.Err()
	}
	if rev <= s.ks.Revision() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return s.ks.WaitForRevision(ctx, rev)
}

// Dial returns a connection to the consumer process at endpoint, shared
// by the process's proxies (and an application's own RPCs).
func (s *Server) Dial(endpoint string) (*grpc.ClientConn, error) { return s.conns.Get(endpoint) }

// Ready returns nil while the process serves — its view of etcd loaded,
// announced under its own lease, not draining — and otherwise why not:
// what its admin endpoint's /readyz reports.
func (s *Server) Ready() error { return s.lifecycle.Ready() }
