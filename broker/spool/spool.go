package spool

import (
	"crypto/sha256"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/quire-dev/quire/labels"
)

// Spool is a fragment being written on local disk. It is not safe for
// concurrent use, except that ReadAt may be called concurrently with the
// writing methods for committed content.
type Spool struct {
	Journal string
	Begin   int64

	content *os.File
	commits *os.File
	closed  atomic.Bool // Files stay set once closed, so that a concurrent ReadAt fails cleanly.

	end       int64 // committed end offset
	pending   int64 // end offset including pending content
	hash      hash.Hash
	committed []byte // marshaled hash state at end
	record    []byte // the last commit record's encoding, its buffer reused
	spare     []byte // a buffer for the next hash state
	sum       [32]byte
	// crc is the CRC32C of the content through pending, committedCRC
	// through end: what a Reader checks the content against as it is
	// read back, more cheaply than by its SHA-256.
	crc, committedCRC uint32
	created           time.Time
}

// ErrClosed is returned by a Spool's methods after Close or Remove.
var ErrClosed = errors.New("spool is closed")

// Dir is the directory of journal's spools beneath root.
func Dir(root, journal string) string {
	return filepath.Join(root, url.PathEscape(journal))
}

func paths(root, journal string, begin int64) (content, commits string) {
	base := filepath.Join(Dir(root, journal), fmt.Sprintf("%016x", begin))
	return base + ".content", base + ".commits"
}

// Create starts an empty spool of journal at offset begin beneath root. A
// spool of the same journal and begin must not exist.
func Create(root, journal string, begin int64, registers labels.Set) (*Spool, error) {
	if begin < 0 {
		return nil, fmt.Errorf("creating spool of %s: begin offset %d is negative", journal, begin)
	}
	if err := os.MkdirAll(Dir(root, journal), 0o755); err != nil {
		return nil, fmt.Errorf("creating spool directory: %w", err)
	}
	cp, lp := paths(root, journal, begin)
	content, err := os.OpenFile(cp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating spool of %s at %d: %w", journal, begin, err)
	}
	commits, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
	if err != nil {
		content.Close()
		os.Remove(cp)
		return nil, fmt.Errorf("creating spool of %s at %d: %w", journal, begin, err)
	}
	s := &Spool{Journal: journal, Begin: begin, content: content, commits: commits,
		end: begin, pending: begin, hash: sha256.New(), created: time.Now()}
	if err := s.commit(registers); err != nil {
		s.Remove()
		return nil, err
	}
	return s, nil
}

// Created is when the spool was created.
func (s *Spool) Created() time.Time { return s.created }

// End is the committed end offset.
func (s *Spool) End() int64 { return s.end }

// Pending is the end offset including pending content.
func (s *Spool) Pending() int64 { return s.pending }

// Sum is the SHA-256 of the committed content.
func (s *Spool) Sum() [32]byte { return s.sum }

// PendingSum is the SHA-256 of the content through Pending().
func (s *Spool) PendingSum() [32]byte {
	var sum [32]byte
	s.hash.Sum(sum[:0])
	return sum
}

// Write appends pending content.
func (s *Spool) Write(p []byte) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.content.WriteAt(p, s.pending-s.Begin)
	s.hash.Write(p[:n])
	s.crc = crc32.Update(s.crc, castagnoli, p[:n])
	s.pending += int64(n)
	if err != nil {
		return n, fmt.Errorf("writing spool of %s at %d: %w", s.Journal, s.pending, err)
	}
	return n, nil
}

// Commit makes the pending content committed, with the journal's registers
// after it. It does not sync; see Sync.
func (s *Spool) Commit(registers labels.Set) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.commit(registers)
}

func (s *Spool) commit(registers labels.Set) error {
	var sum [32]byte
	s.hash.Sum(sum[:0])
	rec, err := appendRecord(s.record[:0], s.pending, sum, registers.Append)
	if err != nil {
		return fmt.Errorf("recording commit of %s at %d: %w", s.Journal, s.pending, err)
	}
	s.record = rec
	if _, err := s.commits.Write(rec); err != nil {
		return fmt.Errorf("recording commit of %s at %d: %w", s.Journal, s.pending, err)
	}
	// Into a spare buffer: committed stays whole if this fails.
	state, err := s.hash.(encoding.BinaryAppender).AppendBinary(s.spare[:0])
	if err != nil {
		return fmt.Errorf("saving spool hash state: %w", err)
	}
	s.end, s.sum, s.committed, s.spare = s.pending, sum, state, s.committed
	s.committedCRC = s.crc
	return nil
}

