package broker

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// maxProbeTime bounds a store's check, and peerShare is the part of a
// request's remaining time that a peer gets to answer: the broker that
// asks its peers keeps the rest to report a peer that did not answer,
// rather than fail the whole request with it.
const (
	maxProbeTime = 30 * time.Second
	peerShare    = 0.8
)

// StoreHealth checks fragment stores: this broker's default store, the
// stores of the journals the selector matches (and the caller may list),
// and the stores the request names (which takes APPLY: it writes where
// the caller says, as a journal's spec can). A request from a client is
// passed on to every other broker of the fleet, each found through its
// member key in etcd, and the answer holds every broker's report; one
// that a broker passed on (it carries a header) is answered for this
// broker alone. So a client needs to reach one broker to check them all.
func (s *Server) StoreHealth(ctx context.Context, req *protocol.StoreHealthRequest) (*protocol.StoreHealthResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	if s.cfg.Auth != nil {
		if err := s.cfg.Auth.RequireAny(ctx, auth.List, "journal"); err != nil {
			return nil, err
		}
		if len(req.Stores) != 0 {
			if err := s.cfg.Auth.RequireAny(ctx, auth.Apply, "journal"); err != nil {
				return nil, err
			}
		}
	}
	if req.Header != nil {
		s.awaitRevision(ctx, req.Header.GetRevision())
		return &protocol.StoreHealthResponse{Status: protocol.Status_OK, Header: s.header(nil),
			Brokers: []*protocol.StoreHealthResponse_Broker{s.checkStores(ctx, req)}}, nil
	}
	s.syncKeyspace(ctx)
	state, _ := s.resolver.snapshot()
	if state == nil { // The context ended before the broker served.
		return nil, status.Errorf(codes.Unavailable, "broker %s is not yet serving: %v", allocator.MemberName(s.cfg.Zone, s.cfg.Suffix), ctx.Err())
	}
	out := make([]*protocol.StoreHealthResponse_Broker, len(state.Members))
	fwd := proto.CloneOf(req)
	fwd.Header = s.header(nil)
	var wg sync.WaitGroup
	for i, m := range state.Members {
		if m.Zone == s.cfg.Zone && m.Suffix == s.cfg.Suffix {
			wg.Go(func() { out[i] = s.checkStores(ctx, req) })
			continue
		}
		var endpoint string
		if spec, ok := m.Value.(*MemberSpec); ok {
			endpoint = spec.Endpoint
		}
		wg.Go(func() { out[i] = s.askPeer(ctx, m.Member, endpoint, fwd) })
	}
	wg.Wait()
	return &protocol.StoreHealthResponse{Status: protocol.Status_OK, Header: s.header(nil), Brokers: out}, nil
}

// askPeer passes req on to the broker member at endpoint, as the caller,
// and returns its report, or one that says why there is none.
func (s *Server) askPeer(ctx context.Context, m allocator.Member, endpoint string, req *protocol.StoreHealthRequest) *protocol.StoreHealthResponse_Broker {
	out := &protocol.StoreHealthResponse_Broker{ProcessId: &protocol.ProcessID{Zone: m.Zone, Suffix: m.Suffix}, Endpoint: endpoint}
	if endpoint == "" {
		out.Error = "its member key names no endpoint"
		return out
	}
	conn, err := s.conns.Get(endpoint)
	if err != nil {
		out.Error = fmt.Sprintf("connecting to %s: %v", endpoint, err)
		return out
	}
	pctx, cancel := context.WithTimeout(ctx, share(ctx, peerShare, 2*maxProbeTime))
	defer cancel()
	resp, err := protocol.NewJournalClient(conn).StoreHealth(auth.ForwardCaller(pctx), req)
	switch {
	case err != nil:
		out.Error = fmt.Sprintf("asking %s: %v", endpoint, err)
	case len(resp.GetBrokers()) != 1:
		out.Error = fmt.Sprintf("%s answered for %d brokers, not for itself alone", endpoint, len(resp.GetBrokers()))
	default:
		out.Stores = resp.Brokers[0].GetStores()
		out.Error = resp.Brokers[0].GetError()
	}
	return out
}

// share is the part of ctx's remaining time to give a step, at most
// limit (all of limit without a deadline).
func share(ctx context.Context, part float64, limit time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(limit, time.Duration(float64(time.Until(dl))*part))
	}
	return limit
}

