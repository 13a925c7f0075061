package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/protocol"
)

// Suspension: a journal that no one appends to need not hold a spool and
// replicas on its brokers. Its primary persists everything and records,
// in the journal's spec, the write head and registers (see
// protocol.Suspension); the allocator then gives it no replicas. Any
// broker serves reads of it from its stores. An append resumes it: the
// broker that receives it clears the record's active flag, the allocator
// assigns replicas again, and the new primary continues at the recorded
// offset with the recorded registers.

// Suspend suspends a journal at its primary (passing the request on to
// it), or resumes it at any broker.
func (s *Server) Suspend(ctx context.Context, req *protocol.SuspendRequest) (*protocol.SuspendResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	spec, route, r := s.resolve(ctx, req.Journal, req.Header.GetRevision())
	if err := s.require(ctx, auth.Apply, req.Journal, spec); err != nil {
		return nil, err
	}
	resp := &protocol.SuspendResponse{Status: protocol.Status_OK, Header: s.header(route)}
	switch {
	case spec == nil:
		resp.Status = protocol.Status_JOURNAL_NOT_FOUND
		return resp, nil
	case req.Resume:
		sp, err := s.resume(ctx, req.Journal)
		resp.Suspension = sp
		return resp, err
	case spec.Suspended():
		resp.Suspension = spec.Suspension
		return resp, nil
	case len(route.GetMembers()) == 0:
		resp.Status = protocol.Status_NO_PRIMARY
		return resp, nil
	case r == nil || indexOf(route, s.id) != 0:
		if req.Header != nil {
			resp.Status = protocol.Status_NOT_PRIMARY
			return resp, nil
		}
		return s.proxySuspend(ctx, req, route)
	}
	sp, err := r.suspend(ctx)
	if errors.Is(err, errNotPrimary) {
		_, route, _ := r.view()
		return &protocol.SuspendResponse{Status: protocol.Status_NOT_PRIMARY, Header: s.header(route)}, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "suspending %s: %v", req.Journal, err)
	}
	resp.Suspension = sp
	return resp, nil
}

func (s *Server) proxySuspend(ctx context.Context, req *protocol.SuspendRequest, route *protocol.Route) (*protocol.SuspendResponse, error) {
	conn, err := s.conns.Get(route.Endpoints[0])
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	req.Header = s.header(route)
	return protocol.NewJournalClient(conn).Suspend(auth.ForwardCaller(ctx), req)
}

// suspend persists the journal's content and records its suspension. It
// holds the token throughout: no append slips in between the last roll
// and the record, and appends that waited for the token find the journal
// suspended, and resume it.
func (r *replica) suspend(ctx context.Context) (*protocol.Suspension, error) {
	if err := r.awaitReady(ctx); err != nil {
		return nil, err
	}
	if err := r.acquire(ctx); err != nil {
		return nil, err
	}
	defer r.release()
	if spec, _, _ := r.view(); spec.Suspended() {
		return spec.Suspension, nil
	}
	// A synchronized pipeline: every replica holds what the primary
	// holds, and the primary holds every commit.
	p, err := r.pipelineWithRetry(ctx)
	if err != nil {
		return nil, err
	}
	if s := r.spool(); s.End() > s.Begin {
		if err := r.rollPipeline(p, s.End()); err != nil {
			r.dropPipeline()
			return nil, err
		}
	}
	if err := r.awaitPersisted(ctx); err != nil {
		return nil, err
	}
	sp := &protocol.Suspension{Active: true, Offset: r.spool().End(),
		Registers: protocol.ProtoLabels(r.registers), Time: time.Now().Unix()}
	if err := r.srv.editSpec(ctx, r.journal, func(spec *protocol.JournalSpec) bool {
		spec.Suspension = sp
		return true
	}); err != nil {
		return nil, err
	}
	journalsSuspended.Inc()
	r.srv.log.Info("suspended the journal", "journal", r.journal, "offset", sp.Offset)
	return sp, nil
}

// awaitPersisted waits until the journal's index holds no local fragment:
// everything rolled is in a store.
func (r *replica) awaitPersisted(ctx context.Context) error {
	for {
		local, changed := r.index.local()
		if !local {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the journal's fragments to be persisted: %w", ctx.Err())
		}
	}
}

