package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/internal/connpool"
	"github.com/quire-dev/quire/keyspace"
	"github.com/quire-dev/quire/protocol"
)

// Config configures a broker.
type Config struct {
	Etcd *clientv3.Client
	// Root is the brokers' key prefix, ending in '/', e.g. /quire/brokers/.
	Root string
	// Zone and Suffix name the broker; Endpoint is its gRPC address,
	// host:port, as other brokers and clients reach it.
	Zone, Suffix, Endpoint string
	// Dir holds the broker's spools.
	Dir string
	// DefaultStore is the fragment store URL of journals that name none.
	DefaultStore string
	// Limit is the most journals the broker serves. Zero means 1024.
	Limit int
	// LeaseTTL is how long the broker's keys outlive it. Zero means 10s.
	LeaseTTL time.Duration
	// DrainTimeout bounds a drain: once it passes, the broker gives up the
	// journals no other broker took (with as many brokers as a journal's
	// replication, none can), which fail over at once, rather than after
	// its lease expires. Zero waits as long as it takes. See
	// allocator.MemberConfig.DrainTimeout.
	DrainTimeout time.Duration
	// IsolationTimeout is how long the broker may reach etcd but none of
	// its peers (while it has two or more) before it resigns: it revokes
	// its lease, so that its journals move to brokers that can replicate
	// them, and Run returns an error wrapping ErrIsolated. It is also how
	// long a peer goes unreached before the broker reports it cut, which
	// may choose this broker or that peer to resign (see cuts.go). Zero
	// means three times LeaseTTL; negative disables both. See isolation.go.
	IsolationTimeout time.Duration
	// SuspendIdle, if positive, suspends journals that no one appended to
	// for that long (see Suspend). Zero never suspends a journal unasked.
	SuspendIdle time.Duration
	// MaxTxnOps is etcd's --max-txn-ops. Zero means 128.
	MaxTxnOps int
	// DialOptions are added to those of the broker's connections to other
	// brokers (which are plaintext by default): transport credentials, for
	// TLS.
	DialOptions []grpc.DialOption
	// Auth checks the capabilities of each request's token, if set; its
	// ServerOptions must be those of the gRPC server the broker is
	// registered with. The broker's own token, for its peers, is one of
	// DialOptions (see auth.DialOptions).
	Auth   *auth.Authorizer
	Logger *slog.Logger

	// peersChecked, if set, is called after each check of the peers, with
	// their number and whether one was reached (for tests).
	peersChecked func(peers int, reached bool)
	// rolled, if set, is called when a spool that holds content has
	// rolled, after the new one is published and before the old one is
	// queued for persisting (for tests).
	rolled func(old *spool.Spool)
}

// Server is a broker. Register it with a grpc.Server, then Run it.
type Server struct {
	protocol.UnimplementedJournalServer

	cfg       Config
	id        *protocol.ProcessID
	log       *slog.Logger
	ks        *keyspace.KeySpace
	resolver  *resolver
	persister *persister
	stores    storeCache
	conns     connpool.Pool

	ctx       context.Context     // the server's life
	wg        sync.WaitGroup      // goroutines of replicas and the persister
	serving   chan struct{}       // closed once the keyspace is loaded and resolved
	lifecycle allocator.Lifecycle // what Ready reports

	localMu sync.Mutex
	locals  map[string][]entry // recovered spools, and those of ended replicas, awaiting persistence
	// isolated is set once the broker resigns, cut off from its peers: see
	// replica.end.
	isolated atomic.Bool
	// ending counts replicas being retired (replica.end), which a drain
	// waits for before it waits for their spools to persist.
	ending sync.WaitGroup
	// recovered is, per journal, its latest spool recovered from disk:
	// its replica starts with its registers, even once it is persisted.
	recovered map[string]*spool.Recovered
}

