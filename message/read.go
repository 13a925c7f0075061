package message

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/quire-dev/quire/client"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Journal string
	// Framing of the journal's messages; nil means JSONLines.
	Framing Framing
	// New returns a new, empty message of the application's type. It is
	// called from several goroutines at once (see Decoders).
	New func() Message
	// Checkpoint is where to resume: reading starts at its Offset, and the
	// sequencer skips what was delivered before it. The zero Checkpoint
	// reads the journal from its start.
	Checkpoint Checkpoint
	// Block waits at the write head for more messages; otherwise Next
	// returns io.EOF there.
	Block bool
	// SkipBadFrames logs a frame that does not decode (naming its journal
	// and offset) and reads on; otherwise Next returns the error.
	SkipBadFrames bool
	// Decoders is the number of goroutines that decode frames in
	// parallel; zero means GOMAXPROCS, at most DefaultDecoders (a
	// process may hold many Decoders: a consumer one per source of each
	// of its shards). Messages are returned in journal
	// order whatever their number. New and the Framing's Unmarshal are
	// called from them.
	Decoders int
	Logger   *slog.Logger
}

// Reader reads a journal's committed messages, each exactly once: it
// splits the journal's bytes into frames, decodes them (a Decoder), and
// passes them through a Sequencer. Its Checkpoint, stored with the state
// the delivered messages produced, resumes it exactly.
type Reader struct {
	dec  *Decoder
	seq  *Sequencer
	skip bool // cfg.SkipBadFrames: its Decoder returns them, for seq.Skip
	log  *slog.Logger
	// ready[next:] were delivered by the sequencer, and not yet returned.
	ready []Delivery
	next  int
}

// NewReader returns a Reader of cfg.Journal through c.
func NewReader(ctx context.Context, c *client.Client, cfg ReaderConfig) (*Reader, error) {
	seq, err := NewSequencer(cfg.Journal, cfg.Checkpoint)
	if err != nil {
		return nil, err
	}
	r := &Reader{seq: seq, skip: cfg.SkipBadFrames, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.Default()
	}
	cfg.SkipBadFrames = false
	r.dec = NewDecoder(ctx, c, cfg)
	return r, nil
}

// Next returns the next committed message and its offsets in the journal.
func (r *Reader) Next() (Delivery, error) {
	for r.next == len(r.ready) {
		m, begin, end, err := r.dec.Next()
		var bad *BadFrameError
		if r.skip && errors.As(err, &bad) {
			r.log.Warn("message reader skipped a bad frame", "err", err)
			if err := r.seq.Skip(begin, end); err != nil {
				return Delivery{}, err
			}
			continue
		}
		if err != nil {
			return Delivery{}, err
		}
		ds, err := r.seq.Queue(m, begin, end)
		if err != nil {
			return Delivery{}, fmt.Errorf("message: journal %s at offset %d: %w", r.dec.cfg.Journal, begin, err)
		}
		if len(ds) == 1 {
			return ds[0], nil // The common case: no copy.
		}
		// ds is the sequencer's, reused by its next Queue: keep a copy.
		r.ready, r.next = append(r.ready[:0], ds...), 0
	}
	d := r.ready[r.next]
	r.ready[r.next] = Delivery{} // Not kept by the Reader.
	r.next++
	return d, nil
}

// A BadFrameError is a frame of a journal that is not a message: it did
// not decode, or its framing was broken (ErrDesyncFrame,
// ErrFrameTooLarge). Reading goes on after it, and a reader that
// sequences passes over it (Sequencer.Skip), so that its checkpoint
// moves past the frame as past a message.
type BadFrameError struct {
	Journal    string
	Begin, End int64 // the frame's offsets
	Err        error
}

func (e *BadFrameError) Error() string {
	return fmt.Sprintf("message: journal %s at offset %d: %v", e.Journal, e.Begin, e.Err)
}

