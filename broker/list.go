package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// List lists the journals whose labels (with the meta-labels name and
// prefix) match the request's selector, with their routes.
func (s *Server) List(ctx context.Context, req *protocol.ListRequest) (*protocol.ListResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	if s.cfg.Auth != nil {
		if err := s.cfg.Auth.RequireAny(ctx, auth.List, "journal"); err != nil {
			return nil, err
		}
	}
	if req.WaitForRevision > 0 {
		if err := s.awaitResolved(ctx, req.WaitForRevision); err != nil {
			return nil, status.FromContextError(err).Err()
		}
	} else {
		s.syncKeyspace(ctx)
	}
	sel, err := labels.ParseSelector(req.Selector)
	if err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	state, journals := s.resolver.snapshot()
	resp := &protocol.ListResponse{Status: protocol.Status_OK, Header: s.header(nil)}
	if state != nil {
		// The revision of the journals listed, which the keyspace may
		// have passed since: a watcher that waits for the next revision
		// after it misses no change.
		resp.Header.Revision = state.Revision
	}
	for _, j := range journals {
		set := j.spec.LabelSetWithMeta()
		if !sel.Matches(set) || !s.cfg.Auth.Allows(ctx, auth.List, set) {
			continue
		}
		resp.Journals = append(resp.Journals, &protocol.ListResponse_Journal{
			Spec: j.spec, CreateRevision: j.item.KV.CreateRevision, ModRevision: j.item.KV.ModRevision, Route: j.route,
		})
	}
	sort.Slice(resp.Journals, func(a, b int) bool { return resp.Journals[a].Spec.Name < resp.Journals[b].Spec.Name })
	return resp, nil
}

// awaitResolved waits, for as long as ctx allows, until the journals and
// routes that the broker serves reflect etcd's revision rev: the long
// poll of a List with WaitForRevision. Unlike awaitRevision, it asks
// nothing of etcd: a watcher waits for a change to come, not for a
// revision it knows was written.
func (s *Server) awaitResolved(ctx context.Context, rev int64) error {
	select {
	case <-s.serving:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		// Take the channel first: the resolver observes each change
		// before the keyspace closes it.
		ch := s.ks.Changed()
		if state, _ := s.resolver.snapshot(); state != nil && state.Revision >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Apply creates, updates and deletes journal specs in one etcd transaction,
// each conditioned on the mod revision its author read.
func (s *Server) Apply(ctx context.Context, req *protocol.ApplyRequest) (*protocol.ApplyResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	s.awaitRevision(ctx, 0)
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	if err := s.requireApply(ctx, req); err != nil {
		return nil, err
	}
	if err := s.keepSuspensions(ctx, req.Changes); err != nil {
		return nil, err
	}
	for _, c := range req.Changes {
		name := c.Delete
		if c.Upsert != nil {
			name = c.Upsert.Name
			raw, err := protocol.MarshalSpec(c.Upsert)
			if err != nil {
				return nil, protocol.InvalidArgument(err)
			}
			ops = append(ops, clientv3.OpPut(allocator.ItemKey(s.cfg.Root, name), string(raw)))
		} else {
			ops = append(ops, clientv3.OpDelete(allocator.ItemKey(s.cfg.Root, name)))
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(allocator.ItemKey(s.cfg.Root, name)), "=", c.ExpectModRevision))
	}
	resp, err := s.cfg.Etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "applying journal specs: %v", err)
	}
	out := &protocol.ApplyResponse{Status: protocol.Status_OK, Revision: resp.Header.Revision}
	if !resp.Succeeded {
		out.Status = protocol.Status_REVISION_MISMATCH
	} else {
		s.awaitRevision(ctx, resp.Header.Revision)
		out.Warnings = s.applyWarnings(req)
	}
	out.Header = s.header(nil)
	return out, nil
}

// keepSuspensions gives each upsert the suspension record of the spec it
// replaces (spec files never hold one), and refuses one that changes it:
// only a journal's primary can suspend it, once its content is persisted
// (see Suspend). It reads the replaced specs in one etcd round trip.
func (s *Server) keepSuspensions(ctx context.Context, changes []*protocol.ApplyRequest_Change) error {
	var updates []*protocol.ApplyRequest_Change
	var gets []clientv3.Op
	for _, c := range changes {
		switch {
		case c.Upsert == nil:
		case c.ExpectModRevision == 0 && c.Upsert.Suspension != nil:
			return protocol.InvalidArgument(fmt.Errorf("journal %s: a new journal cannot be suspended", c.Upsert.Name))
		case c.ExpectModRevision != 0:
			updates = append(updates, c)
			gets = append(gets, clientv3.OpGet(allocator.ItemKey(s.cfg.Root, c.Upsert.Name)))
		}
	}
	if len(gets) == 0 {
		return nil
	}
	resp, err := s.cfg.Etcd.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return status.Errorf(codes.Unavailable, "applying journal specs: %v", err)
	}
	for i, c := range updates {
		kvs := resp.Responses[i].GetResponseRange().GetKvs()
		if len(kvs) == 0 || kvs[0].ModRevision != c.ExpectModRevision {
			continue // The transaction fails: REVISION_MISMATCH.
		}
		cur, err := protocol.UnmarshalSpec(kvs[0].Value)
		if err != nil {
			continue // Replaced by a valid spec: there is no record to keep.
		}
		switch {
		case c.Upsert.Suspension == nil:
			c.Upsert.Suspension = cur.Suspension
		case !proto.Equal(c.Upsert.Suspension, cur.Suspension):
			return protocol.InvalidArgument(fmt.Errorf("journal %s: its suspension is the brokers' to change: use quire journals suspend or resume", c.Upsert.Name))
		}
	}
	return nil
}

