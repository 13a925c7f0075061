package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/protocol"
)

// readChunk bounds the content of one ReadResponse.
const readChunk = 128 << 10

// sentHook is called after each chunk of an indexed fragment is sent; a
// variable for tests.
var sentHook = func(entry) {}

// Read serves a read from a local replica, or proxies it to the primary.
//
// A read that fails here (its fragment store failing, say) fails with
// Unavailable, which clients retry: reading is idempotent, and a reader
// (a consumer's shard, say) must not give up on a journal because a
// store was briefly unreachable.
func (s *Server) Read(req *protocol.ReadRequest, stream protocol.Journal_ReadServer) error {
	err := s.serveRead(req, stream)
	if err == nil || stream.Context().Err() != nil {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return err // Already a gRPC status: the request's, or a proxied one.
	}
	readErrors.Inc()
	s.log.Warn("read failed; the reader will retry", "journal", req.Journal, "offset", req.Offset, "err", err)
	return status.Error(codes.Unavailable, fmt.Sprintf("broker: reading %s: %v", req.Journal, err))
}

func (s *Server) serveRead(req *protocol.ReadRequest, stream protocol.Journal_ReadServer) error {
	if err := req.Validate(); err != nil {
		return protocol.InvalidArgument(err)
	}
	ctx := stream.Context()
	spec, route, r := s.resolve(ctx, req.Journal, req.Header.GetRevision())
	if err := s.require(ctx, auth.Read, req.Journal, spec); err != nil {
		return err
	}
	hdr := s.header(route)
	switch {
	case spec == nil:
		return stream.Send(&protocol.ReadResponse{Status: protocol.Status_JOURNAL_NOT_FOUND, Header: hdr})
	case spec.GetAccess() == protocol.Access_WRITE_ONLY:
		return stream.Send(&protocol.ReadResponse{Status: protocol.Status_NOT_ALLOWED, Header: hdr})
	case r == nil && req.DoNotProxy:
		return stream.Send(&protocol.ReadResponse{Status: protocol.Status_NOT_REPLICA, Header: hdr})
	case r == nil && len(route.GetMembers()) == 0 && spec.Suspended():
		return s.readSuspended(req, stream, spec, hdr)
	case r == nil && len(route.GetMembers()) == 0:
		return stream.Send(&protocol.ReadResponse{Status: protocol.Status_NO_PRIMARY, Header: hdr})
	case r == nil:
		return s.proxyRead(req, stream, route)
	}
	var miss errMiss
	if err := r.read(ctx, req, stream, hdr); !errors.As(err, &miss) {
		return err
	}
	// This replica lacks content the primary may have: read on there.
	req.Offset = miss.offset
	return s.proxyRead(req, stream, route)
}

// errMiss stops a read at an offset this replica lacks, for the primary to
// serve.
type errMiss struct{ offset int64 }

func (e errMiss) Error() string { return fmt.Sprintf("offset %d is not held here", e.offset) }

