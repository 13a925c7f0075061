package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// Append appends to a journal: at its primary, through the pipeline; at
// any other broker, by proxying to the primary.
func (s *Server) Append(stream protocol.Journal_AppendServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	resp, err := s.appendFrom(stream, first)
	if err != nil || resp == nil {
		return err // A nil resp: proxied, and answered by the primary.
	}
	return stream.SendAndClose(resp)
}

// appendFrom runs the append that begins with first, the first message of
// stream, and returns its answer; or nil, if it proxied the append to the
// primary, which answered it.
func (s *Server) appendFrom(stream protocol.Journal_AppendServer, first *protocol.AppendRequest) (*protocol.AppendResponse, error) {
	if err := first.Validate(); err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	ctx := stream.Context()
	spec, route, r := s.resolve(ctx, first.Journal, first.Header.GetRevision())
	if err := s.require(ctx, auth.Append, first.Journal, spec); err != nil {
		return nil, err
	}
	hdr := s.header(route)
	switch {
	case spec == nil:
		return &protocol.AppendResponse{Status: protocol.Status_JOURNAL_NOT_FOUND, Header: hdr}, nil
	case spec.Suspended():
		return s.appendResumes(ctx, first.Journal, hdr)
	case len(route.GetMembers()) == 0:
		return &protocol.AppendResponse{Status: protocol.Status_NO_PRIMARY, Header: hdr}, nil
	case r == nil || indexOf(route, s.id) != 0:
		if first.DoNotProxy {
			return &protocol.AppendResponse{Status: protocol.Status_NOT_PRIMARY, Header: hdr}, nil
		}
		return nil, s.proxyAppend(stream, first, route)
	}
	resp, err := r.append(ctx, stream, first)
	if errors.Is(err, errSuspended) {
		return s.appendResumes(ctx, first.Journal, hdr)
	}
	if errors.Is(err, errNotPrimary) {
		// Nothing was appended: send the writer to the new primary.
		_, route, _ := r.view()
		return &protocol.AppendResponse{Status: protocol.Status_NOT_PRIMARY, Header: s.header(route)}, nil
	}
	if err != nil {
		appendErrors.Inc()
		switch {
		case errors.Is(err, errPipeline):
			return nil, status.Error(codes.Unavailable, err.Error())
		case errors.Is(err, syscall.ENOSPC):
			// A full disk is this broker's, and passes: the client
			// retries (idempotently) until space returns or the
			// journal's primary moves, rather than fail at once.
			return nil, status.Errorf(codes.Unavailable, "broker %s: its disk is full: %v", s.id.Suffix, err)
		}
		return nil, err
	}
	resp.Header = hdr
	return resp, nil
}

// errSuspended stops an append at a primary that suspended the journal
// while the append waited: it resumes the journal.
var errSuspended = errors.New("the journal is suspended")

// appendResumes resumes a suspended journal for an append, which its
// client then retries (NO_PRIMARY) once the journal has replicas again.
func (s *Server) appendResumes(ctx context.Context, journal string, hdr *protocol.Header) (*protocol.AppendResponse, error) {
	if _, err := s.resume(ctx, journal); err != nil {
		return nil, err
	}
	return &protocol.AppendResponse{Status: protocol.Status_NO_PRIMARY, Header: hdr}, nil
}

// commits tells whether req, a message of the Append stream that began
// with first, commits the append: it says so, or it is a later message
// with no content.
func commits(first, req *protocol.AppendRequest) bool {
	return req.Commit || (req != first && len(req.Content) == 0)
}

// proxyAppend forwards an append to the route's primary.
func (s *Server) proxyAppend(stream protocol.Journal_AppendServer, first *protocol.AppendRequest, route *protocol.Route) error {
	conn, err := s.conns.Get(route.Endpoints[0])
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	ctx, cancel := context.WithCancel(auth.ForwardCaller(stream.Context()))
	defer cancel()
	out, err := protocol.NewJournalClient(conn).Append(ctx)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	first.Header, first.DoNotProxy = s.header(route), true
	for req := first; ; {
		if err := out.Send(req); err != nil {
			break // The primary's answer says why.
		}
		if commits(first, req) {
			break
		}
		if req, err = stream.Recv(); err != nil {
			return err // Our client went away: cancelling aborts the append.
		}
	}
	resp, err := out.CloseAndRecv()
	if err != nil {
		return err
	}
	return stream.SendAndClose(resp)
}

