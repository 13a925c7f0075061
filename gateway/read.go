package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/quire-dev/quire/client"
)

// readChunk is how much of a journal the gateway reads, and writes to
// its caller, at a time.
const readChunk = 64 << 10

// read streams the journal's bytes from ?offset (0; -1 for the write
// head) to ?end (the write head, or on and on with ?block=true).
func (g *Gateway) read(w http.ResponseWriter, r *http.Request) {
	ctx, name, ok := begin(w, r)
	if !ok {
		return
	}
	req, err := readRequest(r, name)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err)
		return
	}
	if req.Block {
		g.readBlocking(ctx, w, req)
		return
	}
	// A read that does not block must start within the timeout: a
	// journal without a primary, or brokers that do not answer, answer
	// a status rather than hold the caller.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(g.cfg.Timeout, cancel)
	rd := g.cfg.Journals.NewReader(ctx, req)
	defer rd.Close()
	buf := make([]byte, readChunk)
	n, err := rd.Read(buf)
	var jump *client.OffsetJumpError
	if errors.As(err, &jump) {
		// The range asked for was removed (retention): say so, and
		// serve from where the journal's content resumes.
		w.Header().Set("Quire-Removed", fmt.Sprintf("%d-%d", jump.From, jump.To))
		n, err = rd.Read(buf)
	}
	switch {
	case !timer.Stop():
		WriteError(w, http.StatusServiceUnavailable, fmt.Errorf("no broker served the read of %s within %s: %v", name, g.cfg.Timeout, err))
		return
	case err != nil && !errors.Is(err, io.EOF):
		WriteError(w, StatusOf(err), err)
		return
	case n == 0 && req.Offset > rd.WriteHead():
		WriteError(w, http.StatusRequestedRangeNotSatisfiable,
			fmt.Errorf("offset %d is past the write head %d of %s (block=true waits for it)", req.Offset, rd.WriteHead(), name))
		return
	}
	setHeaders(w, rd.Offset()-int64(n), rd.WriteHead(), rd)
	w.WriteHeader(http.StatusOK)
	g.stream(ctx, w, rd, buf[:n], err)
}

// readBlocking serves a read that waits at the write head for content:
// its headers go at once, with the offset it begins at, and content as
// it is appended.
func (g *Gateway) readBlocking(ctx context.Context, w http.ResponseWriter, req client.ReadRequest) {
	headCtx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	head, err := g.cfg.Journals.WriteHead(headCtx, req.Journal)
	cancel()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		WriteError(w, http.StatusServiceUnavailable, fmt.Errorf("no broker served the read of %s within %s: %w", req.Journal, g.cfg.Timeout, err))
		return
	case err != nil:
		WriteError(w, StatusOf(err), err)
		return
	}
	if req.Offset < 0 {
		req.Offset = head
	}
	setHeaders(w, req.Offset, head, nil)
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).Flush()
	rd := g.cfg.Journals.NewReader(ctx, req)
	defer rd.Close()
	g.stream(ctx, w, rd, nil, nil)
}

func setHeaders(w http.ResponseWriter, offset, head int64, rd *client.Reader) {
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Quire-Offset", strconv.FormatInt(offset, 10))
	h.Set("Quire-Write-Head", strconv.FormatInt(head, 10))
	if rd != nil {
		if f, _ := rd.Fragment(); f != nil {
			h.Set("Quire-Fragment", fmt.Sprintf("%d-%d", f.Begin, f.End))
		}
	}
}

// stream writes first (what was read already, and the error that read
// ended with), then the rest of rd, flushing each chunk to the caller.
func (g *Gateway) stream(ctx context.Context, w http.ResponseWriter, rd *client.Reader, first []byte, err error) {
	rc := http.NewResponseController(w)
	buf := make([]byte, readChunk)
	for chunk := first; ; {
		if len(chunk) > 0 {
			if _, werr := w.Write(chunk); werr != nil {
				return // The caller went away.
			}
			rc.Flush()
		}
		if err != nil {
			break
		}
		var n int
		n, err = rd.Read(buf)
		chunk = buf[:n]
	}
	if !errors.Is(err, io.EOF) && ctx.Err() == nil {
		// The status is sent: end the response early. A removed range
		// met mid-way ends it too; reading again from the offset
		// reached reports it in Quire-Removed.
		g.cfg.Logger.Warn("gateway: a read ended early", "offset", rd.Offset(), "err", err)
	}
}

// readRequest is the read that r's query asks for.
func readRequest(r *http.Request, name string) (client.ReadRequest, error) {
	offset, err := intParam(r, "offset", 0, -1)
	if err != nil {
		return client.ReadRequest{}, err
	}
	end, err := intParam(r, "end", 0, 0)
	if err != nil {
		return client.ReadRequest{}, err
	}
	block, err := boolParam(r, "block")
	if err != nil {
		return client.ReadRequest{}, err
	}
	if end != 0 && offset >= 0 && end <= offset {
		return client.ReadRequest{}, fmt.Errorf("end=%d: want an offset after offset=%d", end, offset)
	}
	return client.ReadRequest{Journal: name, Offset: offset, Block: block, EndOffset: end}, nil
}
