package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/flow"
	"github.com/quire-dev/quire/internal/backoff"
	"github.com/quire-dev/quire/keyspace"
)

// ErrMemberGone is returned by Allocate when the local member's key is no
// longer in the keyspace (its lease expired, or it was deleted).
var ErrMemberGone = errors.New("local member key is gone from the keyspace")

// errConflict tells that a round's transaction failed its compares: the
// leader's view was outdated.
var errConflict = errors.New("allocator transaction conflicted with a concurrent change")

// Config configures Allocate.
type Config struct {
	// Client is the etcd client used for the leader's transactions.
	Client *clientv3.Client
	// KeySpace mirrors the fleet's root, with the decoder of NewDecoder.
	// The caller loads it and keeps it watching; it must already reflect
	// the member's announcement (wait for the Announcement's Revision), or
	// Allocate returns ErrMemberGone at once.
	KeySpace *keyspace.KeySpace
	// Member is this process's member key, as returned by MemberKey and
	// announced with Announce.
	Member string
	// Lease, if set, is the lease the member key was announced under: a
	// key of that name under another lease is another process's, and
	// Allocate returns ErrMemberGone.
	Lease clientv3.LeaseID
	// Ready tells which replicas are ready. Nil means AllReady.
	Ready ReadyFunc
	// InitialValue is the value of a newly created assignment.
	InitialValue string
	// MaxTxnOps bounds compares and operations per transaction; it must
	// not exceed the etcd server's --max-txn-ops. Zero means 128.
	MaxTxnOps int
	// Parallel is the number of a round's transactions committed at once.
	// Zero means 4.
	Parallel int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// AfterRound, if set, is called by the leader after each committed
	// converge round.
	AfterRound func(Round)
	// Idle, if set, is called by the leader when a round finds nothing to
	// change: the fleet is as converged as it can be until something
	// changes (a replica becomes ready, a member or item changes).
	Idle func(*State)
}

// Round describes a converge round committed by the leader.
type Round struct {
	Input    *State // the state the round was planned from
	Revision int64  // highest of the round's transactions
	Txns     int    // transactions attempted
	// Committed transactions; the others' compares failed (a concurrent
	// change) and the counts below exclude them.
	Committed int
	Added     int
	Removed   int
	Moved     int
	// Solved tells whether the round solved the placement problem again
	// (its inputs changed), and Solve how long that took.
	Solved bool
	Solve  time.Duration
}

// Allocate runs the member's allocator until ctx is done, returning
// ctx.Err(); or until the member is exiting and holds no assignments,
// returning nil; or until its member key disappears, returning
// ErrMemberGone. While the member is the fleet's leader, it solves and
// converges the fleet's assignments.
func Allocate(ctx context.Context, cfg Config) error {
	a, err := newAllocator(cfg)
	if err != nil {
		return err
	}
	return a.run(ctx)
}

type allocator struct {
	Config
	root         string
	zone, suffix string
	solver       flow.Solver
	target       [][]int
	targetPrint  uint64
	haveTarget   bool
	leading      bool             // it led at its last snapshot: the leader gauges are its own
	retry        *backoff.Backoff // paces rounds after a failed one
}

