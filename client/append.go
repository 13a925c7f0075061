package client

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// AppendRequest describes an append to a journal.
type AppendRequest struct {
	Journal string
	// Offset, if set, is the offset the journal's write head must be at,
	// or the append fails with ErrWrongAppendOffset.
	Offset *int64
	// CheckRegisters, if set, is a selector the journal's registers must
	// match, or the append fails with ErrRegisterMismatch.
	CheckRegisters string
	// Union and Subtract are added to and removed from the journal's
	// registers when the append commits.
	Union, Subtract labels.Set
}

func (r *AppendRequest) validate() error {
	if err := protocol.ValidateJournalName(r.Journal); err != nil {
		return fmt.Errorf("client: append: %w", err)
	}
	if r.Offset != nil && *r.Offset < 0 {
		return fmt.Errorf("client: append journal %q: offset %d is negative", r.Journal, *r.Offset)
	}
	if r.CheckRegisters != "" {
		if _, err := labels.ParseSelector(r.CheckRegisters); err != nil {
			return fmt.Errorf("client: append journal %q: check registers: %w", r.Journal, err)
		}
	}
	if err := r.Union.Validate(); err != nil {
		return fmt.Errorf("client: append journal %q: union registers: %w", r.Journal, err)
	}
	if err := r.Subtract.Validate(); err != nil {
		return fmt.Errorf("client: append journal %q: subtract registers: %w", r.Journal, err)
	}
	return nil
}

// proto returns the first message of the Append stream.
func (r *AppendRequest) proto() *protocol.AppendRequest {
	return &protocol.AppendRequest{
		Journal:           r.Journal,
		Offset:            r.Offset,
		CheckRegisters:    r.CheckRegisters,
		UnionRegisters:    protoLabels(r.Union),
		SubtractRegisters: protoLabels(r.Subtract),
	}
}

func (r *AppendRequest) detail() string {
	switch {
	case r.Offset != nil && r.CheckRegisters != "":
		return fmt.Sprintf("offset %d, check registers %q", *r.Offset, r.CheckRegisters)
	case r.Offset != nil:
		return fmt.Sprintf("offset %d", *r.Offset)
	case r.CheckRegisters != "":
		return fmt.Sprintf("check registers %q", r.CheckRegisters)
	}
	return ""
}

func protoLabels(s labels.Set) []*protocol.Label {
	if len(s) == 0 {
		return nil
	}
	out := make([]*protocol.Label, len(s))
	for i, l := range s {
		out[i] = &protocol.Label{Name: l.Name, Value: l.Value}
	}
	return out
}

// Append appends content to a journal and returns the committed range,
// [commit.Begin, commit.End). It streams content in chunks to the
// journal's primary, as the client knows it, or else through any broker.
//
// Append retries, with backoff and until ctx is done, failures that may
// pass: NO_PRIMARY, INSUFFICIENT_REPLICAS, NOT_PRIMARY (at once, to the
// primary the broker named), and unreachable brokers or broken streams. A
// retry replays the content from its start, so Append retries only if it
// can: content is an io.Seeker (seeked back to where it was when Append
// was called), or it has been at most Config.MaxAppendBuffer bytes so far.
// Otherwise the error wraps ErrNotReplayable.
//
// Appends commit once: each carries a writer name of the client's and a
// sequence number of its own, and a retry whose earlier attempt committed
// (its stream broke after the commit message was sent) is answered with
// that attempt's range, appending nothing. Concurrent appends to one
// journal go under different names (see writers). A journal remembers the
// last append of its latest writers (see broker.MaxWriters): a retry after
// that many other writers appended to the journal commits again.
//
// An append of at most one chunk to a journal whose primary the client
// knows goes on the client's Appends stream to that broker, shared with
// its other such appends (appends.go). If ctx ends once it was sent, Append
// returns ctx's error at once, and the append may yet commit, as any
// append whose answer a client does not wait for may.
//
// Errors wrap ErrJournalNotFound, ErrWrongAppendOffset,
// ErrRegisterMismatch or ErrNotAllowed when the broker answers so; a nil
// content appends nothing (but updates registers).
func (c *Client) Append(ctx context.Context, req AppendRequest, r io.Reader) (*protocol.Fragment, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	return c.append(ctx, &req, contentOf(r, c.cfg.MaxAppendBuffer))
}

