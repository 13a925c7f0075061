package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/protocol"
)

// An Appends stream holds at most streamBudget bytes of appends in
// progress, each counted as at least minAppendWeight: so at most
// streamBudget/minAppendWeight appends at once. Past it, the stream is
// read no further until an append is answered, and HTTP/2's flow control
// holds the client back.
const (
	streamBudget     = 32 << 20
	minAppendWeight  = 32 << 10
	maxStreamAppends = streamBudget / minAppendWeight
)

// answer is an append's response, and its weight in the stream's budget.
type answer struct {
	resp   *protocol.AppendResponse
	weight int64
}

// Appends runs the appends of an Appends stream (see protocol.proto): each
// in a goroutine of its own, as Append would run that one message with
// do_not_proxy, answering each as it is done. It returns once the client
// has sent its last append and every append is answered, or the stream
// breaks (appends in progress then finish unanswered, as those of a broken
// Append stream do).
func (s *Server) Appends(stream protocol.Journal_AppendsServer) error {
	answers := make(chan answer, maxStreamAppends) // Never full: see readAppends.
	budget := semaphore.NewWeighted(streamBudget)
	sent := make(chan error, 1)
	go func() { sent <- s.sendAnswers(stream, answers, budget) }()

	var wg sync.WaitGroup
	err := s.readAppends(stream, &wg, budget, answers)
	wg.Wait()
	close(answers)
	if serr := <-sent; err == nil {
		err = serr
	}
	return err
}

// readAppends starts an append for each message of stream, once the budget
// allows, until the client closes its side (nil), sends a message of tag 0
// (InvalidArgument, after the appends before it are answered) or the
// stream fails. An append holds its weight until its answer is sent, so at
// most maxStreamAppends answers are ever pending.
//
// Each append runs on a worker of the stream: an idle one, or a new one if
// all are busy. Workers outlive their append (up to maxIdleWorkers idle
// at once), so that the next ones run on a stack already grown, rather
// than each growing a new goroutine's.
func (s *Server) readAppends(stream protocol.Journal_AppendsServer, wg *sync.WaitGroup,
	budget *semaphore.Weighted, answers chan<- answer) error {

	ctx := stream.Context()
	work := make(chan weighted)
	defer close(work) // Idle workers end.
	var idle atomic.Int32
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if req.Tag == 0 {
			// Tag 0 is the broker's own answer, asking the client to end
			// the stream: an append under it could not be answered.
			return status.Errorf(codes.InvalidArgument, "an append of an Appends stream needs a tag other than 0 (journal %q)", req.Journal)
		}
		a := weighted{req, min(max(int64(len(req.Content)), minAppendWeight), streamBudget)}
		if err := budget.Acquire(ctx, a.weight); err != nil {
			return err
		}
		select {
		case work <- a:
		default:
			wg.Go(func() { s.appendWorker(ctx, a, work, &idle, answers) })
		}
	}
}

// maxIdleWorkers bounds the idle workers of an Appends stream.
const maxIdleWorkers = 64

// weighted is an append of an Appends stream, and its weight in the
// stream's budget.
type weighted struct {
	req    *protocol.AppendRequest
	weight int64
}

// appendWorker runs a, then the appends handed to it while idle, until
// work closes or enough other workers are idle.
func (s *Server) appendWorker(ctx context.Context, a weighted, work <-chan weighted, idle *atomic.Int32, answers chan<- answer) {
	for ok := true; ok; {
		answers <- answer{s.appendTagged(ctx, a.req), a.weight}
		if idle.Add(1) > maxIdleWorkers {
			idle.Add(-1)
			return
		}
		a, ok = <-work
		idle.Add(-1)
	}
}

// sendAnswers sends each answer as it comes, releasing its weight. Once a
// send fails it sends no more, but still releases, until answers closes.
//
// Once the server stops (its Run ends), it sends the answer of tag 0,
// which asks the client to send no more on the stream and to close its
// side: the stream then ends as soon as its appends are answered, rather
// than hold the gRPC server's graceful stop until its timeout.
func (s *Server) sendAnswers(stream protocol.Journal_AppendsServer, answers <-chan answer, budget *semaphore.Weighted) error {
	var err error
	var headers repeatedHeaders
	serving, stopped := s.serving, (<-chan struct{})(nil)
	for {
		select {
		case <-serving:
			serving, stopped = nil, s.ctx.Done() // s.ctx is set before serving closes.
		case <-stopped:
			stopped = nil
			if err == nil {
				err = stream.Send(&protocol.AppendResponse{Tag: 0, ErrorCode: int32(codes.Unavailable),
					ErrorMessage: fmt.Sprintf("broker %s is stopping: this stream takes no more appends", s.id.Suffix)})
			}
		case a, ok := <-answers:
			if !ok {
				return err
			}
			if err == nil {
				headers.strip(a.resp)
				err = stream.Send(a.resp)
			}
			budget.Release(a.weight)
		}
	}
}

// repeatedHeaders leaves out of an Appends stream's OK answer the header
// that the stream's previous answer, to an append of the same journal,
// carried already: a client learns nothing from it, and decoding it costs
// a client about as much as the rest of the answer. Every other answer
// carries its header.
type repeatedHeaders struct {
	journal string           // Of the last answer sent with a header, if it was OK.
	header  *protocol.Header // That answer's header.
}

// strip leaves out resp's header if it repeats the last one sent, and
// otherwise records it; it is called for each answer, in the stream's
// order.
func (h *repeatedHeaders) strip(resp *protocol.AppendResponse) {
	journal := resp.GetCommit().GetJournal()
	switch {
	case resp.Header == nil:
		return
	case resp.Status != protocol.Status_OK || resp.ErrorCode != 0 || journal == "":
		h.journal, h.header = "", nil
	case journal == h.journal && sameHeader(resp.Header, h.header):
		resp.Header = nil
	default:
		h.journal, h.header = journal, resp.Header
	}
}

// sameHeader tells whether a and b say the same to a client: the same
// broker, view revision and route, resolved at the same revision.
func sameHeader(a, b *protocol.Header) bool {
	ra, rb := a.GetRoute(), b.GetRoute()
	return a.GetRevision() == b.GetRevision() && ra.GetRevision() == rb.GetRevision() &&
		a.GetProcessId().GetZone() == b.GetProcessId().GetZone() &&
		a.GetProcessId().GetSuffix() == b.GetProcessId().GetSuffix() &&
		sameRoute(ra, rb) && slices.Equal(ra.GetEndpoints(), rb.GetEndpoints())
}

// appendTagged runs one append of an Appends stream, and answers it: with
// its response, or with the error an Append stream would have ended with.
func (s *Server) appendTagged(ctx context.Context, req *protocol.AppendRequest) *protocol.AppendResponse {
	var resp *protocol.AppendResponse
	var err error
	if !req.Commit {
		err = status.Error(codes.InvalidArgument, "an append of an Appends stream is one message, and commits: commit is not set")
	} else {
		req.DoNotProxy = true
		resp, err = s.appendFrom(single{ctx: ctx}, req)
	}
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			st = status.FromContextError(err)
		}
		resp = &protocol.AppendResponse{ErrorCode: int32(st.Code()), ErrorMessage: st.Message()}
	}
	resp.Tag = req.Tag
	return resp
}

// single is the stream of an append of one message that commits: the
// append reads nothing after it, and is never proxied (do_not_proxy), so
// only its context is used.
type single struct {
	protocol.Journal_AppendServer // Nil: not used.
	ctx                           context.Context
}

func (s single) Context() context.Context { return s.ctx }

func (single) Recv() (*protocol.AppendRequest, error) { return nil, io.EOF }
