package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/internal/backoff"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"

	"sync"
)

// replica is this broker's replica of a journal: its spool, its index of
// fragments, and, on the primary, its pipeline.
type replica struct {
	srv     *Server
	journal string
	ctx     context.Context // the replica's life, until unassigned
	cancel  context.CancelFunc
	index   *index

	mu        sync.Mutex
	spec      *protocol.JournalSpec
	route     *protocol.Route
	routeCtx  context.Context // cancelled when the route changes: fences pipelines
	routeStop context.CancelFunc
	cur       *spool.Spool  // current spool; nil until ready
	head      int64         // committed end of cur: the write head
	headSum   [32]byte      // SHA-256 of cur's content up to head
	headCh    chan struct{} // closed when head, acked or cur changes
	ready     chan struct{} // closed once cur exists
	// acked is the end of cur's content that the primary acknowledged
	// (see protocol.ReplicateRequest.Acknowledged). Invariant: a replica
	// that is not the primary serves readers cur only up to acked. Content
	// past it committed here, but may yet fail at the primary, be rolled
	// past by the next pipeline, and be lost with this replica's disk: a
	// reader that saw it would find it gone, or written again by a retry.
	acked int64
	// Content before expect that this replica lacks is held by a peer and
	// on its way to the stores: reads wait for it rather than skip it.
	expect      int64
	expectSince time.Time
	refreshed   time.Time // last listing of the stores
	appended    time.Time // last append, or the replica's start: see suspendIdle
	// synced is the route on which this replica, not the primary, last
	// took the primary's proposal: while it is the current route, the
	// replica holds every commit of the journal, so its write head is the
	// journal's.
	synced *protocol.Route
	// settled is the route on which this replica, as primary, last
	// synchronized its pipeline, with no commit failed since: while it is
	// the current route, peers hold no commit past the primary's head but
	// the one in flight, if any. Otherwise (a new route, or a failed
	// commit) they may hold commits the primary lacks, and a read at its
	// head waits rather than say the journal ends there (see
	// unsettledAtHead), since unsettledSince, for at most settleWait.
	settled        *protocol.Route
	unsettledSince time.Time
	// proposals counts the commits this replica proposed as primary;
	// resolved, those of them that committed or failed. A commit is out
	// between the two: peers may have committed it, and served it.
	proposals, resolved uint64

	// token is held by whoever writes the spool: the append in progress on
	// the primary, or the pipeline stream on another replica.
	// kick wakes maintain when the route changes, for the primary to
	// synchronize the new route even while no one appends; respec wakes
	// it when the spec's fragment settings change, for its timers
	// (flush boundaries, refreshes) to follow them at once.
	kick, respec chan struct{}

	token chan struct{}
	// wholes are whole appends waiting for the token, to commit together
	// (see batch.go). Guarded by mu.
	wholes []*whole
	// Guarded by token:
	registers labels.Set
	// registersKnown: registers are the journal's, as of this replica's
	// content. A replica new to the journal starts with none, and does
	// not know them until it takes a primary's proposal (or recovers them
	// from a spool on its disk): as primary meanwhile, it adopts a peer's
	// (see synchronize) rather than wipe theirs.
	registersKnown bool
	pipe           *pipeline
	copyFailing    time.Time // since when catchUp has failed; zero if it has not
	syncer         spool.Syncer
	limiter        *rate.Limiter // of max_append_rate; nil when unlimited
}

func newReplica(srv *Server, journal string) *replica {
	ctx, cancel := context.WithCancel(srv.ctx)
	r := &replica{
		srv: srv, journal: journal, ctx: ctx, cancel: cancel, index: newIndex(),
		headCh: make(chan struct{}), ready: make(chan struct{}), token: make(chan struct{}, 1),
		kick: make(chan struct{}, 1), respec: make(chan struct{}, 1), appended: time.Now(),
	}
	r.routeCtx, r.routeStop = context.WithCancel(ctx)
	r.token <- struct{}{}
	return r
}

