package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/quire-dev/quire/internal/backoff"
	"github.com/quire-dev/quire/protocol"
)

// ReadRequest describes a read of a journal.
type ReadRequest struct {
	Journal string
	// Offset to read from; -1 reads from the write head.
	Offset int64
	// Block waits for content at the write head. Without it, a Read at
	// the write head returns io.EOF.
	Block bool
	// EndOffset, if not zero, ends the read (with io.EOF) at that offset.
	EndOffset int64
	// SkipGaps continues silently past content that is no longer stored.
	// Without it, Read reports each gap once with an *OffsetJumpError.
	SkipGaps bool
	// ThroughBrokers has brokers serve all of this read's content, as
	// Config.ReadThroughBrokers does for every read: the Reader does not
	// fetch persisted fragments from their stores itself.
	ThroughBrokers bool
}

func (r *ReadRequest) validate() error {
	if err := protocol.ValidateJournalName(r.Journal); err != nil {
		return fmt.Errorf("client: read: %w", err)
	}
	if r.Offset < -1 {
		return fmt.Errorf("client: read journal %q: offset %d is below -1", r.Journal, r.Offset)
	}
	if r.EndOffset < 0 {
		return fmt.Errorf("client: read journal %q: end offset %d is negative", r.Journal, r.EndOffset)
	}
	if r.EndOffset != 0 && r.Offset >= 0 && r.EndOffset <= r.Offset {
		return fmt.Errorf("client: read journal %q: end offset %d is not beyond offset %d", r.Journal, r.EndOffset, r.Offset)
	}
	return nil
}

// Reader reads a journal from an offset, following it across fragments
// and brokers. It is an io.Reader, not safe for concurrent use.
//
// A Reader reads from a replica of the journal: one in the client's zone if
// it knows one, else the primary, else any broker, which proxies the read.
// When the stream breaks or the broker is unreachable, the Reader opens a
// new one at its current offset, after a backoff if it made no progress,
// so no byte is returned twice or skipped.
//
// Read returns io.EOF at EndOffset, and, for a non-blocking read, at the
// write head; a later Read tries again from there. When content before
// the Reader's offset is no longer stored, the broker continues the read
// past it, and Read returns an *OffsetJumpError (matching ErrOffsetJump)
// with no data; the next Read continues after the gap. Other errors are
// returned as they happen; a later Read retries.
//
// Content persisted to fragment stores is read from the stores directly,
// unless Config.ReadThroughBrokers or ReadRequest.ThroughBrokers says
// otherwise (see "Direct reads" in the package documentation).
type Reader struct {
	c   *Client
	ctx context.Context
	req ReadRequest

	offset    int64 // Offset of the next byte Read returns; -1 until known.
	writeHead int64
	fragment  *protocol.Fragment
	url       string
	buf       []byte // Received content at offset, not yet returned.

	stream    protocol.Journal_ReadClient
	cancel    context.CancelFunc
	endpoint  string
	avoid     map[string]bool
	bo        *backoff.Backoff
	failed    bool  // The last stream ended without progress.
	redirects int   // NOT_REPLICA answers followed at once, since progress.
	invalid   error // From validating req.

	// Direct reads (direct.go).
	streamDirect bool        // The stream asked for direct reads.
	directRead   *directRead // A fragment being read from its store, or nil.
	directBuf    []byte
	// throughUntil is where a failed direct read ends: brokers serve the
	// content before it.
	throughUntil int64
}

// NewReader returns a Reader of req.Journal. It opens no stream until the
// first Read; errors in req are returned by Read. ctx bounds the Reader's
// life: cancel it, or call Close, to release its stream.
func (c *Client) NewReader(ctx context.Context, req ReadRequest) *Reader {
	return &Reader{
		c:       c,
		ctx:     ctx,
		req:     req,
		offset:  req.Offset,
		avoid:   make(map[string]bool),
		bo:      c.newBackoff(),
		invalid: req.validate(),
	}
}

// Offset returns the journal offset of the next byte Read returns, or -1
// if the Reader started at the write head and has not learned it yet.
func (r *Reader) Offset() int64 { return r.offset }

// WriteHead returns the journal's write head as last reported by a broker.
func (r *Reader) WriteHead() int64 { return r.writeHead }

// Fragment returns the fragment the Reader is in, as last reported by a
// broker, and its URL in the fragment store if the broker gave one. The
// caller must not modify it.
func (r *Reader) Fragment() (*protocol.Fragment, string) { return r.fragment, r.url }

