package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/readahead"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

// Direct reads: a Reader asks brokers for the URLs of persisted fragments
// (ReadRequest.direct) and fetches them from their stores itself, so that
// reading a journal's history does not load the brokers that serve its
// appends. Whatever goes wrong fetching a fragment — it was removed by
// retention since the broker listed it, the store is out of reach, its
// file store is not mounted here — the Reader reads that fragment through
// a broker instead, which then serves it, or finds it gone and jumps, as
// for any read.

// directChunk is the size of the reads of a fragment fetched directly.
const directChunk = 256 << 10

// readAheadChunks is how many chunks of a fragment fetched directly are
// fetched, decompressed and verified ahead of the Reader. Doing so in a
// goroutine of its own overlaps that work with the Reader's caller's
// (recovery-log playback, decoding messages) on another core.
const readAheadChunks = 4

// fetched is a fragment's content, read ahead. Close cancels the fetch's
// context first, so that a read ahead blocked on a store that stopped
// sending returns, and then waits for the goroutine reading ahead.
type fetched struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (f *fetched) Close() error {
	f.cancel()
	return f.ReadCloser.Close()
}

// StoreHoldOff is how long a Client reads a store's fragments through
// brokers, without trying to fetch them itself, after fetching one failed
// other than for want of the fragment: a store out of reach would
// otherwise cost a timeout per fragment.
const StoreHoldOff = time.Minute

var (
	directReads = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_client_direct_reads_total",
		Help: "Fragments that Readers were told to fetch from their stores (direct reads), by result: ok, fallback (fetching failed, and brokers served the fragment), or closed (the Reader was closed before it read what it wanted of the fragment).",
	}, []string{"result"})
	directReadBytes = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_direct_read_bytes_total",
		Help: "Bytes of content that Readers read from fragment stores directly (also counted in quire_client_read_bytes_total).",
	})
)

// Every result's series exists from the start, so that alerts and rates on
// one (result="fallback") have a series to follow before its first read.
func init() {
	for _, result := range []string{"ok", "fallback", "closed"} {
		directReads.WithLabelValues(result)
	}
}

// directFetcher opens the URLs of fragments for direct reads.
type directFetcher struct {
	http *http.Client
	own  *http.Transport // The transport of http, if the Client made it.
	// nextWarn is when, in Unix nanoseconds, the next warning of a failed
	// direct read may be logged.
	nextWarn atomic.Int64

	mu sync.Mutex
	// heldOff maps the URLs of stores whose fragments are not fetched to
	// when they may be again (see StoreHoldOff).
	heldOff map[string]time.Time
}

func newDirectFetcher(hc *http.Client) *directFetcher {
	d := &directFetcher{http: hc}
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Fragments are compressed by their codec: take the stored bytes
		// as they are.
		t.DisableCompression = true
		// A store that accepts the connection but does not answer is
		// given up on, for a broker to serve the fragment.
		t.ResponseHeaderTimeout = 30 * time.Second
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		// Readers of several journals fetch from one store at once.
		t.MaxIdleConnsPerHost = 16
		d.own, d.http = t, &http.Client{Transport: t}
	}
	return d
}

// holdOff stops fetches from store for StoreHoldOff.
func (d *directFetcher) holdOff(store string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.heldOff == nil {
		d.heldOff = make(map[string]time.Time)
	}
	d.heldOff[store] = time.Now().Add(StoreHoldOff)
}

// heldOffUntil is when fetches from store may resume, if they are held
// off now.
func (d *directFetcher) heldOffUntil(store string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	until, ok := d.heldOff[store]
	if ok && !time.Now().Before(until) {
		delete(d.heldOff, store)
		return time.Time{}, false
	}
	return until, ok
}

func (d *directFetcher) close() {
	if d.own != nil {
		d.own.CloseIdleConnections()
	}
}

