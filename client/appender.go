package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/quire-dev/quire/protocol"
)

// Defaults of AppenderConfig.
const (
	DefaultMaxBatchBytes    = 1 << 20
	DefaultMaxBufferedBytes = 64 << 20
)

// AppenderConfig configures an Appender.
type AppenderConfig struct {
	// MaxBatchBytes bounds a batch: records join a journal's batch while
	// it stays within this size. A larger record is a batch of its own.
	// Zero means DefaultMaxBatchBytes.
	MaxBatchBytes int
	// Linger is how long a batch waits for more records before it is
	// sent, counted from its first record. Zero sends a batch as soon as
	// the journal has no append in flight.
	Linger time.Duration
	// MaxBufferedBytes bounds the records held, across journals, from
	// Append until their batch completes; Append blocks while it is
	// reached. Zero means DefaultMaxBufferedBytes.
	MaxBufferedBytes int
}

// Appender appends records to journals asynchronously, in batches: the
// records of a journal that arrive while an append to it is in flight, or
// within Linger of each other, are sent as one Append. Each journal has at
// most one Append in flight, so its records commit in the order Append
// was called, and contiguously within a batch. An Appender is safe for
// concurrent use.
type Appender struct {
	c   *Client
	ctx context.Context
	cfg AppenderConfig
	mem *budget

	mu      sync.Mutex
	queues  map[string]*queue
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup // One per queue's goroutine.
}

// queue is a journal's batches waiting to be sent; only the last may be
// open to more records. A goroutine runs per non-empty queue.
type queue struct {
	journal string
	batches []*batch
	wake    chan struct{} // Signalled when the first batch is sealed.
}

// batch is records appended by one Append RPC.
type batch struct {
	journal string
	buf     []byte
	first   time.Time // When its first record arrived.
	sealed  bool      // Full: no more records join it.

	done   chan struct{}
	commit *protocol.Fragment // Set before done is closed.
	err    error
}

// AppendHandle reports the outcome of one record given to an Appender.
type AppendHandle struct {
	b          *batch
	begin, end int64 // The record within its batch.
}

// NewAppender returns an Appender appending through c. ctx bounds its
// appends: once it is done, pending records fail. Close the Appender to
// flush it and release its goroutines.
func (c *Client) NewAppender(ctx context.Context, cfg AppenderConfig) *Appender {
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	return &Appender{
		c:       c,
		ctx:     ctx,
		cfg:     cfg,
		mem:     newBudget(int64(cfg.MaxBufferedBytes)),
		queues:  make(map[string]*queue),
		closing: make(chan struct{}),
	}
}

// Append queues record for appending to journal, and returns a handle on
// its outcome. The Appender copies record. Append blocks while the
// Appender holds MaxBufferedBytes of records, until ctx is done. Records
// fail as their batch does: see Client.Append for the retries made.
func (a *Appender) Append(ctx context.Context, journal string, record []byte) (*AppendHandle, error) {
	n := int64(len(record))
	switch {
	case n == 0:
		return nil, fmt.Errorf("client: append to journal %q: record is empty", journal)
	case n > int64(a.cfg.MaxBufferedBytes):
		return nil, fmt.Errorf("client: append to journal %q: record of %d bytes is larger than the appender's buffer of %d bytes",
			journal, n, a.cfg.MaxBufferedBytes)
	}
	if err := a.mem.acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("client: append to journal %q: waiting for buffer space: %w", journal, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		a.mem.release(n)
		return nil, ErrClosed
	}
	q, err := a.queue(journal)
	if err != nil {
		a.mem.release(n)
		return nil, err
	}
	b := q.openBatch(a.cfg.MaxBatchBytes, len(record))
	h := &AppendHandle{b: b, begin: int64(len(b.buf))}
	b.buf = append(b.buf, record...)
	h.end = int64(len(b.buf))
	appenderRecords.Inc()
	if len(b.buf) >= a.cfg.MaxBatchBytes {
		q.seal(b)
	}
	return h, nil
}

// queue returns journal's queue, creating it and its goroutine if needed.
// a.mu is held.
func (a *Appender) queue(journal string) (*queue, error) {
	if q, ok := a.queues[journal]; ok {
		return q, nil
	}
	if err := protocol.ValidateJournalName(journal); err != nil {
		return nil, fmt.Errorf("client: append: %w", err)
	}
	q := &queue{journal: journal, wake: make(chan struct{}, 1)}
	a.queues[journal] = q
	a.wg.Add(1)
	go a.run(q)
	return q, nil
}