// Rollback discards pending content.
func (s *Spool) Rollback() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if s.pending == s.end {
		return nil
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(s.committed); err != nil {
		return fmt.Errorf("restoring spool hash state: %w", err)
	}
	s.hash, s.crc, s.pending = h, s.committedCRC, s.end
	if err := s.content.Truncate(s.end - s.Begin); err != nil {
		return fmt.Errorf("rolling back spool of %s to %d: %w", s.Journal, s.end, err)
	}
	return nil
}

// Sync flushes both files to stable storage.
func (s *Spool) Sync() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.content.Sync(); err != nil {
		return fmt.Errorf("syncing spool of %s: %w", s.Journal, err)
	}
	if err := s.commits.Sync(); err != nil {
		return fmt.Errorf("syncing spool commits of %s: %w", s.Journal, err)
	}
	return nil
}

// ReadAt reads committed content at journal offset off. It returns io.EOF
// at the committed end, and ErrClosed once the spool is closed (a reader
// of a spool that was persisted and removed reads on from the store).
// Callers must not read beyond End() as of their call; content there may
// be pending.
func (s *Spool) ReadAt(p []byte, off int64) (int, error) {
	if off < s.Begin {
		return 0, fmt.Errorf("reading spool of %s: offset %d is before its begin %d", s.Journal, off, s.Begin)
	}
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.content.ReadAt(p, off-s.Begin)
	if errors.Is(err, os.ErrClosed) {
		err = ErrClosed // Closed while reading.
	}
	return n, err
}

// Reader returns a reader of the committed content [Begin, End()).
func (s *Spool) Reader() *Reader {
	return &Reader{r: io.NewSectionReader(s.content, 0, s.end-s.Begin), sum: s.sum, want: s.committedCRC}
}

// Reader reads a spool's committed content, as of the call to
// Spool.Reader, from its file, and checks what it read against the
// CRC32C the spool computed from the content as it was written (Verify).
// The content's SHA-256 was computed from the same bytes then, so a
// persister need not hash them again: it is a fragment.CheckedContent.
type Reader struct {
	r    *io.SectionReader
	sum  [32]byte // the spool's SHA-256 of the content
	want uint32   // and its CRC32C
	crc  uint32   // of what was read
	read int64
}

func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.crc = crc32.Update(r.crc, castagnoli, p[:n])
	r.read += int64(n)
	return n, err
}

// Close does nothing: the spool owns its file.
func (r *Reader) Close() error { return nil }

// Verify returns nil if the reader has read the whole content, the
// content's SHA-256 is sum, and the bytes read are those written (by
// their CRC32C).
func (r *Reader) Verify(sum [32]byte) error {
	switch {
	case sum != r.sum:
		return fmt.Errorf("the spool's content has SHA-256 %x, not %x", r.sum, sum)
	case r.read != r.r.Size():
		return fmt.Errorf("%d of the spool's %d bytes were read", r.read, r.r.Size())
	case r.crc != r.want:
		return fmt.Errorf("the spool's content reads back with CRC32C %08x, not the %08x it was written with: its file changed", r.crc, r.want)
	}
	return nil
}

// Close closes the spool's files, keeping them on disk (to be recovered).
// A ReadAt racing it fails with ErrClosed, never worse.
func (s *Spool) Close() error {
	if s.closed.Swap(true) {
		return ErrClosed
	}
	return errors.Join(s.content.Close(), s.commits.Close())
}

// Remove closes and deletes the spool's files, once its content is
// persisted.
func (s *Spool) Remove() error {
	if s.closed.Load() {
		return ErrClosed
	}
	cp, lp := s.content.Name(), s.commits.Name()
	err := s.Close()
	return errors.Join(err, os.Remove(cp), os.Remove(lp))
}

// MoveTo closes the spool and moves its files into dir (created if
// needed), out of the spools that Recover finds.
func (s *Spool) MoveTo(dir string) error {
	content, commits := s.content.Name(), s.commits.Name()
	if err := s.Close(); err != nil {
		return err
	}
	return moveFiles(dir, s.Journal, &content, &commits)
}

func parseBegin(name, ext string) (int64, bool) {
	if len(name) != 16+len(ext) || filepath.Ext(name) != ext {
		return 0, false
	}
	v, err := strconv.ParseUint(name[:16], 16, 63)
	return int64(v), err == nil
}
