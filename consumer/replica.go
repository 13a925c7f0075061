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

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/backoff"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/recoverylog"
	"github.com/quire-dev/quire/store"
)

// replica is this process's replica of a shard. Its life is a state
// machine, reported in its assignment's value:
//
//	IDLE ──▶ BACKFILL ──▶ STANDBY ──▶ PRIMARY
//	  │   (playing hints)  (tailing)     ▲
//	  └──────────────────────────────────┘  no recovery log, or slot 0 at once
//	any ──▶ FAILED (an error; it stays so until unassigned, by an
//	        operator or, after Config.UnassignFailedAfter, by the process)
//
// A standby becomes primary when its assignment moves to slot 0
// (promoted): it finishes playback at the write head, takes over the
// recovery log, opens the store and processes. It is never demoted: the
// resolver stops a primary whose assignment left slot 0.
type replica struct {
	srv    *Server
	id     string
	dir    string
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned
	wg     sync.WaitGroup

	mu         sync.Mutex
	spec       *ShardSpec
	assignment allocator.AssignmentKV
	changed    chan struct{} // closed and replaced when assignment or want change
	want       Status        // the status to keep in the assignment
	promoted   chan struct{} // closed once assigned slot 0
	isPromoted bool
	promotedAt time.Time // when it was assigned slot 0: a failover's clock

	// Set once the primary serves (ready closed).
	ready chan struct{}
	shard *Shard
	store store.Store
	// holds counts Resolve's callers reading the store; closing is set
	// once the store is to close (no new holds), and held is signalled
	// when holds drops. A count, not an RWMutex: a holder may hold again
	// (a handler calling Stat) while a close waits.
	holdMu  sync.Mutex
	held    *sync.Cond
	holds   int
	closing bool
	// Committed read-through offsets of the sources, and the write heads
	// seen, and the commits counted; committedCh is closed and replaced
	// at each commit.
	readThrough map[string]int64
	heads       map[string]int64
	txns        int64
	committedCh chan struct{}
}

func newReplica(srv *Server, spec *ShardSpec, a allocator.AssignmentKV) *replica {
	ctx, cancel := context.WithCancel(srv.ctx)
	r := &replica{srv: srv, id: spec.ID, dir: srv.replicaDir(spec.ID), ctx: ctx, cancel: cancel,
		log:  srv.log.With("shard", spec.ID),
		done: make(chan struct{}), changed: make(chan struct{}), promoted: make(chan struct{}),
		ready: make(chan struct{}), committedCh: make(chan struct{}),
		readThrough: map[string]int64{}, heads: map[string]int64{}}
	r.held = sync.NewCond(&r.holdMu)
	if a.Slot == 0 {
		r.log.Info("shard replica started as primary", "slot", a.Slot)
	} else {
		r.log.Info("shard standby started", "slot", a.Slot)
	}
	r.update(spec, a)
	return r
}

// update is told of the replica's latest spec and assignment.
func (r *replica) update(spec *ShardSpec, a allocator.AssignmentKV) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.Slot == 0 && !r.isPromoted {
		if r.assignment.KV != nil {
			r.log.Info("shard standby promoted to primary", "from", r.assignment.Slot)
		}
		r.isPromoted, r.promotedAt = true, time.Now()
		close(r.promoted)
	}
	r.spec, r.assignment = spec, a
	r.wake()
}

// wake tells the status keeper that something changed. r.mu is held.
func (r *replica) wake() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// isPrimary tells whether the replica was ever assigned slot 0.
func (r *replica) isPrimary() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.isPromoted
}

// stop ends the replica; its goroutine cleans up.
func (r *replica) stop() { r.cancel() }

func (r *replica) setStatus(s Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want != s {
		r.want = s
		r.wake()
	}
}

// run is the replica's life.
func (r *replica) run() {
	defer r.srv.wg.Done()
	defer close(r.done)
	defer os.RemoveAll(r.dir)
	defer r.forgetLag()
	defer r.wg.Wait()
	defer r.cancel()
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.keepStatus() }()

	err := r.serve()
	if err == nil || r.ctx.Err() != nil {
		r.logStopped()
		return
	}
	r.log.Error("shard replica failed", "err", err)
	replicaFailures.Inc()
	r.setStatus(Status{Code: protocol.ReplicaCode_FAILED, Error: err.Error()})
	if d := r.srv.cfg.UnassignFailedAfter; d > 0 {
		select {
		case <-time.After(d):
			r.unassignFailed()
		case <-r.ctx.Done():
		}
	}
	<-r.ctx.Done() // FAILED until unassigned, or the process stops.
}