// New returns a broker for cfg. It does nothing until Run.
func New(cfg Config) (*Server, error) {
	if cfg.Limit == 0 {
		cfg.Limit = 1024
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, id: &protocol.ProcessID{Zone: cfg.Zone, Suffix: cfg.Suffix},
		log: cfg.Logger.With("broker", cfg.Zone+"#"+cfg.Suffix), locals: map[string][]entry{},
		recovered: map[string]*spool.Recovered{},
		serving:   make(chan struct{})}
	s.conns.Options = cfg.DialOptions
	s.resolver = newResolver(s)
	s.persister = newPersister(s)
	s.ks = keyspace.New(cfg.Root, newDecoder(cfg.Root))
	return s, nil
}

func (c *Config) validate() error {
	switch {
	case c.Etcd == nil:
		return errors.New("broker: Config.Etcd is required")
	case c.Dir == "":
		return errors.New("broker: Config.Dir is required")
	case c.Root == "" || c.Root[len(c.Root)-1] != '/':
		return fmt.Errorf("broker: root %q must end in '/'", c.Root)
	}
	if err := allocator.ValidateToken("zone", c.Zone, false); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if err := allocator.ValidateToken("suffix", c.Suffix, false); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if err := fragment.ValidateURL(c.DefaultStore); err != nil {
		return fmt.Errorf("broker: default store: %w", err)
	}
	if c.IsolationTimeout > 0 && c.IsolationTimeout <= c.LeaseTTL {
		return fmt.Errorf("broker: isolation timeout %s must be more than the lease TTL %s (peers that die must leave etcd before their absence counts)", c.IsolationTimeout, c.LeaseTTL)
	}
	spec := MemberSpec{Limit: c.Limit, Endpoint: c.Endpoint}
	return spec.Validate()
}

// Run serves until ctx is done (returning at once; the broker's journals
// fail over when its lease expires) or drain is closed (handing its
// journals to other brokers, persisting its spools, then returning nil).
func (s *Server) Run(ctx context.Context, drain <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	s.ctx = ctx
	defer s.conns.Close()
	defer s.wg.Wait()
	defer cancel()
	defer s.lifecycle.Advance(allocator.Stopped)

	if err := s.ks.Load(ctx, s.cfg.Etcd, 0); err != nil {
		return fmt.Errorf("loading brokers' keyspace: %w", err)
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.ks.Watch(ctx, s.cfg.Etcd) }()
	// Before its spools, which it may need to compare with a primary's.
	if err := s.awaitPeers(ctx); err != nil {
		return err
	}
	if err := s.recoverSpools(ctx); err != nil {
		return err
	}
	s.ks.Observe(s.resolver.observe)
	s.resolver.observe(s.ks.Snapshot())
	close(s.serving)
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.persister.run(ctx, 2) }()
	return s.serve(ctx, drain)
}

// serve announces the broker and allocates until drained, stopped or
// isolated from its peers. A drain ends once the broker holds no journal
// and its spools are persisted.
func (s *Server) serve(ctx context.Context, drain <-chan struct{}) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	resign := make(chan struct{})
	var isolated error
	if s.cfg.isolationTimeout() > 0 {
		wg.Go(func() { isolated = s.watchPeers(ctx, resign) })
	}
	err := allocator.Run(ctx, drain, allocator.MemberConfig{
		Config: allocator.Config{Client: s.cfg.Etcd, KeySpace: s.ks, Ready: Ready,
			MaxTxnOps: s.cfg.MaxTxnOps, Logger: s.log},
		Root: s.cfg.Root, Zone: s.cfg.Zone, Suffix: s.cfg.Suffix, LeaseTTL: s.cfg.LeaseTTL,
		Encode: func(exiting bool) string {
			return encodeJSON(MemberSpec{Limit: s.cfg.Limit, Endpoint: s.cfg.Endpoint, Exiting: exiting})
		},
		Drained: func(ctx context.Context) error {
			s.log.Info("drained; persisting spools")
			s.ending.Wait() // A drain that timed out has replicas still retiring.
			return s.persister.wait(ctx)
		},
		DrainTimeout: s.cfg.DrainTimeout,
		Lifecycle:    &s.lifecycle,
		Resign:       resign,
		Announced: func(ann *allocator.Announcement) {
			s.log.Info("announced; serving the journals assigned to this broker", "member", ann.Key, "lease", fmt.Sprintf("%x", int64(ann.Lease)))
			s.resolver.announced(ann.Lease)
		},
	})
	if errors.Is(err, allocator.ErrResigned) {
		cancel()
		wg.Wait()
		return fmt.Errorf("%w: %w", isolated, err)
	}
	return err
}