// resume clears the journal's suspension, keeping its record for the next
// primary, and returns it.
func (s *Server) resume(ctx context.Context, journal string) (*protocol.Suspension, error) {
	var sp *protocol.Suspension
	err := s.editSpec(ctx, journal, func(spec *protocol.JournalSpec) bool {
		sp = spec.Suspension
		if !spec.Suspended() {
			return false
		}
		spec.Suspension.Active = false
		return true
	})
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "resuming %s: %v", journal, err)
	}
	if sp.GetActive() {
		journalsResumed.Inc()
		s.log.Info("resumed the journal", "journal", journal, "offset", sp.GetOffset())
	}
	return sp, nil
}

// editSpec changes the journal's spec in etcd with edit, which tells
// whether it changed anything, and waits until this broker sees the
// change. It retries when the spec changed meanwhile.
func (s *Server) editSpec(ctx context.Context, journal string, edit func(*protocol.JournalSpec) bool) error {
	key := allocator.ItemKey(s.cfg.Root, journal)
	for range 10 {
		got, err := s.cfg.Etcd.Get(ctx, key)
		if err != nil {
			return err
		}
		if len(got.Kvs) == 0 {
			return fmt.Errorf("journal %s was deleted", journal)
		}
		spec, err := protocol.UnmarshalSpec(got.Kvs[0].Value)
		if err != nil {
			return err
		}
		if !edit(spec) {
			return nil
		}
		raw, err := protocol.MarshalSpec(spec)
		if err != nil {
			return err
		}
		resp, err := s.cfg.Etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", got.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(key, string(raw))).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			s.awaitRevision(ctx, resp.Header.Revision)
			return nil
		}
	}
	return fmt.Errorf("the spec of %s kept changing", journal)
}

// readSuspended serves a read of a suspended journal from its stores: it
// has no replicas, and its content ends at its suspension's offset. A
// blocking read at that offset waits until the journal resumes, then
// fails Unavailable, for its reader to read on at the new primary.
func (s *Server) readSuspended(req *protocol.ReadRequest, stream protocol.Journal_ReadServer, spec *protocol.JournalSpec, hdr *protocol.Header) error {
	ctx := stream.Context()
	ix := newIndex()
	if err := s.listStores(ctx, req.Journal, spec, ix); err != nil {
		return status.Errorf(codes.Unavailable, "reading suspended journal %s: %v", req.Journal, err)
	}
	head := spec.Suspension.GetOffset()
	offset := req.Offset
	if offset < 0 {
		offset = head
	}
	if err := stream.Send(&protocol.ReadResponse{Status: protocol.Status_OK, Header: hdr, Offset: offset, WriteHead: head}); err != nil {
		return err
	}
	for req.EndOffset == 0 || offset < req.EndOffset {
		e, ok, next, _ := ix.query(offset)
		var err error
		switch {
		case ok && req.MetadataOnly:
			return s.sendMetadata(ctx, stream, e, offset, head)
		case ok:
			if sent, err := s.sendDirect(ctx, stream, req, e, offset, head); sent || err != nil {
				return err
			}
			offset, err = s.sendFragment(ctx, stream, ix, e, offset, limit(e.frag.End, req.EndOffset), head)
			if err != nil {
				return err
			}
		case next >= 0:
			offset = next // Content removed by retention: jump.
			if err := stream.Send(&protocol.ReadResponse{Status: protocol.Status_OK, Offset: offset, WriteHead: head}); err != nil {
				return err
			}
		case !req.Block:
			return stream.Send(&protocol.ReadResponse{Status: protocol.Status_OFFSET_NOT_YET_AVAILABLE, Offset: offset, WriteHead: head})
		default:
			return s.awaitResumed(ctx, req.Journal)
		}
	}
	return nil
}

// awaitResumed waits until journal is no longer suspended, then fails
// Unavailable: the reader reads on where the route now says.
func (s *Server) awaitResumed(ctx context.Context, journal string) error {
	for {
		changed := s.ks.Changed()
		if spec, _, _ := s.resolver.resolve(journal); !spec.Suspended() {
			return status.Errorf(codes.Unavailable, "journal %s resumed: read on at its primary", journal)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
