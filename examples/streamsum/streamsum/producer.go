package streamsum

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/message"
)

// ErrNotSetUp is returned by NewProducer when the chunk journals do not
// exist (yet: a broker may list them a moment after Setup created them).
var ErrNotSetUp = errors.New("not set up")

// ErrAborted marks a transaction that did not commit, and never will.
var ErrAborted = errors.New("streamsum: the transaction did not commit")

// A Producer publishes chunks of streams to the chunk journals, each call
// of Publish one transaction. It is not safe for concurrent use.
type Producer struct {
	journals *client.Client
	parts    *message.Partitions
	mapping  func(message.Message) (string, error)

	// The current producer: a failed transaction ends it (see abandon).
	cancel   context.CancelFunc
	appender *client.Appender
	pub      *message.Publisher
}

// NewProducer returns a Producer through journals, mapping each stream
// to a chunk journal by a hash of its name.
func NewProducer(ctx context.Context, journals *client.Client) (*Producer, error) {
	parts, err := message.NewPartitions(ctx, journals, ChunksSelector, 0)
	if err != nil {
		return nil, fmt.Errorf("streamsum: listing the chunk journals: %w", err)
	}
	if len(parts.Journals()) == 0 {
		parts.Close()
		return nil, fmt.Errorf("streamsum: %w: no journal matches %q (is the application set up? streamsum setup does it)", ErrNotSetUp, ChunksSelector)
	}
	p := &Producer{journals: journals, parts: parts}
	p.mapping = message.ModuloMapping(func(m message.Message) []byte { return []byte(m.(*Chunk).Stream) }, parts)
	p.renew()
	return p, nil
}

// renew starts a new producer, with a producer ID of its own.
func (p *Producer) renew() {
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	p.appender = p.journals.NewAppender(ctx, client.AppenderConfig{})
	p.pub = message.NewPublisher(p.appender, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now()))
}

// abandon ends the current producer after a failed transaction, and
// starts another. The failed transaction's messages stay uncommitted:
// only an acknowledgement of their own producer could commit them, and
// that producer writes no more.
func (p *Producer) abandon() {
	p.cancel()
	p.appender.Close()
	p.renew()
}

// Publish publishes chunks as one transaction. It returns nil once the
// transaction committed, in every journal it wrote; an error that
// errors.Is ErrAborted if it certainly did not commit (a message's append
// failed, so no acknowledgement was written); or another error if it may
// have committed in some journals and not others (an acknowledgement's
// append failed until ctx was done).
func (p *Producer) Publish(ctx context.Context, chunks []*Chunk) error {
	for _, c := range chunks {
		journal, err := p.mapping(c)
		if err == nil {
			_, err = p.pub.PublishUncommitted(ctx, journal, c)
		}
		if err != nil {
			p.abandon()
			return fmt.Errorf("%w: publishing chunk %d of stream %s: %w", ErrAborted, c.Seq, c.Stream, err)
		}
	}
	intents, err := p.pub.BuildAckIntents(nil)
	if err == nil {
		err = p.pub.AwaitTxnWrites(ctx)
	}
	if err != nil {
		p.abandon()
		return fmt.Errorf("%w: %w", ErrAborted, err)
	}
	// Every message is written: the transaction commits in each journal
	// as its acknowledgement is. Writing one again is harmless.
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		err = p.writeAcks(ctx, intents)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			p.abandon()
			return fmt.Errorf("streamsum: the transaction may have committed in some journals and not others: %w", err)
		case <-time.After(backoff):
		}
	}
}

func (p *Producer) writeAcks(ctx context.Context, intents []message.AckIntent) error {
	hs, err := p.pub.WriteAckIntents(ctx, intents)
	for _, h := range hs {
		if _, werr := h.Wait(ctx); werr != nil && err == nil {
			err = werr
		}
	}
	return err
}

// Close releases the Producer.
func (p *Producer) Close() {
	p.appender.Close()
	p.cancel()
	p.parts.Close()
}