// update installs the journal's current spec and route. A changed route
// cancels the route context, ending pipelines built on the old one.
func (r *replica) update(spec *protocol.JournalSpec, route *protocol.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The keyspace decodes a spec once per change of its key, so an
	// unchanged spec is the same value: compared without reflection.
	if r.spec != nil && r.spec != spec && !proto.Equal(r.spec.GetFragment(), spec.GetFragment()) {
		select {
		case r.respec <- struct{}{}:
		default:
		}
	}
	r.spec = spec
	if r.route != nil && !sameRoute(r.route, route) {
		r.routeStop()
		r.routeCtx, r.routeStop = context.WithCancel(r.ctx)
	}
	if r.route == nil || !sameRoute(r.route, route) {
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	r.logPrimaryChange(r.route, route)
	if !sameRoute(r.route, route) {
		r.unsettledSince = time.Now()
	}
	r.route = route
}

// settleWait bounds how long reads at an unsettled primary's head wait
// for it to settle: past it (peers out of reach), it answers with its own
// head.
const settleWait = time.Minute

// settle records that the primary's pipeline on route is synchronized,
// with no commit outstanding, and wakes the reads that wait at the head
// for it (see unsettledAtHead): a new journal's first reader, such as a
// shard's primary playing its new recovery log, would otherwise wait out
// headWait while no append comes to move the head.
func (r *replica) settle(route *protocol.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = route
	close(r.headCh)
	r.headCh = make(chan struct{})
}

// unsettle records that peers may hold commits past the primary's head.
func (r *replica) unsettle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled != nil {
		r.settled, r.unsettledSince = nil, time.Now()
	}
}

// proposing records a commit proposal about to be sent; the returned
// function records its outcome.
func (r *replica) proposing() (resolve func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.proposals++
	n := r.proposals
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.resolved = max(r.resolved, n)
	}
}

// commitsUnresolved tells whether a commit among the first proposed
// proposals is still out. A read at the head waits for those that were
// proposed before it began, and no later ones: under steady appends, it
// would chase the head forever.
func (r *replica) commitsUnresolved(proposed uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resolved < proposed
}

// unsettledAtHead tells whether a read at the head should wait: this
// replica is the primary, not settled on its route, and has not been so
// for settleWait yet.
func (r *replica) unsettledAtHead() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return indexOf(r.route, r.srv.id) == 0 && !sameRoute(r.settled, r.route) && time.Since(r.unsettledSince) < settleWait
}

// logPrimaryChange says when this broker becomes, or stops being, the
// journal's primary: a failover or a handoff, seen from the broker.
// Changes among the other replicas are not logged, nor is a route that
// keeps the primary: a steady broker is quiet.
func (r *replica) logPrimaryChange(old, route *protocol.Route) {
	was, is := indexOf(old, r.srv.id) == 0, indexOf(route, r.srv.id) == 0
	switch {
	case is && !was:
		r.srv.log.Info("serving as the journal's primary", "journal", r.journal, "route", routeText(route), "revision", route.GetRevision())
	case was && !is:
		r.srv.log.Info("no longer the journal's primary", "journal", r.journal, "route", routeText(route), "revision", route.GetRevision())
	}
}

// markSynced records that the replica took a proposal of the primary of
// route.
func (r *replica) markSynced(route *protocol.Route) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.synced = route
}

// current tells whether the replica's write head is the journal's: it is
// the primary, or synchronized with the primary on the current route. A
// replica that is not (it just joined the route, or came back on a disk
// that holds an old spool) may lack commits after its head.
func (r *replica) current() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return indexOf(r.route, r.srv.id) == 0 || (r.synced != nil && sameRoute(r.synced, r.route))
}

// view returns the spec, route and route context.
func (r *replica) view() (*protocol.JournalSpec, *protocol.Route, context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.spec, r.route, r.routeCtx
}

func (r *replica) isPrimary() bool {
	_, route, _ := r.view()
	return indexOf(route, r.srv.id) == 0
}

// throttle waits until n more bytes fit the journal's max append rate. The
// caller holds the token.
func (r *replica) throttle(ctx context.Context, spec *protocol.JournalSpec, n int) error {
	limit := spec.GetMaxAppendRate()
	if limit <= 0 {
		r.limiter = nil
		return nil
	}
	if r.limiter == nil || r.limiter.Limit() != rate.Limit(limit) {
		r.limiter = rate.NewLimiter(rate.Limit(limit), int(min(limit, 1<<30))) // A second's worth.
	}
	for n > 0 {
		step := min(n, r.limiter.Burst())
		if err := r.limiter.WaitN(ctx, step); err != nil {
			return err
		}
		n -= step
	}
	return nil
}

