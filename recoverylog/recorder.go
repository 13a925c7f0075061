package recoverylog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/labels"
)

// AuthorRegister is the name of the journal register that holds the ID of
// the recorder that owns a recovery log.
const AuthorRegister = "author"

// ErrFenced is wrapped by the errors of a recorder that another recorder
// has deposed: the journal's author register no longer names it.
var ErrFenced = errors.New("recovery log: recorder is fenced: another recorder took over the log")

// ErrRecorderFailed is wrapped by the errors of a recorder whose append
// failed for another reason; it records nothing more.
var ErrRecorderFailed = errors.New("recovery log: recorder failed")

// Defaults of RecorderConfig.
const (
	DefaultMaxBuffer     = 4 << 20
	DefaultAppendTimeout = time.Minute
)

// RecorderConfig configures a Recorder.
type RecorderConfig struct {
	Client  *client.Client
	Journal string
	// Author is the recorder's ID: a label value, unique to this recorder
	// (for example the shard's assignment and the process).
	Author string
	// Dir is the recorded directory. Its files must be exactly those of
	// FSM (all of them, with the same content), or it is empty if FSM is
	// nil.
	Dir string
	// FSM is the log's state to continue from: a Player's, after it
	// finished at the write head (the recorder keeps a copy). Nil means
	// the log must be empty.
	FSM *FSM
	// Base is the file system that holds Dir; nil means vfs.Default.
	Base vfs.FS
	// MaxBuffer is how many bytes of ops the recorder holds before it
	// appends them without waiting for a sync. Zero means DefaultMaxBuffer.
	MaxBuffer int
	// AppendTimeout bounds each append, retries included. Zero means
	// DefaultAppendTimeout.
	AppendTimeout time.Duration
	// HintInlineMax is the largest node whose content Hints carry inline,
	// and HintInlineTotal bounds the inline content of one Hints (see
	// Hints). Zero means DefaultHintInlineMax and DefaultHintInlineTotal;
	// negative means none.
	HintInlineMax, HintInlineTotal int
}

// Recorder is a vfs.FS that records every change made to the files of its
// directory into a recovery log. See the package documentation.
type Recorder struct {
	cfg  RecorderConfig
	base vfs.FS
	root string // Absolute and clean.

	// ns serializes the changes to the directory's names (creating,
	// linking, renaming and removing files): each is made on the base FS
	// and recorded while it is held, so that the log records them in the
	// order the directory saw them. It is not mu, which every write, sync
	// and landing append takes: removing a large file can take tens of
	// milliseconds (the file system frees its blocks), and the syncs of
	// Pebble's commits would wait for its background removals. (A commit
	// that rotates the write-ahead log takes ns, and may wait for one.)
	// Lock order: ns, then mu.
	ns  sync.Mutex
	mu  sync.Mutex
	fsm *FSM // The state with every op recorded, appended or pending.
	// small holds the content of live nodes of at most HintInlineMax
	// bytes, for Hints.
	small map[uint64][]byte
	// writers counts the open handles writing each node; a live node
	// without any is sealed.
	writers map[uint64]int

	// The frames of the ops recorded form one stream, appended to the log
	// in order by flights (see fly). Guarded by mu.
	pending   [][]byte  // Frames not yet in a flight, in chunks; they end at fsm.Offset.
	sent      int64     // Log offset where pending begins: the end of the last flight.
	committed int64     // Log offset up to which flights have committed.
	want      int64     // Log offset up to which a sync waits for flights.
	flights   []*flight // In flight, in log order.
	spares    [][]byte  // Buffers of landed flights, for new chunks.
	err       error     // Sticky: set by the first failed append.
	landed    sync.Cond // Broadcast when committed or err change, on mu.
	stats     struct{ flights, peak, resent, bytes int64 }
	// maxFlights and chunkMax: those of the package when the recorder
	// was made.
	maxFlights, chunkMax int
}

var _ vfs.FS = (*Recorder)(nil)

