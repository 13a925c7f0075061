package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/store"
)

// readBatch is what a source's reader hands to the transaction loop:
// messages decoded (not yet sequenced) and the journal's write head, or
// the error that ended the reader.
type readBatch struct {
	journal string
	msgs    []decoded
	head    int64
	err     error
}

type decoded struct {
	m          message.Message // nil for a frame that is not a message
	begin, end int64
}

// maxReadBatch bounds the messages of one readBatch.
const maxReadBatch = 256

// transactions reads the shard's sources and runs its transactions until
// the replica stops (nil) or fails.
func (r *replica) transactions(sh *Shard, st store.Store, cp store.Checkpoint) error {
	spec := sh.spec
	seqs := make(map[string]*message.Sequencer, len(spec.Sources))
	batches := make(chan readBatch, max(4, spec.ReadBufferSize/16))
	ctx, cancel := context.WithCancel(r.ctx)
	var readers sync.WaitGroup
	defer readers.Wait()
	defer cancel()
	for _, src := range spec.Sources {
		scp := sourceCheckpoint(cp.Sources[src.Journal], src.MinOffset)
		seq, err := message.NewSequencer(src.Journal, scp)
		if err != nil {
			return fmt.Errorf("source %s: %w", src.Journal, err)
		}
		seqs[src.Journal] = seq
		readers.Add(1)
		go func() { defer readers.Done(); r.read(ctx, src.Journal, scp, batches) }()
	}
	t := &txnLoop{r: r, sh: sh, st: st, seqs: seqs, batches: batches}
	return t.run(ctx)
}

// sourceCheckpoint is where to resume a source: its checkpoint, unless
// that is before the source's minimum offset. Then pending transactions
// that began before minOffset are given up; those that began at or after
// it are kept, and reading resumes at the first of them (a transaction
// of one producer before minOffset must not give up another's after it,
// whose acknowledgement may follow).
func sourceCheckpoint(cp message.Checkpoint, minOffset int64) message.Checkpoint {
	if cp.Offset >= minOffset {
		return cp
	}
	read := max(minOffset, cp.Read)
	c := message.Checkpoint{Offset: read, Read: read, Producers: maps.Clone(cp.Producers)}
	for id, p := range c.Producers {
		switch {
		case p.Begin < 0:
		case p.Begin < minOffset:
			p.Begin = -1
		default:
			c.Offset = min(c.Offset, p.Begin)
		}
		c.Producers[id] = p
	}
	return c
}

// read decodes a source's messages into batches, until ctx is done or the
// source fails.
func (r *replica) read(ctx context.Context, journal string, cp message.Checkpoint, out chan<- readBatch) {
	app := r.srv.cfg.App
	dec := message.NewDecoder(ctx, r.srv.cfg.Journals, message.ReaderConfig{
		Journal: journal, Framing: framingOf(app, journal), Checkpoint: cp, Block: true,
		New: func() message.Message { return app.NewMessage(journal) }, Logger: r.log})
	defer dec.Close()
	for {
		b := readBatch{journal: journal}
		for len(b.msgs) < maxReadBatch {
			m, begin, end, err := decodeNext(dec)
			if bad := (*message.BadFrameError)(nil); errors.As(err, &bad) {
				// Passed over by the transaction (a nil message), which
				// commits the source's offsets past it.
				r.log.Warn("shard skipped a frame of its source that is not a message", "err", err)
				m, err = nil, nil
			}
			if err != nil {
				b.err = err
				break
			}
			b.msgs = append(b.msgs, decoded{m, begin, end})
			if dec.Buffered() == 0 {
				break
			}
		}
		b.head = dec.WriteHead()
		if ctx.Err() != nil {
			return
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
	}
}

// decodeNext returns dec's next message; a panic of the application's
// NewMessage (or UnmarshalJSON, ...) is returned as an error.
func decodeNext(dec *message.Decoder) (m message.Message, begin, end int64, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoding a message panicked: %v", p)
		}
	}()
	return dec.Next()
}