func (e *BadFrameError) Unwrap() error { return e.Err }

// Decoder reads a journal's messages as they are written, committed or
// not: it splits the journal's bytes into frames and decodes them, without
// sequencing. A consumer that sequences elsewhere (in another goroutine
// than the one that decodes) reads with a Decoder; others use a Reader.
//
// A Decoder works as a pipeline: one goroutine reads the journal and
// splits it into batches of frames, cfg.Decoders goroutines decode the
// batches in parallel, and Next returns their messages in journal order.
// Decoding is most of the cost of reading small messages, so decoding on
// every core reads faster (small JSON messages 1.4× on 2 cores; see
// docs/benchmarks.md).
type Decoder struct {
	cfg     ReaderConfig
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	ctx     context.Context
	batches chan *frameBatch // split, in journal order; closed when split ends
	resume  chan struct{}    // the split waits on it after io.EOF
	free    chan *frameBatch // batches Next is done with, for the split to reuse
	pending atomic.Int64     // frames split and not yet returned by Next

	// Owned by the caller of Next.
	cur    *frameBatch
	next   int // index in cur.frames of the next to return
	head   int64
	err    error // once set, Next returns it
	atHead bool  // Next returned io.EOF; the split waits to resume
}

// A frameBatch is frames split from the journal, their bytes copied out
// of the split's buffer, and then their messages. An error that ends the
// journal's reading follows the frames.
type frameBatch struct {
	buf    []byte
	frames []frame
	head   int64         // the write head as of the batch
	err    error         // after the frames, the split's end
	done   chan struct{} // closed when the frames are decoded
}

type frame struct {
	lo, hi     int   // of the batch's buf
	begin, end int64 // journal offsets
	m          Message
	err        error // a frame that did not split or decode
	fatal      bool  // err is not a bad frame, so not skipped
}

// DefaultDecoders bounds the decoding goroutines of a Decoder whose
// ReaderConfig leaves their number to it.
const DefaultDecoders = 4

// Bounds of a batch: large enough that hand-offs between goroutines cost
// little per frame, small enough that a batch decodes in well under a
// millisecond.
const (
	batchFrames = 256
	batchBytes  = 64 << 10
)

// NewDecoder returns a Decoder of cfg.Journal through c, from
// cfg.Checkpoint.Offset. It ignores the checkpoint's producers. Its
// goroutines run until ctx is done or Close is called: call Close when
// done with it.
func NewDecoder(ctx context.Context, c *client.Client, cfg ReaderConfig) *Decoder {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Framing == nil {
		cfg.Framing = JSONLines
	}
	if cfg.Decoders <= 0 {
		cfg.Decoders = min(runtime.GOMAXPROCS(0), DefaultDecoders)
	}
	ctx, cancel := context.WithCancel(ctx)
	d := &Decoder{cfg: cfg, ctx: ctx, cancel: cancel,
		batches: make(chan *frameBatch, 2*cfg.Decoders), resume: make(chan struct{}, 1),
		free:   make(chan *frameBatch, 2*cfg.Decoders+2),
		atHead: !cfg.Block} // Without Block, reading starts at the first Next.
	jr := c.NewReader(ctx, client.ReadRequest{Journal: cfg.Journal, Offset: cfg.Checkpoint.Offset, Block: cfg.Block})
	work := make(chan *frameBatch, cfg.Decoders)
	d.wg.Add(1 + cfg.Decoders)
	go func() { defer d.wg.Done(); d.split(ctx, jr, work) }()
	for range cfg.Decoders {
		go func() { defer d.wg.Done(); d.decode(work) }()
	}
	return d
}

