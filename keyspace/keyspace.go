package keyspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/quire-dev/quire/internal/backoff"
)

// Decoder decodes the value of an etcd key. Returning an error keeps the key
// out of the mirror, and is logged unless it is ErrSkip. It must not modify
// kv.
type Decoder func(kv *mvccpb.KeyValue) (any, error)

// ErrSkip is returned by a Decoder for a key that does not belong in the
// mirror though it lies under its root (an owner's other keys): it is kept
// out quietly.
var ErrSkip = errors.New("keyspace: key skipped")

// Metrics are package-level, so any number of KeySpaces share them.
var (
	decodeErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_keyspace_decode_errors_total",
		Help: "Values of etcd keys that a keyspace failed to decode and kept out of its mirror.",
	})
	reloads = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_keyspace_reloads_total",
		Help: "Reloads of a whole keyspace because etcd compacted the revision its watch needed.",
	})
	progressRequests = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_keyspace_progress_requests_total",
		Help: "Watch progress notifications requested by waiters for a revision that no event of the keyspace's prefix had reached.",
	})
)

const (
	defaultPageSize = 1000
	minBackoff      = 100 * time.Millisecond
	// maxBatch bounds the watch responses applied as one change.
	maxBatch   = 1024
	maxBackoff = 5 * time.Second
)

// errWatchClosed reports a watch channel that closed without an error.
var errWatchClosed = errors.New("etcd watch channel closed")

// KeySpace mirrors all keys under Root. Its methods are safe for concurrent
// use; Load and Watch are meant to be called by one goroutine.
type KeySpace struct {
	// Root is the etcd key prefix that the KeySpace mirrors.
	Root string

	decode   Decoder
	log      *slog.Logger // nil means slog.Default() at the time of logging
	pageSize int          // keys per range request of Load

	// tree is the writable version of the mirror, changed only by the
	// goroutine that runs Load and Watch; kvs is the version last
	// published, which no one changes.
	tree *btree.BTreeG[*KeyValue]

	mu        sync.RWMutex
	kvs       KeyValues
	rev       int64
	changed   chan struct{}
	observers []observer
	nextID    uint64
	// watcher is the client that Watch runs on, and watchCtx the context
	// of its current watch (nil between watches): WaitForRevision asks
	// that watch for progress. A request carries the watch's context, not
	// the waiter's: where the watch's stream is gone, etcd's client makes
	// a new one for the request's context, and one that ends with a
	// waiter's request would close the next watch made on it.
	watcher  *clientv3.Client
	watchCtx context.Context
	// askedAt is when progress was last requested and not yet notified
	// (zero if none is outstanding). One request at a time: every request
	// of a synced watch is answered, and answers queued behind a slow
	// stream would otherwise pile up ahead of the events it must deliver.
	askedAt time.Time
}

// observer is a function registered with Observe.
type observer struct {
	id uint64
	fn func(KeyValues, int64)
}

// New returns an empty KeySpace of the keys under root, whose values are
// decoded by decode. A nil decode leaves every Decoded value nil.
func New(root string, decode Decoder) *KeySpace {
	if decode == nil {
		decode = func(*mvccpb.KeyValue) (any, error) { return nil, nil }
	}
	return &KeySpace{
		Root:     root,
		decode:   decode,
		pageSize: defaultPageSize,
		tree:     newTree(),
		changed:  make(chan struct{}),
	}
}

// Snapshot returns the current mirror and the etcd revision it reflects. The
// returned KeyValues is never modified afterwards (each applied change builds
// a new version), so callers may keep and read it without locks.
func (ks *KeySpace) Snapshot() (KeyValues, int64) {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return ks.kvs, ks.rev
}

// Revision returns the revision the mirror reflects; zero before Load.
func (ks *KeySpace) Revision() int64 {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return ks.rev
}

// Changed returns a channel that is closed when the next change is applied
// (a new revision or a reload). Take it before reading a Snapshot to never
// miss a change:
//
//	ch := ks.Changed()
//	kvs, rev := ks.Snapshot()
//	...
//	<-ch
func (ks *KeySpace) Changed() <-chan struct{} {
	ks.mu.RLock()
	defer ks.mu.RUnlock()
	return ks.changed
}