// txnLoop runs a primary's transactions, pipelined: the next transaction
// consumes while the previous one's commit becomes durable and its
// acknowledgements are written, but it commits only after that.
type txnLoop struct {
	r       *replica
	sh      *Shard
	st      store.Store
	seqs    map[string]*message.Sequencer
	batches <-chan readBatch
	heads   map[string]int64
	// intents holds, per journal, the acknowledgement last committed
	// there: every checkpoint carries them all, so that a successor rolls
	// back whatever a crashed transaction left pending in any of them.
	intents map[string]message.AckIntent
	prev    *commitFuture
}

// commitFuture is a commit on its way: durable, then acknowledged.
type commitFuture struct {
	done  chan struct{}
	err   error
	cp    store.Checkpoint
	begin time.Time
}

func (t *txnLoop) run(ctx context.Context) error {
	t.heads = map[string]int64{}
	t.intents = map[string]message.AckIntent{}
	for {
		first, err := t.awaitFirst(ctx)
		if err != nil || first == nil {
			return err
		}
		if err := t.runTxn(ctx, *first); err != nil {
			// The previous commit uses the store and the appender, which
			// the caller closes once this returns: wait for it first.
			t.drainPrev()
			return err
		}
	}
}

// awaitFirst waits for the first batch of a transaction, resolving the
// previous commit meanwhile. It returns nil when ctx is done.
func (t *txnLoop) awaitFirst(ctx context.Context) (*readBatch, error) {
	for {
		var prevDone chan struct{}
		if t.prev != nil {
			prevDone = t.prev.done
		}
		select {
		case b := <-t.batches:
			return &b, nil
		case <-prevDone:
			if err := t.resolve(); err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, t.drainPrev()
		}
	}
}

// drainPrev waits for the previous commit as the replica stops, or as a
// transaction fails: its acknowledgements are written, or the successor
// writes them.
func (t *txnLoop) drainPrev() error {
	if t.prev == nil {
		return nil
	}
	<-t.prev.done
	t.prev = nil
	return nil
}

// resolve finishes the previous commit: its error fails the shard.
func (t *txnLoop) resolve() error {
	p := t.prev
	if p == nil {
		return nil
	}
	<-p.done
	t.prev = nil
	if f, ok := t.r.srv.cfg.App.(TxnFinisher); ok {
		if _, err := guard("FinishedTxn", func() (struct{}, error) {
			f.FinishedTxn(t.sh, t.st, p.err)
			return struct{}{}, nil
		}); err != nil {
			return err
		}
	}
	if p.err != nil {
		return p.err
	}
	txnsTotal.Inc()
	txnDuration.Observe(time.Since(p.begin).Seconds())
	t.r.committed(p.cp, t.heads)
	return nil
}

// runTxn runs one transaction from its first batch: it consumes while
// messages are ready and MaxTxnDuration has not passed, and, once they
// stall, until MinTxnDuration has passed and the previous transaction's
// commit has resolved; then it finalizes and commits.
func (t *txnLoop) runTxn(ctx context.Context, first readBatch) error {
	spec, app := t.r.currentSpec(), t.r.srv.cfg.App
	begin := time.Now()
	if b, ok := app.(TxnBeginner); ok {
		if _, err := guard("BeginTxn", func() (struct{}, error) { return struct{}{}, b.BeginTxn(t.sh, t.st) }); err != nil {
			return err
		}
	}
	if err := t.consume(first); err != nil {
		return err
	}
	maxTimer := time.NewTimer(spec.MaxTxnDuration)
	defer maxTimer.Stop()
	var minTimer <-chan time.Time
	if d := spec.MinTxnDuration - time.Since(begin); d > 0 {
		minTimer = time.After(d)
	}
	for time.Since(begin) < spec.MaxTxnDuration {
		select {
		case b := <-t.batches:
			if err := t.consume(b); err != nil {
				return err
			}
			continue
		default:
		}
		// Stalled. The transaction closes once its minimum duration has
		// passed and the previous commit resolved: until then, it may as
		// well consume what arrives.
		var prevDone chan struct{}
		if t.prev != nil {
			prevDone = t.prev.done
		}
		if minTimer == nil && prevDone == nil {
			break
		}
		select {
		case b := <-t.batches:
			if err := t.consume(b); err != nil {
				return err
			}
		case <-minTimer:
			minTimer = nil
		case <-prevDone:
			if err := t.resolve(); err != nil {
				return err
			}
		case <-maxTimer.C:
		case <-ctx.Done():
			return t.drainPrev() // The transaction is abandoned.
		}
	}
	if _, err := guard("FinalizeTxn", func() (struct{}, error) { return struct{}{}, app.FinalizeTxn(t.sh, t.st) }); err != nil {
		return err
	}
	return t.commit(ctx, begin)
}