// Close releases the Reader's stream, and any fragment it reads from a
// store. Read may be called again after it, and opens a new one.
func (r *Reader) Close() error {
	r.closeStream()
	r.closeDirect()
	return nil
}

// Read reads journal content into p.
func (r *Reader) Read(p []byte) (int, error) {
	if r.invalid != nil {
		return 0, r.invalid
	}
	for {
		if len(r.buf) > 0 {
			n := copy(p, r.buf)
			r.buf = r.buf[n:]
			r.offset += int64(n)
			return n, nil
		}
		if r.req.EndOffset != 0 && r.offset >= r.req.EndOffset {
			r.closeStream()
			r.closeDirect()
			return 0, io.EOF
		}
		if len(p) == 0 {
			return 0, nil
		}
		if r.directRead != nil {
			if err := r.readDirect(); err != nil {
				return 0, err
			}
			continue
		}
		if r.stream == nil {
			if err := r.open(); err != nil {
				return 0, err
			}
			if r.stream == nil {
				continue // It failed, and is to be retried.
			}
		}
		resp, err := r.stream.Recv()
		if err != nil {
			if err := r.streamFailed(err); err != nil {
				return 0, err
			}
			continue
		}
		if err := r.handle(resp); err != nil {
			return 0, err
		}
	}
}

// open starts a stream at the Reader's offset, after a backoff if the last
// one failed.
func (r *Reader) open() error {
	if r.failed {
		if err := r.bo.Wait(r.ctx); err != nil {
			return fmt.Errorf("client: read journal %q: %w", r.req.Journal, err)
		}
	}
	r.failed = true // Until the stream makes progress.
	t := r.c.router.pick(r.req.Journal, forRead, r.avoid)
	jc, err := r.c.journal(t.endpoint)
	if err != nil {
		return fmt.Errorf("client: read journal %q: %w", r.req.Journal, err)
	}
	if r.offset >= r.throughUntil {
		r.throughUntil = 0 // Past the fragment that a failed direct read left to brokers.
	}
	req := &protocol.ReadRequest{
		Header:     r.c.router.header(),
		Journal:    r.req.Journal,
		Offset:     r.offset,
		Block:      r.req.Block,
		DoNotProxy: t.doNotProxy,
		EndOffset:  r.req.EndOffset,
		Direct:     r.direct(),
	}
	if r.offset < r.throughUntil && (req.EndOffset == 0 || r.throughUntil < req.EndOffset) {
		// A direct read of the fragment ending there failed: a broker
		// serves it, and the Reader reads directly again after it.
		req.EndOffset = r.throughUntil
	}
	ctx, cancel := context.WithCancel(r.ctx)
	stream, err := jc.Read(ctx, req)
	if err != nil {
		cancel()
		if isTransientCode(r.ctx, err) {
			r.avoid[t.endpoint] = true
			return r.retryable(err, t.endpoint)
		}
		return fmt.Errorf("client: read journal %q via %s: %w", r.req.Journal, t.endpoint, ctxError(r.ctx, err))
	}
	readsTotal.Inc()
	r.stream, r.cancel, r.endpoint, r.streamDirect = stream, cancel, t.endpoint, req.Direct
	return nil
}

// retryable reports a failure to open a stream that the next Read retries:
// nil, unless the context is done.
func (r *Reader) retryable(err error, endpoint string) error {
	readRetries.WithLabelValues(grpcCode(err)).Inc()
	r.c.router.invalidate(r.req.Journal, endpoint)
	r.c.warnUnreachable("read", r.req.Journal, endpoint, err)
	if cerr := r.ctx.Err(); cerr != nil {
		return fmt.Errorf("client: read journal %q: %w", r.req.Journal, cerr)
	}
	return nil
}

func (r *Reader) closeStream() {
	if r.cancel != nil {
		r.cancel()
	}
	r.stream, r.cancel, r.endpoint = nil, nil, ""
}

// streamFailed handles the end of a stream: a clean end before EndOffset
// or a transient failure reopens it, anything else is returned.
func (r *Reader) streamFailed(err error) error {
	endpoint := r.endpoint
	r.closeStream()
	switch {
	case err == io.EOF && r.throughUntil != 0 && r.offset >= r.throughUntil:
		return nil // The end of a fragment read through a broker after a failed direct read.
	case err == io.EOF:
		readRetries.WithLabelValues("EOF").Inc()
		return nil
	case isTransientCode(r.ctx, err):
		r.avoid[endpoint] = true
		return r.retryable(err, endpoint)
	}
	return fmt.Errorf("client: read journal %q via %s at offset %d: %w",
		r.req.Journal, endpoint, r.offset, ctxError(r.ctx, err))
}