// NewRecorder takes over the log and returns a recorder of cfg.Dir. The
// takeover is an empty append that requires the log's write head to be
// cfg.FSM.Offset (0 without an FSM) and sets the journal's author
// register to cfg.Author; every later append requires the register to
// still name cfg.Author. It fails with an error wrapping
// client.ErrWrongAppendOffset if the log has grown since the FSM's
// playback: play it again, then retry.
func NewRecorder(ctx context.Context, cfg RecorderConfig) (*Recorder, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Recorder{cfg: cfg, base: cfg.Base, fsm: NewFSM(0), small: map[uint64][]byte{}, writers: map[uint64]int{}}
	r.landed.L = &r.mu
	r.maxFlights, r.chunkMax = maxFlights, chunkMax
	if r.base == nil {
		r.base = vfs.Default
	}
	if cfg.FSM != nil {
		r.fsm = cfg.FSM.clone()
	}
	if r.cfg.MaxBuffer <= 0 {
		r.cfg.MaxBuffer = DefaultMaxBuffer
	}
	if r.cfg.AppendTimeout <= 0 {
		r.cfg.AppendTimeout = DefaultAppendTimeout
	}
	switch {
	case r.cfg.HintInlineMax == 0:
		r.cfg.HintInlineMax = DefaultHintInlineMax
	case r.cfg.HintInlineMax < 0:
		r.cfg.HintInlineMax = -1
	}
	switch {
	case r.cfg.HintInlineTotal == 0:
		r.cfg.HintInlineTotal = DefaultHintInlineTotal
	case r.cfg.HintInlineTotal < 0:
		r.cfg.HintInlineTotal = 0
	}
	root, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("recoverylog: recorder directory %q: %w", cfg.Dir, err)
	}
	r.root = root
	r.loadSmall()
	if err := r.takeOver(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// loadSmall reads the content of the FSM's small nodes from the
// directory, for Hints. A node it cannot read whole is not inlined.
func (r *Recorder) loadSmall() {
	for id, n := range r.fsm.nodes {
		if n.Length > int64(r.cfg.HintInlineMax) {
			continue
		}
		f, err := r.base.Open(filepath.Join(r.root, filepath.FromSlash(r.fsm.pathOf(id))))
		if err != nil {
			continue
		}
		c := make([]byte, n.Length)
		_, err = io.ReadFull(f, c)
		var extra [1]byte
		if m, _ := f.Read(extra[:]); err == nil && m == 0 {
			r.small[id] = c
		}
		f.Close()
	}
}

func (cfg *RecorderConfig) validate() error {
	switch {
	case cfg.Client == nil:
		return errors.New("recoverylog: recorder config: Client is nil")
	case cfg.Dir == "":
		return errors.New("recoverylog: recorder config: Dir is empty")
	}
	if err := labels.ValidateValue(cfg.Author); err != nil || cfg.Author == "" {
		return fmt.Errorf("recoverylog: recorder config: Author %q is not a non-empty label value: %v", cfg.Author, err)
	}
	return nil
}

func (r *Recorder) takeOver(ctx context.Context) error {
	head := r.fsm.Offset
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AppendTimeout)
	defer cancel()
	_, err := r.cfg.Client.Append(ctx, client.AppendRequest{
		Journal:  r.cfg.Journal,
		Offset:   &head,
		Subtract: labels.Set{{Name: AuthorRegister}},
		Union:    labels.Set{{Name: AuthorRegister, Value: r.cfg.Author}},
	}, nil)
	if err != nil {
		return fmt.Errorf("recoverylog: recorder %q taking over log %q at offset %d: %w",
			r.cfg.Author, r.cfg.Journal, head, err)
	}
	r.sent, r.committed, r.want = head, head, head
	return nil
}

// Author returns the recorder's ID.
func (r *Recorder) Author() string { return r.cfg.Author }

// Err returns the error that stopped the recorder, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Sync appends every op recorded so far to the log.
func (r *Recorder) Sync() error { return r.flush() }

// FSM returns a copy of the recorder's state: every op recorded, whether
// appended yet or not.
func (r *Recorder) FSM() *FSM {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fsm.clone()
}