// acquire takes the token, or fails when ctx is done. It sends the peers
// the acknowledgement of the last commit, if a batch of whole appends
// left it for the next (see pipeline.ack): whatever the caller does with
// the token may send them nothing for a while.
func (r *replica) acquire(ctx context.Context) error {
	select {
	case <-r.token:
		r.sendAck()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release gives the token back. It sends the peers the acknowledgement of
// the last commit unless whole appends are queued: one of them takes the
// token next, and its commit's first message carries it.
func (r *replica) release() {
	if r.pipe != nil && r.pipe.ack != 0 {
		r.mu.Lock()
		queued := len(r.wholes) != 0
		r.mu.Unlock()
		if !queued {
			r.pipe.sendAck()
		}
	}
	r.token <- struct{}{}
}

// sendAck sends the peers the acknowledgement not yet sent, if any. The
// caller holds the token.
func (r *replica) sendAck() {
	if r.pipe != nil {
		r.pipe.sendAck()
	}
}

// load lists the journal's stores into the index, then creates the first
// spool after everything indexed, and keeps the index fresh.
func (r *replica) load() {
	defer r.srv.wg.Done()
	if !r.retry("listing fragments", r.refresh) {
		return
	}
	r.srv.indexLocals(r.journal, r.index)
	r.index.markLoaded()
	if !r.retry("creating spool", func() error {
		// A replica of the journal that just ended here may hand its
		// spool off late: its files are where this one would start.
		r.srv.indexLocals(r.journal, r.index)
		return r.startSpool(r.srv.latestRecovered(r.journal))
	}) {
		return
	}
	r.maintain()
}

// retry calls f until it succeeds, logging and backing off between
// tries, and tells whether it did before the replica ended.
func (r *replica) retry(what string, f func() error) bool {
	bo := newBackoff()
	for {
		err := f()
		if err == nil {
			return true
		}
		r.srv.log.Warn(what+" failed; retrying", "journal", r.journal, "err", err)
		if bo.Wait(r.ctx) != nil {
			return false
		}
	}
}

// maintain keeps the index fresh and, on the primary, rolls idle spools at
// flush boundaries and removes fragments past their retention, until the
// replica ends.
func (r *replica) maintain() {
	nextRefresh := time.Now()
	synced := false // the primary synchronized the current route
	for {
		if !synced && r.isPrimary() {
			synced = r.synchronizeRoute()
		}
		spec, _, _ := r.view()
		now := time.Now()
		if !now.Before(nextRefresh) {
			if err := r.refresh(); err != nil {
				r.srv.log.Warn("refreshing fragments failed", "journal", r.journal, "err", err)
			}
			if r.isPrimary() {
				r.prune(spec)
				r.rollPastStoresIfAhead()
			}
			nextRefresh = now.Add(refreshInterval(spec))
		}
		wake := nextRefresh
		if idle := r.srv.cfg.SuspendIdle; idle > 0 && r.isPrimary() {
			if until := r.idleUntil(idle); !until.After(now) {
				r.suspendIdle()
			} else {
				wake = minTime(wake, until)
			}
		}
		if d := spec.GetFragment().GetFlushInterval().AsDuration(); d > 0 {
			wake = minTime(wake, now.Truncate(d).Add(d))
		}
		if !synced && r.isPrimary() {
			wake = minTime(wake, time.Now().Add(time.Second)) // Retry soon.
		}
		t := time.NewTimer(time.Until(wake))
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
		case <-r.kick:
			synced = false
		case <-r.respec:
			nextRefresh = time.Now() // With the new refresh interval.
		case <-t.C:
		}
		t.Stop()
		if r.isPrimary() {
			r.flushIfDue()
		}
	}
}

// idleUntil is when the journal will have gone idle long enough to be
// suspended, if no one appends before.
func (r *replica) idleUntil(idle time.Duration) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.appended.Add(idle)
}

// touch records an append.
func (r *replica) touch() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.appended = time.Now()
}

// suspendIdle suspends the journal, idle for Config.SuspendIdle. A
// failure is retried after another such period.
func (r *replica) suspendIdle() {
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if spec, _, _ := r.view(); spec.Suspended() {
		return
	}
	r.touch() // Try again in a while if this fails.
	if _, err := r.suspend(ctx); err != nil && r.ctx.Err() == nil {
		r.srv.log.Warn("suspending an idle journal failed; will retry", "journal", r.journal, "err", err)
	}
}

