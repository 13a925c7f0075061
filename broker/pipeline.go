package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quire-dev/quire/labels"
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

	// ack is the end of the last commit, if the peers are yet to be told
	// that the primary acknowledged it (and they may serve it to
	// readers); zero once they are. The next message to the peers carries
	// it: under steady appends, the next commit's first message, rather
	// than a message of its own per commit. The token's holder sends it
	// alone as it releases the token with no append queued to commit next
	// (replica.release), and when it takes the token for anything but
	// such a batch (replica.acquire), so that peers learn of a commit as
	// soon as no commit follows it at once.
	ack int64
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

// send sends req to every peer, with the acknowledgement not yet sent.
// A failed send breaks the pipeline, which the next append finds; its
// synchronization acknowledges again.
func (p *pipeline) send(req *protocol.ReplicateRequest) error {
	req.Acknowledged = max(req.Acknowledged, p.ack)
	for i, s := range p.peers {
		if err := s.Send(req); err != nil {
			return fmt.Errorf("%w: sending to %s: %w", errPipeline, p.route.Endpoints[i+1], err)
		}
	}
	p.ack = 0
	return nil
}

// sendAck sends the acknowledgement not yet sent, if any, in a message of
// its own.
func (p *pipeline) sendAck() {
	if p.ack != 0 {
		_ = p.send(&protocol.ReplicateRequest{})
	}
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
	r.settle(route)
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
	// A failed pipeline may leave commits on peers past the head (see
	// settle): have maintain build the next one, even if no one appends.
	select {
	case r.kick <- struct{}{}:
	default:
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
	// Invariant: no offset is written twice. Content up to r.expect
	// exists elsewhere (a peer held it when an earlier synchronization
	// found it), even if this replica then failed to copy it or to roll
	// past it, and that peer has since gone.
	at, holders := max(s.End(), r.index.end(), r.expectedEnd()), []int(nil)
	for i, resp := range resps {
		switch resp.Status {
		case protocol.Status_OK:
		case protocol.Status_PROPOSAL_MISMATCH:
			switch end := resp.Fragment.GetEnd(); {
			case end > at:
				at, holders = end, []int{i}
			case end == at && end > s.End():
				holders = append(holders, i)
			}
		case protocol.Status_WRONG_ROUTE:
			// The peer may know a newer route; catch up before retrying.
			r.srv.awaitRevision(ctx, resp.Header.GetRevision())
			return fmt.Errorf("%w: %s is on another route (revision %d)", errPipeline, p.route.Endpoints[i+1], resp.Header.GetRevision())
		default:
			return fmt.Errorf("%w: %s answered %s", errPipeline, p.route.Endpoints[i+1], resp.Status)
		}
	}
	r.expectBefore(at) // Remembered before anything can fail.
	var copied *protocol.ReplicateResponse
	if len(holders) == 0 {
		r.copyFailing = time.Time{} // Nothing to copy: failures to come count afresh.
	} else {
		var err error
		if copied, err = r.catchUp(ctx, p, resps, holders, at); err != nil {
			return err // Registers untouched: the next pipeline may lack the holder.
		}
		s = r.spool()
	}
	// Registers only with the content they describe: a retry answered
	// from a holder's must find its commit here, not on a peer that may
	// lose its spool before persisting it.
	adopted := r.adoptRegisters(resps)
	if copied != nil {
		adopted = r.adoptHolderRegisters(copied) || adopted
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

// catchUpPatience bounds how long a primary keeps failing to build its
// pipeline because it cannot copy content that only peers hold (see
// catchUp), before it rolls past that content without it. A variable for
// tests.
var catchUpPatience = 20 * time.Second

// catchUp copies into the primary's spool the content up to at that the
// holders (peers whose spools end there) committed and the primary lacks:
// an append that committed on some replicas only, as the route changed.
// The journal rolls past it on every replica, and the others would rely
// on a holder to persist it: a holder lost first (a machine gone with its
// disk) would leave a gap there, which a reader jumps and a recovery log
// cannot play past. With this copy, the primary holds it too, and
// persists it as it rolls. It returns the answer of the holder it copied
// from, or nil.
//
// If no holder serves it, the pipeline fails, to be built again; past
// catchUpPatience of such failures, the primary rolls past the content
// without it, relying on the holders (reads of it wait for it to reach
// the store, see expect), and without the registers of its commit (see
// synchronize): a retry of that append commits again. The caller holds
// the token.
func (r *replica) catchUp(ctx context.Context, p *pipeline, resps []*protocol.ReplicateResponse, holders []int, at int64) (*protocol.ReplicateResponse, error) {
	var errs []error
	for _, i := range holders {
		registers := r.registers
		if resps[i].RegistersKnown {
			registers = protocol.LabelsOf(resps[i].Registers)
		}
		err := r.copyFrom(ctx, p.route.Endpoints[i+1], resps[i].Fragment.GetBegin(), at, registers)
		if err == nil {
			r.copyFailing = time.Time{}
			return resps[i], nil
		}
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	if r.copyFailing.IsZero() {
		r.copyFailing = time.Now()
	}
	if failing := time.Since(r.copyFailing); failing < catchUpPatience {
		r.srv.log.Warn("copying content only peers hold failed; will retry", "journal", r.journal, "end", at, "err", err)
		return nil, fmt.Errorf("%w: copying content through offset %d that only peers hold: %w", errPipeline, at, err)
	}
	r.copyFailing = time.Time{}
	catchUpsAbandoned.Inc()
	r.srv.log.Error("rolling past content only peers hold, which could not be copied; it is lost if they lose it before they persist it, and a retry of its append commits again",
		"journal", r.journal, "end", at, "tried", catchUpPatience, "err", err)
	return nil, nil
}

// copyFrom copies the content of journal up to at from the peer at
// endpoint, whose spool begins at begin, into the primary's spool. What
// the primary lacks before the peer's spool (the peer itself rolled past
// it, lacking it) is expected from elsewhere: the primary rolls there
// first. The copy commits with registers, the peer's as of its end. The
// caller holds the token.
func (r *replica) copyFrom(ctx context.Context, endpoint string, begin, at int64, registers labels.Set) error {
	s := r.spool()
	from := max(s.End(), r.index.end(), begin)
	if from >= at {
		return nil
	}
	if from > s.End() {
		if err := r.roll(from); err != nil {
			return err
		}
		s = r.spool()
	}
	if err := copyHook(r, endpoint); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	head, err := r.srv.readPeer(ctx, endpoint, nil, r.journal, from, at, func(_ int64, content []byte) error {
		_, err := s.Write(content)
		return err
	})
	if err == nil && head >= 0 {
		err = fmt.Errorf("it ends at offset %d", head)
	}
	if err == nil {
		err = s.Commit(registers)
	}
	if err != nil {
		s.Rollback()
		return fmt.Errorf("copying [%d, %d) from %s: %w", from, at, endpoint, err)
	}
	r.committed()
	caughtUp.Add(float64(at - from))
	return nil
}

// copyHook is called before a primary copies content from a peer, and an
// error fails the copy; a variable for tests.
var copyHook = func(*replica, string) error { return nil }

func mismatched(resps []*protocol.ReplicateResponse) bool {
	for _, r := range resps {
		if r.Status != protocol.Status_OK {
			return true
		}
	}
	return false
}