func (s *Server) proxyRead(req *protocol.ReadRequest, stream protocol.Journal_ReadServer, route *protocol.Route) error {
	conn, err := s.conns.Get(route.Endpoints[0])
	if err != nil {
		return err
	}
	req.Header, req.DoNotProxy = s.header(route), true
	in, err := protocol.NewJournalClient(conn).Read(auth.ForwardCaller(stream.Context()), req)
	if err != nil {
		return err
	}
	for {
		resp, err := in.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// read streams the journal from req.Offset: from the current spool up to
// the write head, or from an indexed fragment. At the write head, a
// blocking read waits for commits.
func (r *replica) read(ctx context.Context, req *protocol.ReadRequest, stream protocol.Journal_ReadServer, hdr *protocol.Header) error {
	if err := r.awaitReady(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	offset, head, proposed := req.Offset, r.readable(req, r.head), r.proposals
	r.mu.Unlock()
	if offset < 0 {
		offset = head
	}
	meta := &protocol.ReadResponse{Status: protocol.Status_OK, Header: hdr, Offset: offset, WriteHead: head}
	if err := stream.Send(meta); err != nil {
		return err
	}
	for req.EndOffset == 0 || offset < req.EndOffset {
		next, err := r.readOnce(ctx, req, stream, offset, proposed)
		if err != nil || next < 0 {
			return err
		}
		offset = next
	}
	return nil
}

// readOnce serves content at offset, returning the offset to continue
// from, or -1 when the read is over.
//
// proposed is the count of commits the replica had proposed, as primary,
// when the read began (see commitsUnresolved).
func (r *replica) readOnce(ctx context.Context, req *protocol.ReadRequest, stream protocol.Journal_ReadServer, offset int64, proposed uint64) (int64, error) {
	r.mu.Lock()
	cur, committed, headSum, headCh := r.cur, r.head, r.headSum, r.headCh
	head := r.readable(req, committed)
	r.mu.Unlock()
	if offset >= cur.Begin {
		if offset >= head && (!r.current() || head < committed && !req.Block) {
			// Its head may not be the journal's, or what it holds there is
			// not acknowledged yet: the primary serves on. (A blocking
			// read waits here for the acknowledgement.)
			return r.miss(ctx, req, stream, offset, -1, cur.Begin, head, nil)
		}
		if offset < head {
			if req.MetadataOnly && head < committed {
				// headSum is of committed, not of head.
				return r.miss(ctx, req, stream, offset, -1, cur.Begin, head, nil)
			}
			if req.MetadataOnly {
				// Of head, not of cur: its end and sum change under appends,
				// and this read does not hold the token.
				return -1, stream.Send(&protocol.ReadResponse{Status: protocol.Status_OK, Offset: offset, WriteHead: head,
					Fragment: &protocol.Fragment{Journal: cur.Journal, Begin: cur.Begin, End: head, Sum: headSum[:]}})
			}
			return r.sendSpool(stream, cur, offset, limit(head, req.EndOffset), head)
		}
		if !req.Block && !req.OwnHead && (r.unsettledAtHead() || r.commitsUnresolved(proposed)) {
			// A primary that is new to its route, or whose last commit
			// failed, or whose commit proposed before this read began is
			// still out, may lack commits its peers made, and served:
			// saying the journal ends at its head could show a reader
			// less than an earlier read did.
			return r.awaitExpected(ctx, offset, headCh)
		}
		if !req.Block && r.expected(offset) {
			// A primary that found a peer holding content past its head,
			// and has yet to copy it or roll past it: the content is
			// coming. Saying there is none would have a broker that
			// returns with that content on its disk judge it divergent
			// (see divergence), and quarantine it.
			return r.awaitExpected(ctx, offset, headCh)
		}
		if !req.Block {
			return -1, stream.Send(&protocol.ReadResponse{Status: protocol.Status_OFFSET_NOT_YET_AVAILABLE,
				Offset: offset, WriteHead: head})
		}
		select {
		case <-headCh:
			return offset, nil
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-r.ctx.Done():
			return -1, errReplicaGone
		}
	}
	e, ok, next, changed := r.index.query(offset)
	if !ok {
		return r.miss(ctx, req, stream, offset, next, cur.Begin, head, changed)
	}
	if req.MetadataOnly {
		return -1, r.sendMetadata(ctx, stream, e, offset, head)
	}
	if sent, err := r.srv.sendDirect(ctx, stream, req, e, offset, head); sent || err != nil {
		return -1, err
	}
	return r.sendFragment(ctx, stream, e, offset, limit(e.frag.End, req.EndOffset), head)
}

// miss handles an offset before the current spool that the index lacks.
// Another replica may hold it: the primary, which serves the read instead.
// The primary lists the stores again; content a peer is persisting is
// waited for; anything else is gone (removed by retention), and the read
// jumps to the next content there is.
//
// Only the primary judges content gone: a replica that is not, asked not
// to proxy (a client reading from a route it cached, or a broker passing
// a read to the primary it knew), redirects the reader to the primary,
// which may have moved here since. Answering itself, it would have the
// reader skip content that a peer holds: an append that committed on
// some replicas only, as the primary changed, which the new primary
// rolled the journal past.
func (r *replica) miss(ctx context.Context, req *protocol.ReadRequest, stream protocol.Journal_ReadServer,
	offset, next, begin, head int64, changed <-chan struct{}) (int64, error) {
	switch {
	case !r.isPrimary() && !req.DoNotProxy:
		return -1, errMiss{offset}
	case !r.isPrimary():
		_, route, _ := r.view()
		readsRedirected.Inc()
		return -1, stream.Send(&protocol.ReadResponse{Status: protocol.Status_NOT_PRIMARY, Header: r.srv.header(route)})
	}
	r.refreshSoon()
	if _, ok, _, _ := r.index.query(offset); ok {
		return offset, nil
	}
	if r.expected(offset) {
		return r.awaitExpected(ctx, offset, changed)
	}
	if next < 0 || next > begin {
		next = begin
	}
	return next, stream.Send(&protocol.ReadResponse{Status: protocol.Status_OK, Offset: next, WriteHead: head})
}

// awaitExpected waits until changed is closed, for headWait at most, for
// content at offset that the replica expects, then reads at offset again.
func (r *replica) awaitExpected(ctx context.Context, offset int64, changed <-chan struct{}) (int64, error) {
	awaitHeadHook(r)
	t := time.NewTimer(headWait)
	defer t.Stop()
	select {
	case <-changed:
	case <-t.C:
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	return offset, nil
}

// headWait bounds a wait of awaitExpected: each read there looks again at
// least this often. A variable for tests.
var headWait = time.Second

// awaitHeadHook is called as a read begins to wait in awaitExpected; a
// variable for tests.
var awaitHeadHook = func(*replica) {}

func limit(end, endOffset int64) int64 {
	if endOffset > 0 {
		return min(end, endOffset)
	}
	return end
}

// sendSpool sends committed content [offset, end) of cur, the spool that
// was current when head was read (not the current one now: a roll since
// would leave offset before its begin). Each response carries the write
// head, so that a reader knows how far behind it is.
func (r *replica) sendSpool(stream protocol.Journal_ReadServer, cur *spool.Spool, offset, end, head int64) (int64, error) {
	buf := make([]byte, min(readChunk, end-offset))
	for offset < end {
		n, err := cur.ReadAt(buf[:min(int64(len(buf)), end-offset)], offset)
		if n > 0 {
			if err := stream.Send(&protocol.ReadResponse{Offset: offset, Content: buf[:n], WriteHead: head}); err != nil {
				return -1, err
			}
			bytesRead.Add(float64(n))
			offset += int64(n)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return r.spoolGone(offset, err)
		}
		if n == 0 {
			break // The spool rolled away under us; continue from the index.
		}
	}
	return offset, nil
}

// spoolGone handles an error reading a local spool. A spool is closed
// while it is read when it was persisted and removed (the index then
// holds its stored fragment, which the read continues from) or when the
// replica ends.
func (r *replica) spoolGone(offset int64, err error) (int64, error) {
	if errors.Is(err, spool.ErrClosed) && r.ctx.Err() == nil {
		return offset, nil
	}
	return -1, err
}

// sendFragment sends an indexed fragment's content [offset, end), with
// the write head.
func (r *replica) sendFragment(ctx context.Context, stream protocol.Journal_ReadServer, e entry, offset, end, head int64) (int64, error) {
	next, err := r.srv.sendFragment(ctx, stream, r.index, e, offset, end, head)
	if err != nil && e.spool != nil {
		return r.spoolGone(next, err)
	}
	return next, err
}

// sendFragment sends the content [offset, end) of e, an entry of ix, with
// the write head. On an error reading e, it returns the offset reached.
func (s *Server) sendFragment(ctx context.Context, stream protocol.Journal_ReadServer, ix *index, e entry, offset, end, head int64) (int64, error) {
	store, _ := s.storeFor(ctx, e.frag.Store)
	rc, err := e.open(ctx, store, offset)
	if errors.Is(err, fs.ErrNotExist) && !e.local() {
		s.log.Warn("indexed fragment is gone from its store; dropping it from the index",
			"journal", e.frag.Journal, "begin", e.frag.Begin, "end", e.frag.End, "store", e.frag.Store)
		ix.drop(e.frag)
		return offset, nil // Read on: the index now has a gap here.
	} else if err != nil {
		return -1, err
	}
	defer rc.Close()
	if err := stream.Send(&protocol.ReadResponse{Status: protocol.Status_OK, Offset: offset,
		WriteHead: head, Fragment: protoFragment(e.frag)}); err != nil {
		return -1, err
	}
	buf := make([]byte, readChunk)
	for offset < end {
		n, err := io.ReadFull(rc, buf[:min(int64(len(buf)), end-offset)])
		if n > 0 {
			if err := stream.Send(&protocol.ReadResponse{Offset: offset, Content: buf[:n], WriteHead: head}); err != nil {
				return -1, err
			}
			bytesRead.Add(float64(n))
			offset += int64(n)
			sentHook(e)
		}
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			return offset, err
		}
	}
	return offset, nil
}

func (r *replica) sendMetadata(ctx context.Context, stream protocol.Journal_ReadServer, e entry, offset, head int64) error {
	return r.srv.sendMetadata(ctx, stream, e, offset, head)
}

func (s *Server) sendMetadata(ctx context.Context, stream protocol.Journal_ReadServer, e entry, offset, head int64) error {
	resp := &protocol.ReadResponse{Status: protocol.Status_OK, Offset: offset, WriteHead: head, Fragment: protoFragment(e.frag)}
	if !e.local() {
		if store, err := s.storeFor(ctx, e.frag.Store); err == nil {
			resp.FragmentUrl, _ = store.SignURL(ctx, e.frag, time.Hour)
		}
	}
	return stream.Send(resp)
}