// checkStores probes, concurrently, the stores of req at this broker.
func (s *Server) checkStores(ctx context.Context, req *protocol.StoreHealthRequest) *protocol.StoreHealthResponse_Broker {
	out := &protocol.StoreHealthResponse_Broker{ProcessId: s.id, Endpoint: s.cfg.Endpoint}
	sel, err := labels.ParseSelector(req.Selector)
	if err != nil { // Validated already.
		out.Error = fmt.Sprintf("selector %q: %v", req.Selector, err)
		return out
	}
	// The stores, each once, with what uses it.
	byURL := map[string]*protocol.StoreHealthResponse_Store{}
	var explicit []string
	add := func(url string) *protocol.StoreHealthResponse_Store {
		st := byURL[url]
		if st == nil {
			st = &protocol.StoreHealthResponse_Store{Url: url}
			byURL[url] = st
		}
		return st
	}
	add(s.cfg.DefaultStore).DefaultStore = true
	_, journals := s.resolver.snapshot()
	for _, j := range journals {
		set := j.spec.LabelSetWithMeta()
		if !sel.Matches(set) || !s.cfg.Auth.Allows(ctx, auth.List, set) {
			continue
		}
		for _, url := range s.storesOf(j.spec) {
			add(url).Journals++
		}
	}
	for _, url := range req.Stores {
		if byURL[url] == nil {
			explicit = append(explicit, url)
		}
		add(url)
	}
	for _, st := range byURL {
		out.Stores = append(out.Stores, st)
	}
	sort.Slice(out.Stores, func(a, b int) bool { return out.Stores[a].Url < out.Stores[b].Url })

	pctx, cancel := context.WithTimeout(ctx, share(ctx, 0.75, maxProbeTime))
	defer cancel()
	var wg sync.WaitGroup
	for _, st := range out.Stores {
		wg.Go(func() {
			// Stores of specs and the default stay open for the broker's
			// use; a store named only by this request is not kept.
			var store fragment.Store
			var err error
			if slices.Contains(explicit, st.Url) {
				store, err = fragment.Open(pctx, st.Url)
			} else {
				store, err = s.stores.get(pctx, st.Url)
			}
			s.probe(pctx, st, store, err)
		})
	}
	wg.Wait()
	return out
}

// probe fills st with the outcome of probing store, which failed to open
// with openErr if that is set.
func (s *Server) probe(ctx context.Context, st *protocol.StoreHealthResponse_Store, store fragment.Store, openErr error) {
	if openErr != nil {
		st.FailedStep, st.Error = protocol.StoreStep_STORE_OPEN, fmt.Sprintf("opening %s: %v", st.Url, openErr)
		storeProbes.WithLabelValues(storeLabel(st.Url), "open").Inc()
		s.log.Warn("store health: a store does not open", "store", st.Url, "err", openErr)
		return
	}
	res := fragment.Probe(ctx, store, allocator.MemberName(s.cfg.Zone, s.cfg.Suffix))
	for _, p := range res.Passed {
		st.Passed = append(st.Passed, &protocol.StoreHealthResponse_Step{Step: stepOf(p.Step), Latency: durationpb.New(p.Latency)})
	}
	st.Ok = res.OK()
	if !st.Ok {
		st.FailedStep, st.Error = stepOf(res.Failed), res.Err.Error()
		storeProbes.WithLabelValues(storeLabel(st.Url), res.Failed.String()).Inc()
		s.log.Warn("store health: a store fails its check", "store", st.Url, "step", res.Failed.String(), "err", res.Err)
		return
	}
	storeProbes.WithLabelValues(storeLabel(st.Url), "ok").Inc()
}

// storeLabel is a store URL without its query (endpoints, regions,
// options), for a metric label: short, and free of anything but the
// store's scheme, bucket and prefix.
func storeLabel(url string) string {
	if i := strings.IndexByte(url, '?'); i >= 0 {
		return url[:i]
	}
	return url
}

func stepOf(st fragment.ProbeStep) protocol.StoreStep {
	switch st {
	case fragment.ProbeWrite:
		return protocol.StoreStep_STORE_WRITE
	case fragment.ProbeRead:
		return protocol.StoreStep_STORE_READ
	case fragment.ProbeList:
		return protocol.StoreStep_STORE_LIST
	case fragment.ProbeDelete:
		return protocol.StoreStep_STORE_DELETE
	}
	return protocol.StoreStep_STORE_STEP_UNSPECIFIED
}
