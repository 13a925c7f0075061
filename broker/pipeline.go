package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/protocol"
)

// pipeline is the primary's set of Replicate streams to a journal's other
// replicas, on one route. Messages flow to every peer in lock step: content
// without answers, then a proposal that each peer acknowledges.
type pipeline struct {
	route  *protocol.Route
	ctx    context.Context
	cancel context.CancelFunc
	peers  []protocol.Journal_ReplicateClient
}

// errPipeline marks failures of the pipeline (a peer or the network), after
// which it is torn down; the client may retry.
var errPipeline = errors.New("replication pipeline failed")

// errNotPrimary stops an append, or a roll, at a broker that is no
// longer the journal's primary: the writer retries at the new one.
var errNotPrimary = errors.New("this broker is no longer the journal's primary")

// openPipeline opens streams to every other member of route, living until
// routeCtx ends or the pipeline is closed.
func (r *replica) openPipeline(routeCtx context.Context, route *protocol.Route) (*pipeline, error) {
	ctx, cancel := context.WithCancel(routeCtx)
	p := &pipeline{route: route, ctx: ctx, cancel: cancel}
	for i := 1; i < len(route.Members); i++ {
		conn, err := r.srv.conns.Get(route.Endpoints[i])
		if err != nil {
			p.close()
			return nil, err
		}
		stream, err := protocol.NewJournalClient(conn).Replicate(ctx)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("%w: opening stream to %s: %w", errPipeline, route.Endpoints[i], err)
		}
		p.peers = append(p.peers, stream)
	}
	return p, nil
}

func (p *pipeline) close() {
	for _, s := range p.peers {
		s.CloseSend()
	}
	p.cancel()
}

// send sends req to every peer.
func (p *pipeline) send(req *protocol.ReplicateRequest) error {
	for i, s := range p.peers {
		if err := s.Send(req); err != nil {
			return fmt.Errorf("%w: sending to %s: %w", errPipeline, p.route.Endpoints[i+1], err)
		}
	}
	return nil
}

// recv receives one response from every peer.
func (p *pipeline) recv() ([]*protocol.ReplicateResponse, error) {
	out := make([]*protocol.ReplicateResponse, len(p.peers))
	for i, s := range p.peers {
		resp, err := s.Recv()
		if err != nil {
			return nil, fmt.Errorf("%w: receiving from %s: %w", errPipeline, p.route.Endpoints[i+1], err)
		}
		out[i] = resp
	}
	return out, nil
}

// exchange sends a proposal to every peer and requires each to accept it.
func (p *pipeline) exchange(req *protocol.ReplicateRequest) error {
	req.Acknowledge = true
	if err := p.send(req); err != nil {
		return err
	}
	resps, err := p.recv()
	if err != nil {
		return err
	}
	for i, resp := range resps {
		if resp.Status != protocol.Status_OK {
			return fmt.Errorf("%w: %s answered %s", errPipeline, p.route.Endpoints[i+1], resp.Status)
		}
	}
	return nil
}

// ensurePipeline returns a synchronized pipeline on the replica's current
// route, building one if needed. The caller holds the token and is primary.
func (r *replica) ensurePipeline(ctx context.Context) (*pipeline, error) {
	_, route, routeCtx := r.view()
	if indexOf(route, r.srv.id) != 0 {
		// The route moved on while the caller waited for the replica
		// (an append queued behind others, as a drain hands the journal
		// over). Building a pipeline on it anyway would hold this
		// replica, which the new primary's pipeline needs, while waiting
		// for a peer that the new primary's pipeline holds: neither
		// would get through until one gave up.
		r.dropPipeline()
		return nil, errNotPrimary
	}
	if r.pipe != nil && sameRoute(r.pipe.route, route) && r.pipe.ctx.Err() == nil {
		return r.pipe, nil
	}
	r.dropPipeline()
	p, err := r.openPipeline(routeCtx, route)
	if err != nil {
		return nil, err
	}
	if err := r.synchronize(ctx, p); err != nil {
		p.close()
		return nil, err
	}
	r.pipe = p
	// Tell maintain to record the route in the assignments.
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return p, nil
}

func (r *replica) dropPipeline() {
	if r.pipe != nil {
		r.pipe.close()
		r.pipe = nil
	}
}