// append runs an append at the primary. Appends are sequenced by the
// replica's token; an fsync before acknowledging happens after the token is
// released, so that concurrent appends share flushes (group commit).
func (r *replica) append(ctx context.Context, stream protocol.Journal_AppendServer, first *protocol.AppendRequest) (*protocol.AppendResponse, error) {
	if err := r.awaitReady(ctx); err != nil {
		return nil, err
	}
	if spec, _, _ := r.view(); isWhole(first, spec) {
		return r.appendWhole(ctx, first)
	}
	if err := r.acquireAt(ctx, first.Offset); err != nil {
		return nil, err
	}
	spec, _, _ := r.view()
	resp, err := r.appendLocked(ctx, stream, first, spec)
	r.release()
	if err == nil && resp.Status == protocol.Status_OK && spec.GetFragment().GetFsync() {
		err = r.syncer.Sync(r.syncCurrent)
	}
	return resp, err
}

func (r *replica) appendLocked(ctx context.Context, stream protocol.Journal_AppendServer, first *protocol.AppendRequest, spec *protocol.JournalSpec) (*protocol.AppendResponse, error) {
	if spec.GetAccess() == protocol.Access_READ_ONLY {
		return &protocol.AppendResponse{Status: protocol.Status_NOT_ALLOWED}, nil
	}
	if spec.Suspended() {
		return nil, errSuspended
	}
	p, err := r.pipelineWithRetry(ctx)
	if err != nil {
		return nil, err
	}
	// The writer's check comes first: a retry of an append that committed
	// finds the write head moved, which an offset condition would refuse.
	if resp := r.checkWriter(first); resp != nil {
		return resp, nil
	}
	if first.Offset != nil && *first.Offset > r.spool().End() {
		// An offset ahead of the head, still after the wait for the
		// appends before it: the writer may know of content the stores
		// hold past the head (quire journals reset-head, after fragments
		// were restored). List them now rather than at the next refresh.
		if err := r.refresh(); err != nil {
			return nil, status.Errorf(codes.Unavailable, "listing the stores of %s for an append at offset %d, past the write head %d: %v",
				r.journal, *first.Offset, r.spool().End(), err)
		}
		if err := r.rollPastStores(p); err != nil {
			r.dropPipeline()
			return nil, err
		}
	}
	if resp := r.checkAppend(first); resp != nil {
		return resp, nil
	}
	if err := r.rollIfDue(p, spec); err != nil {
		return nil, err
	}
	r.touch()
	resp, err := r.appendContent(stream, p, first, spec)
	if err != nil {
		r.discardPending()
	}
	return resp, err
}

// rollIfDue rolls every replica to a new spool if the current one is due
// to roll (see shouldRoll); the caller holds the token.
func (r *replica) rollIfDue(p *pipeline, spec *protocol.JournalSpec) error {
	if !shouldRoll(spec, r.spool(), time.Now()) {
		return nil
	}
	if err := r.rollPipeline(p, r.spool().End()); err != nil {
		r.dropPipeline()
		return err
	}
	return nil
}

// discardPending rolls back content of an append that failed, and drops
// the pipeline, whose peers may hold it; the caller holds the token.
func (r *replica) discardPending() {
	r.spool().Rollback()
	r.dropPipeline()
}

// syncCurrent flushes the current spool. Spools that rolled were flushed as
// they rolled (see roll), and a closed spool was persisted.
func (r *replica) syncCurrent() error {
	err := r.spool().Sync()
	if errors.Is(err, spool.ErrClosed) {
		return nil
	}
	return err
}

