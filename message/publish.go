package message

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quire-dev/quire/client"
)

// Publisher publishes messages to journals, through a client.Appender that
// batches them. It stamps each message with a UUID of its producer ID, its
// clock (ticked per message, and never behind the wall clock's last
// reading) and flags.
//
// Committed messages (PublishCommitted) stand alone. Uncommitted messages
// (PublishUncommitted) form the current transaction, which BuildAckIntents
// ends: it returns, for every journal the transaction touched, an
// acknowledgement that commits the producer's messages in that journal up
// to its clock. Readers hold uncommitted messages until they read that
// acknowledgement. A consumer stores the intents with its state before
// writing them, so that if it crashes after its store commit its successor
// writes the same intents; if it crashes before, its successor writes the
// previous transaction's intents, whose older clock rolls back the
// uncommitted messages.
//
// A Publisher is safe for concurrent use, but a transaction is its
// publisher's: uncommitted messages of concurrent goroutines join the same
// transaction.
type Publisher struct {
	appender *client.Appender
	framing  Framing
	producer ProducerID

	mu    sync.Mutex
	clock Clock
	wall  wallClock
	// txn holds, per journal written by the current transaction, its last
	// message there: BuildAckIntents may ask it for an acknowledgement.
	txn map[string]Message
	// written are the appends of the current transaction's messages, and
	// sealedWrites those of the transaction that BuildAckIntents ended:
	// its acknowledgements wait for them (an acknowledgement must never
	// commit a message whose append failed).
	written, sealedWrites []*client.AppendHandle
	// sealed is set between BuildAckIntents and WriteAckIntents: a message
	// of the next transaction must not reach a journal before the previous
	// transaction's acknowledgement, which would roll it back.
	sealed bool
	// unsealed, if set (BlockWhileAckPending), is signalled when sealed
	// is cleared; publishes wait for it rather than fail.
	unsealed *sync.Cond
	buf      bytes.Buffer
	w        *bufio.Writer
}

// ErrAckPending is returned by publishes between BuildAckIntents and
// WriteAckIntents.
var ErrAckPending = errors.New("message: the previous transaction's acknowledgements are built but not written")

// NewPublisher returns a publisher of producer, writing through appender
// with framing, whose clock starts at clock (or the wall clock, if later).
// Plain publishers use NewProducerID and NewClock(time.Now()); consumers
// restore both from their checkpoint.
func NewPublisher(appender *client.Appender, framing Framing, producer ProducerID, clock Clock) *Publisher {
	p := &Publisher{appender: appender, framing: framing, producer: producer, clock: clock, txn: map[string]Message{}}
	p.w = bufio.NewWriter(&p.buf)
	return p
}

// Producer returns the publisher's producer ID.
func (p *Publisher) Producer() ProducerID { return p.producer }

// Clock returns the publisher's current clock.
func (p *Publisher) Clock() Clock {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clock
}

// PublishCommitted publishes m to journal as a message that commits on its
// own. The handle reports when the journal holds it.
func (p *Publisher) PublishCommitted(ctx context.Context, journal string, m Message) (*client.AppendHandle, error) {
	return p.publish(ctx, journal, m, OutsideTxn)
}

// PublishUncommitted publishes m to journal within the current
// transaction: readers see it once the transaction's acknowledgement of
// journal is written (see BuildAckIntents).
func (p *Publisher) PublishUncommitted(ctx context.Context, journal string, m Message) (*client.AppendHandle, error) {
	return p.publish(ctx, journal, m, ContinueTxn)
}

// BlockWhileAckPending makes publishes between BuildAckIntents and
// WriteAckIntents wait for WriteAckIntents (or for their context to end)
// rather than fail with ErrAckPending. A consumer sets it: its next
// transaction runs while the previous one commits, and its messages must
// not reach a journal before the previous acknowledgements are queued.
func (p *Publisher) BlockWhileAckPending() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unsealed = sync.NewCond(&p.mu)
}

func (p *Publisher) publish(ctx context.Context, journal string, m Message, flags Flags) (*client.AppendHandle, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.awaitUnsealed(ctx); err != nil {
		return nil, err
	}
	frame, err := p.stamp(m, flags)
	if err != nil {
		return nil, fmt.Errorf("message: publishing to %s: %w", journal, err)
	}
	h, err := p.appender.Append(ctx, journal, frame)
	if err != nil {
		return nil, err
	}
	if flags == ContinueTxn {
		p.txn[journal] = m
		p.written = append(p.written, h)
	}
	return h, nil
}

// awaitUnsealed returns ErrAckPending while p is sealed, or, with
// BlockWhileAckPending, waits until it is not. p.mu is held.
func (p *Publisher) awaitUnsealed(ctx context.Context) error {
	if !p.sealed {
		return nil
	}
	if p.unsealed == nil {
		return ErrAckPending
	}
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.unsealed.Broadcast()
	})
	defer stop()
	for p.sealed {
		if err := ctx.Err(); err != nil {
			return err
		}
		p.unsealed.Wait()
	}
	return nil
}