// Lookup returns the node linked at name, a file of the recorded
// directory, and the log offset where the next op recorded will begin:
// how much of the log the node's ops span, which is what playing it
// costs (see Hints).
func (r *Recorder) Lookup(name string) (n Node, next int64, ok bool) {
	rel, ok := r.rel(name)
	if !ok {
		return Node{}, 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok = r.fsm.Lookup(rel)
	return n, r.fsm.Offset, ok
}

// rel returns name relative to the recorded directory, slash-separated,
// or false if it is outside.
func (r *Recorder) rel(name string) (string, bool) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", false
	}
	rel, err := filepath.Rel(r.root, abs)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// record assigns op its sequence number and author, applies it to the
// state and adds its frame to the pending ones. r.mu is held.
func (r *Recorder) record(op *Op) error {
	if r.err != nil {
		return r.err
	}
	op.Seq, op.Author = r.fsm.LastSeq+1, r.cfg.Author
	if op.Kind == KindCreate {
		op.Node = op.Seq
	}
	chunk := r.chunk()
	n, begin := len(*chunk), r.fsm.Offset
	*chunk = AppendOp(*chunk, op)
	if err := r.fsm.Apply(op, begin, begin+int64(len(*chunk)-n)); err != nil {
		*chunk = (*chunk)[:n]
		// The directory and the state disagree: a bug, or a file changed
		// behind the recorder's back. Nothing more can be recorded safely.
		r.err = fmt.Errorf("%w: recorder %q: %w", ErrRecorderFailed, r.cfg.Author, err)
		return r.err
	}
	switch op.Kind {
	case KindCreate:
		r.small[op.Node] = []byte{}
	case KindWrite, KindWriteAt, KindTruncate:
		r.writeSmall(op)
	case KindUnlink, KindRename:
		for id := range r.small {
			if _, ok := r.fsm.nodes[id]; !ok {
				delete(r.small, id)
			}
		}
	}
	r.kick()
	return nil
}

// writeSmall applies a recorded write or truncate to the content kept of
// a small node, which stops being kept once it outgrows HintInlineMax.
// r.mu is held.
func (r *Recorder) writeSmall(op *Op) {
	c, ok := r.small[op.Node]
	if !ok {
		return
	}
	length := r.fsm.nodes[op.Node].Length // The op is applied.
	if length > int64(r.cfg.HintInlineMax) {
		delete(r.small, op.Node)
		return
	}
	if int64(len(c)) < length {
		c = append(c, make([]byte, length-int64(len(c)))...)
	}
	c = c[:length]
	if op.Kind != KindTruncate {
		copy(c[op.Offset:], op.Data)
	}
	r.small[op.Node] = c
}

// Appending. The frames of the recorded ops form one stream, which the
// recorder appends to the log in order, in flights: appends of chunks of
// the stream (whole frames). A sync waits for the flights up to its own
// ops; the ops recorded meanwhile wait for a free flight, then go
// together in the next (group commit). Every flight requires the log's
// write head to be where the flight before it ends (AppendRequest.Offset)
// and the author register to name the recorder: the broker refuses,
// leaving nothing, an append that does not follow its predecessor or that
// a successor recorder has fenced, so the log always holds a prefix of
// the stream, and a retry of an append that had committed after all
// cannot append it twice.
//
// With more than one flight at once (maxFlights), a flight may reach the
// broker before the one ahead of it (appends are separate streams, and
// the broker sequences them as their handlers run). The broker holds an
// append whose offset is ahead of the write head until the appends before
// it commit (for up to a second); one refused for its offset all the same
// is sent again once the ones ahead of it have committed.

// Knobs of the appends: variables, for tests.
var (
	// maxFlights is how many appends are in flight at once. Two: the
	// next sync's append travels while the broker writes the one before
	// (10% more recorded throughput in BenchmarkPebbleWrites; three or
	// four did no better).
	maxFlights = 2
	// chunkMax is the size past which the recorder starts a new chunk of
	// the stream, so the most a flight carries (but one frame).
	chunkMax = 1 << 20
)

// flight is one append of a chunk of the stream, [begin, end) of the log.
type flight struct {
	data       []byte
	begin, end int64
	// raced: it was sent while another flight was ahead of it, which it
	// may have overtaken on its way to the broker.
	raced bool
	done  bool  // Guarded by Recorder.mu, with err.
	err   error // Of a done flight.
}