// Next returns the next message of the journal and its offsets [begin,
// end). Bad frames are skipped or returned as errors (a *BadFrameError,
// after which Next reads on), as cfg.SkipBadFrames says. Without
// cfg.Block, Next returns io.EOF at the write head, and may be called
// again to read what was written since; after any other error, Next
// returns it again.
func (d *Decoder) Next() (m Message, begin, end int64, err error) {
	for {
		if d.cur == nil || d.next == len(d.cur.frames) {
			if err := d.nextBatch(); err != nil {
				return nil, 0, 0, err
			}
			continue
		}
		f := d.cur.frames[d.next]
		d.cur.frames[d.next].m = nil // Not kept by the Decoder.
		d.next++
		d.pending.Add(-1)
		if f.err == nil {
			return f.m, f.begin, f.end, nil
		}
		if f.fatal {
			return nil, f.begin, f.end, fmt.Errorf("message: journal %s at offset %d: %w", d.cfg.Journal, f.begin, f.err)
		}
		err := &BadFrameError{Journal: d.cfg.Journal, Begin: f.begin, End: f.end, Err: f.err}
		if !d.cfg.SkipBadFrames {
			return nil, f.begin, f.end, err
		}
		d.cfg.Logger.Warn("message reader skipped a bad frame", "err", err)
	}
}

// nextBatch makes the next decoded batch current, or returns the error
// that ended the current one.
func (d *Decoder) nextBatch() error {
	if d.err != nil {
		return d.err
	}
	if b := d.cur; b != nil && b.err != nil {
		d.cur = nil
		if errors.Is(b.err, io.EOF) {
			d.atHead = true
			return io.EOF
		}
		d.err = b.err
		return d.err
	}
	if d.atHead {
		d.atHead = false
		d.resume <- struct{}{}
	}
	if d.cur != nil {
		d.recycle(d.cur)
	}
	b, ok := <-d.batches
	if !ok {
		// The split ended without an error to report: Close was called, or
		// the Decoder's context is done.
		d.err = fmt.Errorf("message: reading journal %s: %w", d.cfg.Journal, context.Cause(d.ctx))
		return d.err
	}
	<-b.done
	d.cur, d.next, d.head = b, 0, b.head
	return nil
}

// Buffered is the number of frames read from the journal that Next has
// not returned: while it is not zero, Next returns without waiting for
// the network.
func (d *Decoder) Buffered() int { return int(d.pending.Load()) }

// WriteHead is the journal's write head, as the broker reported it when
// the frames that Next last returned were read.
func (d *Decoder) WriteHead() int64 { return d.head }

// Close stops the Decoder's goroutines, waits for them, and releases its
// stream.
func (d *Decoder) Close() error {
	d.cancel()
	d.wg.Wait()
	return nil
}

// split reads the journal into batches of frames, and hands each to Next
// (in order) and to a decoding goroutine, until the journal's reading
// ends or ctx is done. At the write head without cfg.Block, it waits
// until Next is called again to read on.
func (d *Decoder) split(ctx context.Context, jr *client.Reader, work chan<- *frameBatch) {
	defer close(d.batches)
	defer close(work)
	defer jr.Close()
	br := bufio.NewReaderSize(jr, 256<<10)
	if !d.cfg.Block && !d.awaitResume(ctx) {
		return
	}
	for {
		b := d.fill(jr, br)
		end := b.err // b is Next's once it is sent.
		d.pending.Add(int64(len(b.frames)))
		select {
		case d.batches <- b:
		case <-ctx.Done():
			return
		}
		select {
		case work <- b:
		case <-ctx.Done():
			b.frames, b.err = nil, context.Cause(ctx)
			close(b.done)
			return
		}
		if end == nil {
			continue
		} else if !errors.Is(end, io.EOF) || !d.awaitResume(ctx) {
			return
		}
	}
}

// awaitResume waits for Next to be called for more, and tells whether it
// was (rather than ctx being done).
func (d *Decoder) awaitResume(ctx context.Context) bool {
	select {
	case <-d.resume:
		return true
	case <-ctx.Done():
		return false
	}
}

