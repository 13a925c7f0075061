package message

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/quire-dev/quire/client"
)

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	Journal string
	Framing Framing
	// New returns a new, empty message of the application's type.
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
	Logger        *slog.Logger
}

// Reader reads a journal's committed messages, each exactly once: it
// splits the journal's bytes into frames, decodes them (a Decoder), and
// passes them through a Sequencer. Its Checkpoint, stored with the state
// the delivered messages produced, resumes it exactly.
type Reader struct {
	dec   *Decoder
	seq   *Sequencer
	ready []Delivery // delivered by the sequencer, not yet returned
}

// NewReader returns a Reader of cfg.Journal through c.
func NewReader(ctx context.Context, c *client.Client, cfg ReaderConfig) (*Reader, error) {
	seq, err := NewSequencer(cfg.Journal, cfg.Checkpoint)
	if err != nil {
		return nil, err
	}
	return &Reader{dec: NewDecoder(ctx, c, cfg), seq: seq}, nil
}

// Next returns the next committed message and its offsets in the journal.
func (r *Reader) Next() (Delivery, error) {
	for len(r.ready) == 0 {
		m, begin, end, err := r.dec.Next()
		if err != nil {
			return Delivery{}, err
		}
		ds, err := r.seq.Queue(m, begin, end)
		if err != nil {
			return Delivery{}, fmt.Errorf("message: journal %s at offset %d: %w", r.dec.cfg.Journal, begin, err)
		}
		r.ready = append(r.ready, ds...)
	}
	d := r.ready[0]
	r.ready = r.ready[1:]
	return d, nil
}

// Decoder reads a journal's messages as they are written, committed or
// not: it splits the journal's bytes into frames and decodes them, without
// sequencing. A consumer that sequences elsewhere (in another goroutine
// than the one that decodes) reads with a Decoder; others use a Reader.
type Decoder struct {
	cfg     ReaderConfig
	journal *client.Reader
	br      *bufio.Reader
}

// NewDecoder returns a Decoder of cfg.Journal through c, from
// cfg.Checkpoint.Offset. It ignores the checkpoint's producers.
func NewDecoder(ctx context.Context, c *client.Client, cfg ReaderConfig) *Decoder {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	jr := c.NewReader(ctx, client.ReadRequest{Journal: cfg.Journal, Offset: cfg.Checkpoint.Offset, Block: cfg.Block})
	return &Decoder{cfg: cfg, journal: jr, br: bufio.NewReaderSize(jr, 256<<10)}
}

// Next returns the next message of the journal and its offsets [begin,
// end). Bad frames are skipped or returned as errors, as
// cfg.SkipBadFrames says.
func (d *Decoder) Next() (m Message, begin, end int64, err error) {
	for {
		m, begin, end, err = d.readFrame()
		if m != nil || err != nil {
			return m, begin, end, err
		}
	}
}

// Buffered is the number of bytes read from the journal and not yet
// decoded: while it is not zero, Next returns without waiting for the
// network.
func (d *Decoder) Buffered() int { return d.br.Buffered() }

// WriteHead is the journal's write head, as the broker last reported it.
func (d *Decoder) WriteHead() int64 { return d.journal.WriteHead() }

// Close releases the Decoder's stream.
func (d *Decoder) Close() error { return d.journal.Close() }

// readFrame reads and decodes one frame. It returns a nil message and
// error for a frame skipped or a gap.
func (d *Decoder) readFrame() (Message, int64, int64, error) {
	begin := d.journal.Offset() - int64(d.br.Buffered())
	frame, err := d.cfg.Framing.Unpack(d.br)
	end := d.journal.Offset() - int64(d.br.Buffered())
	switch {
	case errors.Is(err, client.ErrOffsetJump):
		// Content was removed: frames resume at the new offset.
		d.cfg.Logger.Warn("message reader skipped a gap in its journal", "journal", d.cfg.Journal, "err", err)
		d.br.Reset(d.journal)
		return nil, 0, 0, nil
	case errors.Is(err, ErrDesyncFrame) || errors.Is(err, ErrFrameTooLarge):
		return nil, 0, 0, d.badFrame(begin, err)
	case errors.Is(err, io.ErrUnexpectedEOF) && !d.cfg.Block:
		return nil, 0, 0, io.EOF // A frame still being written: not a message yet.
	case errors.Is(err, client.ErrOffsetNotYetAvailable):
		return nil, 0, 0, io.EOF
	case err != nil:
		return nil, 0, 0, err
	}
	m := d.cfg.New()
	if err := d.cfg.Framing.Unmarshal(frame, m); err != nil {
		return nil, 0, 0, d.badFrame(begin, err)
	}
	return m, begin, end, nil
}

func (d *Decoder) badFrame(offset int64, err error) error {
	err = fmt.Errorf("message: journal %s at offset %d: %w", d.cfg.Journal, offset, err)
	if !d.cfg.SkipBadFrames {
		return err
	}
	d.cfg.Logger.Warn("message reader skipped a bad frame", "err", err)
	return nil
}

// ErrMidBatch is returned by Checkpoint while messages that one
// acknowledgement committed together are only partly returned.
var ErrMidBatch = errors.New("message: checkpoint in the middle of a committed batch; call Next until Buffered is zero")

// Buffered is the number of committed messages read but not yet returned
// by Next. A checkpoint may be taken when it is zero.
func (r *Reader) Buffered() int { return len(r.ready) }

// Checkpoint returns the state from which a new Reader resumes exactly
// after the messages Next has returned, once Buffered is zero.
func (r *Reader) Checkpoint() (Checkpoint, error) {
	if len(r.ready) != 0 {
		return Checkpoint{}, ErrMidBatch
	}
	return r.seq.Checkpoint(), nil
}

// Close releases the Reader's stream.
func (r *Reader) Close() error { return r.dec.Close() }
