package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

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
		writeError(w, http.StatusBadRequest, err)
		return
	}
	rd := g.journals.NewReader(ctx, req)
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
	if err != nil && !errors.Is(err, io.EOF) {
		writeError(w, statusOf(err), err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Quire-Offset", strconv.FormatInt(rd.Offset()-int64(n), 10))
	h.Set("Quire-Write-Head", strconv.FormatInt(rd.WriteHead(), 10))
	if f, _ := rd.Fragment(); f != nil {
		h.Set("Quire-Fragment", fmt.Sprintf("%d-%d", f.Begin, f.End))
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for n > 0 {
		if _, werr := w.Write(buf[:n]); werr != nil {
			return // The caller went away.
		}
		rc.Flush()
		if err != nil {
			break
		}
		n, err = rd.Read(buf)
	}
	if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
		// The status is sent: end the response early. A removed range
		// met mid-way ends it too; reading again from the offset
		// reached reports it in Quire-Removed.
		g.log.Warn("gateway: a read ended early", "journal", name, "offset", rd.Offset(), "err", err)
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