// pipelineWithRetry builds the pipeline, retrying transient failures
// (peers still learning the route) for a few seconds.
func (r *replica) pipelineWithRetry(ctx context.Context) (*pipeline, error) {
	deadline := time.Now().Add(5 * time.Second)
	bo := newBackoff()
	for attempt := 0; ; attempt++ {
		p, err := r.ensurePipeline(ctx)
		if err == nil || !errors.Is(err, errPipeline) || time.Now().After(deadline) {
			if err != nil && ctx.Err() == nil {
				r.srv.log.Warn("building the journal's pipeline failed; the append fails", "journal", r.journal, "attempts", attempt+1, "err", err)
			}
			return p, err
		}
		if err := bo.Wait(ctx); err != nil {
			return nil, err
		}
	}
}

// offsetAheadWait is how long an append whose required offset is ahead of
// the write head waits for the appends before it. A writer may so keep
// several appends at consecutive offsets in flight, on separate streams,
// whatever order the broker receives them in; one still ahead after the
// wait is refused with WRONG_APPEND_OFFSET, as one behind is at once. A
// variable, for tests, as is aheadHook, called as such an append waits.
var (
	offsetAheadWait = time.Second
	aheadHook       = func() {}
)

// acquireAt takes the token; with an offset ahead of the write head, it
// first waits until the head reaches it, or for offsetAheadWait.
func (r *replica) acquireAt(ctx context.Context, offset *int64) error {
	var deadline <-chan time.Time
	for {
		if err := r.acquire(ctx); err != nil {
			return err
		}
		if offset == nil {
			return nil
		}
		r.mu.Lock()
		ahead, headCh := r.cur.End() < *offset, r.headCh
		r.mu.Unlock()
		if !ahead {
			return nil
		}
		if deadline == nil {
			t := time.NewTimer(offsetAheadWait)
			defer t.Stop()
			deadline = t.C
		}
		r.release()
		aheadHook()
		select {
		case <-headCh:
		case <-deadline:
			return r.acquire(ctx) // checkAppend refuses it.
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// checkAppend checks the append's conditions against the write head and
// registers, returning the refusal if they fail.
func (r *replica) checkAppend(first *protocol.AppendRequest) *protocol.AppendResponse {
	if first.Offset != nil && *first.Offset != r.spool().End() {
		return &protocol.AppendResponse{Status: protocol.Status_WRONG_APPEND_OFFSET,
			Commit: &protocol.Fragment{Journal: r.journal, Begin: r.spool().End(), End: r.spool().End()}}
	}
	if first.CheckRegisters != "" {
		sel, err := labels.ParseSelector(first.CheckRegisters)
		if err != nil || !sel.Matches(r.registers) {
			return &protocol.AppendResponse{Status: protocol.Status_REGISTER_MISMATCH,
				Registers: answered(r.registers)}
		}
	}
	return nil
}

// rollPastStores rolls every replica to the end of the content the
// journal's stores hold, if that is past the write head: fragments
// restored to a store from a backup, or persisted in an earlier life of
// the journal by brokers whose spools are gone. Appending at the head
// instead would give offsets the stores hold a second, different content.
// A new pipeline rolls past them as it synchronizes; this is for a
// pipeline already built. The caller holds the token and is primary.
func (r *replica) rollPastStores(p *pipeline) error {
	head, end := r.spool().End(), r.index.end()
	if end <= head {
		return nil
	}
	if err := r.rollPipeline(p, end); err != nil {
		return err
	}
	r.srv.log.Info("rolled the write head forward, past content the stores hold", "journal", r.journal, "from", head, "to", end)
	headsRolledForward.Inc()
	return nil
}

// rollPipeline rolls every replica to an empty spool at offset at.
func (r *replica) rollPipeline(p *pipeline, at int64) error {
	if err := r.roll(at); err != nil {
		return err
	}
	return p.exchange(&protocol.ReplicateRequest{
		Proposal:  &protocol.Fragment{Journal: r.journal, Begin: at, End: at, Sum: emptySum[:]},
		Registers: protocol.ProtoLabels(r.registers),
	})
}

// spoolWriteHook is called before the primary writes an append's content
// to its spool, and an error it returns is the write's; tests set it.
var spoolWriteHook = func(*replica) error { return nil }

// appendContent streams the client's content down the pipeline and commits
// it once every replica has it.
func (r *replica) appendContent(stream protocol.Journal_AppendServer, p *pipeline, first *protocol.AppendRequest, spec *protocol.JournalSpec) (*protocol.AppendResponse, error) {
	s := r.spool()
	begin := s.End()
	var held *protocol.ReplicateRequest // Content written, not yet sent.
	for req := first; ; {
		if len(req.Content) != 0 {
			if err := r.throttle(stream.Context(), spec, len(req.Content)); err != nil {
				r.abort(p)
				return nil, err
			}
			var err error
			if held, err = r.writeContent(p, held, req.Content); err != nil {
				return nil, err
			}
		}
		if commits(first, req) {
			break
		}
		var err error
		if req, err = stream.Recv(); errors.Is(err, io.EOF) {
			err = errors.New("append stream ended without a commit; nothing was appended")
		}
		if err != nil {
			r.abort(p)
			return nil, status.Error(codes.Canceled, err.Error())
		}
		if err := req.ValidateContent(); err != nil {
			r.abort(p)
			return nil, protocol.InvalidArgument(err)
		}
	}
	// Subtract first, so that an append may replace a register's value.
	registers := r.registers.Subtract(protocol.LabelsOf(first.SubtractRegisters)).Union(protocol.LabelsOf(first.UnionRegisters))
	if first.Writer != "" {
		registers = withWriter(registers, first.Writer, lastAppend{first.Sequence, begin, s.Pending()})
	}
	if err := r.commit(p, registers, held); err != nil {
		return nil, err
	}
	appendCommits.Inc()
	appendsCommitted.Inc()
	bytesAppended.Add(float64(s.End() - begin))
	return &protocol.AppendResponse{
		Status:    protocol.Status_OK,
		Commit:    &protocol.Fragment{Journal: r.journal, Begin: begin, End: s.End()},
		Registers: answered(registers),
	}, nil
}

// commit proposes the pending content to every peer and, once every peer
// has acknowledged it, commits it locally. The proposal goes in carrier,
// if not nil: the message of the last content written, not yet sent.
//
// The primary commits last so that its committed content is never more
// than its peers hold: a primary cut off between its commit and its
// peers' would keep a committed tail that they never got, and that the
// journal's next primary writes other content over. (Peers that commit
// an append the primary then fails keep it; the next pipeline rolls every
// replica to the greatest end, so it stays in the journal, whole.)
func (r *replica) commit(p *pipeline, registers labels.Set, carrier *protocol.ReplicateRequest) error {
	s := r.spool()
	resolve := r.proposing()
	var err error
	if len(p.peers) != 0 { // At replication 1, no proposal to build.
		if carrier == nil {
			carrier = new(protocol.ReplicateRequest)
		}
		carrier.Proposal, carrier.Registers, carrier.Acknowledge = fragmentOf(s, true), protocol.ProtoLabels(registers), true
		carrier.OmitRegisters = true // propose reads the answers' status only.
		err = r.propose(p, carrier)
	}
	if err == nil {
		err = s.Commit(registers)
	}
	if err != nil {
		// Some peers may have committed it: until the next pipeline
		// settles that, this replica's head may be short of theirs.
		r.unsettle()
		resolve()
		return err
	}
	r.registers = registers
	resolve() // Before readers waiting for it wake.
	r.committed()
	if len(p.peers) != 0 {
		p.ack = s.End() // Peers may now serve it: see pipeline.ack.
	}
	return nil
}

// propose sends a commit proposal to every peer and requires each to
// accept it.
func (r *replica) propose(p *pipeline, req *protocol.ReplicateRequest) error {
	if err := p.send(req); err != nil {
		return err
	}
	resps, err := p.recv()
	if err != nil {
		return err
	}
	for i, resp := range resps {
		if resp.Status != protocol.Status_OK {
			return fmt.Errorf("%w: %s answered %s to a commit", errPipeline, p.route.Endpoints[i+1], resp.Status)
		}
	}
	return nil
}

// abort rolls pending content back on every replica.
func (r *replica) abort(p *pipeline) {
	s := r.spool()
	s.Rollback()
	if err := p.exchange(&protocol.ReplicateRequest{Proposal: fragmentOf(s, false),
		Registers: protocol.ProtoLabels(r.registers)}); err != nil {
		r.dropPipeline()
	}
}
