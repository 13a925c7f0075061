package recoverylog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/quire-dev/quire/client"
)

// PlayerConfig configures a Player.
type PlayerConfig struct {
	Client  *client.Client
	Journal string
	// Dir is where the player reproduces the recorded directory. It must
	// not exist, or be empty.
	Dir string
	// Tail keeps the player reading at the write head, as a hot standby,
	// until FinishAtWriteHead is called. Without it, Play stops at the
	// write head.
	Tail bool
	// Hints, if not nil, are hints of the log (see Recorder.Hints): the
	// player installs their inline files, reads only the log segments of
	// their other live files, then plays every op from their offset on.
	Hints *Hints
	// SegmentGap joins segments of the log to read (see Hints.Segments)
	// that are less than this many bytes apart, to read on rather than
	// open a new read. Zero means DefaultSegmentGap.
	SegmentGap int64
}

// DefaultSegmentGap is the default PlayerConfig.SegmentGap.
const DefaultSegmentGap = 256 << 10

// Progress of a Player.
type Progress struct {
	Offset    int64 // Log offset played up to: the end of the last op applied.
	WriteHead int64 // The log's write head, as last reported by a broker.
	BytesRead int64 // Log bytes read.
	// BytesSkipped counts log bytes, before the hints' offset, that
	// playback from hints did not read.
	BytesSkipped int64
	Ops          int64 // Ops applied.
}

// Player reproduces a recorded directory from its recovery log.
type Player struct {
	cfg   PlayerConfig
	fsm   *FSM
	files map[uint64]*os.File // Open for writing, by node.
	// w makes the writes of the play in progress; see withWriter.
	w *dirWriter

	finish     chan struct{}
	finishOnce sync.Once

	offset, writeHead, bytesRead, bytesSkipped, ops atomic.Int64
}

// NewPlayer returns a player of the log from its beginning into cfg.Dir,
// which it creates.
func NewPlayer(cfg PlayerConfig) (*Player, error) {
	if cfg.Client == nil || cfg.Dir == "" {
		return nil, errors.New("recoverylog: player config: Client and Dir are required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("recoverylog: player directory: %w", err)
	}
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("recoverylog: player directory: %w", err)
	}
	if len(ents) != 0 {
		return nil, fmt.Errorf("recoverylog: player directory %q is not empty (it holds %q)", cfg.Dir, ents[0].Name())
	}
	if h := cfg.Hints; h != nil {
		if h.Log != cfg.Journal {
			return nil, fmt.Errorf("%w: they are hints of log %q, not %q", ErrBadHints, h.Log, cfg.Journal)
		}
		if err := h.Validate(); err != nil {
			return nil, err
		}
	}
	if cfg.SegmentGap <= 0 {
		cfg.SegmentGap = DefaultSegmentGap
	}
	return &Player{cfg: cfg, fsm: NewFSM(0), files: map[uint64]*os.File{}, finish: make(chan struct{})}, nil
}

// FinishAtWriteHead tells a tailing Play to play up to the log's write
// head and return. It does not wait.
func (p *Player) FinishAtWriteHead() { p.finishOnce.Do(func() { close(p.finish) }) }

func (p *Player) finishing() bool {
	select {
	case <-p.finish:
		return true
	default:
		return false
	}
}

// Progress returns the player's progress; it is safe to call during Play.
func (p *Player) Progress() Progress {
	return Progress{Offset: p.offset.Load(), WriteHead: p.writeHead.Load(),
		BytesRead: p.bytesRead.Load(), BytesSkipped: p.bytesSkipped.Load(), Ops: p.ops.Load()}
}

// FSM returns the state played. Once Play returned nil, it is the state
// of the directory, and of the log up to its write head then: the state a
// Recorder continues from.
func (p *Player) FSM() *FSM { return p.fsm }

// Play plays the log into the directory until the write head or, when
// tailing, until FinishAtWriteHead and then the write head. When it
// returns nil, every file is synced and the directory is exactly the
// recorded state.
func (p *Player) Play(ctx context.Context) error {
	defer p.closeFiles()
	if p.cfg.Hints != nil {
		if err := p.playHints(ctx); err != nil {
			return err
		}
	}
	if p.cfg.Tail {
		return p.Tail(ctx)
	}
	if err := p.playFrom(ctx, false); err != nil {
		return err
	}
	return p.syncFiles()
}