// openBatch returns the batch that n more bytes join.
func (q *queue) openBatch(maxBytes, n int) *batch {
	if k := len(q.batches); k > 0 {
		b := q.batches[k-1]
		if !b.sealed && len(b.buf)+n <= maxBytes {
			return b
		}
		q.seal(b)
	}
	b := &batch{journal: q.journal, first: time.Now(), done: make(chan struct{}), buf: getBuffer(maxBytes)}
	q.batches = append(q.batches, b)
	return b
}

// Batch buffers are reused: filling a fresh one would cost growing and
// zeroing it, which under load costs more than the appends themselves.
var bufferPool sync.Pool

func getBuffer(maxBytes int) []byte {
	if b, ok := bufferPool.Get().(*[]byte); ok && cap(*b) >= maxBytes {
		return (*b)[:0]
	}
	return make([]byte, 0, maxBytes)
}

func putBuffer(b []byte) {
	if cap(b) != 0 {
		bufferPool.Put(&b)
	}
}

func (q *queue) seal(b *batch) {
	if b.sealed {
		return
	}
	b.sealed = true
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting records, sends those queued, and waits until every
// batch has completed. Cancel the Appender's context to give up instead.
func (a *Appender) Close() error {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.closing)
	}
	a.mu.Unlock()
	a.wg.Wait()
	return nil
}

// run sends q's batches in order until q is empty.
func (a *Appender) run(q *queue) {
	defer a.wg.Done()
	for b := a.next(q); b != nil; b = a.next(q) {
		a.send(b)
	}
}

// next waits until q's first batch is due, and takes it; it returns nil,
// and removes q, once q is empty.
func (a *Appender) next(q *queue) *batch {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		if len(q.batches) == 0 {
			delete(a.queues, q.journal)
			return nil
		}
		b := q.batches[0]
		wait := a.cfg.Linger - time.Since(b.first)
		if b.sealed || a.closed || wait <= 0 {
			b.sealed = true
			q.batches[0] = nil
			q.batches = q.batches[1:]
			return b
		}
		a.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-q.wake:
		case <-a.closing:
		}
		t.Stop()
		a.mu.Lock()
	}
}

// send appends b and completes its records.
func (a *Appender) send(b *batch) {
	n := int64(len(b.buf))
	b.commit, b.err = a.c.append(a.ctx, &AppendRequest{Journal: b.journal}, &bytesContent{data: b.buf})
	putBuffer(b.buf)
	b.buf = nil
	close(b.done)
	a.mem.release(n)
	appenderBatches.Inc()
}

// Done is closed when the record's batch has completed.
func (h *AppendHandle) Done() <-chan struct{} { return h.b.done }

// Err waits until the record's batch completes, and returns its error.
func (h *AppendHandle) Err() error {
	<-h.b.done
	return h.b.err
}

// Commit waits until the record's batch completes, and returns the range
// of the journal the record was committed at, or nil if the batch failed.
func (h *AppendHandle) Commit() *protocol.Fragment {
	<-h.b.done
	if h.b.err != nil {
		return nil
	}
	begin := h.b.commit.GetBegin()
	return &protocol.Fragment{Journal: h.b.journal, Begin: begin + h.begin, End: begin + h.end}
}

// Wait waits until the record's batch completes, or ctx is done, and
// returns the record's commit (see Commit) and error.
func (h *AppendHandle) Wait(ctx context.Context) (*protocol.Fragment, error) {
	select {
	case <-h.b.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := h.Err(); err != nil {
		return nil, err
	}
	return h.Commit(), nil
}

// budget is a weighted semaphore over bytes; waiters are served in order.
type budget struct {
	mu      sync.Mutex
	avail   int64
	waiters []*waiter
}

type waiter struct {
	n     int64
	ready chan struct{} // Closed when the waiter holds its n bytes.
}

func newBudget(n int64) *budget { return &budget{avail: n} }

// acquire takes n bytes, waiting until they are free or ctx is done.
func (m *budget) acquire(ctx context.Context, n int64) error {
	m.mu.Lock()
	if len(m.waiters) == 0 && m.avail >= n {
		m.avail -= n
		m.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	m.waiters = append(m.waiters, w)
	m.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-w.ready: // Granted meanwhile: give it back.
		m.avail += n
	default:
		for i, o := range m.waiters {
			if o == w {
				m.waiters = append(m.waiters[:i], m.waiters[i+1:]...)
				break
			}
		}
	}
	m.grant()
	return ctx.Err()
}

// release returns n bytes.
func (m *budget) release(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.avail += n
	m.grant()
}

// grant serves waiters in order while their bytes are free. m.mu is held.
func (m *budget) grant() {
	for len(m.waiters) > 0 && m.waiters[0].n <= m.avail {
		w := m.waiters[0]
		m.waiters[0] = nil
		m.waiters = m.waiters[1:]
		m.avail -= w.n
		close(w.ready)
	}
}