// errOvertaken marks the refusal of a raced flight for its offset: it may
// have reached the broker before the flight ahead of it.
var errOvertaken = errors.New("append reached the broker before the one ahead of it")

// chunk returns the chunk of the stream to add frames to. r.mu is held.
func (r *Recorder) chunk() *[]byte {
	if k := len(r.pending) - 1; k >= 0 && len(r.pending[k]) < r.chunkMax {
		return &r.pending[k]
	}
	var b []byte
	if k := len(r.spares) - 1; k >= 0 {
		b, r.spares = r.spares[k], r.spares[:k]
	}
	r.pending = append(r.pending, b)
	return &r.pending[len(r.pending)-1]
}

// backlog returns the length of the stream not yet in a flight. r.mu is
// held.
func (r *Recorder) backlog() int64 { return r.fsm.Offset - r.sent }

// kick starts flights of pending chunks while a flight is free and ops
// are pending that a sync waits for, or more than MaxBuffer bytes of
// them. r.mu is held.
func (r *Recorder) kick() {
	for r.err == nil && len(r.flights) < r.maxFlights && r.sent < r.fsm.Offset &&
		(r.sent < r.want || r.backlog() >= int64(r.cfg.MaxBuffer)) {
		data := r.pending[0]
		r.pending = slices.Delete(r.pending, 0, 1)
		if len(data) == 0 {
			continue
		}
		f := &flight{data: data, begin: r.sent, end: r.sent + int64(len(data)), raced: len(r.flights) > 0}
		r.sent = f.end
		r.flights = append(r.flights, f)
		r.stats.flights++
		r.stats.bytes += int64(len(data))
		r.stats.peak = max(r.stats.peak, int64(len(r.flights)))
		go r.fly(f)
	}
}

// fly appends f and lands it.
func (r *Recorder) fly(f *flight) {
	err := r.append(f)
	r.mu.Lock()
	defer r.mu.Unlock()
	f.done, f.err = true, err
	r.land()
}

// land takes the done flights at the head, in order: it advances
// r.committed past those that committed, sends again one that was
// overtaken, and otherwise stops the recorder with the first failure.
// Then it starts the next flights. r.mu is held.
func (r *Recorder) land() {
	for len(r.flights) > 0 && r.flights[0].done {
		f := r.flights[0]
		if r.err == nil && errors.Is(f.err, errOvertaken) {
			// The flights ahead of it have committed: send it again.
			r.stats.resent++
			f.raced, f.done, f.err = false, false, nil
			go r.fly(f)
			break
		}
		r.flights = slices.Delete(r.flights, 0, 1)
		switch {
		case r.err != nil: // Stopped: what lands after is moot.
		case f.err != nil:
			r.err = f.err
			reason := "failed"
			if errors.Is(f.err, ErrFenced) {
				reason = "fenced"
			}
			recorderFailures.WithLabelValues(reason).Inc()
		default:
			r.committed = f.end
			appendsTotal.Inc()
			appendedBytes.Add(float64(f.end - f.begin))
			if cap(f.data) <= 2*r.chunkMax && len(r.spares) < 2*r.maxFlights {
				r.spares = append(r.spares, f.data[:0])
			}
		}
	}
	r.kick()
	r.landed.Broadcast()
}

// startSync has the ops recorded so far appended, and returns the log
// offset they end at, for wait.
func (r *Recorder) startSync() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.fsm.Offset
	r.want = max(r.want, end)
	r.kick()
	return end
}

// wait returns once the log holds the ops up to end, or the recorder has
// failed.
func (r *Recorder) wait(end int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.err == nil && r.committed < end {
		r.landed.Wait()
	}
	return r.err
}

// flush appends every op recorded so far.
func (r *Recorder) flush() error { return r.wait(r.startSync()) }

// timedFlush is flush for a file's sync, whose wait it measures.
func (r *Recorder) timedFlush() {
	start := time.Now()
	r.flush()
	syncSeconds.Observe(time.Since(start).Seconds())
}