// writable checks that the broker can make spools in dir, so that a
// broker that cannot fails at start, naming the directory, rather than
// announce itself and fail every append given to it.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("the spool directory %s cannot be made: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err == nil {
		_, err = f.Write([]byte{0})
		err = errors.Join(err, f.Close(), os.Remove(f.Name()))
	}
	if err != nil {
		return fmt.Errorf("the spool directory %s cannot be written: %w", dir, err)
	}
	return nil
}

// recoverSpools finds the spools a previous process left, indexes them for
// reads, and queues them for persisting.
func (s *Server) recoverSpools(ctx context.Context) error {
	if err := writable(s.cfg.Dir); err != nil {
		return err
	}
	recovered, err := spool.Recover(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("recovering spools: %w", err)
	}
	kvs, rev := s.ks.Snapshot()
	state := allocator.NewState(s.cfg.Root, kvs, rev)
	for _, rec := range recovered {
		if rec.End == rec.Begin {
			rec.Remove()
			continue
		}
		spoolsRecovered.Inc()
		if rec.Lost > 0 {
			s.log.Error("spool recovered with bytes lost (machine crash before sync, or disk damage)",
				"journal", rec.Journal, "begin", rec.Begin, "end", rec.End, "lost", rec.Lost, "path", rec.Path())
		}
		var spec *protocol.JournalSpec // Nil if the journal was deleted: persist to the default store.
		if i := state.ItemIndex(rec.Journal); i >= 0 {
			spec = state.Items[i].Value.(*protocol.JournalSpec)
		}
		f := fragment.Fragment{Journal: rec.Journal, Begin: rec.Begin, End: rec.End, Sum: rec.Sum,
			Codec: codecOf(spec), Store: s.storesOf(spec)[0]}
		if other, ok := s.conflict(ctx, spec, f); ok {
			s.quarantine(rec, spec, other.Name())
			continue
		}
		if why := s.divergence(ctx, state, spec, rec); why != "" {
			s.quarantine(rec, spec, why)
			continue
		}
		s.adopt(rec, f)
	}
	return nil
}

// divergence tells why a recovered spool of a replicated journal (with
// replication 2 or more) cannot be adopted, or is empty when it can.
//
// While this broker was down, its journal may have moved: if another
// broker is its primary now, every acknowledged byte is on that broker's
// route, and content this broker committed that the others never got (the
// tail of an append that failed when it was cut off) may conflict with
// what the new primary wrote since, even before that is persisted (so
// conflict, which asks the stores, cannot see it). Such a spool is adopted
// only if the primary serves the same bytes over the same offsets.
func (s *Server) divergence(ctx context.Context, state *allocator.State, spec *protocol.JournalSpec, rec *spool.Recovered) string {
	if spec.GetReplication() < 2 {
		return ""
	}
	route := routeOf(state, state.ItemAssignments(rec.Journal))
	if len(route.Members) == 0 || indexOf(route, s.id) == 0 {
		return "" // This broker is still the primary: its content stands.
	}
	// The primary waits for content it expects from a peer (this broker,
	// perhaps): its silence means it lacks the spool's content, which is
	// then adopted, as is content it judges gone.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err := s.samePrimaryContent(ctx, route, rec)
	switch {
	case err == nil, errors.Is(err, errGap), ctx.Err() != nil && !errors.Is(err, errDiffers):
		return ""
	}
	return fmt.Sprintf("the journal's primary %s does not serve the same content: %v", route.Endpoints[0], err)
}

// samePrimaryContent compares a recovered spool with the content of its
// offsets that the route's primary serves.
func (s *Server) samePrimaryContent(ctx context.Context, route *protocol.Route, rec *spool.Recovered) error {
	local, err := rec.Reader()
	if err != nil {
		return err
	}
	defer local.Close()
	head, err := s.compareWithPrimary(ctx, route, rec.Journal, rec.Begin, rec.End, local)
	if err == nil && head >= 0 {
		return fmt.Errorf("it ends at offset %d", head)
	}
	return err
}