// synchronizeRoute builds the pipeline of a new route, which records the
// route in the replicas' assignments: the allocator counts them ready even
// if no one appends. It reports whether that succeeded.
func (r *replica) synchronizeRoute() bool {
	ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	if r.acquire(ctx) != nil {
		return false
	}
	defer r.release()
	if _, err := r.ensurePipeline(ctx); err != nil {
		r.srv.log.Debug("synchronizing route failed; will retry", "journal", r.journal, "err", err)
		return false
	}
	_, route, _ := r.view()
	if err := r.srv.markSynchronized(ctx, r.journal, route); err != nil {
		r.srv.log.Debug("recording synchronized route failed; will retry", "journal", r.journal, "err", err)
		return false
	}
	return true
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// flushIfDue rolls the spool through the pipeline if it holds content
// begun before the last flush boundary, unless appends keep the token busy
// (the next append rolls it then).
func (r *replica) flushIfDue() {
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	defer cancel()
	if r.acquire(ctx) != nil {
		return
	}
	defer r.release()
	spec, _, _ := r.view()
	if !shouldRoll(spec, r.spool(), time.Now()) {
		return
	}
	p, err := r.ensurePipeline(ctx)
	if err == nil {
		err = r.rollPipeline(p, r.spool().End())
	}
	if err != nil {
		r.dropPipeline()
		r.srv.log.Warn("rolling spool at flush interval failed", "journal", r.journal, "err", err)
	}
}

// rollPastStoresIfAhead rolls the journal forward past content its
// stores hold beyond the write head, which a listing just found (see
// rollPastStores), unless appends keep the token busy: the next listing
// tries again.
func (r *replica) rollPastStoresIfAhead() {
	// The write head as published to readers: the spool's own end may
	// only be read with the token, which this first look does not take.
	r.mu.Lock()
	head := r.head
	r.mu.Unlock()
	if r.index.end() <= head {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	defer cancel()
	if r.acquire(ctx) != nil {
		return
	}
	defer r.release()
	p, err := r.ensurePipeline(ctx)
	if err == nil {
		err = r.rollPastStores(p)
	}
	if err != nil {
		r.dropPipeline()
		r.srv.log.Warn("rolling the write head past content the stores hold failed", "journal", r.journal, "err", err)
	}
}

// prune removes fragments persisted longer ago than the journal's
// retention from its stores.
func (r *replica) prune(spec *protocol.JournalSpec) {
	retention := spec.GetFragment().GetRetention().AsDuration()
	if retention <= 0 {
		return
	}
	cutoff := time.Now().Add(-retention)
	removed := false
	for _, f := range r.index.list(0) {
		if f.Store == "" || f.ModTime.IsZero() || f.ModTime.After(cutoff) {
			continue
		}
		store, err := r.srv.stores.get(r.ctx, f.Store)
		if err == nil {
			err = store.Remove(r.ctx, f)
		}
		if err != nil {
			r.srv.log.Warn("removing expired fragment failed", "fragment", f.Name(), "err", err)
			continue
		}
		fragmentsPruned.Inc()
		removed = true
	}
	if removed {
		if err := r.refresh(); err != nil {
			r.srv.log.Warn("refreshing fragments failed", "journal", r.journal, "err", err)
		}
	}
}

// refresh lists every store of the journal into the index.
func (r *replica) refresh() error {
	spec, _, _ := r.view()
	if err := r.srv.listStores(r.ctx, r.journal, spec, r.index); err != nil {
		return err
	}
	r.mu.Lock()
	r.refreshed = time.Now()
	r.mu.Unlock()
	return nil
}

// refreshSoon lists the stores unless that was done in the last second.
func (r *replica) refreshSoon() {
	r.mu.Lock()
	recent := time.Since(r.refreshed) < time.Second
	r.mu.Unlock()
	if !recent {
		if err := r.refresh(); err != nil {
			r.srv.log.Warn("refreshing fragments failed", "journal", r.journal, "err", err)
		}
	}
}

// expected tells whether offset, which this replica lacks, is content a
// peer held when the spools were last synchronized, still on its way to
// the stores.
func (r *replica) expected(offset int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return offset < r.expect && time.Since(r.expectSince) < expectWait
}

// expectBefore records, as the replica rolls to at, that content before
// at which it lacks (it joined the journal there, behind its peers) is
// held by its peers and on its way to the stores. Should it become the
// primary before that content is listed (the broker that held it drains
// while a slow store takes it), reads of it wait rather than jump.
func (r *replica) expectBefore(at int64) {
	lacks := max(r.spool().End(), r.index.end())
	if at <= lacks {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expect, r.expectSince = max(r.expect, at), time.Now()
}

// expectedEnd is the greatest offset that a synchronization found held
// by a peer and this replica lacks, or 0.
func (r *replica) expectedEnd() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.expect
}

// expectWait bounds how long reads wait for content a peer should persist.
const expectWait = 2 * time.Minute

// recoverRegisters takes the registers of the latest spool recovered from
// the broker's disk, if any. At replication 1 they are the journal's; at
// more, the journal may have moved on while the broker was down, so they
// count only if no peer knows better (see adoptRegisters).
func (r *replica) recoverRegisters(rec *spool.Recovered) {
	if rec == nil {
		return
	}
	set, err := labels.Parse(rec.Registers)
	if err != nil {
		r.srv.log.Warn("recovered spool holds registers that do not parse; ignored", "journal", r.journal, "path", rec.Path(), "err", err)
		return
	}
	spec, _, _ := r.view()
	r.registers, r.registersKnown = set, spec.GetReplication() < 2
}

// resumeRegisters takes the registers the journal had when it was last
// suspended, if its stores end where it was then and no spool recovered
// from disk is more recent. They stand only if no peer knows better (see
// adoptRegisters): an empty append may have set others since it resumed.
func (r *replica) resumeRegisters(latest *spool.Recovered) {
	spec, _, _ := r.view()
	sp := spec.GetSuspension()
	if sp == nil || r.index.end() != sp.Offset || (latest != nil && latest.End > sp.Offset) {
		return
	}
	r.registers, r.registersKnown = protocol.LabelsOf(sp.Registers), false
}

// startSpool creates the first spool, after every indexed offset, with the
// registers of the latest spool recovered from disk (latest, if not nil).
func (r *replica) startSpool(latest *spool.Recovered) error {
	if err := r.acquire(r.ctx); err != nil {
		return err
	}
	defer r.release()
	r.recoverRegisters(latest)
	r.resumeRegisters(latest)
	s, err := spool.Create(r.srv.cfg.Dir, r.journal, r.index.end(), r.registers)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.cur, r.head, r.headSum, r.acked = s, s.Begin, s.Sum(), s.Begin
	close(r.ready)
	r.mu.Unlock()
	return nil
}

// awaitReady waits until the replica has a spool.
func (r *replica) awaitReady(ctx context.Context) error {
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.ctx.Done():
		return errReplicaGone
	}
}

// errReplicaGone ends requests of a replica no longer assigned here. It is
// a gRPC Unavailable error: the client retries where the route now says.
var errReplicaGone = status.Error(codes.Unavailable, "the journal is no longer served by this broker")

// spool returns the current spool; the caller holds the token.
func (r *replica) spool() *spool.Spool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// committed publishes a commit of the current spool to readers.
func (r *replica) committed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.head, r.headSum = r.cur.End(), r.cur.Sum()
	close(r.headCh)
	r.headCh = make(chan struct{})
}

