package client

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/protocol"
)

// An append of one message to a journal's primary goes on the client's
// Appends stream to that broker (see protocol.proto), which carries all of
// the client's such appends to it at once: setting up a stream of its own
// costs each side more than a small append does. Appends of more than one
// message, and those sent through another broker (which proxies them), go
// on Append streams of their own.

// appendStreams holds the client's Appends streams, one per broker.
type appendStreams struct {
	ctx    context.Context // Of every stream: ends with close.
	cancel context.CancelFunc

	mu      sync.Mutex
	open    map[string]*appendStream
	opening map[string]*opening
	legacy  map[string]bool // Brokers that do not serve Appends.
	closed  bool
	wg      sync.WaitGroup // Openers and receivers.
}

// opening is a stream being opened: appends wait for it, each until its
// own context ends.
type opening struct {
	done chan struct{}
	s    *appendStream
	err  error
}

func newAppendStreams() *appendStreams {
	ctx, cancel := context.WithCancel(context.Background())
	return &appendStreams{ctx: ctx, cancel: cancel, open: make(map[string]*appendStream),
		opening: make(map[string]*opening), legacy: make(map[string]bool)}
}

// appendStream is one Appends stream, and the appends waiting for its
// answers, by tag. Once broken (err set), it takes no more appends, and
// those waiting fail with err.
type appendStream struct {
	stream protocol.Journal_AppendsClient
	cancel context.CancelFunc
	leave  func()        // Removes it from the open streams.
	send   chan struct{} // Held (one token) to Send: serializes them.

	mu      sync.Mutex
	waiting map[uint64]chan appendAnswer
	next    uint64 // The last tag given.
	err     error
}

type appendAnswer struct {
	resp *protocol.AppendResponse
	err  error
}

// errNoAppendsStream tells that a broker does not serve Appends (it
// predates it): the append goes on an Append stream instead.
var errNoAppendsStream = errors.New("the broker does not serve Appends streams")

// appendOne appends msg, a whole append that commits, to the broker at
// endpoint, on the client's Appends stream to it. It returns
// errNoAppendsStream if the broker does not serve them. An answer with an
// error code is returned as that gRPC error, as an Append call would fail.
func (c *Client) appendOne(ctx context.Context, endpoint string, msg *protocol.AppendRequest) (*protocol.AppendResponse, error) {
	for attempt := 0; ; attempt++ {
		s, err := c.streams.get(ctx, c, endpoint)
		if err != nil {
			return nil, err
		}
		resp, err := s.append(ctx, msg)
		if status.Code(err) == codes.Unimplemented {
			c.streams.markLegacy(endpoint)
			return nil, errNoAppendsStream
		}
		if status.Code(err) == codes.Unauthenticated && attempt == 0 {
			// The stream's token may have expired since it began: a new
			// stream carries a fresh one. Once only, as a bad token fails
			// again.
			s.fail(err)
			continue
		}
		return resp, err
	}
}