// Errors of readPeer and compareWithPrimary: the broker serves no content
// there (it judges it gone), or other bytes.
var (
	errGap     = errors.New("no content")
	errDiffers = errors.New("different bytes")
)

// compareWithPrimary compares local, the content of a spool of journal at
// [begin, end), with what the route's primary serves over those offsets.
// It returns -1 and nil if the primary serves the same bytes; the
// primary's write head and nil if it serves the same bytes up to its
// write head, before end; an error wrapping errDiffers if it serves other
// bytes; and another error if it serves none (errGap), or cannot be asked.
func (s *Server) compareWithPrimary(ctx context.Context, route *protocol.Route, journal string, begin, end int64, local io.Reader) (int64, error) {
	buf := make([]byte, readChunk)
	return s.readPeer(ctx, route.Endpoints[0], route, journal, begin, end, func(offset int64, content []byte) error {
		mine := buf[:len(content)]
		if _, err := io.ReadFull(local, mine); err != nil {
			return fmt.Errorf("reading the local spool at %d: %w", offset, err)
		}
		if !bytes.Equal(mine, content) {
			return fmt.Errorf("%w in [%d, %d)", errDiffers, offset, offset+int64(len(mine)))
		}
		return nil
	})
}

// readPeer reads [begin, end) of journal from what the broker at endpoint
// holds itself (route is that of the request's header), and passes its
// content, in order and without gaps, to each. It returns -1 and nil once
// each had it all, or the broker's write head and nil if the content ends
// there, before end; an error wrapping errGap if the broker has none at
// an offset, or each's error. A primary answers with its own head at once
// (OwnHead), even if peers may hold commits it lacks: what it holds is
// what a recovered spool is compared with.
func (s *Server) readPeer(ctx context.Context, endpoint string, route *protocol.Route, journal string, begin, end int64,
	each func(offset int64, content []byte) error) (int64, error) {
	conn, err := s.conns.Get(endpoint)
	if err != nil {
		return -1, err
	}
	stream, err := protocol.NewJournalClient(conn).Read(ctx, &protocol.ReadRequest{Header: s.header(route),
		Journal: journal, Offset: begin, EndOffset: end, DoNotProxy: true, OwnHead: true})
	if err != nil {
		return -1, err
	}
	for next := begin; next < end; {
		resp, err := stream.Recv()
		switch {
		case err != nil:
			return -1, fmt.Errorf("reading [%d, %d): %w", next, end, err)
		case resp.Status == protocol.Status_OFFSET_NOT_YET_AVAILABLE:
			return next, nil
		case resp.Status != protocol.Status_OK:
			return -1, fmt.Errorf("reading [%d, %d): %s", next, end, resp.Status)
		case len(resp.Content) == 0 && resp.Offset > next:
			return -1, fmt.Errorf("it has %w at [%d, %d)", errGap, next, resp.Offset)
		case len(resp.Content) == 0:
			continue
		case resp.Offset != next:
			return -1, fmt.Errorf("content at %d, want %d", resp.Offset, next)
		}
		content := resp.Content[:min(int64(len(resp.Content)), end-next)]
		if err := each(next, content); err != nil {
			return -1, err
		}
		next += int64(len(content))
	}
	return -1, nil
}

// conflict finds a stored fragment that overlaps f with other content:
// while this broker was down, its journal moved, and another primary wrote
// those offsets. Offsets never change once acknowledged, so the stored
// content stands.
func (s *Server) conflict(ctx context.Context, spec *protocol.JournalSpec, f fragment.Fragment) (fragment.Fragment, bool) {
	var found fragment.Fragment
	ok := false
	for _, url := range s.storesOf(spec) {
		store, err := s.stores.get(ctx, url)
		if err != nil {
			s.log.Warn("cannot check a recovered spool against its store", "store", url, "err", err)
			continue
		}
		err = store.List(ctx, f.Journal, func(g fragment.Fragment) error {
			if g.Begin < f.End && f.Begin < g.End && !(g.Begin == f.Begin && g.End == f.End && g.Sum == f.Sum) &&
				!(g.Begin <= f.Begin && f.End <= g.End && g.Sum == f.Sum) {
				found, ok = g, true
			}
			return nil
		})
		if err != nil {
			s.log.Warn("cannot check a recovered spool against its store", "store", url, "err", err)
		}
	}
	return found, ok
}