// acknowledge records that the primary acknowledged cur's content up to
// end, and wakes readers waiting for it.
func (r *replica) acknowledge(end int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if end = min(end, r.head); end <= r.acked {
		return
	}
	r.acked = end
	close(r.headCh)
	r.headCh = make(chan struct{})
}

// openFragment is the spool being written, through what a reader may
// read of it here, as listings show it: not persisted (no store, no
// time), and with no sum where a reader may read less than the committed
// head, whose sum alone is kept. Nil while it holds nothing readable.
func (r *replica) openFragment(spec *protocol.JournalSpec) *protocol.Fragment {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.head
	if indexOf(r.route, r.srv.id) != 0 {
		end = min(end, r.acked)
	}
	if r.cur == nil || end <= r.cur.Begin {
		return nil
	}
	f := &protocol.Fragment{Journal: r.journal, Begin: r.cur.Begin, End: end, Codec: protocol.Codec(codecOf(spec)) + 1}
	if end == r.head {
		f.Sum = bytes.Clone(r.headSum[:])
	}
	return f
}

// readable is how far a reader of req may read cur, whose committed end
// is head: to head at the primary, which acknowledges what it commits, and
// for a broker comparing its spool with a peer's (own_head); elsewhere,
// to what the primary acknowledged. The caller holds mu.
func (r *replica) readable(req *protocol.ReadRequest, head int64) int64 {
	if req.OwnHead || indexOf(r.route, r.srv.id) == 0 {
		return head
	}
	return min(head, r.acked)
}