// append appends f's chunk, which must land at f.begin, after every op
// of the recorder before it, and while the log's author is the recorder.
func (r *Recorder) append(f *flight) error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.AppendTimeout)
	defer cancel()
	begin := f.begin
	commit, err := r.cfg.Client.Append(ctx, client.AppendRequest{
		Journal:        r.cfg.Journal,
		Offset:         &begin,
		CheckRegisters: r.check(),
	}, bytes.NewReader(f.data))
	wrong := errors.Is(err, client.ErrWrongAppendOffset)
	switch {
	case wrong && f.raced:
		return fmt.Errorf("%w: %w", errOvertaken, err)
	case wrong:
		// Did another recorder take over? It appended after it did.
		if perr := r.probe(); errors.Is(perr, client.ErrRegisterMismatch) {
			err = perr
		} else if r.holds(ctx, f) {
			// An attempt that failed had committed after all (on the
			// replica that became the journal's primary, say, when the
			// primary changed as it committed).
			retriedAppends.Inc()
			return nil
		}
	}
	switch {
	case errors.Is(err, client.ErrRegisterMismatch):
		return fmt.Errorf("%w: recorder %q: append of %d bytes for log offset %d refused: %w",
			ErrFenced, r.cfg.Author, len(f.data), begin, err)
	case wrong:
		return fmt.Errorf("%w: recorder %q: append of %d bytes for log offset %d: the log's write head is elsewhere: it holds content this recorder did not write, or an attempt of this append that was thought to have failed: %w",
			ErrRecorderFailed, r.cfg.Author, len(f.data), begin, err)
	case err != nil:
		return fmt.Errorf("%w: recorder %q: append of %d bytes for log offset %d: %w",
			ErrRecorderFailed, r.cfg.Author, len(f.data), begin, err)
	case commit.GetBegin() != begin:
		return fmt.Errorf("%w: recorder %q: append of %d bytes committed at log offset %d, expected %d: the log holds content this recorder did not write",
			ErrRecorderFailed, r.cfg.Author, len(f.data), commit.GetBegin(), begin)
	}
	return nil
}

// holds tells whether the log holds f's chunk at f's offsets: its append
// was refused for its offset because an earlier attempt of it, thought to
// have failed, had committed. (A failure as the journal's primary changes
// may leave an append committed on some replicas; the new primary then
// rolls the journal past it, and serves it.)
func (r *Recorder) holds(ctx context.Context, f *flight) bool {
	rd := r.cfg.Client.NewReader(ctx, client.ReadRequest{Journal: r.cfg.Journal, Offset: f.begin, EndOffset: f.end})
	defer rd.Close()
	got := make([]byte, len(f.data))
	if _, err := io.ReadFull(rd, got); err != nil {
		return false
	}
	return bytes.Equal(got, f.data)
}

// check is the register selector of the recorder's appends.
func (r *Recorder) check() string { return AuthorRegister + "=" + r.cfg.Author }

// probe makes an empty append that checks the author register only.
func (r *Recorder) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.AppendTimeout)
	defer cancel()
	_, err := r.cfg.Client.Append(ctx, client.AppendRequest{Journal: r.cfg.Journal, CheckRegisters: r.check()}, nil)
	return err
}

// Create creates name, recording the removal of a file it replaces.
func (r *Recorder) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	rel, ok := r.rel(name)
	if !ok {
		return r.base.Create(name, category)
	}
	r.ns.Lock()
	defer r.ns.Unlock()
	f, err := r.base.Create(name, category)
	if err != nil {
		return f, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created(f, rel), nil
}

// created records the creation of f, a new empty file at rel, and returns
// it as a file whose writes are recorded; a failed recorder returns f (it
// is the base FS, see Err). r.mu is held.
func (r *Recorder) created(f vfs.File, rel string) vfs.File {
	if r.err != nil {
		return f
	}
	node, err := r.recordCreate(rel)
	if err != nil {
		return f
	}
	return r.writer(f, node)
}

// writer returns f, open on node, as a file whose writes are recorded.
// r.mu is held.
func (r *Recorder) writer(f vfs.File, node uint64) vfs.File {
	r.writers[node]++
	return &recordedFile{File: f, r: r, node: node}
}

