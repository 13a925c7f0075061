package client

import (
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
)

// content is the content of an Append: a sequence of chunks that can be
// replayed from the start for a retry, if it is small or seekable enough.
type content interface {
	// next returns the next chunk of at most max bytes, or io.EOF. The
	// chunk is not modified afterwards, so it may be sent as is.
	next(max int) ([]byte, error)
	// rewind prepares to replay the content from the start, or returns an
	// error wrapping ErrNotReplayable.
	rewind() error
	// release is called once the append is over, when no chunk is in use.
	release()
}

// bytesContent is content held in memory.
type bytesContent struct {
	data []byte
	pos  int
}

func (b *bytesContent) next(max int) ([]byte, error) {
	if b.pos == len(b.data) {
		return nil, io.EOF
	}
	n := min(max, len(b.data)-b.pos)
	chunk := b.data[b.pos : b.pos+n : b.pos+n]
	b.pos += n
	return chunk, nil
}

func (b *bytesContent) rewind() error {
	b.pos = 0
	return nil
}

func (b *bytesContent) release() {}

// readerContent is content read from an io.Reader. If the reader is also a
// working io.Seeker, rewind seeks back to where it started. Otherwise the
// chunks read are kept, as long as they total at most limit bytes, and
// replayed before reading further.
type readerContent struct {
	r      io.Reader
	seeker io.Seeker
	start  int64

	limit    int
	kept     [][]byte
	keptLen  int
	overflow bool  // More than limit bytes were read: kept is incomplete.
	replay   int   // Index in kept of the next chunk to replay.
	err      error // From the last read of r; returned once its data is.

	pooled [][]byte // chunks of a seeker's content, for release
}

// contentOf returns r as content; a nil r is empty content.
func contentOf(r io.Reader, limit int) content {
	if r == nil {
		return &bytesContent{}
	}
	rc := &readerContent{r: r, limit: limit}
	if s, ok := r.(io.Seeker); ok {
		if pos, err := s.Seek(0, io.SeekCurrent); err == nil {
			rc.seeker, rc.start = s, pos
		}
	}
	return rc
}

func (c *readerContent) next(max int) ([]byte, error) {
	if c.replay < len(c.kept) {
		chunk := c.kept[c.replay]
		c.replay++
		return chunk, nil
	}
	if c.err != nil {
		return nil, c.err
	}
	var chunk []byte
	if c.seeker != nil { // Not kept: its chunks may serve the next appends.
		chunk = getChunk(chunkHint(c.r, max))
		c.pooled = append(c.pooled, chunk)
	} else {
		chunk = make([]byte, chunkHint(c.r, max))
	}
	var n int
	for tries := 0; n == 0 && c.err == nil; tries++ {
		if tries == 100 {
			c.err = io.ErrNoProgress
			break
		}
		n, c.err = c.r.Read(chunk)
	}
	if n == 0 {
		return nil, c.err // io.EOF, or a read error.
	}
	chunk = chunk[:n:n]
	if c.seeker == nil && !c.overflow {
		if c.keptLen+n > c.limit {
			c.overflow, c.kept = true, nil
		} else {
			c.kept = append(c.kept, chunk)
			c.keptLen += n
			c.replay = len(c.kept)
		}
	}
	// An error that came with data is returned by the next call.
	return chunk, nil
}

func (c *readerContent) release() {
	for _, b := range c.pooled {
		putChunk(b)
	}
	c.pooled = nil
}

// Chunks of content read from an io.Seeker come from pools, by size
// class, and go back to them when the append is over: a chunk is dead once
// its message is sent (the codec copies it), and a seeker is read again
// for a retry rather than kept. Otherwise an append of 1 KiB from a
// bytes.Reader allocates its chunk each time: a third of the client's
// allocations. The classes reach MaxChunkSize: a large append from a
// seeker otherwise allocates, and clears, a chunk of up to ChunkSize for
// each message.
const (
	minPooledChunk = 512
	maxPooledChunk = minPooledChunk << (len(chunkPools) - 1) // 1 MiB, MaxChunkSize
)

// chunkPools[i] holds *[]byte of capacity minPooledChunk<<i.
var chunkPools [12]sync.Pool

// getChunk returns a buffer of length n, pooled if n is at most
// maxPooledChunk.
func getChunk(n int) []byte {
	if n > maxPooledChunk {
		return make([]byte, n)
	}
	i := bits.Len(uint(max(n, 1)-1) / minPooledChunk) // the least i with minPooledChunk<<i >= n
	if p, ok := chunkPools[i].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, minPooledChunk<<i)
}

// putChunk gives a buffer of getChunk back to its pool.
func putChunk(b []byte) {
	c := cap(b)
	if c < minPooledChunk || c > maxPooledChunk || c&(c-1) != 0 {
		return // Not one of getChunk's pooled buffers.
	}
	b = b[:0]
	chunkPools[bits.Len(uint(c/minPooledChunk))-1].Put(&b)
}

func (c *readerContent) rewind() error {
	if c.seeker != nil {
		if _, err := c.seeker.Seek(c.start, io.SeekStart); err != nil {
			return fmt.Errorf("%w: seek to %d: %w", ErrNotReplayable, c.start, err)
		}
		c.err = nil
		return nil
	}
	if c.overflow {
		return fmt.Errorf("%w: it is not an io.Seeker and is over %d bytes (the append buffer limit)",
			ErrNotReplayable, c.limit)
	}
	c.replay = 0 // Replay kept chunks; c.err (io.EOF, if any) follows them.
	return nil
}

// chunkHint sizes a read buffer: max, or less if r knows its remaining
// length (as bytes.Reader, bytes.Buffer and strings.Reader do).
func chunkHint(r io.Reader, max int) int {
	if l, ok := r.(interface{ Len() int }); ok {
		return min(max, l.Len()+1) // One more, to see io.EOF at once.
	}
	return max
}

// contentError is a failure to read an Append's content: never retried.
type contentError struct{ err error }

func (e *contentError) Error() string { return "read content: " + e.err.Error() }
func (e *contentError) Unwrap() error { return e.err }

func isContentError(err error) bool {
	var ce *contentError
	return errors.As(err, &ce)
}
