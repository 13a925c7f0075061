package console

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/fleet"
	"github.com/quire-dev/quire/keyspace"
)

// Config configures a Console.
type Config struct {
	// Etcd is the deployment's etcd.
	Etcd *clientv3.Client
	// Prefix is where the console looks for fleets: it shows every broker
	// fleet and consumer application whose root is beneath it ("/quire/",
	// say). Empty looks at the whole of etcd.
	Prefix string
	// Journals reads the journals' write heads, as the console (with its
	// own token, if any).
	Journals *client.Client
	// DialOptions dial the consumer processes, for their shards' status:
	// transport credentials, and the console's own token. Without
	// transport credentials, connections are plaintext.
	DialOptions []grpc.DialOption
	// Actions enables the console's actions: unassigning a FAILED shard,
	// applying an edited journal spec.
	Actions bool
	// Interval is how often the console samples write heads and shards;
	// zero means a second.
	Interval time.Duration
	Logger   *slog.Logger
}

// Console is the web console: a handler, and the watches and samples
// behind it, which Run keeps current.
type Console struct {
	cfg    Config
	mux    *http.ServeMux
	sample *sampler

	mu     sync.Mutex
	fleets map[string]*watched // by root
	cached cachedView
	wg     sync.WaitGroup // of the fleets' watches

	// changeMu guards changed and version. It is not mu: keyspaces call
	// notify with their own lock held, and snapshots takes theirs under
	// mu, so notify taking mu could deadlock.
	changeMu sync.Mutex
	changed  chan struct{} // closed, and replaced, at each change
	version  uint64        // counts changes

	// viewed is when someone last asked for a view (Unix nanoseconds);
	// wake tells Run that someone looks again after idleAfter.
	viewed atomic.Int64
	wake   chan struct{}
}

// watched is a fleet and the keyspace that mirrors it.
type watched struct {
	fleet.Found
	ks     *keyspace.KeySpace
	cancel context.CancelFunc
}

// New returns the console of cfg. It shows nothing until Run runs.
func New(cfg Config) *Console {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	c := &Console{cfg: cfg, fleets: map[string]*watched{}, changed: make(chan struct{}), wake: make(chan struct{}, 1)}
	c.sample = newSampler(cfg)
	c.mux = c.routes()
	return c
}

// discoverEvery is how many samples pass between searches for fleets
// that appeared or went away.
const discoverEvery = 10

// etcdEvery is how many samples pass between checks of etcd's members.
const etcdEvery = 5

// persistedEvery is how many samples pass between listings of the
// journals' fragments, for how far each is persisted.
const persistedEvery = 10

// idleAfter is how long after the last view the console stops making
// RPCs to sample write heads and shards: a history's length.
const idleAfter = historyLen * time.Second

// Run keeps the console current until ctx is done: it watches every
// fleet under the prefix and samples once an interval. It returns
// ctx.Err() once every watch it started has stopped.
func (c *Console) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		c.wg.Wait()
		c.sample.close()
	}()
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	active := 0 // samples since someone began to look
	for n := 0; ; n++ {
		if n%discoverEvery == 0 {
			c.discover(ctx)
		}
		what := sampling{}
		if c.looking() {
			active++
			what = sampling{rpcs: true, etcd: active%etcdEvery == 1, persisted: active%persistedEvery == 1}
		} else {
			active = 0
		}
		c.sample.take(ctx, c.snapshots(), what)
		c.notify()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		case <-c.wake:
		}
	}
}

// touch notes that someone looks at the console, and wakes Run if no one
// did until now, so that the first view is not an empty one for long.
func (c *Console) touch() {
	now := time.Now().UnixNano()
	if prev := c.viewed.Swap(now); time.Duration(now-prev) > idleAfter {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// looking is whether someone looked at the console within idleAfter.
func (c *Console) looking() bool {
	return time.Since(time.Unix(0, c.viewed.Load())) < idleAfter
}

// discover starts watching the fleets that appeared under the prefix,
// and stops watching those that are gone.
func (c *Console) discover(ctx context.Context) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	found, err := fleet.Discover(dctx, c.cfg.Etcd, c.cfg.Prefix)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("console: finding fleets", "prefix", c.cfg.Prefix, "err", err)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	for _, f := range found {
		seen[f.Root] = true
		if w, ok := c.fleets[f.Root]; ok && w.Kind == f.Kind {
			continue
		} else if ok {
			w.cancel() // Its kind changed: a consumer application got its first shard.
		}
		c.fleets[f.Root] = c.watch(ctx, f)
	}
	for root, w := range c.fleets {
		if !seen[root] {
			w.cancel()
			delete(c.fleets, root)
		}
	}
}

// watch mirrors fleet f until ctx is done or the watch is cancelled.
func (c *Console) watch(ctx context.Context, f fleet.Found) *watched {
	ctx, cancel := context.WithCancel(ctx)
	w := &watched{Found: f, cancel: cancel,
		ks: keyspace.New(f.Root, allocator.NewDecoder(f.Root, f.Kind.Decoders()))}
	// Values that do not decode are a fleet whose kind the console read
	// before its first item (a consumer application without shards reads
	// as brokers); the next discovery watches it again as its kind.
	w.ks.SetLogger(slog.New(slog.DiscardHandler))
	w.ks.Observe(func(keyspace.KeyValues, int64) { c.notify() })
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := w.ks.Watch(ctx, c.cfg.Etcd); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("console: watching a fleet", "root", f.Root, "err", err)
		}
	}()
	return w
}

// fleetState is a fleet as of one revision.
type fleetState struct {
	Kind fleet.Kind
	*allocator.State
}

// snapshots are the fleets' states now, sorted by root.
func (c *Console) snapshots() []fleetState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]fleetState, 0, len(c.fleets))
	for _, w := range c.fleets {
		kvs, rev := w.ks.Snapshot()
		out = append(out, fleetState{Kind: w.Kind, State: allocator.NewState(w.Root, kvs, rev)})
	}
	sortFleets(out)
	return out
}

// state is the state of the fleet at root, or nil if the console does
// not watch it.
func (c *Console) state(root string) *fleetState {
	for _, f := range c.snapshots() {
		if f.Root == root {
			return &f
		}
	}
	return nil
}

// notify tells the event streams that something changed.
func (c *Console) notify() {
	c.changeMu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.version++
	c.changeMu.Unlock()
}

// changes returns a channel closed at the next change.
func (c *Console) changes() <-chan struct{} {
	c.changeMu.Lock()
	defer c.changeMu.Unlock()
	return c.changed
}

// ServeHTTP serves the console's page and its API.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.mux.ServeHTTP(w, r) }