// stamp ticks the clock, sets m's UUID and returns its frame. p.mu is held.
func (p *Publisher) stamp(m Message, flags Flags) ([]byte, error) {
	p.clock.Update(p.wall.now())
	p.clock.Tick()
	m.SetUUID(BuildUUID(p.producer, p.clock, flags))
	p.buf.Reset()
	if err := p.framing.Marshal(m, p.w); err != nil {
		return nil, err
	}
	if err := p.w.Flush(); err != nil {
		return nil, err
	}
	return p.buf.Bytes(), nil // The appender copies it.
}

// wallClock reads the wall clock at half the cost of time.Now, which
// reads both the wall and the monotonic clocks: it adds the monotonic
// time elapsed since its last full reading to that reading's wall time,
// and takes a full reading again once a second, so that it follows a
// stepped wall clock within a second. Its zero value is ready to use.
type wallClock struct{ base time.Time }

func (w *wallClock) now() time.Time {
	if !w.base.IsZero() {
		if d := time.Since(w.base); d >= 0 && d < time.Second {
			return w.base.Add(d)
		}
	}
	w.base = time.Now()
	return w.base
}

// AwaitTxnWrites waits until every message of the transaction that the
// last BuildAckIntents ended is appended, and fails if one of those
// appends failed. A consumer calls it before it commits the intents with
// its state: once committed, a successor writes them, and an
// acknowledgement must never commit a message that was not written.
func (p *Publisher) AwaitTxnWrites(ctx context.Context) error {
	p.mu.Lock()
	writes := p.sealedWrites
	p.mu.Unlock()
	for _, h := range writes {
		if _, err := h.Wait(ctx); err != nil {
			return fmt.Errorf("message: a message of the transaction was not written, so it cannot be acknowledged: %w", err)
		}
	}
	return nil
}

// AckIntent is an encoded acknowledgement to write to Journal.
type AckIntent struct {
	Journal string `json:"journal"`
	Intent  []byte `json:"intent"`
}

// BuildAckIntents ends the current transaction: it returns an
// acknowledgement for every journal the transaction wrote, in journal
// order, each committing the producer's messages through the publisher's
// current clock. The caller writes them with WriteAckIntents. newAck
// returns the acknowledgement message for a journal; if nil, it is the
// NewAcknowledgement of the transaction's last message there.
func (p *Publisher) BuildAckIntents(newAck func(journal string) Message) ([]AckIntent, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	journals := make([]string, 0, len(p.txn))
	for j := range p.txn {
		journals = append(journals, j)
	}
	slices.Sort(journals)
	p.clock.Update(p.wall.now())
	p.clock.Tick()
	uuid := BuildUUID(p.producer, p.clock, AckTxn)
	out := make([]AckIntent, 0, len(journals))
	for _, j := range journals {
		var ack Message
		if newAck != nil {
			ack = newAck(j)
		} else {
			ack = p.txn[j].NewAcknowledgement(j)
		}
		ack.SetUUID(uuid)
		p.buf.Reset()
		if err := p.framing.Marshal(ack, p.w); err != nil {
			return nil, fmt.Errorf("message: building the acknowledgement of %s: %w", j, err)
		}
		if err := p.w.Flush(); err != nil {
			return nil, err
		}
		out = append(out, AckIntent{Journal: j, Intent: bytes.Clone(p.buf.Bytes())})
	}
	clear(p.txn)
	p.sealedWrites, p.written = p.written, nil
	p.sealed = len(out) != 0
	return out, nil
}

// WriteAckIntents writes acknowledgements built by BuildAckIntents (by this
// publisher, or by a predecessor of the same producer, restored from a
// checkpoint) and returns their handles.
//
// Appends are queued in order per journal, so messages published after it
// returns land after the acknowledgements.
//
// It first waits until every message of the transaction that
// BuildAckIntents ended is appended (AwaitTxnWrites), and fails, writing
// nothing, if one of those appends failed.
func (p *Publisher) WriteAckIntents(ctx context.Context, intents []AckIntent) ([]*client.AppendHandle, error) {
	if err := p.AwaitTxnWrites(ctx); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sealedWrites = nil
	hs := make([]*client.AppendHandle, 0, len(intents))
	for _, in := range intents {
		h, err := p.appender.Append(ctx, in.Journal, in.Intent)
		if err != nil {
			return hs, fmt.Errorf("message: writing the acknowledgement of %s: %w", in.Journal, err)
		}
		hs = append(hs, h)
	}
	p.sealed = false
	if p.unsealed != nil {
		p.unsealed.Broadcast()
	}
	return hs, nil
}
