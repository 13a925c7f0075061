package message

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/quire-dev/quire/client"
)

// Partitions is the live, sorted set of journals that a label selector
// selects: the partitions a mapping spreads messages over. It lists them
// again every refresh interval, so journals added later join the set.
type Partitions struct {
	client   *client.Client
	selector string

	mu       sync.RWMutex
	journals []string
	err      error // of the last listing

	cancel context.CancelFunc
	done   chan struct{}
}

// NewPartitions lists the journals selector selects and keeps the list
// fresh every refresh (default 30s) until Close.
func NewPartitions(ctx context.Context, c *client.Client, selector string, refresh time.Duration) (*Partitions, error) {
	if refresh <= 0 {
		refresh = 30 * time.Second
	}
	p := &Partitions{client: c, selector: selector, done: make(chan struct{})}
	if err := p.list(ctx); err != nil {
		return nil, err
	}
	ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go p.refresh(ctx, refresh)
	return p, nil
}

func (p *Partitions) refresh(ctx context.Context, every time.Duration) {
	defer close(p.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.list(ctx)
		}
	}
}

func (p *Partitions) list(ctx context.Context) error {
	js, err := p.client.ListAll(ctx, p.selector)
	names := make([]string, 0, len(js))
	for _, j := range js {
		names = append(names, j.GetSpec().GetName())
	}
	slices.Sort(names)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
	if err != nil {
		return fmt.Errorf("message: listing partitions %q: %w", p.selector, err)
	}
	p.journals = names
	return nil
}

// Journals returns the current partitions, sorted.
func (p *Partitions) Journals() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.journals
}

// Close stops refreshing.
func (p *Partitions) Close() {
	p.cancel()
	<-p.done
}

// ErrNoPartitions is returned when a mapping has no journal to map to.
var ErrNoPartitions = errors.New("message: no journal matches the partitions' selector")

// ModuloMapping maps a message to a partition by a hash of its key: the
// same key goes to the same journal while the partitions do not change.
func ModuloMapping(key func(Message) []byte, parts *Partitions) func(Message) (string, error) {
	return func(m Message) (string, error) {
		js := parts.Journals()
		if len(js) == 0 {
			return "", fmt.Errorf("%w %q", ErrNoPartitions, parts.selector)
		}
		h := fnv.New32a()
		h.Write(key(m))
		return js[h.Sum32()%uint32(len(js))], nil
	}
}