// maxRedirects is how many NOT_PRIMARY answers in a row Append follows at
// once, before it backs off.
const maxRedirects = 3

func (c *Client) append(ctx context.Context, req *AppendRequest, body content) (*protocol.Fragment, error) {
	defer body.release() // Every attempt has returned: no chunk is in use.
	first := req.proto()
	first.Header = c.router.header()
	// Every attempt of this append carries the same identity: a retry
	// after an attempt that committed is answered with its range.
	writer, release := c.writers.acquire(req.Journal)
	defer release()
	first.Writer, first.Sequence = writer, c.sequence.Add(1)
	avoid := make(map[string]bool)
	bo := c.newBackoff()
	redirects := 0
	for {
		t := c.router.pick(req.Journal, forAppend, avoid)
		resp, n, err := c.appendOnce(ctx, t, first, body)
		retry, redirect, err := c.appendOutcome(ctx, req, t, resp, n, err, avoid)
		if !retry {
			if err != nil {
				appendsTotal.WithLabelValues("error").Inc()
				return nil, err
			}
			appendsTotal.WithLabelValues("ok").Inc()
			appendBytes.Add(float64(n))
			return resp.GetCommit(), nil
		}
		if rerr := body.rewind(); rerr != nil {
			appendsTotal.WithLabelValues("error").Inc()
			return nil, fmt.Errorf("%w (not retried: %w)", err, rerr)
		}
		appendRetries.WithLabelValues(retryReason(resp, err)).Inc()
		if redirect && redirects < maxRedirects {
			redirects++
			continue
		}
		redirects = 0
		if werr := bo.Wait(ctx); werr != nil {
			appendsTotal.WithLabelValues("error").Inc()
			return nil, fmt.Errorf("client: append journal %q: %w (retrying after: %w)", req.Journal, werr, err)
		}
	}
}