// get returns the open stream to endpoint, opening one if there is none,
// or ctx's error if it ends first; errNoAppendsStream if the broker does
// not serve them. A stream opens on its own goroutine, so that an append
// waits for a broker's connection no longer than its ctx allows, and
// appends to other brokers not at all.
func (ss *appendStreams) get(ctx context.Context, c *Client, endpoint string) (*appendStream, error) {
	ss.mu.Lock()
	switch {
	case ss.closed:
		ss.mu.Unlock()
		return nil, ErrClosed
	case ss.legacy[endpoint]:
		ss.mu.Unlock()
		return nil, errNoAppendsStream
	}
	if s, ok := ss.open[endpoint]; ok {
		ss.mu.Unlock()
		return s, nil
	}
	o, ok := ss.opening[endpoint]
	if !ok {
		o = &opening{done: make(chan struct{})}
		ss.opening[endpoint] = o
		ss.wg.Go(func() { ss.openStream(c, endpoint, o) })
	}
	ss.mu.Unlock()
	select {
	case <-o.done:
		return o.s, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// openStream opens a stream to endpoint, and installs it.
func (ss *appendStreams) openStream(c *Client, endpoint string, o *opening) {
	defer close(o.done)
	var stream protocol.Journal_AppendsClient
	jc, err := c.journal(endpoint)
	ctx, cancel := context.WithCancel(ss.ctx)
	if err == nil {
		stream, err = jc.Appends(ctx)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.opening, endpoint)
	if err == nil && ss.closed {
		err = ErrClosed
	}
	if err != nil {
		cancel()
		o.err = err
		return
	}
	s := &appendStream{stream: stream, cancel: cancel, send: make(chan struct{}, 1),
		waiting: make(map[uint64]chan appendAnswer)}
	s.leave = func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.open[endpoint] == s {
			delete(ss.open, endpoint)
		}
	}
	ss.open[endpoint] = s
	ss.wg.Go(s.receive)
	o.s = s
}

// receive hands each answer to its append, until the stream ends.
func (s *appendStream) receive() {
	var closing sync.WaitGroup
	defer closing.Wait() // The stream has failed: a Send in progress ends.
	for {
		resp, err := s.stream.Recv()
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "the Appends stream ended")
		}
		if err != nil {
			s.fail(err)
			return
		}
		if resp.Tag == 0 {
			s.retire(status.Error(codes.Code(resp.ErrorCode), resp.ErrorMessage))
			// Not on this goroutine: closing the side waits for a Send in
			// progress, which may wait for the broker to read, which may
			// wait for answers that this goroutine receives.
			closing.Go(s.closeSend)
			continue
		}
		s.mu.Lock()
		ch, ok := s.waiting[resp.Tag]
		delete(s.waiting, resp.Tag)
		s.mu.Unlock()
		if ok {
			ch <- appendAnswer{resp: resp}
		}
	}
}

func (ss *appendStreams) markLegacy(endpoint string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.legacy[endpoint] = true
}

// close breaks every stream, and waits for their openers and receivers.
func (ss *appendStreams) close() {
	ss.mu.Lock()
	ss.closed = true
	ss.mu.Unlock()
	ss.cancel()
	ss.wg.Wait()
}

// append sends msg under a new tag, and waits for its answer, the stream
// to break, or ctx. An append whose ctx ends once it was sent may yet
// commit: its retry, under the same writer and sequence, commits once.
//
// While another append's Send is blocked (HTTP/2 flow control holds it
// once the broker's budget for the stream is full), an append waiting to
// send leaves when its ctx ends; the one in Send waits for the broker.
func (s *appendStream) append(ctx context.Context, msg *protocol.AppendRequest) (*protocol.AppendResponse, error) {
	ch := make(chan appendAnswer, 1)
	// Sent holding send, so that once retire has closed the stream's side
	// (holding send, after setting err), no append is sent on it.
	select {
	case s.send <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		<-s.send
		return nil, err
	}
	s.next++
	tag := s.next
	s.waiting[tag] = ch
	s.mu.Unlock()
	msg.Tag = tag
	err := s.stream.Send(msg)
	<-s.send
	if err != nil && !errors.Is(err, io.EOF) {
		// Not sent (too large, say); the stream goes on.
		s.forget(tag)
		return nil, err
	}
	// On io.EOF the stream ended, and its receiver learns why.
	select {
	case a := <-ch:
		if a.err != nil {
			return nil, a.err
		}
		if code := codes.Code(a.resp.ErrorCode); code != codes.OK {
			return nil, status.Error(code, a.resp.ErrorMessage)
		}
		return a.resp, nil
	case <-ctx.Done():
		s.forget(tag)
		return nil, ctx.Err()
	}
}

// forget drops the append of tag from those waiting for an answer.
func (s *appendStream) forget(tag uint64) {
	s.mu.Lock()
	delete(s.waiting, tag)
	s.mu.Unlock()
}

// retire stops s taking appends, as the broker asks when it stops (the
// answer of tag 0): new appends fail with err, and are retried on a new
// stream, while those sent are answered before the stream ends, once
// closeSend has closed the client's side.
func (s *appendStream) retire(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	s.leave()
}

// closeSend closes the client's side of a retired stream, once no append
// is being sent: none is sent after, as s.err is set.
func (s *appendStream) closeSend() {
	s.send <- struct{}{}
	s.stream.CloseSend()
	<-s.send
}

// fail breaks s with err (the first error wins), failing the appends
// waiting for its answers.
func (s *appendStream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	waiting := s.waiting
	s.waiting = make(map[uint64]chan appendAnswer)
	err = s.err
	s.mu.Unlock()
	s.leave()
	s.cancel()
	for _, ch := range waiting {
		ch <- appendAnswer{err: err}
	}
}
