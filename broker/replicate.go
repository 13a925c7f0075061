package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// Replicate serves the replica's side of a pipeline: it accepts the
// pipeline only if built on this broker's route for the journal, then
// applies content and proposals from the primary until the stream ends,
// the route changes, or a proposal does not match.
func (s *Server) Replicate(stream protocol.Journal_ReplicateServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := first.Validate(); err != nil {
		return protocol.InvalidArgument(err)
	}
	ctx := stream.Context()
	if err := s.requireReplicate(ctx, first.Journal); err != nil {
		return err
	}
	r, hdr, status := s.localReplica(ctx, first.Journal, first.Header)
	if status != protocol.Status_OK {
		return stream.Send(&protocol.ReplicateResponse{Status: status, Header: hdr})
	}
	_, route, routeCtx := r.view()
	if !sameRoute(route, first.Header.GetRoute()) { // It changed since localReplica looked.
		return stream.Send(&protocol.ReplicateResponse{Status: protocol.Status_WRONG_ROUTE, Header: s.header(route)})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(routeCtx, cancel)()
	if err := r.awaitReady(ctx); err != nil {
		return err
	}
	if err := r.acquire(ctx); err != nil {
		return err
	}
	defer r.release()
	defer func() { r.spool().Rollback() }() // The spool in place at the end: it may roll.
	return r.replicate(ctx, stream, first, route)
}

// localReplica resolves the journal's replica here for a pipeline built on
// hdr's route, or the status refusing it.
func (s *Server) localReplica(ctx context.Context, journal string, hdr *protocol.Header) (*replica, *protocol.Header, protocol.Status) {
	s.awaitRevision(ctx, hdr.GetRevision())
	r, route := s.resolver.replica(journal)
	mine := s.header(route)
	switch {
	case r == nil:
		return nil, mine, protocol.Status_NOT_REPLICA
	case !sameRoute(route, hdr.GetRoute()) || indexOf(route, s.id) < 1:
		return nil, mine, protocol.Status_WRONG_ROUTE
	}
	return r, mine, protocol.Status_OK
}

func (r *replica) replicate(ctx context.Context, stream protocol.Journal_ReplicateServer, req *protocol.ReplicateRequest, route *protocol.Route) error {
	for {
		if err := r.applyReplicate(ctx, stream, req, route); err != nil {
			return err
		}
		var err error
		if req, err = stream.Recv(); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func (r *replica) applyReplicate(ctx context.Context, stream protocol.Journal_ReplicateServer, req *protocol.ReplicateRequest, route *protocol.Route) error {
	s := r.spool()
	if req.Acknowledged != 0 {
		r.acknowledge(req.Acknowledged)
	}
	if len(req.Content) != 0 {
		if want := s.Pending() - s.End(); req.ContentDelta != want {
			return fmt.Errorf("replicating %s: content delta %d, but %d bytes are pending", r.journal, req.ContentDelta, want)
		}
		if _, err := s.Write(req.Content); err != nil {
			return err
		}
	}
	if req.Proposal == nil {
		return nil
	}
	if err := proposalHook(r, req); err != nil {
		return err
	}
	registers, known := r.registers, r.registersKnown // Before the proposal sets them.
	status, err := r.applyProposal(req)
	if err != nil {
		return err
	}
	if status == protocol.Status_OK {
		r.markSynced(route)
	}
	if !req.Acknowledge && status == protocol.Status_OK {
		return nil
	}
	resp := answerProposal(req, status, registers, known)
	if status != protocol.Status_OK {
		_, route, _ := r.view()
		resp.Header, resp.Fragment = r.srv.header(route), fragmentOf(r.spool(), false)
	}
	// A mismatch is not the end: the primary may roll every replica to a
	// common offset next.
	return stream.Send(resp)
}

// proposalHook is called before a replica applies a proposal, and an
// error fails the replica's stream; a variable for tests.
var proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil }

// applyProposal applies a proposal from the primary: commit the pending
// content it describes, roll back to the committed content it describes,
// or roll to the empty spool it describes.
func (r *replica) applyProposal(req *protocol.ReplicateRequest) (protocol.Status, error) {
	s := r.spool()
	p := req.Proposal
	registers := protocol.LabelsOf(req.Registers)
	pending, committed := fragmentOf(s, true), fragmentOf(s, false)
	switch {
	case sameFragment(p, pending) && p.End > s.End():
		if err := s.Commit(registers); err != nil {
			return 0, err
		}
		if err := r.maybeSync(); err != nil {
			return 0, err
		}
		r.registers, r.registersKnown = registers, true
		r.committed()
	case sameFragment(p, committed):
		if err := s.Rollback(); err != nil {
			return 0, err
		}
		r.registers, r.registersKnown = registers, true
		// The primary holds this content committed: it is the journal's.
		r.acknowledge(p.End)
	case p.Begin == p.End && p.Begin >= s.End():
		r.registers, r.registersKnown = registers, true
		r.expectBefore(p.Begin)
		if err := r.roll(p.Begin); err != nil {
			return 0, err
		}
	default:
		if err := s.Rollback(); err != nil {
			return 0, err
		}
		return protocol.Status_PROPOSAL_MISMATCH, nil
	}
	return protocol.Status_OK, nil
}

func sameFragment(a, b *protocol.Fragment) bool {
	return a.Begin == b.Begin && a.End == b.End && bytes.Equal(a.Sum, b.Sum)
}

// maybeSync syncs the spool before acknowledging, if the journal asks for
// it, sharing the flush with concurrent committers.
func (r *replica) maybeSync() error {
	spec, _, _ := r.view()
	if !spec.GetFragment().GetFsync() {
		return nil
	}
	s := r.spool()
	return r.syncer.Sync(s.Sync)
}

// requireReplicate checks that a pipeline comes from a holder of
// REPLICATE: a broker, with its own token.
func (s *Server) requireReplicate(ctx context.Context, journal string) error {
	spec, _, _ := s.resolve(ctx, journal, 0)
	return s.require(ctx, auth.Replicate, journal, spec)
}

// answerProposal is a replica's answer to proposal req, with status,
// given the registers it held before the proposal and whether it knew
// them. An OK answer to a proposal that commits appends carries no
// registers, which its primary does not read: at R=3, peers' registers
// were a tenth of the bytes allocated per small append.
func answerProposal(req *protocol.ReplicateRequest, status protocol.Status, registers labels.Set, known bool) *protocol.ReplicateResponse {
	resp := &protocol.ReplicateResponse{Status: status, RegistersKnown: known}
	if !req.OmitRegisters || status != protocol.Status_OK {
		resp.Registers = protocol.ProtoLabels(registers)
	}
	return resp
}
