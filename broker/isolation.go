package broker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/allocator"
)

// ErrIsolated is wrapped by the error of a Run that ended because the
// broker reached etcd but none of its peers (see Config.IsolationTimeout).
var ErrIsolated = errors.New("broker: isolated from its peers")

// A broker that keeps its etcd lease while it cannot reach the other
// brokers stays on its journals' routes: nothing else drops it, and the
// pipelines of those journals, which need every broker of the route,
// refuse appends until the network heals. So each broker checks that it
// reaches its peers, and resigns, giving its journals up to brokers that
// can replicate them, once it has reached none of them for
// IsolationTimeout.
//
// Reaching none of the peers is the only case decided: with two or more
// peers announced, a broker that reaches none is most likely the one cut
// off (the others do not resign while they reach each other). With fewer
// there is no telling which side is cut off, and nobody resigns. The
// timeout is longer than the lease TTL, so that peers that died (rather
// than became unreachable) are gone from etcd before a broker judges.
// What is not decided: a broker cut off from some peers only.

// peerSample bounds the peers checked in a round: in a large fleet, an
// isolated broker fails them all, and a connected one reaches one soon.
const peerSample = 3

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

// watchPeers checks the broker's peers every interval, and closes resign
// once it has reached none of them for the isolation timeout, returning
// why. It returns nil once ctx is done.
func (s *Server) watchPeers(ctx context.Context, resign chan<- struct{}) error {
	defer peersUnreached.Set(0)
	interval := s.cfg.checkInterval()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last := time.Now() // The broker last reached a peer, or had fewer than two.
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		state, _ := s.resolver.snapshot()
		peers := s.peers(state)
		if s.connected(ctx, peers, interval) {
			last = time.Now()
			peersUnreached.Set(0)
			continue
		}
		alone := time.Since(last)
		peersUnreached.Set(alone.Seconds())
		if alone < s.cfg.isolationTimeout() {
			continue
		}
		err := fmt.Errorf("%w: reached etcd, but none of its %d peers for %s (--isolation-timeout %s)",
			ErrIsolated, len(peers), alone.Round(time.Second), s.cfg.isolationTimeout())
		s.log.Error("resigning, so that its journals move to brokers that reach each other", "err", err)
		s.isolated.Store(true)
		close(resign)
		return err
	}
}

// awaitPeers waits, before the broker announces itself, until it reaches
// one of its peers, if it has two or more: an isolated broker that joined
// its journals' routes would make them refuse appends. Peers that died
// leave etcd when their leases expire, and are then not waited for.
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
		if s.connected(ctx, peers, interval) {
			return nil
		}
		if time.Since(warned) >= 10*time.Second {
			s.log.Warn("waiting to reach one of its peers before serving", "peers", len(peers))
			warned = time.Now()
		}
		if err := wait(ctx, changed, interval); err != nil {
			return err
		}
	}
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

// peers are the endpoints of the other brokers of state.
func (s *Server) peers(state *allocator.State) []string {
	if state == nil {
		return nil
	}
	var out []string
	for _, m := range state.Members {
		if m.Zone == s.cfg.Zone && m.Suffix == s.cfg.Suffix {
			continue
		}
		if spec, ok := m.Value.(*MemberSpec); ok {
			out = append(out, spec.Endpoint)
		}
	}
	return out
}

// connected tells whether the broker is not isolated from peers: it
// reaches one of them, or has fewer than two.
func (s *Server) connected(ctx context.Context, peers []string, timeout time.Duration) bool {
	ok := len(peers) < 2 || s.reachAny(ctx, peers, timeout)
	if s.cfg.peersChecked != nil {
		s.cfg.peersChecked(len(peers), ok)
	}
	return ok
}

// reachAny tells whether the broker reaches any of a sample of peers
// within timeout. Any answer reaches a peer, even an error status (a
// server without the health service answers Unimplemented); only
// transport failures do not.
func (s *Server) reachAny(ctx context.Context, peers []string, timeout time.Duration) bool {
	rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ok atomic.Bool
	var wg sync.WaitGroup
	for _, endpoint := range peers[:min(len(peers), peerSample)] {
		wg.Go(func() {
			conn, err := s.conns.Get(endpoint)
			if err != nil {
				return
			}
			_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			switch status.Code(err) {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			default:
				ok.Store(true)
			}
		})
	}
	wg.Wait()
	return ok.Load()
}
