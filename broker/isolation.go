package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/allocator"
)

// ErrIsolated is wrapped by the error of a Run that ended because the
// broker reached etcd but none of its peers, or not some of them and was
// chosen to resign for it (see Config.IsolationTimeout).
var ErrIsolated = errors.New("broker: isolated from its peers")

// A broker that keeps its etcd lease while it cannot reach the other
// brokers stays on its journals' routes: nothing else drops it, and the
// pipelines of those journals, which need every broker of the route,
// refuse appends until the network heals. So each broker checks that it
// reaches its peers, and resigns, giving its journals up to brokers that
// can replicate them, once it has reached none of them for
// IsolationTimeout.
//
// With two or more peers announced, a broker that reaches none is most
// likely the one cut off (the others do not resign while they reach each
// other). With fewer there is no telling which side is cut off, and
// nobody resigns. The timeout is longer than the lease TTL, so that peers
// that died (rather than became unreachable) are gone from etcd before a
// broker judges. A broker cut off from some peers only reports them, and
// resigns if the reports choose it: see cuts.go.

// checkParallel bounds the health checks of a round run at once.
const checkParallel = 16

// isolationTimeout is cfg.IsolationTimeout with its default, or 0 if
// disabled.
func (c *Config) isolationTimeout() time.Duration {
	switch {
	case c.IsolationTimeout < 0:
		return 0
	case c.IsolationTimeout == 0:
		return 3 * c.LeaseTTL
	}
	return c.IsolationTimeout
}

// checkInterval is how often peers are checked, and each check's timeout.
func (c *Config) checkInterval() time.Duration {
	return min(time.Second, c.isolationTimeout()/5)
}

// peerWatch is what a broker learned of its peers from its checks.
type peerWatch struct {
	// last is when the broker last reached a peer, or had fewer than two.
	last time.Time
	// since holds, for each peer (ZONE#SUFFIX) not reached at its last
	// check, when its checks began to fail.
	since map[string]time.Time
	// reported is the broker's cut report as last written, if written:
	// the first round writes it (removing any that a run before this
	// one left, under a lease not yet expired).
	reported CutReport
	written  bool
	// choice is when the cut reports began to choose this broker to
	// resign, and chose it at every round since; zero if they do not.
	choice time.Time
}

// chosen records whether the cut reports choose the broker to resign at
// now, and tells whether they have chosen it for grace. The two sides
// of a cut report it rounds apart, and a report alone may choose wrongly
// (of a broker that nobody reaches, each report alone makes a pair whose
// greater name goes): the grace lets all reports in.
func (w *peerWatch) chosen(chosen bool, now time.Time, grace time.Duration) bool {
	switch {
	case !chosen:
		w.choice = time.Time{}
	case w.choice.IsZero():
		w.choice = now
	}
	return chosen && now.Sub(w.choice) >= grace
}

// observe records a round of checks made at now: reached tells, for
// every peer, whether it was reached.
func (w *peerWatch) observe(reached map[string]bool, now time.Time) {
	reachedAny := len(reached) < 2
	for name, ok := range reached {
		if ok {
			delete(w.since, name)
			reachedAny = true
		} else if _, ok := w.since[name]; !ok {
			w.since[name] = now
		}
	}
	for name := range w.since {
		if _, ok := reached[name]; !ok {
			delete(w.since, name) // No longer a peer.
		}
	}
	if reachedAny {
		w.last = now
	}
}

// report returns the cut report of the peers not reached for timeout at
// now (unreached), and of those not reached for half of it (suspected).
func (w *peerWatch) report(now time.Time, timeout time.Duration) CutReport {
	var r CutReport
	for name, since := range w.since {
		switch failing := now.Sub(since); {
		case failing >= timeout:
			r.Unreached = append(r.Unreached, name)
		case failing >= timeout/2:
			r.Suspected = append(r.Suspected, name)
		}
	}
	slices.Sort(r.Unreached)
	slices.Sort(r.Suspected)
	return r
}