// quarantine keeps a conflicting recovered spool out of the journal, on
// disk for an operator, and says so loudly; why names the conflict.
//
// At replication 2 or more this is expected after an append that failed
// (it committed here, as this broker went down, and not elsewhere): the
// other replicas hold every acknowledged byte, and it is a warning. At
// replication 1 the spool may hold acknowledged bytes: an error.
func (s *Server) quarantine(rec *spool.Recovered, spec *protocol.JournalSpec, why string) {
	level, msg := slog.LevelError, "recovered spool conflicts with content another broker wrote at the same offsets; kept out of the journal"
	if spec.GetReplication() >= 2 {
		level, msg = slog.LevelWarn, "recovered spool ends in content the journal does not hold (an append that failed); kept out of the journal, whose other replicas hold every acknowledged byte"
	}
	s.logQuarantined(rec.MoveTo(s.quarantineDir()), level, msg, rec.Journal, rec.Begin, rec.End, why)
}

// quarantineSpool keeps the spool of a replica that left its journal's
// route out of the journal, as quarantine does for a recovered one.
func (s *Server) quarantineSpool(sp *spool.Spool, why string) {
	s.logQuarantined(sp.MoveTo(s.quarantineDir()), slog.LevelWarn,
		"spool of a replica that left the journal's route ends in content the journal does not hold "+
			"(an append that failed); kept out of the journal, whose other replicas hold every acknowledged byte",
		sp.Journal, sp.Begin, sp.End(), why)
}

// quarantineDir holds quarantined spools.
func (s *Server) quarantineDir() string {
	return filepath.Join(s.cfg.Dir, "#quarantine") // "#" never appears in a journal name.
}

func (s *Server) logQuarantined(moveErr error, level slog.Level, msg, journal string, begin, end int64, why string) {
	s.log.Log(context.Background(), level, msg, "journal", journal, "begin", begin, "end", end, "conflict", why,
		"quarantine", s.quarantineDir(), "moveErr", moveErr)
	spoolsQuarantined.Inc()
}

// adopt indexes a recovered spool for reads and queues it for persisting.
func (s *Server) adopt(rec *spool.Recovered, f fragment.Fragment) {
	s.localMu.Lock()
	s.locals[rec.Journal] = append(s.locals[rec.Journal], entry{frag: f, rec: rec})
	if prev := s.recovered[rec.Journal]; prev == nil || rec.End > prev.End {
		s.recovered[rec.Journal] = rec
	}
	s.localMu.Unlock()
	s.persister.enqueue(&persistJob{frag: f, open: rec.Reader, done: func(stored fragment.Fragment) {
		s.persisted(rec.Journal, stored)
		if err := rec.Remove(); err != nil {
			s.log.Warn("removing persisted spool", "path", rec.Path(), "err", err)
		}
	}})
	s.log.Info("recovered spool", "journal", rec.Journal, "begin", rec.Begin, "end", rec.End)
}

// latestRecovered is the latest spool of journal recovered from disk, or
// nil.
func (s *Server) latestRecovered(journal string) *spool.Recovered {
	s.localMu.Lock()
	defer s.localMu.Unlock()
	return s.recovered[journal]
}

// rolledFragment is the fragment of a rolled spool of journal.
func (s *Server) rolledFragment(journal string, spec *protocol.JournalSpec, sp *spool.Spool) fragment.Fragment {
	return fragment.Fragment{Journal: journal, Begin: sp.Begin, End: sp.End(), Sum: sp.Sum(),
		Codec: codecOf(spec), Store: s.storesOf(spec)[0]}
}