// logStopped says that the replica ended, and why: its process stops, or
// the resolver stopped it.
func (r *replica) logStopped() {
	role := "standby"
	if r.isPrimary() {
		role = "primary"
	}
	why := "unassigned, moved off slot 0, or restarted for a changed spec"
	if r.srv.ctx.Err() != nil {
		why = "the process is stopping"
	}
	r.log.Info("shard "+role+" stopped", "why", why)
}

// forgetLag removes the replica's series of quire_consumer_source_lag_bytes
// once it stops: another process's primary reports the shard's lag now.
func (r *replica) forgetLag() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for j := range r.readThrough {
		sourceLag.DeleteLabelValues(r.id, j)
	}
	for j := range r.heads {
		sourceLag.DeleteLabelValues(r.id, j)
	}
}

// unassignFailed removes the replica's assignment once its FAILED status
// is recorded there, for the allocator to assign the shard afresh; the
// resolver then stops the replica. It tries until it succeeds or the
// replica stops.
func (r *replica) unassignFailed() {
	for {
		r.mu.Lock()
		a, changed := r.assignment, r.changed
		r.mu.Unlock()
		if statusOf(a).Code == protocol.ReplicaCode_FAILED {
			ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
			key := string(a.KV.Key)
			resp, err := r.srv.cfg.Etcd.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", a.KV.ModRevision)).
				Then(clientv3.OpDelete(key)).Commit()
			cancel()
			switch {
			case err == nil && resp.Succeeded:
				replicasUnassigned.Inc()
				r.log.Info("unassigned the FAILED replica, for the shard to be assigned afresh",
					"after", r.srv.cfg.UnassignFailedAfter)
				return
			case err != nil && r.ctx.Err() == nil:
				r.log.Warn("unassigning the FAILED replica failed; retrying", "err", err)
			}
		}
		// Wait for the status to be recorded, or for a newer assignment.
		select {
		case <-changed:
		case <-time.After(time.Second):
		case <-r.ctx.Done():
			return
		}
	}
}

// serve plays the recovery log as a standby until promoted, then serves
// as primary until the replica stops.
func (r *replica) serve() error {
	spec := r.currentSpec()
	if spec.RecoveryLog() == "" {
		r.setStatus(Status{Code: protocol.ReplicaCode_STANDBY})
		select {
		case <-r.promoted:
		case <-r.ctx.Done():
			return nil
		}
		return r.servePrimary(spec, nil)
	}
	r.setStatus(Status{Code: protocol.ReplicaCode_BACKFILL})
	player, err := r.backfill(spec)
	if err != nil || player == nil {
		return err // player is nil if the replica stopped.
	}
	select {
	case <-r.promoted:
	default:
		r.setStatus(Status{Code: protocol.ReplicaCode_STANDBY})
		r.log.Info("shard standby ready: tailing the recovery log", "log", spec.RecoveryLog())
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			select {
			case <-r.promoted:
				player.FinishAtWriteHead()
			case <-r.ctx.Done():
			}
		}()
		if err := player.Tail(r.ctx); err != nil {
			return playError(r.ctx, spec, err)
		}
	}
	return r.servePrimary(spec, player)
}

func (r *replica) currentSpec() *ShardSpec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spec
}