// consume sequences a batch and applies its committed messages.
func (t *txnLoop) consume(b readBatch) error {
	if b.err != nil {
		return fmt.Errorf("reading source %s: %w", b.journal, b.err)
	}
	t.heads[b.journal] = b.head
	seq, app := t.seqs[b.journal], t.r.srv.cfg.App
	for _, d := range b.msgs {
		if d.m == nil { // A bad frame.
			if err := seq.Skip(d.begin, d.end); err != nil {
				return fmt.Errorf("source %s at offset %d: %w", b.journal, d.begin, err)
			}
			badFrames.Inc()
			continue
		}
		ds, err := seq.Queue(d.m, d.begin, d.end)
		if err != nil {
			return fmt.Errorf("source %s at offset %d: %w", b.journal, d.begin, err)
		}
		for _, del := range ds {
			if _, err := guard("Consume", func() (struct{}, error) {
				return struct{}{}, app.Consume(t.sh, t.st, Envelope{Journal: b.journal, Delivery: del})
			}); err != nil {
				return err
			}
		}
		messagesTotal.Add(float64(len(ds)))
	}
	return nil
}

// commit waits for the previous commit, then starts this one: the store's
// changes with the sources' checkpoints and the acknowledgement intents.
func (t *txnLoop) commit(ctx context.Context, begin time.Time) error {
	if err := t.resolve(); err != nil {
		return err
	}
	acks, err := t.sh.publisher.BuildAckIntents(nil)
	if err != nil {
		return fmt.Errorf("building acknowledgements: %w", err)
	}
	// The checkpoint commits the acknowledgements (a successor writes
	// them): what they commit must be written first.
	if err := t.sh.publisher.AwaitTxnWrites(ctx); err != nil {
		return fmt.Errorf("publishing the transaction's messages: %w", err)
	}
	for _, a := range acks {
		t.intents[a.Journal] = a
	}
	cp := store.Checkpoint{Sources: make(map[string]message.Checkpoint, len(t.seqs))}
	for j, seq := range t.seqs {
		producersPruned.Add(float64(seq.Prune(t.r.srv.cfg.ProducerPruneHorizon)))
		cp.Sources[j] = seq.Checkpoint()
	}
	for _, j := range slices.Sorted(maps.Keys(t.intents)) {
		cp.AckIntents = append(cp.AckIntents, t.intents[j])
	}
	wait := func() error { return nil }
	if pl, ok := t.st.(store.Pipeliner); ok {
		wait, err = pl.CommitAsync(ctx, cp)
	} else {
		err = t.st.StartCommit(ctx, cp)
	}
	if err != nil {
		return fmt.Errorf("committing store: %w", err)
	}
	f := &commitFuture{done: make(chan struct{}), cp: cp, begin: begin}
	t.prev = f
	t.r.wg.Add(1)
	go func() {
		defer t.r.wg.Done()
		defer close(f.done)
		if f.err = wait(); f.err != nil {
			f.err = fmt.Errorf("committing store: %w", f.err)
			return
		}
		// A recorder that failed (a successor fenced it) may have let
		// Pebble believe in a sync it did not record: the commit is
		// durable only if the recorder is still sound after it.
		if rec := t.sh.recorder; rec != nil && rec.Err() != nil {
			f.err = fmt.Errorf("committing store: %w", rec.Err())
			return
		}
		if f.err = writeAcks(t.r.ctx, t.sh.publisher, acks); f.err != nil {
			f.err = fmt.Errorf("writing acknowledgements: %w", f.err)
		}
	}()
	return nil
}

// committed records a resolved commit's read-through offsets, for Stat.
func (r *replica) committed(cp store.Checkpoint, heads map[string]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for j, c := range cp.Sources {
		r.readThrough[j] = c.Read
	}
	maps.Copy(r.heads, heads)
	r.txns++
	for j, h := range r.heads {
		sourceLag.WithLabelValues(r.id, j).Set(float64(max(0, h-r.readThrough[j])))
	}
	close(r.committedCh)
	r.committedCh = make(chan struct{})
}