var _ fragment.CheckedContent = (*spool.Reader)(nil)

// persistSpool queues a rolled spool, indexed as f, for persisting; once
// stored, the indexes serve it from the store, and its files go.
func (s *Server) persistSpool(f fragment.Fragment, sp *spool.Spool) {
	s.persister.enqueue(&persistJob{
		frag: f,
		// The spool's reader checks its content by a CRC32C, not a
		// second SHA-256: a fragment.CheckedContent.
		open: func() (io.ReadCloser, error) { return sp.Reader(), nil },
		done: func(stored fragment.Fragment) {
			s.persisted(f.Journal, stored)
			if err := sp.Remove(); err != nil {
				s.log.Warn("removing persisted spool", "fragment", stored.Name(), "err", err)
			}
		},
	})
}

// handOffEnded keeps the spool of a replica that ended as a local
// fragment of the broker, as a recovered spool is, until it is
// persisted: a later replica of the journal indexes it (indexLocals).
func (s *Server) handOffEnded(journal string, spec *protocol.JournalSpec, sp *spool.Spool) {
	f := s.rolledFragment(journal, spec, sp)
	s.localMu.Lock()
	s.locals[journal] = append(s.locals[journal], entry{frag: f, spool: sp})
	s.localMu.Unlock()
	s.persistSpool(f, sp)
}

// indexLocals indexes in ix the spools of journal that the broker holds
// outside any replica (recovered at start, or of a replica that ended)
// and has not yet persisted.
//
// It holds localMu while it indexes them: persisted removes a spool from
// locals under localMu before it indexes the stored fragment, so a spool
// is either indexed here before persisted replaces it, or not at all.
// (Copied out and indexed after, a spool persisted in between was indexed
// as local once its files were gone, and reads of it failed for good.)
func (s *Server) indexLocals(journal string, ix *index) {
	s.localMu.Lock()
	defer s.localMu.Unlock()
	for _, e := range s.locals[journal] {
		ix.addLocal(e)
	}
}

// persisted records that a local fragment of journal is now stored.
func (s *Server) persisted(journal string, f fragment.Fragment) {
	s.localMu.Lock()
	out := s.locals[journal][:0]
	for _, e := range s.locals[journal] {
		if e.frag.Begin != f.Begin || e.frag.End != f.End {
			out = append(out, e)
		}
	}
	s.locals[journal] = out
	s.localMu.Unlock()
	if r, _ := s.resolver.replica(journal); r != nil {
		f.ModTime = time.Now()
		r.index.persisted(f)
	}
}

// storesOf is the journal's stores, or the default store.
func (s *Server) storesOf(spec *protocol.JournalSpec) []string {
	if stores := spec.GetFragment().GetStores(); len(stores) != 0 {
		return stores
	}
	return []string{s.cfg.DefaultStore}
}

func (s *Server) storeFor(ctx context.Context, url string) (fragment.Store, error) {
	if url == "" {
		return nil, nil
	}
	return s.stores.get(ctx, url)
}

// header is the header of this broker's responses.
func (s *Server) header(route *protocol.Route) *protocol.Header {
	return &protocol.Header{ProcessId: s.id, Route: route, Revision: s.ks.Revision()}
}

// awaitRevision waits until the server serves (its gRPC service may be
// registered and reachable before Run has loaded the keyspace), then
// (briefly) until the keyspace reflects rev, so that a request from a
// client or broker that knows more is judged on the same view.
// resolve returns a journal's spec (nil if there is no such journal), its
// route, and this broker's replica of it, as of at least revision rev.
// Before it answers that a journal does not exist, it asks etcd: a
// journal created before the request is never reported missing because
// this broker's watch has not delivered it yet (a client that creates a
// journal through one broker and then uses it through another would fail
// otherwise).
func (s *Server) resolve(ctx context.Context, journal string, rev int64) (*protocol.JournalSpec, *protocol.Route, *replica) {
	s.awaitRevision(ctx, rev)
	spec, route, r := s.resolver.resolve(journal)
	if spec != nil {
		return spec, route, r
	}
	resp, err := s.cfg.Etcd.Get(ctx, allocator.ItemKey(s.cfg.Root, journal), clientv3.WithKeysOnly())
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision <= route.GetRevision() {
		return spec, route, r
	}
	s.awaitRevision(ctx, resp.Kvs[0].ModRevision)
	return s.resolver.resolve(journal)
}