// backfill plays the recovery log to its write head, from the newest
// hints that play.
func (r *replica) backfill(spec *ShardSpec) (*recoverylog.Player, error) {
	hints, err := recoverylog.LoadHints(r.ctx, r.srv.cfg.Etcd, spec.HintKey(), spec.HintBackupCount())
	if err != nil {
		return nil, fmt.Errorf("loading hints of shard %s: %w", spec.ID, err)
	}
	candidates := append(hints, nil) // nil: from the log's start.
	if len(hints) != 0 {
		candidates = hints // Hints exist, so the log's start may be pruned.
	}
	start := time.Now()
	player, err := recoverylog.PlayFirst(r.ctx, recoverylog.PlayerConfig{
		Client: r.srv.cfg.Journals, Journal: spec.RecoveryLog(), Dir: r.dir}, candidates)
	if err != nil {
		return nil, playError(r.ctx, spec, err)
	}
	p := player.Progress()
	r.log.Info("recovery log played to its write head", "log", spec.RecoveryLog(), "offset", p.Offset,
		"bytesRead", p.BytesRead, "bytesSkipped", p.BytesSkipped, "took", time.Since(start))
	return player, nil
}

func playError(ctx context.Context, spec *ShardSpec, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("playing recovery log %s: %w", spec.RecoveryLog(), err)
}

// servePrimary takes over the recovery log (if any), opens and restores
// the store, and processes transactions until the replica stops.
func (r *replica) servePrimary(spec *ShardSpec, player *recoverylog.Player) error {
	var rec *recoverylog.Recorder
	if player != nil {
		var err error
		if rec, err = r.takeOver(spec, player); err != nil || rec == nil {
			return err
		}
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	app := r.srv.cfg.App
	appender := r.srv.cfg.Journals.NewAppender(r.ctx, client.AppenderConfig{})
	defer appender.Close()
	pub := message.NewPublisher(appender, framingOf(app, ""), message.NewProducerID(), message.NewClock(time.Now()))
	pub.BlockWhileAckPending()
	sh := &Shard{ctx: r.ctx, spec: spec, dir: r.dir, recorder: rec, publisher: pub,
		journals: r.srv.cfg.Journals, etcd: r.srv.cfg.Etcd, log: r.log}

	st, err := guard("NewStore", func() (store.Store, error) { return app.NewStore(sh) })
	if err != nil {
		return err
	}
	defer r.closeStore(st)
	cp, err := st.RestoreCheckpoint(r.ctx)
	if err != nil {
		return fmt.Errorf("restoring checkpoint: %w", err)
	}
	if err := writeAcks(r.ctx, pub, cp.AckIntents); err != nil {
		return fmt.Errorf("re-writing the acknowledgements of the last commit: %w", err)
	}
	r.servingPrimary(sh, st, cp)
	if rec != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.storeHintsEvery(spec, rec) }()
	}
	err = r.transactions(sh, st, cp)
	if rec != nil && r.srv.ctx.Err() == nil {
		r.storeFinalHints(spec, rec)
	}
	return err
}

// holdStore holds the primary's store open for a reader, unless it is
// closing.
func (r *replica) holdStore() bool {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	if r.closing {
		return false
	}
	r.holds++
	return true
}

func (r *replica) releaseStore() {
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	r.holds--
	r.held.Broadcast()
}

// closeStore closes the store once its readers are done.
func (r *replica) closeStore(st store.Store) {
	r.holdMu.Lock()
	r.closing = true
	for r.holds > 0 {
		r.held.Wait()
	}
	r.holdMu.Unlock()
	if err := st.Close(); err != nil && r.ctx.Err() == nil {
		r.log.Warn("closing store", "err", err)
	}
}

// servingPrimary publishes the primary's store, for Resolve and Stat.
func (r *replica) servingPrimary(sh *Shard, st store.Store, cp store.Checkpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shard, r.store = sh, st
	for j, c := range cp.Sources {
		r.readThrough[j] = c.Read
	}
	// Every source's lag series exists from the start, not from the
	// first commit that read it: an alert on a shard that never reads
	// needs the series. Unknown heads count as caught up until then.
	for _, src := range sh.spec.Sources {
		rt := r.readThrough[src.Journal]
		r.readThrough[src.Journal] = rt
		sourceLag.WithLabelValues(r.id, src.Journal).Set(float64(max(0, r.heads[src.Journal]-rt)))
	}
	close(r.ready)
	r.want = Status{Code: protocol.ReplicaCode_PRIMARY}
	r.wake()
	r.log.Info("shard primary serving", "sincePromoted", time.Since(r.promotedAt))
}