// synchronize brings every peer's spool to the primary's. Peers answer the
// primary's proposal with their own spool if it differs; then everyone
// rolls to an empty spool at the greatest end offset known to anyone, so
// that no offset is written twice.
func (r *replica) synchronize(ctx context.Context, p *pipeline) error {
	s := r.spool()
	hdr := r.srv.header(p.route)
	if err := p.send(&protocol.ReplicateRequest{Header: hdr, Journal: r.journal,
		Proposal: fragmentOf(s, false), Registers: protocol.ProtoLabels(r.registers), Acknowledge: true}); err != nil {
		return err
	}
	resps, err := p.recv()
	if err != nil {
		return err
	}
	at, holder := max(s.End(), r.index.end()), -1
	for i, resp := range resps {
		switch resp.Status {
		case protocol.Status_OK:
		case protocol.Status_PROPOSAL_MISMATCH:
			if end := resp.Fragment.GetEnd(); end > at {
				at, holder = end, i
			}
		case protocol.Status_WRONG_ROUTE:
			// The peer may know a newer route; catch up before retrying.
			r.srv.awaitRevision(ctx, resp.Header.GetRevision())
			return fmt.Errorf("%w: %s is on another route (revision %d)", errPipeline, p.route.Endpoints[i+1], resp.Header.GetRevision())
		default:
			return fmt.Errorf("%w: %s answered %s", errPipeline, p.route.Endpoints[i+1], resp.Status)
		}
	}
	adopted := r.adoptRegisters(resps)
	if holder >= 0 {
		adopted = r.adoptHolderRegisters(resps[holder]) || adopted
		r.catchUp(ctx, p.route.Endpoints[holder+1], s, at)
	}
	if at == s.End() && !mismatched(resps) {
		if !adopted {
			return nil
		}
		// The peers took the registers it proposed: give them those it
		// adopted.
		return p.exchange(&protocol.ReplicateRequest{Proposal: fragmentOf(s, false),
			Registers: protocol.ProtoLabels(r.registers)})
	}
	r.expectBefore(at)
	if err := r.roll(at); err != nil {
		return err
	}
	return p.exchange(&protocol.ReplicateRequest{
		Proposal:  &protocol.Fragment{Journal: r.journal, Begin: at, End: at, Sum: emptySum[:]},
		Registers: protocol.ProtoLabels(r.registers),
	})
}

// adoptRegisters makes a primary that does not know the journal's
// registers (it is new to the journal, and became primary before any
// proposal reached it: its predecessor vanished) take those of a peer
// that knows them, from the peers' answers to its proposal. Its own,
// empty, would wipe theirs: a recovery log's author register, say, whose
// recorder would then find itself fenced. It tells whether the registers
// changed. The caller holds the token.
func (r *replica) adoptRegisters(resps []*protocol.ReplicateResponse) bool {
	if r.registersKnown {
		return false
	}
	r.registersKnown = true
	for _, resp := range resps {
		if !resp.RegistersKnown {
			continue
		}
		regs := protocol.LabelsOf(resp.Registers)
		if regs.String() == r.registers.String() {
			return false
		}
		r.srv.log.Info("adopted the journal's registers from a peer", "journal", r.journal, "registers", regs.String())
		r.registers = regs
		return true
	}
	return false // No peer knows them either: its own stand (recovered from its disk, or none for a new journal).
}

// adoptHolderRegisters makes the primary take the registers of holder,
// the peer whose answer holds content past the primary's end: an append
// that committed there but failed at the primary. The journal rolls past
// that content on every replica, so the registers its commit set are the
// journal's, and the writer's last append among them is what answers a
// retry of it; the primary's own, from before it, would let the retry
// commit again. It tells whether the registers changed. The caller holds
// the token.
func (r *replica) adoptHolderRegisters(holder *protocol.ReplicateResponse) bool {
	if !holder.RegistersKnown {
		return false
	}
	regs := protocol.LabelsOf(holder.Registers)
	if regs.String() == r.registers.String() {
		return false
	}
	r.srv.log.Info("adopted the registers of the peer holding the journal's latest commit", "journal", r.journal, "registers", regs.String())
	r.registers = regs
	return true
}

// maxCatchUp bounds the content a primary copies from a peer as it
// synchronizes (see catchUp).
const maxCatchUp = 4 << 20

// catchUp copies into the primary's spool the content [s.End(), at) that
// the peer at endpoint committed and the primary lacks: an append that
// committed on some replicas only, as the route changed. The journal
// rolls past it on every replica, and the others rely on a replica that
// holds it to persist it: with this copy, the primary holds it too, and
// persists it as it rolls, so losing that peer loses nothing. Past
// maxCatchUp (a new primary far behind), or if the peer fails to serve
// it, the primary goes without and waits for it in the store (expect).
// The caller holds the token.
func (r *replica) catchUp(ctx context.Context, endpoint string, s *spool.Spool, at int64) {
	if at-s.End() > maxCatchUp || at <= s.End() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	content, err := r.srv.readFrom(ctx, endpoint, r.journal, s.End(), at)
	if err == nil {
		_, err = s.Write(content)
	}
	if err == nil {
		err = s.Commit(r.registers.String())
	}
	if err != nil {
		s.Rollback()
		r.srv.log.Warn("copying content only a peer holds failed; the journal waits for it in the store",
			"journal", r.journal, "peer", endpoint, "begin", s.End(), "end", at, "err", err)
		return
	}
	r.committed()
	caughtUp.Add(float64(len(content)))
}

func mismatched(resps []*protocol.ReplicateResponse) bool {
	for _, r := range resps {
		if r.Status != protocol.Status_OK {
			return true
		}
	}
	return false
}
