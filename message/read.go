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
// splits the journal's bytes into frames, decodes them, and passes them
// through a Sequencer. Its Checkpoint, stored with the state the delivered
// messages produced, resumes it exactly.
type Reader struct {
	cfg     ReaderConfig
	journal *client.Reader
	br      *bufio.Reader
	seq     *Sequencer
	ready   []Delivery // delivered by the sequencer, not yet returned
}

// NewReader returns a Reader of cfg.Journal through c.
func NewReader(ctx context.Context, c *client.Client, cfg ReaderConfig) (*Reader, error) {
	seq, err := NewSequencer(cfg.Journal, cfg.Checkpoint)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	jr := c.NewReader(ctx, client.ReadRequest{Journal: cfg.Journal, Offset: cfg.Checkpoint.Offset, Block: cfg.Block})
	return &Reader{cfg: cfg, journal: jr, br: bufio.NewReaderSize(jr, 256<<10), seq: seq}, nil
}

// Next returns the next committed message and its offsets in the journal.
func (r *Reader) Next() (Delivery, error) {
	for len(r.ready) == 0 {
		if err := r.readFrame(); err != nil {
			return Delivery{}, err
		}
	}
	d := r.ready[0]
	r.ready = r.ready[1:]
	return d, nil
}

// readFrame reads, decodes and sequences one frame.
func (r *Reader) readFrame() error {
	begin := r.journal.Offset() - int64(r.br.Buffered())
	frame, err := r.cfg.Framing.Unpack(r.br)
	end := r.journal.Offset() - int64(r.br.Buffered())
	switch {
	case errors.Is(err, client.ErrOffsetJump):
		// Content was removed: frames resume at the new offset.
		r.cfg.Logger.Warn("message reader skipped a gap in its journal", "journal", r.cfg.Journal, "err", err)
		r.br.Reset(r.journal)
		return nil
	case errors.Is(err, ErrDesyncFrame) || errors.Is(err, ErrFrameTooLarge):
		return r.badFrame(begin, err)
	case errors.Is(err, io.ErrUnexpectedEOF) && !r.cfg.Block:
		return io.EOF // A frame still being written: not a message yet.
	case errors.Is(err, client.ErrOffsetNotYetAvailable):
		return io.EOF
	case err != nil:
		return err
	}
	m := r.cfg.New()
	if err := r.cfg.Framing.Unmarshal(frame, m); err != nil {
		return r.badFrame(begin, err)
	}
	ds, err := r.seq.Queue(m, begin, end)
	if err != nil {
		return fmt.Errorf("message: journal %s at offset %d: %w", r.cfg.Journal, begin, err)
	}
	r.ready = append(r.ready, ds...)
	return nil
}

func (r *Reader) badFrame(offset int64, err error) error {
	err = fmt.Errorf("message: journal %s at offset %d: %w", r.cfg.Journal, offset, err)
	if !r.cfg.SkipBadFrames {
		return err
	}
	r.cfg.Logger.Warn("message reader skipped a bad frame", "err", err)
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
func (r *Reader) Close() error { return r.journal.Close() }