// recordCreate records the creation of an empty file at rel, replacing
// any. r.mu is held.
func (r *Recorder) recordCreate(rel string) (uint64, error) {
	if _, ok := r.fsm.paths[rel]; ok {
		if err := r.record(&Op{Kind: KindUnlink, Path: rel}); err != nil {
			return 0, err
		}
	}
	op := &Op{Kind: KindCreate, Path: rel}
	if err := r.record(op); err != nil {
		return 0, err
	}
	return op.Node, nil
}

// adopt records the file now at rel, which the recorder did not write
// (it was linked or renamed from outside the directory): its creation and
// its whole content. r.mu is held.
func (r *Recorder) adopt(name, rel string) error {
	node, err := r.recordCreate(rel)
	if err != nil {
		return err
	}
	f, err := r.base.Open(name)
	if err != nil {
		return fmt.Errorf("recoverylog: recording %q: %w", rel, err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if rerr := r.recordWrite(node, buf[:n]); rerr != nil {
				return rerr
			}
		}
		if err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("recoverylog: recording %q: %w", rel, err)
		}
	}
}

// recordWrite records data appended to node, unless the node has no link
// left (its content can no longer be seen). r.mu is held.
func (r *Recorder) recordWrite(node uint64, data []byte) error {
	n, ok := r.fsm.nodes[node]
	if !ok {
		return r.err
	}
	return r.recordWriteAt(node, n.Length, data)
}

// recordWriteAt records data written to node at off: as writes where
// they append, as write-at ops where they do not. It records nothing for
// a node with no link left. r.mu is held.
func (r *Recorder) recordWriteAt(node uint64, off int64, data []byte) error {
	if r.err != nil {
		return r.err
	}
	n, ok := r.fsm.nodes[node]
	if !ok {
		return nil
	}
	for len(data) > 0 {
		chunk := data[:min(len(data), maxWriteData, r.chunkMax)]
		op := &Op{Kind: KindWrite, Node: node, Offset: off, Data: chunk}
		if off != n.Length {
			op.Kind = KindWriteAt
		}
		if err := r.record(op); err != nil {
			return err
		}
		data, off = data[len(chunk):], off+int64(len(chunk))
	}
	return nil
}

// Link links newname to oldname's file.
func (r *Recorder) Link(oldname, newname string) error {
	newRel, ok := r.rel(newname)
	if !ok {
		return r.base.Link(oldname, newname)
	}
	r.ns.Lock()
	defer r.ns.Unlock()
	if err := r.base.Link(oldname, newname); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil
	}
	if oldRel, ok := r.rel(oldname); ok {
		if id, ok := r.fsm.paths[oldRel]; ok {
			r.record(&Op{Kind: KindLink, Node: id, Path: newRel})
			return nil
		}
	}
	r.adopt(newname, newRel)
	return nil
}

// Open opens name for reading; it records nothing.
func (r *Recorder) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return r.base.Open(name, opts...)
}

// OpenReadWrite opens name for reading and writing anywhere, creating it
// if it does not exist (recording its creation). Writes before the end of
// the file are recorded as write-at ops, and the returned file's Truncate
// as truncate ops: logs with them need a player of frame version 2 (see
// AppendOp). Pebble does not use it within its directory; SQLite does.
func (r *Recorder) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	rel, ok := r.rel(name)
	if !ok {
		return r.base.OpenReadWrite(name, category, opts...)
	}
	r.ns.Lock()
	defer r.ns.Unlock()
	f, err := r.base.OpenReadWrite(name, category, opts...)
	if err != nil {
		return f, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return f, nil // A failed recorder is the base FS (see Err).
	}
	node, ok := r.fsm.paths[rel]
	if !ok {
		// New, or (against the contract of RecorderConfig.Dir) not
		// recorded: either way, recorded whole from here.
		if r.adopt(name, rel) != nil {
			return f, nil
		}
		node = r.fsm.paths[rel]
	}
	return r.writer(f, node), nil
}

// OpenDir opens a directory; syncing it appends the pending ops.
func (r *Recorder) OpenDir(name string) (vfs.File, error) {
	f, err := r.base.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &syncedFile{File: f, r: r}, nil
}

