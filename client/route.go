package client

import (
	"slices"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/protocol"
)

// target is where to send one request: a broker endpoint, and whether the
// broker must answer itself (NOT_PRIMARY, NOT_REPLICA) rather than proxy.
type target struct {
	endpoint   string
	doNotProxy bool
}

// purpose is what a request needs of the broker it goes to.
type purpose int

const (
	forAppend purpose = iota // The journal's primary.
	forRead                  // Any replica of the journal.
)

// router caches each journal's route as learned from response headers, and
// chooses the broker each request goes to.
type router struct {
	brokers []string // The configured brokers, tried in order.
	zone    string

	mu     sync.RWMutex
	routes map[string]*protocol.Route
	known  map[string]struct{} // Every endpoint seen in a route.
	// seen is the highest etcd revision any broker reported. Requests
	// carry it, so that a broker answers from a view at least as recent as
	// any the client acted on (read your writes: an Apply through one
	// broker, then an Append through another).
	seen atomic.Int64
}

// observe records a revision a broker reported.
func (r *router) observe(rev int64) {
	for {
		cur := r.seen.Load()
		if rev <= cur || r.seen.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// header is the header requests carry: the highest revision seen.
func (r *router) header() *protocol.Header {
	if rev := r.seen.Load(); rev > 0 {
		return &protocol.Header{Revision: rev}
	}
	return nil
}

func newRouter(brokers []string, zone string) *router {
	return &router{
		brokers: brokers,
		zone:    zone,
		routes:  make(map[string]*protocol.Route),
		known:   make(map[string]struct{}),
	}
}

// learn records the route that a broker's header gives for journal, unless
// the cached route was resolved at a later revision. Routes without
// members, or whose endpoints do not match their members, are ignored.
func (r *router) learn(journal string, h *protocol.Header) {
	r.observe(h.GetRevision())
	rt := h.GetRoute()
	if journal == "" || !usableRoute(rt) {
		return
	}
	r.mu.RLock()
	old, ok := r.routes[journal]
	r.mu.RUnlock()
	if ok && sameRoute(old, rt) {
		return // Most answers repeat the route known.
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.routes[journal]; ok && old.GetRevision() > rt.GetRevision() {
		return
	}
	r.routes[journal] = proto.CloneOf(rt)
	for _, ep := range rt.GetEndpoints() {
		r.known[ep] = struct{}{}
	}
}

// sameRoute tells whether a and b are the same route, resolved at the
// same revision.
func sameRoute(a, b *protocol.Route) bool {
	return a.GetRevision() == b.GetRevision() && slices.Equal(a.GetEndpoints(), b.GetEndpoints()) &&
		slices.EqualFunc(a.GetMembers(), b.GetMembers(), func(m, n *protocol.ProcessID) bool {
			return m.GetZone() == n.GetZone() && m.GetSuffix() == n.GetSuffix()
		})
}

func usableRoute(rt *protocol.Route) bool {
	n := len(rt.GetMembers())
	return n > 0 && len(rt.GetEndpoints()) == n && !slices.Contains(rt.GetEndpoints(), "")
}

// invalidate forgets journal's route if it includes endpoint, or, if
// endpoint is empty, unconditionally.
func (r *router) invalidate(journal, endpoint string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rt, ok := r.routes[journal]; ok && (endpoint == "" || slices.Contains(rt.GetEndpoints(), endpoint)) {
		delete(r.routes, journal)
	}
}

// route returns the cached route of journal, or nil. The caller must not
// modify it.
func (r *router) route(journal string) *protocol.Route {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.routes[journal]
}

// pick chooses a target for a request about journal, skipping endpoints in
// avoid (those that just failed). With a cached route, appends go to the
// primary and reads to a replica in the client's zone (else the primary),
// proxy-less. Failing those, requests go to any other broker, which
// proxies them: the configured brokers first, in order, then brokers seen
// in routes. If
// every candidate is to be avoided, avoid is cleared and the first is used.
func (r *router) pick(journal string, p purpose, avoid map[string]bool) target {
	cands := r.candidates(journal, p)
	for _, t := range cands {
		if !avoid[t.endpoint] {
			return t
		}
	}
	clear(avoid)
	return cands[0]
}

func (r *router) candidates(journal string, p purpose) []target {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []target
	seen := make(map[string]bool)
	add := func(ep string, direct bool) {
		if ep != "" && !seen[ep] {
			seen[ep] = true
			out = append(out, target{endpoint: ep, doNotProxy: direct})
		}
	}
	if rt := r.routes[journal]; rt != nil {
		eps := rt.GetEndpoints()
		if p == forRead {
			if r.zone != "" {
				for i, m := range rt.GetMembers() {
					if m.GetZone() == r.zone {
						add(eps[i], true)
					}
				}
			}
			for _, ep := range eps {
				add(ep, true)
			}
		} else {
			add(eps[0], true)
			for _, ep := range eps[1:] {
				add(ep, false)
			}
		}
	}
	for _, b := range r.brokers {
		add(b, false)
	}
	others := make([]string, 0, len(r.known))
	for ep := range r.known {
		others = append(others, ep)
	}
	slices.Sort(others)
	for _, ep := range others {
		add(ep, false)
	}
	return out
}