// WaitForRevision blocks until the mirror reflects at least rev, or ctx is
// done, in which case it returns ctx.Err().
//
// rev is typically one that etcd told someone: of a write under another
// prefix, say, carried in a request by a process whose own mirror moved
// past it. No event under Root may ever come to reach it, so while Watch
// runs, a waiter asks its watch for a progress notification, which moves
// the mirror up to etcd's revision once the watch has caught up; it asks
// again every progressRetry while it waits, since etcd drops a request
// while any watch of the stream is still catching up.
func (ks *KeySpace) WaitForRevision(ctx context.Context, rev int64) error {
	var retry *time.Ticker
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	for {
		ks.mu.RLock()
		cur, ch := ks.rev, ks.changed
		ks.mu.RUnlock()
		if cur >= rev {
			return nil
		}
		ks.askProgress()
		if retry == nil {
			retry = time.NewTicker(progressRetry / 4)
		}
		select {
		case <-ch:
		case <-retry.C:
			ks.askProgress()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// progressRetry is how long a progress request may go unanswered before
// it is made again: etcd drops one while any watch of the stream is still
// catching up.
const progressRetry = time.Second

// askProgress requests a progress notification on the watch, unless one
// is outstanding (asked less than progressRetry ago, and not answered).
// Best effort: a failed request is made again after progressRetry.
func (ks *KeySpace) askProgress() {
	ks.mu.Lock()
	c, ctx := ks.watcher, ks.watchCtx
	if c == nil || ctx == nil || (!ks.askedAt.IsZero() && time.Since(ks.askedAt) < progressRetry) {
		ks.mu.Unlock()
		return
	}
	ks.askedAt = time.Now()
	ks.mu.Unlock()
	progressRequests.Inc()
	_ = c.RequestProgress(ctx)
}

// progressNotified marks the outstanding progress request answered.
func (ks *KeySpace) progressNotified() {
	ks.mu.Lock()
	ks.askedAt = time.Time{}
	ks.mu.Unlock()
}

// Sync waits until the mirror reflects at least what etcd held when Sync
// was called: every write under Root that etcd had made, by any client.
// A process's watch may lag behind a write that another process made
// and told a third about; Sync closes that gap, so that a journal created
// through one broker is listed by any other at once. client is the
// client that Watch runs on: Sync asks its watch for a progress
// notification, which moves the mirror's revision up to etcd's even when
// the latest writes are under other prefixes. It costs a linearizable
// read.
func (ks *KeySpace) Sync(ctx context.Context, client *clientv3.Client) error {
	resp, err := client.Get(ctx, ks.Root) // A single key, whatever the prefix holds.
	if err != nil {
		return fmt.Errorf("keyspace %s: reading etcd's revision: %w", ks.Root, err)
	}
	rev := resp.Header.Revision
	if ks.Revision() >= rev {
		return nil
	}
	ks.mu.RLock()
	watching := ks.watcher == client
	ks.mu.RUnlock()
	if !watching { // Else WaitForRevision asks, sharing requests.
		// The watch's stream is the one of contexts that require a leader.
		if err := client.RequestProgress(clientv3.WithRequireLeader(ctx)); err != nil {
			return fmt.Errorf("keyspace %s: requesting watch progress: %w", ks.Root, err)
		}
	}
	return ks.WaitForRevision(ctx, rev)
}

// Observe registers fn, called with the keyspace's lock held after each
// applied change (and after each Load), with the new mirror and revision.
// Watch responses that arrive together are applied as one change, so a
// call may cover several revisions; the mirror it sees is always the state
// of etcd at its revision.
// fn must not call the KeySpace's methods, nor the returned cancel: they take
// the lock. cancel unregisters fn; once it returns, fn is not called again.
func (ks *KeySpace) Observe(fn func(kvs KeyValues, rev int64)) (cancel func()) {
	ks.mu.Lock()
	ks.nextID++
	id := ks.nextID
	ks.observers = append(ks.observers, observer{id: id, fn: fn})
	ks.mu.Unlock()

	var once sync.Once
	return func() {
		once.Do(func() {
			ks.mu.Lock()
			defer ks.mu.Unlock()
			ks.observers = slices.DeleteFunc(ks.observers, func(o observer) bool { return o.id == id })
		})
	}
}

// Load reads all keys under Root at revision rev (0 = latest), replacing the
// mirror. Call it before Watch; Watch reloads by itself when it must.
func (ks *KeySpace) Load(ctx context.Context, client *clientv3.Client, rev int64) error {
	tree, rev, err := ks.read(ctx, client, rev)
	if err != nil {
		return err
	}
	ks.tree = tree
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.publish(rev)
	return nil
}

// read returns the decoded keys under Root at rev (0 = latest) and that
// revision, reading them in pages of pageSize keys.
func (ks *KeySpace) read(ctx context.Context, kv clientv3.KV, rev int64) (*btree.BTreeG[*KeyValue], int64, error) {
	from, end := ks.Root, clientv3.GetPrefixRangeEnd(ks.Root)
	if from == "" {
		from = "\x00" // etcd rejects an empty key; "\x00" starts the whole key space.
	}
	tree := newTree()
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(ks.pageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, from, opts...)
		if err != nil {
			return nil, 0, fmt.Errorf("keyspace %q: reading keys at revision %d: %w", ks.Root, rev, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision // Later pages read this same revision.
		}
		for _, raw := range resp.Kvs {
			if d, ok := ks.decodeKV(raw); ok {
				tree.ReplaceOrInsert(&KeyValue{Raw: raw, Decoded: d})
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return tree, rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// decodeKV decodes raw, logging and counting a failure.
func (ks *KeySpace) decodeKV(raw *mvccpb.KeyValue) (any, bool) {
	d, err := ks.decode(raw)
	if errors.Is(err, ErrSkip) {
		return nil, false
	} else if err != nil {
		decodeErrors.Inc()
		ks.logger().Warn("keyspace: value does not decode; keeping the key out of the mirror",
			"root", ks.Root, "key", string(raw.Key), "mod_revision", raw.ModRevision, "err", err)
		return nil, false
	}
	return d, true
}

// publish installs the writable version of the mirror at rev, calls the
// observers and wakes everyone waiting on Changed. The lock must be held.
func (ks *KeySpace) publish(rev int64) {
	// The clone shares every node with ks.tree, which copies a node before
	// its next change to it: the published version never changes.
	kvs := KeyValues{v: &version{tree: ks.tree.Clone()}}
	ks.kvs, ks.rev = kvs, rev
	for _, o := range ks.observers {
		o.fn(kvs, rev)
	}
	close(ks.changed)
	ks.changed = make(chan struct{})
}

// SetLogger sets the logger of values that do not decode; nil means
// slog.Default(). Call it before Load.
func (ks *KeySpace) SetLogger(l *slog.Logger) { ks.log = l }

func (ks *KeySpace) logger() *slog.Logger {
	if ks.log != nil {
		return ks.log
	}
	return slog.Default()
}

// Watch applies changes after the loaded revision until ctx is done, and
// then returns ctx.Err(). If nothing was loaded yet, it loads the latest
// revision first.
//
// It survives watch cancellation and errors by re-watching from the next
// revision, etcd compaction of the revision it needs by reloading the whole
// prefix at the latest revision, and etcd restarts by retrying with backoff;
// each retry is logged.
func (ks *KeySpace) Watch(ctx context.Context, client *clientv3.Client) error {
	ks.mu.Lock()
	ks.watcher = client
	ks.mu.Unlock()
	defer func() {
		ks.mu.Lock()
		ks.watcher = nil
		ks.mu.Unlock()
	}()
	bo := backoff.New(minBackoff, maxBackoff)
	needLoad := ks.Revision() == 0
	for {
		err := ks.watchStep(ctx, client, bo, &needLoad)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			continue
		}
		d := bo.Next()
		ks.logger().Warn("keyspace: watch failed; retrying",
			"root", ks.Root, "revision", ks.Revision(), "err", err, "backoff", d)
		if err := backoff.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// watchStep loads the prefix if *needLoad, and otherwise watches it until
// the watch fails. A compacted revision is not a failure: it sets *needLoad.
func (ks *KeySpace) watchStep(ctx context.Context, client *clientv3.Client, bo *backoff.Backoff, needLoad *bool) error {
	if *needLoad {
		if err := ks.Load(ctx, client, 0); err != nil {
			return err
		}
		*needLoad = false
		return nil
	}
	err := ks.watchOnce(ctx, client, bo)
	if errors.Is(err, rpctypes.ErrCompacted) {
		reloads.Inc()
		ks.logger().Info("keyspace: watched revision was compacted; reloading",
			"root", ks.Root, "revision", ks.Revision())
		*needLoad = true
		return nil
	}
	return err
}

// watchOnce runs one etcd watch from the revision after the mirror's,
// applying its responses until it fails. It always returns an error.
func (ks *KeySpace) watchOnce(ctx context.Context, client *clientv3.Client, bo *backoff.Backoff) error {
	wctx, cancel := context.WithCancel(ownStream(clientv3.WithRequireLeader(ctx)))
	defer cancel()
	ks.mu.Lock()
	ks.watchCtx = wctx
	ks.mu.Unlock()
	defer func() {
		ks.mu.Lock()
		ks.watchCtx = nil
		ks.mu.Unlock()
	}()
	wch := client.Watch(wctx, ks.Root, clientv3.WithPrefix(),
		clientv3.WithRev(ks.Revision()+1), clientv3.WithProgressNotify())
	for resp := range wch {
		// Apply every response already waiting as one change: under a burst
		// of writes this builds one new mirror instead of one per revision.
		batch := []*clientv3.WatchResponse{&resp}
		err := resp.Err()
		for more := true; more && err == nil && len(batch) < maxBatch; {
			select {
			case next, ok := <-wch:
				if !ok {
					more = false
					break
				}
				if err = next.Err(); err == nil {
					batch = append(batch, &next)
				}
			default:
				more = false
			}
		}
		if resp.Err() == nil && ks.apply(batch) {
			// Ask for a progress notification, which lets the revision catch up
			// with etcd's once the watch has caught up. Best effort.
			ks.askProgress()
		}
		if err != nil {
			return err
		}
		bo.Reset()
	}
	return errWatchClosed
}

// streams numbers the watches of this process, each on a stream of its own.
var streams atomic.Uint64

// ownStream returns ctx with outgoing metadata that no other watch
// carries: etcd's client multiplexes the watches whose contexts carry
// the same metadata on one stream, and a watch must have a stream of its
// own for its progress notifications to mean what WaitForRevision takes
// them to mean. etcd answers a progress request for a whole stream, and
// its client hands the answer to every watch of the stream; on a shared
// stream that answer could reach one watch ahead of events that an
// earlier write had for it, which it then never applied, since its
// revision had moved past them (seen with three brokers on one client:
// one found its own member key missing from its mirror, and quit).
func ownStream(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "quire-watch", strconv.FormatUint(streams.Add(1), 10))
}

// apply applies a batch of consecutive watch responses as a single change
// and reports whether etcd's revision is ahead of the mirror's afterwards.
//
// The mirror advances to the revision of the last event, not to a response
// header's: while a watch catches up, etcd sends batches with
// the header revision of the store even though later batches follow. Only a
// progress notification vouches for its header revision.
func (ks *KeySpace) apply(batch []*clientv3.WatchResponse) bool {
	cur := ks.Revision() // Only the watching goroutine changes it.
	rev := cur
	var events []*clientv3.Event
	for _, resp := range batch {
		if resp.IsProgressNotify() {
			rev = max(rev, resp.Header.Revision)
			ks.progressNotified()
		} else if n := len(resp.Events); n > 0 {
			rev = max(rev, resp.Events[n-1].Kv.ModRevision)
		}
		events = append(events, resp.Events...)
	}
	if ks.applyEvents(events, cur) || rev > cur {
		ks.mu.Lock()
		ks.publish(rev)
		ks.mu.Unlock()
	}
	return batch[len(batch)-1].Header.Revision > rev
}

// applyEvents applies the events after revision `after`, in order, to the
// writable mirror, and reports whether any did apply. Keys outside Root
// never enter.
func (ks *KeySpace) applyEvents(events []*clientv3.Event, after int64) bool {
	applied := false
	for _, ev := range events {
		if ev.Kv.ModRevision <= after || !strings.HasPrefix(string(ev.Kv.Key), ks.Root) {
			continue
		}
		applied = true
		if ev.Type == clientv3.EventTypePut {
			if d, ok := ks.decodeKV(ev.Kv); ok {
				ks.tree.ReplaceOrInsert(&KeyValue{Raw: ev.Kv, Decoded: d})
				continue
			}
		}
		// A deleted key, or one whose new value does not decode, leaves.
		ks.tree.Delete(&KeyValue{Raw: ev.Kv})
	}
	return applied
}