// watchPeers checks the broker's peers every interval, reports those it
// has not reached for the isolation timeout (see cuts.go), and closes
// resign, returning why, once it has reached none of them for that
// timeout, or once the cut reports choose it to resign. It returns nil
// once ctx is done.
func (s *Server) watchPeers(ctx context.Context, resign chan<- struct{}) error {
	defer peersUnreached.Set(0)
	defer peersCut.Set(0)
	interval := s.cfg.checkInterval()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	w := peerWatch{last: time.Now(), since: map[string]time.Time{}}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if why := s.watchRound(ctx, &w, interval); why != nil && ctx.Err() == nil {
			s.log.Error("resigning, so that its journals move to brokers that reach each other", "err", why)
			s.isolated.Store(true)
			close(resign)
			return why
		}
	}
}

// watchRound checks the broker's peers once, and reports those it has
// not reached for the isolation timeout. It returns why the broker must
// resign, if it must.
func (s *Server) watchRound(ctx context.Context, w *peerWatch, interval time.Duration) error {
	timeout := s.cfg.isolationTimeout()
	state, _ := s.resolver.snapshot()
	if state == nil {
		return nil
	}
	kvs, _ := s.ks.Snapshot()
	peers := s.peers(state)
	reached := s.check(ctx, peers, interval)
	if ctx.Err() != nil {
		return nil
	}
	now := time.Now()
	w.observe(reached, now)
	s.checked(reached)
	alone := now.Sub(w.last)
	peersUnreached.Set(alone.Seconds())
	report := w.report(now, timeout)
	if alone >= timeout {
		// Reported first, so that the peers' reports of it, which may be
		// in before it is gone from etcd, do not choose one of them.
		if err := s.reportCuts(ctx, state, report); err != nil {
			s.log.Warn("reporting the peers it cannot reach failed; resigning all the same", "unreached", report.Unreached, "err", err)
		}
		return fmt.Errorf("%w: reached etcd, but none of its %d peers for %s (--isolation-timeout %s)",
			ErrIsolated, len(peers), alone.Round(time.Second), timeout)
	}
	unreached := report.Unreached
	peersCut.Set(float64(len(unreached)))
	if !w.written || !slices.Equal(unreached, w.reported.Unreached) || !slices.Equal(report.Suspected, w.reported.Suspected) {
		if err := s.reportCuts(ctx, state, report); err != nil {
			s.log.Warn("reporting the peers it cannot reach failed; retrying", "unreached", unreached, "suspected", report.Suspected, "err", err)
		} else {
			w.reported, w.written = report, true
		}
	}
	cuts, resigned := s.cutsOf(kvs)
	members := memberNames(state)
	if !w.chosen(chosenToResign(s.name(), members, cuts, resigned), now, cutGrace(timeout, cuts, members)) {
		return nil
	}
	cutFrom := unreachedBy(s.name(), cuts)
	if err := s.leaveResignation(ctx, cutFrom); err != nil {
		s.log.Warn("leaving a record of the resignation failed; resigning all the same", "err", err)
	}
	return fmt.Errorf("%w: cut off from %s (unreached, it reports: %v), while others reach each other; it is the broker chosen to resign (see --isolation-timeout)",
		ErrIsolated, strings.Join(cutFrom, ", "), unreached)
}