// takeOver creates the recorder that continues the player's log, fencing
// the previous primary. If the previous primary appended since playback
// ended, it plays on and tries again, with a growing pause, for up to
// twice the lease TTL: a previous primary cut off from etcd (a zombie)
// goes on committing until it finds its lease gone, at most a TTL later,
// and a takeover that gave up sooner would fail the shard.
func (r *replica) takeOver(spec *ShardSpec, player *recoverylog.Player) (*recoverylog.Recorder, error) {
	// Unique to this replica, not only to its assignment: a shard whose
	// spec changes is restarted in the same process at the same
	// assignment, and the replica stopped, still finishing a commit, must
	// be fenced by its successor's author like any other predecessor.
	author := fmt.Sprintf("%s.%s.%d.%s", r.srv.cfg.Zone, r.srv.cfg.Suffix, r.assignmentRevision(), filepath.Base(r.dir))
	deadline := time.Now().Add(2 * r.srv.cfg.LeaseTTL)
	pause := backoff.New(10*time.Millisecond, maxTakeOverPause)
	for attempt := 1; ; attempt++ {
		(*takeOverHook.Load())(spec.ID, attempt)
		rec, err := recoverylog.NewRecorder(r.ctx, recoverylog.RecorderConfig{
			Client: r.srv.cfg.Journals, Journal: spec.RecoveryLog(), Author: author,
			Dir: r.dir, FSM: player.FSM()})
		switch {
		case err == nil:
			return rec, nil
		case r.ctx.Err() != nil:
			return nil, nil
		case !errors.Is(err, client.ErrWrongAppendOffset) || time.Now().After(deadline):
			return nil, fmt.Errorf("taking over recovery log %s (attempt %d): %w", spec.RecoveryLog(), attempt, err)
		}
		if pause.Wait(r.ctx) != nil {
			return nil, nil
		}
		player.FinishAtWriteHead()
		if err := player.Tail(r.ctx); err != nil {
			return nil, playError(r.ctx, spec, err)
		}
	}
}

// maxTakeOverPause bounds the pause between attempts of a takeover.
const maxTakeOverPause = 500 * time.Millisecond

// takeOverHook is called before each attempt of a takeover. Tests set it
// while shards of earlier tests may still be running, hence atomic.
var takeOverHook atomic.Pointer[func(shard string, attempt int)]

func init() { resetTakeOverHook() }

func resetTakeOverHook() {
	nop := func(string, int) {}
	takeOverHook.Store(&nop)
}

func (r *replica) assignmentRevision() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.assignment.KV.CreateRevision
}

// writeAcks writes acknowledgement intents and waits for their appends.
func writeAcks(ctx context.Context, pub *message.Publisher, intents []message.AckIntent) error {
	hs, err := pub.WriteAckIntents(ctx, intents)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if _, err := h.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// guard calls an application callback, turning a panic into an error.
func guard[T any](name string, f func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("application %s panicked: %v", name, p)
		}
	}()
	v, err = f()
	if err != nil {
		err = fmt.Errorf("application %s: %w", name, err)
	}
	return v, err
}

// keepStatus keeps the replica's wanted status in its assignment's value,
// by transactions conditioned on the assignment's mod revision, retried
// (after a backoff on errors) while the replica lives.
func (r *replica) keepStatus() {
	bo := backoff.New(50*time.Millisecond, 5*time.Second)
	for {
		r.mu.Lock()
		want, a, changed := r.want, r.assignment, r.changed
		r.mu.Unlock()
		if statusOf(a) != want {
			if err := r.putStatus(a, want); err != nil {
				r.log.Warn("recording replica status failed; retrying", "status", want.String(), "err", err)
				if bo.Wait(r.ctx) != nil {
					return
				}
				continue
			}
			bo.Reset()
		}
		select {
		case <-changed:
		case <-r.ctx.Done():
			return
		}
	}
}

// putStatus writes want into assignment a, if it is unchanged. A changed
// assignment is not an error: the resolver delivers the new one.
func (r *replica) putStatus(a allocator.AssignmentKV, want Status) error {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	key := string(a.KV.Key)
	_, err := r.srv.cfg.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", a.KV.ModRevision)).
		Then(clientv3.OpPut(key, want.encode(), clientv3.WithIgnoreLease())).Commit()
	return err
}