// appendOnce makes one attempt of an append to t, and returns the
// response and the length of the content sent. An append of one message
// to the primary goes on the client's Appends stream to it (appends.go);
// any other streams its content on an Append stream of its own.
func (c *Client) appendOnce(ctx context.Context, t target, first *protocol.AppendRequest,
	body content) (*protocol.AppendResponse, int64, error) {

	// The first message carries the first chunk, and the last one commits:
	// an append of at most one chunk is a single message. err is that of
	// reading the chunk after chunk: io.EOF if there is none.
	// The attempts of an append take turns with its first message, each
	// setting the fields that are its own: gRPC has marshaled a message
	// when Send returns, so no earlier attempt reads it still.
	msg := first
	msg.DoNotProxy, msg.Content, msg.Commit, msg.Tag = t.doNotProxy, nil, false, 0
	chunk, err := body.next(c.cfg.ChunkSize)
	var next []byte
	if err == nil {
		next, err = body.next(c.cfg.ChunkSize)
	}
	if err != nil && err != io.EOF {
		return nil, 0, &contentError{err}
	}
	if err == io.EOF && t.doNotProxy {
		msg.Content, msg.Commit = chunk, true
		resp, serr := c.appendOne(ctx, t.endpoint, msg)
		if !errors.Is(serr, errNoAppendsStream) {
			return resp, int64(len(chunk)), serr
		}
	}

	jc, jerr := c.journal(t.endpoint)
	if jerr != nil {
		return nil, 0, jerr
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // Aborts the append if it has not committed.
	stream, serr := jc.Append(ctx)
	if serr != nil {
		return nil, 0, serr
	}
	var n int64
	for {
		msg.Content, msg.Commit = chunk, err == io.EOF
		if serr := stream.Send(msg); serr != nil {
			return closeAppend(stream, n, serr)
		}
		n += int64(len(chunk))
		if msg.Commit {
			return closeAppend(stream, n, nil)
		}
		msg, chunk = &protocol.AppendRequest{}, next
		if next, err = body.next(c.cfg.ChunkSize); err != nil && err != io.EOF {
			return nil, n, &contentError{err}
		}
	}
}

// closeAppend finishes an Append stream. A Send that failed with io.EOF
// means the broker answered already (or the stream broke); its answer, or
// the stream's error, comes from CloseAndRecv.
func closeAppend(stream protocol.Journal_AppendClient, n int64, sendErr error) (*protocol.AppendResponse, int64, error) {
	if sendErr != nil && sendErr != io.EOF {
		return nil, n, sendErr
	}
	resp, err := stream.CloseAndRecv()
	return resp, n, err
}

// appendOutcome classifies the result of an attempt: success (no retry, nil
// error), a failure to return, or a failure to retry, at once (redirect)
// or after a backoff.
func (c *Client) appendOutcome(ctx context.Context, req *AppendRequest, t target,
	resp *protocol.AppendResponse, n int64, err error, avoid map[string]bool) (retry, redirect bool, _ error) {

	if err != nil {
		switch {
		case isContentError(err), errors.Is(err, ErrClosed):
			return false, false, fmt.Errorf("client: append journal %q: %w", req.Journal, err)
		case isTransientCode(ctx, err):
			avoid[t.endpoint] = true
			c.router.invalidate(req.Journal, t.endpoint)
			c.warnUnreachable("append", req.Journal, t.endpoint, err)
			return true, false, fmt.Errorf("client: append journal %q via %s: %w", req.Journal, t.endpoint, err)
		}
		return false, false, fmt.Errorf("client: append journal %q via %s: %w", req.Journal, t.endpoint, ctxError(ctx, err))
	}
	c.router.learn(req.Journal, resp.GetHeader())
	st := resp.GetStatus()
	serr := &StatusError{Op: "append", Journal: req.Journal, Status: st, Header: resp.GetHeader(), Detail: req.detail()}
	switch st {
	case protocol.Status_OK:
		if resp.GetAlreadyCommitted() {
			// An earlier attempt committed: the broker answered with its
			// range before this one's content was all sent.
			appendsFoundCommitted.Inc()
			return false, false, nil
		}
		return false, false, checkCommit(req.Journal, resp.GetCommit(), n)
	case protocol.Status_NOT_PRIMARY:
		if primary := primaryOf(resp.GetHeader()); primary != "" && primary != t.endpoint {
			return true, true, serr // The broker named another primary: go there.
		}
		c.router.invalidate(req.Journal, "")
		avoid[t.endpoint] = true
		return true, false, serr
	case protocol.Status_JOURNAL_NOT_FOUND:
		c.router.invalidate(req.Journal, "")
		return false, false, serr
	}
	return isTransientStatus(st), false, serr
}

// checkCommit verifies that the broker committed the n bytes sent.
func checkCommit(journal string, commit *protocol.Fragment, n int64) error {
	if commit == nil {
		if n == 0 {
			return nil
		}
		return fmt.Errorf("client: append journal %q: broker answered OK without a commit for %d bytes", journal, n)
	}
	if got := commit.GetEnd() - commit.GetBegin(); got != n || commit.GetBegin() < 0 {
		return fmt.Errorf("client: append journal %q: broker committed [%d, %d), %d bytes, for %d bytes sent",
			journal, commit.GetBegin(), commit.GetEnd(), got, n)
	}
	return nil
}

// primaryOf returns the primary's endpoint in h's route, or "".
func primaryOf(h *protocol.Header) string {
	if rt := h.GetRoute(); usableRoute(rt) {
		return rt.GetEndpoints()[0]
	}
	return ""
}

// retryReason labels the retry metric: a status name or a gRPC code.
func retryReason(resp *protocol.AppendResponse, err error) string {
	var serr *StatusError
	if errors.As(err, &serr) {
		return serr.Status.String()
	}
	if resp != nil && resp.GetStatus() != protocol.Status_OK {
		return resp.GetStatus().String()
	}
	return grpcCode(err)
}