func newAllocator(cfg Config) (*allocator, error) {
	if cfg.Client == nil || cfg.KeySpace == nil {
		return nil, errors.New("allocator: Config.Client and Config.KeySpace are required")
	}
	root := cfg.KeySpace.Root
	name, ok := strings.CutPrefix(cfg.Member, root+MembersPrefix)
	if !ok {
		return nil, fmt.Errorf("allocator: member key %q is not under %q", cfg.Member, root+MembersPrefix)
	}
	zone, suffix, err := parseMemberName(name)
	if err != nil {
		return nil, fmt.Errorf("allocator: %w", err)
	}
	if cfg.Ready == nil {
		cfg.Ready = AllReady
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("member", name)
	return &allocator{Config: cfg, root: root, zone: zone, suffix: suffix,
		retry: backoff.New(50*time.Millisecond, 5*time.Second)}, nil
}

func (a *allocator) run(ctx context.Context) error {
	defer a.stopLeading()
	for {
		changed := a.KeySpace.Changed()
		kvs, rev := a.KeySpace.Snapshot()
		s := NewState(a.root, kvs, rev)
		self := s.MemberIndex(a.zone, a.suffix)
		switch {
		case self < 0:
			return ErrMemberGone
		case a.Lease != 0 && clientv3.LeaseID(s.Members[self].KV.Lease) != a.Lease:
			return fmt.Errorf("%w: it is under lease %x, not this process's %x", ErrMemberGone, s.Members[self].KV.Lease, int64(a.Lease))
		case s.Members[self].Value.IsExiting() && s.Load[self] == 0:
			a.Logger.Info("drained: member holds no assignments")
			return nil
		}
		if s.Leader != self {
			a.stopLeading()
		} else {
			a.leading = true
			next, err := a.round(ctx, s)
			if errors.Is(err, errConflict) {
				// The state changed since the snapshot; the change is on its
				// way to (or already in) the keyspace.
				next, err = 0, nil
			}
			if err != nil {
				if err := a.backoff(ctx, err); err != nil {
					return err
				}
				continue
			}
			a.retry.Reset()
			if next != 0 {
				if err := a.KeySpace.WaitForRevision(ctx, next); err != nil {
					return err
				}
				continue
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stopLeading zeroes the gauges of the leader's solve once this member
// no longer leads (another member does, or it stopped): they describe the
// fleet only as its leader sees it, and a former leader's last values
// would otherwise stay, and alerts on them with it, after the new leader
// found the fleet changed. Should it lead again, it solves afresh, and
// sets them from that solve.
func (a *allocator) stopLeading() {
	if !a.leading {
		return
	}
	a.leading, a.haveTarget = false, false
	membersGauge.Set(0)
	itemsGauge.Set(0)
	desiredSlotsGauge.Set(0)
	unattainableSlotsGauge.Set(0)
}

// backoff logs a failed round and waits before the next attempt, unless
// ctx ends first.
func (a *allocator) backoff(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	d := a.retry.Next()
	a.Logger.Warn("allocator round failed; retrying", "err", err, "backoff", d)
	return backoff.Sleep(ctx, d)
}

// round solves if the inputs changed, then commits one converge round. It
// returns the revision to wait for before the next round, or 0 if the
// fleet is as converged as it can be until something changes.
func (a *allocator) round(ctx context.Context, s *State) (int64, error) {
	r := Round{Input: s}
	if fp := s.fingerprint(); !a.haveTarget || fp != a.targetPrint {
		r.Solved, r.Solve = true, a.solve(s)
		a.targetPrint, a.haveTarget = fp, true
	}
	self := s.Members[s.Leader].KV
	b := newBatch(a.Client, a.MaxTxnOps,
		clientv3.Compare(clientv3.ModRevision(string(self.Key)), "=", self.ModRevision))
	c := converger{s: s, target: a.target, ready: a.Ready, initial: a.InitialValue, b: b}
	if err := c.plan(); err != nil {
		return 0, err
	}
	b.flush()
	total := b.Txns()
	if total == 0 {
		if a.Idle != nil {
			a.Idle(s)
		}
		return 0, nil
	}
	res, err := b.Commit(ctx, a.Parallel)
	if err != nil {
		return 0, err
	}
	assignmentsAdded.Add(float64(res.stats.added))
	assignmentsRemoved.Add(float64(res.stats.removed))
	assignmentsMoved.Add(float64(res.stats.moved))
	a.logChanges(res)
	if a.AfterRound != nil {
		r.Revision, r.Txns, r.Committed = res.rev, total, res.committed
		r.Added, r.Removed, r.Moved = res.stats.added, res.stats.removed, res.stats.moved
		a.AfterRound(r)
	}
	if res.committed < total {
		txnsFailed.Inc()
		a.Logger.Debug("allocator transaction conflicted; recomputing",
			"committed", res.committed, "of", total, "revision", res.rev)
		return 0, errConflict
	}
	convergeRounds.Inc()
	return res.rev, nil
}

// logChanges tells operators what the leader's round changed: a failover
// or a handoff is a promotion here (a move to slot 0). A round that
// changed nothing says nothing, so a steady fleet is quiet.
func (a *allocator) logChanges(res commitResult) {
	st := res.stats
	if st.added+st.removed+st.moved == 0 {
		return
	}
	a.Logger.Info("leader changed assignments", "revision", res.rev,
		"added", st.added, "removed", st.removed, "moved", st.moved, "txns", res.committed)
}

func (a *allocator) solve(s *State) time.Duration {
	start := time.Now()
	p := s.Problem()
	sol := a.solver.Solve(p)
	elapsed := time.Since(start)
	a.target = sol.Assigned

	solveSeconds.Observe(elapsed.Seconds())
	membersGauge.Set(float64(len(s.Members)))
	itemsGauge.Set(float64(len(s.Items)))
	desiredSlotsGauge.Set(float64(sol.Stats.Desired))
	unattainableSlotsGauge.Set(float64(sol.Stats.Desired - sol.Stats.Assigned))
	a.Logger.Info("solved", "revision", s.Revision, "members", len(s.Members), "items", len(s.Items),
		"desired", sol.Stats.Desired, "assigned", sol.Stats.Assigned, "kept", sol.Stats.Kept,
		"added", sol.Stats.Added, "removed", sol.Stats.Removed, "seconds", elapsed.Seconds())
	return elapsed
}