// Remove removes name, recording the removal of its link.
func (r *Recorder) Remove(name string) error {
	rel, ok := r.rel(name)
	if !ok {
		return r.base.Remove(name)
	}
	r.ns.Lock()
	defer r.ns.Unlock()
	if err := r.base.Remove(name); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.fsm.paths[rel]; ok && r.err == nil {
		r.record(&Op{Kind: KindUnlink, Path: rel})
	}
	return nil
}

// RemoveAll removes name and everything beneath it, recording the removal
// of each link.
func (r *Recorder) RemoveAll(name string) error {
	rel, ok := r.rel(name)
	abs, _ := filepath.Abs(name)
	if !ok && abs != r.root {
		return r.base.RemoveAll(name)
	}
	r.ns.Lock()
	defer r.ns.Unlock()
	err := r.base.RemoveAll(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return err
	}
	for _, p := range r.fsm.Paths() {
		if abs == r.root || p == rel || strings.HasPrefix(p, rel+"/") {
			if _, serr := r.base.Stat(filepath.Join(r.root, filepath.FromSlash(p))); !os.IsNotExist(serr) {
				continue // Not removed, as err says.
			}
			if r.record(&Op{Kind: KindUnlink, Path: p}) != nil {
				return err
			}
		}
	}
	return err
}

// Rename renames oldname to newname, replacing any newname.
func (r *Recorder) Rename(oldname, newname string) error {
	oldRel, oldIn := r.rel(oldname)
	newRel, newIn := r.rel(newname)
	if !oldIn && !newIn {
		return r.base.Rename(oldname, newname)
	}
	r.ns.Lock()
	defer r.ns.Unlock()
	if err := r.base.Rename(oldname, newname); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return nil
	}
	oldID, tracked := r.fsm.paths[oldRel]
	switch {
	case tracked && !newIn:
		r.record(&Op{Kind: KindUnlink, Path: oldRel})
	case tracked:
		if newID, ok := r.fsm.paths[newRel]; ok && newID == oldID {
			return nil // Links of one file: rename(2) does nothing.
		}
		r.record(&Op{Kind: KindRename, Path: oldRel, NewPath: newRel})
	case newIn:
		r.adopt(newname, newRel)
	}
	return nil
}

// ReuseForWrite reuses oldname's file for newname, as Pebble recycles
// its write-ahead logs: the local file is renamed and written over from
// its start, which spares the commit that rotates the log an unlink of the
// old one (milliseconds for a file system to free its blocks) and the
// allocation of new blocks. The log records the removal of oldname and the
// creation of newname as an empty file, so that it holds only what is
// written to newname: a played directory has no stale bytes past them,
// which Pebble's recyclable log format tells from its records anyway.
//
// A file still open for writing is not reused (its writer would write
// into newname): it is removed, and newname created.
func (r *Recorder) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	oldRel, oldIn := r.rel(oldname)
	newRel, newIn := r.rel(newname)
	if !oldIn || !newIn || r.writing(oldRel) {
		if err := r.Remove(oldname); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		return r.Create(newname, category)
	}
	r.ns.Lock()
	defer r.ns.Unlock()
	f, err := r.base.ReuseForWrite(oldname, newname, category)
	if err != nil {
		return f, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return f, nil // A failed recorder is the base FS (see Err).
	}
	if _, ok := r.fsm.paths[oldRel]; ok {
		if r.record(&Op{Kind: KindUnlink, Path: oldRel}) != nil {
			return f, nil
		}
	}
	return r.created(f, newRel), nil
}

// writing tells whether the file at rel is open for writing.
func (r *Recorder) writing(rel string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.fsm.paths[rel]
	return ok && r.writers[id] > 0
}

// MkdirAll creates directories; they are not recorded (a player creates
// the directories of the paths it links).
func (r *Recorder) MkdirAll(dir string, perm os.FileMode) error { return r.base.MkdirAll(dir, perm) }

// Lock locks name; lock files are not recorded.
func (r *Recorder) Lock(name string) (io.Closer, error) { return r.base.Lock(name) }

// List lists dir.
func (r *Recorder) List(dir string) ([]string, error) { return r.base.List(dir) }

// Stat describes name.
func (r *Recorder) Stat(name string) (vfs.FileInfo, error) { return r.base.Stat(name) }

// PathBase is the base FS's.
func (r *Recorder) PathBase(path string) string { return r.base.PathBase(path) }