// open returns a reader of f's content from offset to its end, fetched
// from rawURL, f's stored bytes: decompressed, and verified against f's
// length and SHA-256 as it reaches f's end. Errors wrap fs.ErrNotExist if
// the store says that f is not there.
//
// The content is fetched, decompressed and verified ahead of the reader, up
// to readAheadChunks chunks, in a goroutine that Close stops and waits for.
func (d *directFetcher) open(ctx context.Context, f fragment.Fragment, rawURL string, offset int64) (_ io.ReadCloser, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	body, err := d.get(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	rc, err := fragment.NewReader(f, body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", redact(rawURL), err)
	}
	// Compressed content is read from its beginning.
	if _, err := io.CopyN(io.Discard, rc, offset-f.Begin); err != nil {
		rc.Close()
		return nil, fmt.Errorf("reading %s to offset %d: %w", redact(rawURL), offset, err)
	}
	ra, err := readahead.NewReadCloserSize(rc, readAheadChunks, directChunk)
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("reading %s ahead: %w", redact(rawURL), err)
	}
	return &fetched{ReadCloser: ra, cancel: cancel}, nil
}

// get returns the body at rawURL: a file's (file://) or an HTTP GET's.
func (d *directFetcher) get(ctx context.Context, rawURL string) (io.ReadCloser, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("fragment URL %q: %w", redact(rawURL), err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("fragment URL %q: a file URL of host %q, not of this one", redact(rawURL), u.Host)
		}
		// A file store that is not mounted here is not found: a broker
		// then serves the fragment.
		f, err := os.Open(filepath.FromSlash(u.Path))
		if err != nil {
			return nil, err // Names the path.
		}
		return f, nil
	case "http", "https":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
		if err != nil {
			return nil, fmt.Errorf("fragment URL %q: %w", redact(rawURL), err)
		}
		resp, err := d.http.Do(req)
		if err != nil {
			// A *url.Error names the whole URL, signature and all.
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err
			}
			return nil, fmt.Errorf("GET %s: %w", redact(rawURL), err)
		}
		if resp.StatusCode != http.StatusOK {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			err := fmt.Errorf("GET %s: %s: %q", redact(rawURL), resp.Status, msg)
			if resp.StatusCode == http.StatusNotFound {
				err = fmt.Errorf("%w: %w", fs.ErrNotExist, err)
			}
			return nil, err
		}
		return resp.Body, nil
	}
	return nil, fmt.Errorf("fragment URL %q: scheme %q is neither file nor http(s)", redact(rawURL), u.Scheme)
}

// redact is rawURL without its query, which holds a signed URL's
// signature: for errors and logs.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(a URL that does not parse)"
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}

// warn logs, at most every UnreachableWarnInterval, that a direct read
// failed and a broker serves the fragment instead.
func (d *directFetcher) warn(log *slog.Logger, journal string, offset int64, err error) {
	if log == nil {
		return
	}
	now, next := time.Now().UnixNano(), d.nextWarn.Load()
	if now < next || !d.nextWarn.CompareAndSwap(next, now+int64(UnreachableWarnInterval)) {
		return
	}
	log.Warn("reading a fragment from its store failed; reading it through a broker (Config.ReadThroughBrokers always does)",
		"journal", journal, "offset", offset, "err", err)
}

// directRead is a fragment that a Reader reads from its store.
type directRead struct {
	frag fragment.Fragment
	url  string
	end  int64         // Where the direct read ends: the fragment's end, or the read's EndOffset before it.
	rc   io.ReadCloser // Its content at the Reader's offset; nil until opened.
}

// direct reports whether a stream opened now asks for direct reads.
func (r *Reader) direct() bool {
	return !r.c.cfg.ReadThroughBrokers && !r.req.ThroughBrokers && r.offset >= r.throughUntil
}

// startDirect follows a broker's answer that the fragment pf, at the
// Reader's offset, is at rawURL in its store: the next Read fetches it
// from there.
func (r *Reader) startDirect(pf *protocol.Fragment, rawURL string) {
	r.closeStream() // The broker ends it: read on from the store.
	r.failed = false
	f, err := storedFragment(pf)
	if err == nil && (r.offset < f.Begin || r.offset >= f.End) {
		err = fmt.Errorf("broker sent fragment [%d, %d) for offset %d", f.Begin, f.End, r.offset)
	}
	if err != nil {
		r.fallBack(max(pf.GetEnd(), r.offset+1), err)
		return
	}
	if until, ok := r.c.direct.heldOffUntil(f.Store); ok {
		r.fallBack(f.End, fmt.Errorf("fragment [%d, %d): fetching from store %s failed recently; not trying again until %s",
			f.Begin, f.End, redact(f.Store), until.Format(time.RFC3339)))
		return
	}
	end := f.End
	if r.req.EndOffset != 0 {
		end = min(end, r.req.EndOffset)
	}
	if r.offset < end { // Else Read returns io.EOF at EndOffset.
		r.directRead = &directRead{frag: f, url: rawURL, end: end}
	}
}