// recycle gives a batch whose messages Next returned back to the split.
// Its frames' bytes are no longer used: Unmarshal does not keep them.
func (d *Decoder) recycle(b *frameBatch) {
	b.buf, b.frames, b.err = b.buf[:0], b.frames[:0], nil
	select {
	case d.free <- b:
	default:
	}
}

// fill reads frames into a batch: at least one frame or error, and then
// as many as are buffered, up to the batch's bounds, so that it never
// waits for the network while it holds frames.
func (d *Decoder) fill(jr *client.Reader, br *bufio.Reader) *frameBatch {
	var b *frameBatch
	select {
	case b = <-d.free:
	default:
		// Small at first: a batch grows to its bounds only on a busy journal.
		b = &frameBatch{buf: make([]byte, 0, 4<<10), frames: make([]frame, 0, 16)}
	}
	b.done = make(chan struct{})
	for len(b.frames) < batchFrames && len(b.buf) < batchBytes && b.err == nil {
		begin := jr.Offset() - int64(br.Buffered())
		data, err := d.cfg.Framing.Unpack(br)
		end := jr.Offset() - int64(br.Buffered())
		switch {
		case err == nil:
			lo := len(b.buf)
			b.buf = append(b.buf, data...)
			b.frames = append(b.frames, frame{lo: lo, hi: len(b.buf), begin: begin, end: end})
		case errors.Is(err, client.ErrOffsetJump):
			// Content was removed: frames resume at the new offset.
			d.cfg.Logger.Warn("message reader skipped a gap in its journal", "journal", d.cfg.Journal, "err", err)
			br.Reset(jr)
		case errors.Is(err, ErrDesyncFrame) || errors.Is(err, ErrFrameTooLarge):
			b.frames = append(b.frames, frame{begin: begin, end: end, err: err})
		case errors.Is(err, io.ErrUnexpectedEOF) && !d.cfg.Block:
			b.err = io.EOF // A frame still being written: not a message yet.
		case errors.Is(err, client.ErrOffsetNotYetAvailable):
			b.err = io.EOF
		default:
			b.err = err
		}
		if br.Buffered() == 0 {
			break
		}
	}
	b.head = jr.WriteHead()
	return b
}

// decode decodes the frames of batches from work.
func (d *Decoder) decode(work <-chan *frameBatch) {
	for b := range work {
		for i := range b.frames {
			if f := &b.frames[i]; f.err == nil {
				f.m, f.err, f.fatal = d.unmarshal(b.buf[f.lo:f.hi])
			}
		}
		close(b.done)
	}
}

// unmarshal decodes a frame into a new message. A panic of the
// application's code (New, or a method that the framing calls) is
// returned as a fatal error.
func (d *Decoder) unmarshal(data []byte) (m Message, err error, fatal bool) {
	defer func() {
		if p := recover(); p != nil {
			m, err, fatal = nil, fmt.Errorf("decoding a message panicked: %v", p), true
		}
	}()
	m = d.cfg.New()
	if err := d.cfg.Framing.Unmarshal(data, m); err != nil {
		return nil, err, false
	}
	return m, nil, false
}

// ErrMidBatch is returned by Checkpoint while messages that one
// acknowledgement committed together are only partly returned.
var ErrMidBatch = errors.New("message: checkpoint in the middle of a committed batch; call Next until Buffered is zero")

// Buffered is the number of committed messages read but not yet returned
// by Next. A checkpoint may be taken when it is zero.
func (r *Reader) Buffered() int { return len(r.ready) - r.next }

// Checkpoint returns the state from which a new Reader resumes exactly
// after the messages Next has returned, once Buffered is zero.
func (r *Reader) Checkpoint() (Checkpoint, error) {
	if r.Buffered() != 0 {
		return Checkpoint{}, ErrMidBatch
	}
	return r.seq.Checkpoint(), nil
}

// Close releases the Reader's stream.
func (r *Reader) Close() error { return r.dec.Close() }