// PathJoin is the base FS's.
func (r *Recorder) PathJoin(elem ...string) string { return r.base.PathJoin(elem...) }

// PathDir is the base FS's.
func (r *Recorder) PathDir(path string) string { return r.base.PathDir(path) }

// GetDiskUsage is the base FS's.
func (r *Recorder) GetDiskUsage(path string) (vfs.DiskUsage, error) { return r.base.GetDiskUsage(path) }

// Unwrap returns the base FS.
func (r *Recorder) Unwrap() vfs.FS { return r.base }

// syncedFile is a file (or directory) whose syncs append the pending ops
// of every file, and wait for them to commit. They do not sync the local
// file system: the log is what makes the directory durable (a directory
// whose machine crashed is rebuilt by a player, never reused), and a
// local fsync would only add its latency, and the disk's work, to every
// sync.
type syncedFile struct {
	vfs.File
	r *Recorder
}

// Sync and SyncData wait until the pending ops are in the log. They never
// fail: a recorder that failed has Err set, and is the base FS.
func (f *syncedFile) Sync() error     { f.r.timedFlush(); return nil }
func (f *syncedFile) SyncData() error { f.r.timedFlush(); return nil }

// SyncTo starts appending the pending ops, and returns without waiting:
// fullSync false promises nothing durable (Pebble syncs a file before it
// relies on it, and calls SyncTo meanwhile to spread the work).
func (f *syncedFile) SyncTo(length int64) (bool, error) {
	f.r.startSync()
	return false, nil
}

// recordedFile is a file of the directory opened for writing.
type recordedFile struct {
	vfs.File
	r      *Recorder
	node   uint64
	closed bool // Guarded by r.mu.
}

func (f *recordedFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	if n > 0 {
		f.recordWrite(p[:n])
	}
	return n, err
}

// WriteAt writes p at off: an appending write where off is the file's
// end, a write-at op elsewhere.
func (f *recordedFile) WriteAt(p []byte, off int64) (int, error) {
	w, err := f.File.WriteAt(p, off)
	if w > 0 {
		f.record(func(r *Recorder) error { return r.recordWriteAt(f.node, off, p[:w]) })
	}
	return w, err
}

// Truncate sets the file's length, recording a truncate op. The base
// file system's files must have a Truncate method (os.File's).
func (f *recordedFile) Truncate(size int64) error {
	t, ok := f.File.(interface{ Truncate(int64) error })
	if !ok {
		return fmt.Errorf("recoverylog: truncating a %T: %w", f.File, errors.ErrUnsupported)
	}
	if err := t.Truncate(size); err != nil {
		return err
	}
	f.record(func(r *Recorder) error {
		if n, ok := r.fsm.nodes[f.node]; !ok || n.Length == size {
			return r.err
		}
		return r.record(&Op{Kind: KindTruncate, Node: f.node, Offset: size})
	})
	return nil
}

func (f *recordedFile) recordWrite(p []byte) error {
	return f.record(func(r *Recorder) error { return r.recordWrite(f.node, p) })
}

// record calls rec with r.mu held, then waits while more than MaxBuffer
// bytes of ops are pending.
func (f *recordedFile) record(rec func(*Recorder) error) error {
	r := f.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := rec(r); err != nil {
		return err
	}
	for r.err == nil && r.backlog() >= int64(r.cfg.MaxBuffer) {
		r.landed.Wait()
	}
	return r.err
}

// Close closes the file; once no handle writes its node, the node is
// sealed.
func (f *recordedFile) Close() error {
	f.r.mu.Lock()
	if !f.closed {
		f.closed = true
		if f.r.writers[f.node]--; f.r.writers[f.node] <= 0 {
			delete(f.r.writers, f.node)
		}
	}
	f.r.mu.Unlock()
	return f.File.Close()
}

func (f *recordedFile) Sync() error     { return (&syncedFile{f.File, f.r}).Sync() }
func (f *recordedFile) SyncData() error { return (&syncedFile{f.File, f.r}).SyncData() }
func (f *recordedFile) SyncTo(length int64) (bool, error) {
	return (&syncedFile{f.File, f.r}).SyncTo(length)
}