// syncKeyspace waits (up to 5s) until the broker's view of etcd holds
// every write etcd made before the call (see keyspace.Sync): a List then
// shows a journal just created through another broker.
func (s *Server) syncKeyspace(ctx context.Context) {
	s.awaitRevision(ctx, 0)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.ks.Sync(sctx, s.cfg.Etcd); err != nil && ctx.Err() == nil {
		s.log.Warn("answering from a view of etcd that may lag it", "err", err)
	}
}

func (s *Server) awaitRevision(ctx context.Context, rev int64) {
	select {
	case <-s.serving:
	case <-ctx.Done():
		return
	}
	if rev <= s.ks.Revision() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s.ks.WaitForRevision(ctx, rev)
}

// markSynchronized records, in each assignment of the journal, that its
// replicas are synchronized on route: the allocator then counts them ready.
// It fails if the assignments changed meanwhile (the route will change, and
// the new one be synchronized).
func (s *Server) markSynchronized(ctx context.Context, journal string, route *protocol.Route) error {
	state, _ := s.resolver.snapshot()
	if current := routeOf(state, state.ItemAssignments(journal)); !sameRoute(current, route) {
		return fmt.Errorf("recording route of %s: it changed to %q", journal, routeText(current))
	}
	text := routeText(route)
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for _, a := range state.ItemAssignments(journal) {
		if string(a.KV.Value) == text {
			continue
		}
		key := string(a.KV.Key)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", a.KV.ModRevision))
		ops = append(ops, clientv3.OpPut(key, text, clientv3.WithIgnoreLease()))
	}
	if len(ops) == 0 {
		return nil
	}
	resp, err := s.cfg.Etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("recording route %q of %s: %w", text, journal, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("recording route %q of %s: assignments changed", text, journal)
	}
	return nil
}

// listStores lists every store of journal, of spec, into ix.
func (s *Server) listStores(ctx context.Context, journal string, spec *protocol.JournalSpec, ix *index) error {
	mark := ix.listingMark()
	var listed []fragment.Fragment
	for _, url := range s.storesOf(spec) {
		store, err := s.stores.get(ctx, url)
		if err != nil {
			return err
		}
		err = store.List(ctx, journal, func(f fragment.Fragment) error {
			listed = append(listed, f)
			return nil
		})
		if err != nil {
			return fmt.Errorf("listing %s in %s: %w", journal, url, err)
		}
	}
	ix.replaceStored(listed, mark)
	return nil
}

func protoFragment(f fragment.Fragment) *protocol.Fragment {
	var mod int64
	if !f.ModTime.IsZero() {
		mod = f.ModTime.Unix()
	}
	return &protocol.Fragment{Journal: f.Journal, Begin: f.Begin, End: f.End, Sum: f.Sum[:],
		Codec: protocol.Codec(f.Codec) + 1, Store: f.Store, ModTime: mod}
}

// Ready returns nil while the broker serves — its view of etcd loaded,
// its spools recovered, announced under its own lease, not draining —
// and otherwise why not: what its admin endpoint's /readyz reports.
func (s *Server) Ready() error { return s.lifecycle.Ready() }

// require fails with PermissionDenied unless ctx's request may do want to
// the journal: checked against its spec's labels, or its name alone if it
// has no spec, so that a caller learns nothing of journals outside its
// token's selector, not even whether they exist.
func (s *Server) require(ctx context.Context, want auth.Capability, journal string, spec *protocol.JournalSpec) error {
	if s.cfg.Auth == nil {
		return nil
	}
	if spec == nil {
		spec = &protocol.JournalSpec{Name: journal}
	}
	return s.cfg.Auth.Require(ctx, want, "journal", journal, spec.LabelSetWithMeta())
}
