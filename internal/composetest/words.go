package composetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
)

// Vocabulary is the words a Publisher publishes.
var Vocabulary = func() []string {
	var ws []string
	for i := range 24 {
		ws = append(ws, fmt.Sprintf("w%02d", i))
	}
	return ws
}()

// A Publisher publishes batches of words to the word count without
// pause, each in one transaction, and counts what was acknowledged.
type Publisher struct {
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	acked map[string]uint64
	// failed counts the words of batches that failed: they may count
	// all the same (their transaction may have committed).
	failed map[string]uint64
	total  int
	times  []time.Time // when each batch was acknowledged
	errs   []error
}

// StartPublishing starts a Publisher on the cluster; it stops when the
// test ends, if not before.
func (c *Cluster) StartPublishing() *Publisher {
	p := &Publisher{stopc: make(chan struct{}), done: make(chan struct{}), acked: map[string]uint64{}, failed: map[string]uint64{}}
	journals := c.Journals()
	go func() {
		defer close(p.done)
		// One producer for the whole run, as a program that publishes
		// would be: a producer per batch would leave every shard's
		// checkpoint with thousands of producers, which each transaction
		// writes to its recovery log.
		var pub *wordcount.Publisher
		defer func() {
			if pub != nil {
				pub.Close()
			}
		}()
		rnd := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-p.stopc:
				return
			default:
			}
			words := make([]string, 8)
			for i := range words {
				words[i] = Vocabulary[rnd.IntN(len(Vocabulary))]
			}
			p.publish(func(ctx context.Context, text string) (int, error) {
				if pub == nil {
					var err error
					if pub, err = wordcount.NewPublisher(context.Background(), journals, wordcount.Selector); err != nil {
						return 0, err
					}
				}
				n, err := pub.Publish(ctx, strings.NewReader(text))
				if err != nil {
					pub.Close() // A new producer for the next batch, as a restarted program.
					pub = nil
				}
				return n, err
			}, words)
		}
	}()
	c.t.Cleanup(func() { p.Stop() })
	return p
}

func (p *Publisher) publish(publish func(context.Context, string) (int, error), words []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := publish(ctx, strings.Join(words, " "))
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && n != len(words) {
		err = fmt.Errorf("published %d words of %d", n, len(words))
	}
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("publishing %v: %w", words, err))
		for _, w := range words {
			p.failed[w]++
		}
		return
	}
	for _, w := range words {
		p.acked[w]++
	}
	p.total += len(words)
	p.times = append(p.times, time.Now())
}

// Acknowledged is the number of words acknowledged so far.
func (p *Publisher) Acknowledged() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Failed is the count of each word in batches that failed, so far.
func (p *Publisher) Failed() map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]uint64{}
	for w, n := range p.failed {
		out[w] = n
	}
	return out
}

// Acks are the times at which batches were acknowledged, so far.
func (p *Publisher) Acks() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time{}, p.times...)
}

// Stop ends the publishing once the batch under way is acknowledged, and
// returns the count of each word acknowledged, and the errors of the
// batches that failed (whose words may or may not count).
func (p *Publisher) Stop() (map[string]uint64, []error) {
	select {
	case <-p.stopc:
	default:
		close(p.stopc)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := p.errs
	p.errs = nil
	return p.acked, errs
}

// Counts asks each word of Vocabulary its count, through each consumer
// process in turn, once the count has read all that was published.
func (c *Cluster) Counts() (map[string]uint64, error) {
	counts := map[string]uint64{}
	for i, w := range Vocabulary {
		via := Consumers[i%len(Consumers)]
		err := Poll(time.Minute, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := wordcountpb.NewWordCountClient(c.Conn(c.Addr(via, 7702))).Count(ctx,
				&wordcountpb.CountRequest{Words: []string{w}, Sync: true})
			if err != nil {
				return err
			}
			counts[w] = resp.Counts[0].Count
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("the count of %s via %s: %w", w, via, err)
		}
	}
	return counts, nil
}