// handle applies one response of the stream to the Reader. A jump past a
// gap is returned as an error, after any content of the response is
// buffered for the next Read.
func (r *Reader) handle(resp *protocol.ReadResponse) error {
	r.c.router.learn(r.req.Journal, resp.GetHeader())
	if resp.GetStatus() != protocol.Status_OK {
		return r.handleStatus(resp)
	}
	r.writeHead = max(r.writeHead, resp.GetWriteHead())
	if f := resp.GetFragment(); f != nil {
		r.fragment, r.url = f, resp.GetFragmentUrl()
	}
	off, content := resp.GetOffset(), resp.GetContent()
	if r.offset < 0 {
		r.offset = off // Reading from the write head: now we know it.
	}
	var jumpErr error
	if off > r.offset {
		jumpErr = r.jump(off)
	}
	if skip := r.offset - off; skip > 0 { // Already returned: drop it.
		content = content[min(skip, int64(len(content))):]
	}
	if r.req.EndOffset != 0 {
		// The offset may be past EndOffset already: a read from the write
		// head, or a jump, beyond it. Then nothing of content is wanted.
		content = content[:max(0, min(int64(len(content)), r.req.EndOffset-r.offset))]
	}
	if len(content) > 0 {
		r.buf = content
		r.progress()
		readBytes.Add(float64(len(content)))
	} else if r.streamDirect && resp.GetFragmentUrl() != "" && len(resp.GetContent()) == 0 {
		r.startDirect(resp.GetFragment(), resp.GetFragmentUrl())
	}
	return jumpErr
}

// progress notes that the stream delivered content: the next failure is
// retried at once, with a fresh backoff.
func (r *Reader) progress() {
	r.failed = false
	r.redirects = 0
	r.bo = r.c.newBackoff()
	clear(r.avoid)
}

// jump moves the Reader forward to off, past content no longer stored.
func (r *Reader) jump(off int64) error {
	from := r.offset
	r.offset = off
	readOffsetJumps.Inc()
	if r.req.SkipGaps {
		return nil
	}
	return &OffsetJumpError{Journal: r.req.Journal, From: from, To: off}
}

func (r *Reader) handleStatus(resp *protocol.ReadResponse) error {
	st := resp.GetStatus()
	endpoint := r.endpoint
	r.closeStream()
	switch st {
	case protocol.Status_OFFSET_NOT_YET_AVAILABLE:
		r.writeHead = max(r.writeHead, resp.GetWriteHead())
		if r.offset < 0 {
			r.offset = resp.GetWriteHead()
		}
		r.failed = false
		return io.EOF
	case protocol.Status_NOT_PRIMARY:
		// A replica lacks the offset (or its head may be behind the
		// journal's) and may not proxy: another replica, or the primary
		// the header named, serves it.
		r.avoid[endpoint] = true
		readRetries.WithLabelValues(st.String()).Inc()
		if r.redirects < maxRedirects {
			r.redirects++
			r.failed = false
		}
		return nil
	case protocol.Status_NOT_REPLICA:
		r.avoid[endpoint] = true
		readRetries.WithLabelValues(st.String()).Inc()
		if rt := resp.GetHeader().GetRoute(); usableRoute(rt) && !slices.Contains(rt.GetEndpoints(), endpoint) &&
			r.redirects < maxRedirects {
			r.redirects++
			r.failed = false // The broker named the replicas: go there at once.
		} else {
			r.c.router.invalidate(r.req.Journal, "")
		}
		return nil
	}
	serr := &StatusError{Op: "read", Journal: r.req.Journal, Status: st, Header: resp.GetHeader(),
		Detail: fmt.Sprintf("offset %d", r.offset)}
	if isTransientStatus(st) {
		readRetries.WithLabelValues(st.String()).Inc()
		return nil
	}
	if st == protocol.Status_JOURNAL_NOT_FOUND {
		r.c.router.invalidate(r.req.Journal, "")
	}
	return serr
}

// IsOffsetJump reports whether err reports a gap that a Reader skipped.
func IsOffsetJump(err error) bool { return errors.Is(err, ErrOffsetJump) }

// WriteHead returns journal's write head: where its next append will
// begin. It is a read at the write head that does not wait.
func (c *Client) WriteHead(ctx context.Context, journal string) (int64, error) {
	rd := c.NewReader(ctx, ReadRequest{Journal: journal, Offset: -1})
	defer rd.Close()
	var b [1]byte
	if _, err := rd.Read(b[:]); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("client: write head of %q: %w", journal, err)
	}
	return rd.WriteHead(), nil
}