// readDirect reads the next chunk of the fragment being read directly
// into r.buf. A failure to read it has the Reader read the fragment through
// a broker, and is not returned unless the Reader's context is done.
func (r *Reader) readDirect() error {
	d := r.directRead
	if err := r.ctx.Err(); err != nil {
		r.closeDirect()
		return fmt.Errorf("client: read journal %q: %w", r.req.Journal, err)
	}
	if d.rc == nil {
		rc, err := r.c.direct.open(r.ctx, d.frag, d.url, r.offset)
		if err != nil {
			return r.directFailed(err)
		}
		d.rc = rc
	}
	if r.directBuf == nil {
		r.directBuf = make([]byte, directChunk)
	}
	buf := r.directBuf[:min(int64(len(r.directBuf)), d.end-r.offset)]
	if _, err := io.ReadFull(d.rc, buf); err != nil {
		return r.directFailed(err)
	}
	if r.offset+int64(len(buf)) == d.frag.End {
		// Its last chunk: it is returned only once the content is
		// verified, which it is at its end.
		if _, err := io.ReadFull(d.rc, make([]byte, 1)); err != io.EOF {
			if err == nil {
				err = fmt.Errorf("fragment %s continues past its end", d.frag.Name())
			}
			return r.directFailed(err)
		}
	}
	if r.offset+int64(len(buf)) >= d.end {
		r.endDirect("ok")
	}
	r.buf = buf
	r.progress()
	readBytes.Add(float64(len(buf)))
	directReadBytes.Add(float64(len(buf)))
	return nil
}

// directFailed has the Reader read the rest of the fragment it failed to
// read directly through a broker, returning nil, unless the Reader's
// context is done.
func (r *Reader) directFailed(err error) error {
	d := r.directRead
	r.endDirect("") // Counted by fallBack.
	if cerr := r.ctx.Err(); cerr != nil {
		return fmt.Errorf("client: read journal %q at offset %d: %w", r.req.Journal, r.offset, cerr)
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fragment.ErrCorrupt) {
		// Not this fragment's trouble, but the store's, or the way to it.
		r.c.direct.holdOff(d.frag.Store)
	}
	r.fallBack(d.frag.End, fmt.Errorf("fragment [%d, %d) at %s: %w", d.frag.Begin, d.frag.End, redact(d.url), err))
	return nil
}

// fallBack has the Reader read through brokers up to until.
func (r *Reader) fallBack(until int64, err error) {
	r.throughUntil = max(until, r.offset+1)
	directReads.WithLabelValues("fallback").Inc()
	r.c.direct.warn(r.c.cfg.Logger, r.req.Journal, r.offset, err)
}

// closeDirect closes the fragment being read directly, if any, before
// the Reader read what it wanted of it.
func (r *Reader) closeDirect() { r.endDirect("closed") }

// endDirect closes the fragment being read directly, if any, and counts
// its fetch, if there was one, with result (unless empty).
func (r *Reader) endDirect(result string) {
	if d := r.directRead; d != nil && d.rc != nil {
		d.rc.Close()
		if result != "" {
			directReads.WithLabelValues(result).Inc()
		}
	}
	r.directRead = nil
}

// storedFragment is pf, as the fragment package describes it.
func storedFragment(pf *protocol.Fragment) (fragment.Fragment, error) {
	f := fragment.Fragment{Journal: pf.GetJournal(), Begin: pf.GetBegin(), End: pf.GetEnd(),
		Codec: fragment.Codec(pf.GetCodec() - 1), Store: pf.GetStore()}
	if pf.GetCodec() == protocol.Codec_CODEC_UNSPECIFIED {
		return f, fmt.Errorf("broker sent fragment [%d, %d) without its codec", f.Begin, f.End)
	}
	if len(pf.GetSum()) != len(f.Sum) {
		return f, fmt.Errorf("broker sent fragment [%d, %d) with a sum of %d bytes", f.Begin, f.End, len(pf.GetSum()))
	}
	copy(f.Sum[:], pf.GetSum())
	return f, f.Validate()
}