// roll replaces the current spool by an empty one at offset at, handing the
// old one, if it holds content, to the index and the persister. The caller
// holds the token.
//
// Invariant: the old spool is synced (with fsync) and indexed before the
// new one is published. A reader that sees the new spool finds the old
// one's content in the index (else it judged it gone, and jumped), and an
// append whose group commit flushes the new spool was in a spool already
// synced.
func (r *replica) roll(at int64) error {
	old := r.spool()
	if err := old.Rollback(); err != nil {
		return err
	}
	if old.Begin == at && old.End() == at {
		return nil // Already an empty spool there.
	}
	if at < old.End() {
		return fmt.Errorf("rolling %s to %d, before its spool's end %d", r.journal, at, old.End())
	}
	spec, _, _ := r.view()
	empty := old.End() == old.Begin
	var f fragment.Fragment
	if !empty {
		if spec.GetFragment().GetFsync() {
			if err := old.Sync(); err != nil {
				return err
			}
		}
		f = r.indexRolled(spec, old)
	}
	s, err := spool.Create(r.srv.cfg.Dir, r.journal, at, r.registers)
	if err != nil {
		return err // The old spool stays current, and indexed: both serve its content.
	}
	r.mu.Lock()
	// Content before at is the journal's for good: the primary rolled
	// every replica past it.
	r.cur, r.head, r.headSum, r.acked = s, at, s.Sum(), at
	close(r.headCh)
	r.headCh = make(chan struct{})
	r.mu.Unlock()
	spoolsRolled.Inc()
	if empty {
		return old.Remove()
	}
	if r.srv.cfg.rolled != nil {
		r.srv.cfg.rolled(old)
	}
	r.srv.persistSpool(f, old)
	return nil
}

// indexRolled indexes a rolled spool as a local fragment, and returns it.
func (r *replica) indexRolled(spec *protocol.JournalSpec, old *spool.Spool) fragment.Fragment {
	f := r.srv.rolledFragment(r.journal, spec, old)
	r.index.addLocal(entry{frag: f, spool: old})
	return f
}

// shouldRoll tells whether the current spool should roll before the next
// append: it reached the target length, or crossed a flush boundary.
func shouldRoll(spec *protocol.JournalSpec, s *spool.Spool, now time.Time) bool {
	if s.End() == s.Begin {
		return false
	}
	if s.End()-s.Begin >= spec.GetFragment().GetLength() && spec.GetFragment().GetLength() > 0 {
		return true
	}
	if d := spec.GetFragment().GetFlushInterval().AsDuration(); d > 0 {
		return now.Truncate(d).After(s.Created())
	}
	return false
}

// fragmentOf describes the spool, through its pending content if pending.
func fragmentOf(s *spool.Spool, pending bool) *protocol.Fragment {
	f := &protocol.Fragment{Journal: s.Journal, Begin: s.Begin, End: s.End()}
	sum := s.Sum()
	if pending {
		f.End, sum = s.Pending(), s.PendingSum()
	}
	f.Sum = sum[:]
	return f
}

var emptySum = sha256.Sum256(nil)

func codecOf(spec *protocol.JournalSpec) fragment.Codec {
	switch spec.GetFragment().GetCodec() {
	case protocol.Codec_CODEC_NONE:
		return fragment.None
	case protocol.Codec_CODEC_GZIP:
		return fragment.Gzip
	case protocol.Codec_CODEC_SNAPPY:
		return fragment.Snappy
	}
	return fragment.Zstd
}

func refreshInterval(spec *protocol.JournalSpec) time.Duration {
	if d := spec.GetFragment().GetRefreshInterval().AsDuration(); d > 0 {
		return d
	}
	return time.Minute
}

// newBackoff paces a replica's retries.
func newBackoff() *backoff.Backoff { return backoff.New(50*time.Millisecond, 5*time.Second) }