// unreachedBy returns, sorted, the brokers that name or that report name
// unreached.
func unreachedBy(name string, cuts []cut) []string {
	var out []string
	for _, c := range cuts {
		if c.reporter == name {
			out = append(out, c.Unreached...)
		} else if slices.Contains(c.Unreached, name) {
			out = append(out, c.reporter)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checked calls the test hook with a round's checks.
func (s *Server) checked(reached map[string]bool) {
	if s.cfg.peersChecked == nil {
		return
	}
	s.cfg.peersChecked(len(reached), len(reached) < 2 || reachedOne(reached))
}

// reachedOne tells whether a peer of reached was reached.
func reachedOne(reached map[string]bool) bool {
	for _, ok := range reached {
		if ok {
			return true
		}
	}
	return false
}

// awaitPeers waits, before the broker announces itself, until it reaches
// each of its peers (if it has two or more), but for those that other
// brokers report they cannot reach either, and at least one: a broker that joined its journals'
// routes while cut from a peer of theirs would make them refuse appends.
// Peers that died leave etcd when their leases expire, and are then not
// waited for.
func (s *Server) awaitPeers(ctx context.Context) error {
	if s.cfg.isolationTimeout() == 0 {
		return nil
	}
	interval := s.cfg.checkInterval()
	var warned time.Time
	for {
		changed := s.ks.Changed()
		kvs, rev := s.ks.Snapshot()
		peers := s.peers(allocator.NewState(s.cfg.Root, kvs, rev))
		reached := s.check(ctx, peers, interval)
		s.checked(reached)
		cuts, _ := s.cutsOf(kvs)
		missing := awaited(reached, cuts)
		if len(peers) < 2 || len(missing) == 0 && reachedOne(reached) {
			return nil
		}
		if time.Since(warned) >= 10*time.Second {
			s.log.Warn("waiting to reach its peers before serving", "peers", len(peers), "unreached", missing)
			warned = time.Now()
		}
		if err := wait(ctx, changed, interval); err != nil {
			return err
		}
	}
}

// awaited returns, sorted, the peers not reached that no cut report of
// another peer names. The peers are the keys of reached. A report by the
// broker itself (left by its last run, under a lease not yet expired) or
// by a broker that is not a member does not count: it is no evidence that
// others are cut from the peer too.
func awaited(reached map[string]bool, cuts []cut) []string {
	reportedByPeer := func(name string) bool {
		return slices.ContainsFunc(cuts, func(c cut) bool {
			_, peer := reached[c.reporter]
			return peer && c.reporter != name && slices.Contains(c.Unreached, name)
		})
	}
	var out []string
	for name, ok := range reached {
		if !ok && !reportedByPeer(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// wait waits for changed, or d, or returns ctx's error.
func wait(ctx context.Context, changed <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// peers returns the endpoints of the other brokers of state, by name.
func (s *Server) peers(state *allocator.State) map[string]string {
	out := map[string]string{}
	if state == nil {
		return out
	}
	for _, m := range state.Members {
		if m.Zone == s.cfg.Zone && m.Suffix == s.cfg.Suffix {
			continue
		}
		if spec, ok := m.Value.(*MemberSpec); ok {
			out[memberName(m.Member)] = spec.Endpoint
		}
	}
	return out
}

// memberNames returns the names of state's members.
func memberNames(state *allocator.State) []string {
	out := make([]string, len(state.Members))
	for i, m := range state.Members {
		out[i] = memberName(m.Member)
	}
	return out
}

// check tells, for each of peers (endpoints by name), whether the broker
// reaches it within timeout. Any answer reaches a peer, even an error
// status (a server without the health service answers Unimplemented);
// only transport failures do not.
func (s *Server) check(ctx context.Context, peers map[string]string, timeout time.Duration) map[string]bool {
	var mu sync.Mutex
	reached := make(map[string]bool, len(peers))
	var wg sync.WaitGroup
	slots := make(chan struct{}, checkParallel)
	for name, endpoint := range peers {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			// Each its own timeout: a check waiting for a slot behind
			// unreachable peers still gets all of it.
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			ok := s.reach(ctx, endpoint)
			mu.Lock()
			defer mu.Unlock()
			reached[name] = ok
		})
	}
	wg.Wait()
	return reached
}

// reach tells whether a health check of endpoint gets an answer.
func (s *Server) reach(ctx context.Context, endpoint string) bool {
	conn, err := s.conns.Get(endpoint)
	if err != nil {
		return false
	}
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false
	}
	return true
}