// Tail plays on from where the player is, reading at the write head as a
// hot standby until FinishAtWriteHead, and then to the write head, as Play
// does with PlayerConfig.Tail. A standby first plays without Tail (to
// learn when it reached the write head), then calls Tail. Once finished,
// Tail plays to the current write head and returns: a new primary whose
// takeover of the log failed because its predecessor appended meanwhile
// calls it again to catch up.
func (p *Player) Tail(ctx context.Context) error {
	defer p.closeFiles()
	tail, cancel := context.WithCancel(ctx)
	go func() { // Ends with tail, which is cancelled before Tail returns.
		select {
		case <-p.finish:
			cancel()
		case <-tail.Done():
		}
	}()
	err := p.playFrom(tail, true)
	cancel()
	if ctx.Err() != nil || !p.finishing() || !errors.Is(err, context.Canceled) && err != nil {
		return err
	}
	if err := p.playFrom(ctx, false); err != nil {
		return err
	}
	return p.syncFiles()
}

// playFrom reads and applies ops from the state's offset. Without block,
// it returns nil at the write head, once every op read is made.
func (p *Player) playFrom(ctx context.Context, block bool) error {
	return p.withWriter(func() error { return p.readFrom(ctx, block) })
}

// withWriter runs play with a dirWriter for its writes, and returns once
// they are all made, with play's error or else the writer's.
func (p *Player) withWriter(play func() error) error {
	p.w = newDirWriter()
	err := play()
	if werr := p.w.close(); err == nil {
		err = werr
	}
	p.w = nil
	return err
}

func (p *Player) readFrom(ctx context.Context, block bool) error {
	rd := p.cfg.Client.NewReader(ctx, client.ReadRequest{Journal: p.cfg.Journal, Offset: p.fsm.Offset, Block: block})
	defer rd.Close()
	ops := &opReader{r: &countingReader{bufio.NewReaderSize(rd, 1<<20), &p.bytesRead}, offset: p.fsm.Offset}
	var gap error // The gap just crossed, if the last read crossed one.
	for {
		begin := ops.offset
		op, err := ops.next()
		p.writeHead.Store(rd.WriteHead())
		if to, ok := gapAt(err, begin); ok {
			gap = p.crossGap(err, begin, to)
			p.fsm.Offset, ops.offset = to, to
			continue
		} else if err != nil {
			return p.readError(err, begin, rd.WriteHead())
		}
		if err := p.apply(&op, begin, ops); err != nil && gap != nil {
			return fmt.Errorf("%w, after %w", err, gap)
		} else if err != nil {
			return err
		}
		gap = nil
	}
}

// gapAt tells whether err is the log's reader jumping over a gap that
// begins at offset, a frame's boundary, and returns where the log resumes.
//
// Such a gap held the frames of an append that no replica kept but one,
// since lost with its disk: the append failed at the log's primary, whose
// next pipeline rolled past it. It was never acknowledged, so no recorder
// counted it durable (its recorder, refused the retry, stopped), and the
// ops after the gap must follow from those before it; apply checks that
// by their sequence numbers. A gap within a frame is a corruption.
func gapAt(err error, offset int64) (int64, bool) {
	var jump *client.OffsetJumpError
	if !errors.As(err, &jump) || jump.From != offset {
		return 0, false
	}
	return jump.To, true
}

// crossGap records that playback crossed the gap [from, to), which jump
// reported, and returns it as an error to name if the next op does not
// follow: content is missing after all.
func (p *Player) crossGap(jump error, from, to int64) error {
	gapsCrossed.Inc()
	p.offset.Store(to)
	slog.Warn("recovery-log playback crossed a gap: an append that was never acknowledged, lost with the one replica that held it",
		"log", p.cfg.Journal, "from", from, "to", to)
	return fmt.Errorf("the gap [%d, %d) in the log (%w)", from, to, jump)
}

func (p *Player) readError(err error, offset, head int64) error {
	j := p.cfg.Journal
	switch {
	case err == io.EOF:
		return nil
	case err == io.ErrUnexpectedEOF:
		return fmt.Errorf("recoverylog: log %q: %w: op at offset %d is cut short by the write head %d",
			j, ErrCorrupt, offset, head)
	case errors.Is(err, ErrCorrupt):
		return fmt.Errorf("recoverylog: log %q: op at offset %d: %w", j, offset, err)
	case client.IsOffsetJump(err):
		return fmt.Errorf("recoverylog: log %q: content after offset %d is missing: %w", j, offset, err)
	}
	return fmt.Errorf("recoverylog: playing log %q at offset %d: %w", j, offset, err)
}

