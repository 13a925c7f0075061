package wordcount

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"strings"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/message"
)

// Publish reads lines from r, splits them into words at white space, and
// publishes each word as a committed message to the journal that
// message.ModuloMapping maps it to among the journals selector selects
// (Selector, normally): a word always goes to the same journal, so one
// shard counts it. It returns the number of words published, once every
// one is acknowledged (durable in the journals).
//
// Publish is one producer: a program that publishes again and again
// keeps a Publisher instead, since every producer a journal has seen
// stays in its readers' checkpoints for a while (see docs/messages.md).
func Publish(ctx context.Context, journals *client.Client, selector string, r io.Reader) (int, error) {
	p, err := NewPublisher(ctx, journals, selector)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	return p.Publish(ctx, r)
}

// Publisher publishes words as one producer, for as long as it lives.
// It is not safe for concurrent use.
type Publisher struct {
	parts    *message.Partitions
	mapping  func(message.Message) (string, error)
	appender *client.Appender
	pub      *message.Publisher
}

// NewPublisher returns a Publisher to the journals selector selects. ctx
// bounds its appends; Close releases it.
func NewPublisher(ctx context.Context, journals *client.Client, selector string) (*Publisher, error) {
	listCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	parts, err := message.NewPartitions(listCtx, journals, selector, 0)
	if err != nil {
		return nil, fmt.Errorf("%w (is the broker running? quire dev runs one)", err)
	}
	appender := journals.NewAppender(ctx, client.AppenderConfig{})
	return &Publisher{
		parts:    parts,
		mapping:  message.ModuloMapping(func(m message.Message) []byte { return []byte(m.(*Word).Word) }, parts),
		appender: appender,
		pub:      message.NewPublisher(appender, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now())),
	}, nil
}

// Close waits for the appends in flight and releases the Publisher.
func (p *Publisher) Close() error {
	err := p.appender.Close()
	p.parts.Close()
	return err
}

// Publish publishes the words of r, as the function Publish does.
func (p *Publisher) Publish(ctx context.Context, r io.Reader) (int, error) {
	var pending []*client.AppendHandle
	wait := func() error {
		for _, h := range pending {
			if _, err := h.Wait(ctx); err != nil {
				return fmt.Errorf("publishing: %w", err)
			}
		}
		pending = pending[:0]
		return nil
	}
	n := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		for _, w := range strings.Fields(sc.Text()) {
			m := &Word{Word: w}
			journal, err := p.mapping(m)
			if err != nil {
				return n, err
			}
			h, err := p.pub.PublishCommitted(ctx, journal, m)
			if err != nil {
				return n, fmt.Errorf("publishing %q to %s: %w", w, journal, err)
			}
			n++
			pending = append(pending, h)
			if len(pending) >= 4096 {
				if err := wait(); err != nil {
					return n, err
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return n, fmt.Errorf("reading words: %w", err)
	}
	return n, wait()
}

// partitionOf is the journal of journals (sorted) that holds word: the
// hash of message.ModuloMapping, over the journals that the shards read.
func partitionOf(word string, journals []string) string {
	h := fnv.New32a()
	h.Write([]byte(word))
	return journals[h.Sum32()%uint32(len(journals))]
}