// applyWarnings says which upserted journals ask for more replicas than
// there are brokers to hold them: the allocator gives each replica its own
// broker, so such a journal stays under-replicated until more join.
func (s *Server) applyWarnings(req *protocol.ApplyRequest) []string {
	kvs, rev := s.ks.Snapshot()
	state := allocator.NewState(s.cfg.Root, kvs, rev)
	holders := 0
	for _, m := range state.Members {
		if m.Value.ItemLimit() > 0 && !m.Value.IsExiting() {
			holders++
		}
	}
	brokers := fmt.Sprintf("%d brokers", holders)
	if holders == 1 {
		brokers = "1 broker"
	}
	var out []string
	for _, c := range req.Changes {
		if c.Upsert != nil && int(c.Upsert.Replication) > holders {
			out = append(out, fmt.Sprintf("%s: replication %d, but only %s can hold journals: it is under-replicated until %d more join",
				c.Upsert.Name, c.Upsert.Replication, brokers, int(c.Upsert.Replication)-holders))
		}
	}
	return out
}

// requireApply checks that the request may apply each of its changes: to
// the journal as it is, and to its new spec, so that no one moves a
// journal into or out of a selector that bounds them.
//
// A create (expected mod revision 0) of a journal that does not exist has
// no "as it is" to check: its new spec is all there is, and the
// transaction fails if the journal appears meanwhile. Checking its name
// alone instead would refuse every token whose selector matches by label.
// Any other change of a journal this broker does not know (a delete, an
// update at a revision its view has not reached) keeps the name-only
// check, so that it learns nothing of journals outside its selector.
func (s *Server) requireApply(ctx context.Context, req *protocol.ApplyRequest) error {
	if s.cfg.Auth == nil {
		return nil
	}
	for _, c := range req.Changes {
		name := c.Delete
		if c.Upsert != nil {
			name = c.Upsert.Name
			if err := s.require(ctx, auth.Apply, name, c.Upsert); err != nil {
				return err
			}
		}
		current, _, _ := s.resolve(ctx, name, 0)
		if current == nil && c.Upsert != nil && c.ExpectModRevision == 0 {
			continue
		}
		if err := s.require(ctx, auth.Apply, name, current); err != nil {
			return err
		}
	}
	return nil
}

// ListFragments lists a journal's fragments from a replica's index.
func (s *Server) ListFragments(ctx context.Context, req *protocol.FragmentsRequest) (*protocol.FragmentsResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	spec, route, r := s.resolve(ctx, req.Journal, req.Header.GetRevision())
	if err := s.require(ctx, auth.Read, req.Journal, spec); err != nil {
		return nil, err
	}
	hdr := s.header(route)
	switch {
	case spec == nil:
		return &protocol.FragmentsResponse{Status: protocol.Status_JOURNAL_NOT_FOUND, Header: hdr}, nil
	case r == nil && len(route.GetMembers()) == 0 && spec.Suspended():
		// No replica holds it: its stores do, all of it.
		ix := newIndex()
		if err := s.listStores(ctx, req.Journal, spec, ix); err != nil {
			return nil, status.Errorf(codes.Unavailable, "listing the stores of suspended %s: %v", req.Journal, err)
		}
		return s.listFragments(ctx, ix, req, hdr, nil), nil
	case r == nil && (req.DoNotProxy || len(route.GetMembers()) == 0):
		return &protocol.FragmentsResponse{Status: protocol.Status_NOT_REPLICA, Header: hdr}, nil
	case r == nil:
		conn, err := s.conns.Get(route.Endpoints[0])
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		req.Header, req.DoNotProxy = hdr, true
		return protocol.NewJournalClient(conn).ListFragments(auth.ForwardCaller(ctx), req)
	}
	if err := r.awaitReady(ctx); err != nil {
		return nil, err
	}
	if req.Refresh && req.NextPageToken == 0 {
		if err := r.refresh(); err != nil {
			return nil, status.Errorf(codes.Unavailable, "listing the stores of %s: %v", req.Journal, err)
		}
	}
	return s.listFragments(ctx, r.index, req, hdr, r.openFragment(spec)), nil
}

// listFragments answers a page of the fragments of ix, followed by the
// spool being written (open), if not nil: a user asking where a
// journal's content is finds all of it.
func (s *Server) listFragments(ctx context.Context, ix *index, req *protocol.FragmentsRequest, hdr *protocol.Header, open *protocol.Fragment) *protocol.FragmentsResponse {
	resp := &protocol.FragmentsResponse{Status: protocol.Status_OK, Header: hdr}
	limit := int(req.PageLimit)
	if limit <= 0 {
		limit = 1000
	}
	// add adds pf, which is f, unless filtered out; false once the page
	// is full.
	add := func(pf *protocol.Fragment, f fragment.Fragment) bool {
		if (req.BeginModTime != 0 && pf.ModTime < req.BeginModTime) || (req.EndModTime != 0 && pf.ModTime >= req.EndModTime) {
			return true
		}
		if len(resp.Fragments) == limit {
			resp.NextPageToken = pf.Begin
			return false
		}
		info := &protocol.FragmentsResponse_Info{Fragment: pf}
		if ttl := req.SignatureTtl.AsDuration(); ttl > 0 && f.Store != "" {
			if store, err := s.storeFor(ctx, f.Store); err == nil {
				info.SignedUrl, _ = store.SignURL(ctx, f, max(ttl, time.Second))
			}
		}
		resp.Fragments = append(resp.Fragments, info)
		return true
	}
	for _, f := range ix.list(req.NextPageToken) {
		if !add(protoFragment(f), f) {
			return resp
		}
	}
	if open != nil && open.Begin >= req.NextPageToken {
		add(open, fragment.Fragment{})
	}
	return resp
}

func encodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // MemberSpec always marshals.
	}
	return string(b)
}