// apply checks op, which ops just read, against the state, makes it in
// the directory (or queues it to be made), then applies it to the state.
func (p *Player) apply(op *Op, begin int64, ops *opReader) error {
	end := ops.offset
	if err := p.fsm.check(op); err != nil {
		return fmt.Errorf("recoverylog: log %q: %w", p.cfg.Journal,
			&OpError{Offset: begin, Op: op.String(), Reason: err.Error()})
	}
	if err := p.applyToDir(op, ops); err != nil {
		return fmt.Errorf("recoverylog: log %q: op at offset %d (%s): %w", p.cfg.Journal, begin, op, err)
	}
	if err := p.fsm.Apply(op, begin, end); err != nil {
		return err // Checked above: not reached.
	}
	p.offset.Store(end)
	p.ops.Add(1)
	return nil
}

func (p *Player) path(rel string) string { return filepath.Join(p.cfg.Dir, filepath.FromSlash(rel)) }

// applyToDir makes a checked op in the directory, or queues it to p.w.
func (p *Player) applyToDir(op *Op, ops *opReader) error {
	switch op.Kind {
	case KindLink, KindUnlink, KindRename:
		// They may close a file, and the log orders them after the
		// writes before them.
		if err := p.w.wait(); err != nil {
			return err
		}
	}
	switch op.Kind {
	case KindCreate:
		if err := p.mkdirFor(op.Path); err != nil {
			return err
		}
		f, err := os.OpenFile(p.path(op.Path), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		p.files[op.Node] = f
		return nil
	case KindLink:
		if err := p.mkdirFor(op.Path); err != nil {
			return err
		}
		return os.Link(p.path(p.fsm.pathOf(op.Node)), p.path(op.Path))
	case KindUnlink:
		id := p.fsm.paths[op.Path]
		if len(p.fsm.nodes[id].Links) == 1 {
			p.closeFile(id)
		}
		return os.Remove(p.path(op.Path))
	case KindRename:
		if id, ok := p.fsm.paths[op.NewPath]; ok && len(p.fsm.nodes[id].Links) == 1 {
			p.closeFile(id)
		}
		if err := p.mkdirFor(op.NewPath); err != nil {
			return err
		}
		return os.Rename(p.path(op.Path), p.path(op.NewPath))
	case KindWrite, KindWriteAt:
		f, err := p.file(op.Node)
		if err != nil {
			return err
		}
		ops.body, err = p.w.writeAt(f, op.Node, ops.body, op.Data, op.Offset, false)
		return err
	case KindTruncate:
		f, err := p.file(op.Node)
		if err != nil {
			return err
		}
		return p.w.truncate(f, op.Node, op.Offset)
	}
	return fmt.Errorf("unknown op kind %d", uint8(op.Kind))
}

func (p *Player) mkdirFor(rel string) error {
	if dir := filepath.Dir(rel); dir != "." {
		return os.MkdirAll(p.path(dir), 0o755)
	}
	return nil
}

// file returns node's file, open for writing.
func (p *Player) file(id uint64) (*os.File, error) {
	if f, ok := p.files[id]; ok {
		return f, nil
	}
	f, err := os.OpenFile(p.path(p.fsm.pathOf(id)), os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	p.files[id] = f
	return f, nil
}

func (p *Player) closeFile(id uint64) {
	if f, ok := p.files[id]; ok {
		f.Close()
		delete(p.files, id)
	}
}

func (p *Player) closeFiles() {
	for id := range p.files {
		p.closeFile(id)
	}
}

// syncFiles makes the directory durable: every file written, and the
// directories.
func (p *Player) syncFiles() error {
	for id, f := range p.files {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("recoverylog: syncing node %d: %w", id, err)
		}
	}
	dirs := map[string]bool{".": true}
	for _, rel := range p.fsm.Paths() {
		dirs[filepath.Dir(rel)] = true
	}
	for dir := range dirs {
		if err := syncDir(p.path(dir)); err != nil {
			return fmt.Errorf("recoverylog: syncing directory %q: %w", dir, err)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// countingReader counts the bytes read through it: over a buffered
// reader, the log bytes that playback took, not those read ahead.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	playedBytes.Add(float64(n))
	return n, err
}
