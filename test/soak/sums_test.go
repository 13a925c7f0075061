package soak

import (
	"context"
	"sync"
	"time"

	"github.com/quire-dev/quire/examples/streamsum/streamsum"
	"github.com/quire-dev/quire/internal/composetest"
	"github.com/quire-dev/quire/protocol"
)

// chunksPerTxn is the size of the stream-sum producer's transactions.
const chunksPerTxn = 6

// sums is the stream-sum workload: a producer publishing the chunks of
// streams in transactions, without pause, and what it published.
type sums struct {
	streams *streamsum.Streams
	prod    *streamsum.Producer
	stopc   chan struct{}
	done    chan struct{}

	mu     sync.Mutex
	times  []time.Time // when each transaction committed
	failed int         // transactions that did not commit, or may not have
}

// startSums sets the stream-sum application up and starts its producer.
func (s *soak) startSums(seed uint64) *sums {
	s.t.Helper()
	s.c.AwaitReady(composetest.StreamSums...)
	journals := s.c.Journals()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := streamsum.SetupConfig{Journals: journals, Root: "/quire/consumers/streamsum/", Replication: 3, HotStandbys: 1,
		Shards: protocol.NewShardClient(s.c.Conn(s.c.Addr(composetest.StreamSums[0], 7702)))}
	var prod *streamsum.Producer
	s.c.Await(2*time.Minute, "the stream-sum application's setup", func() error {
		if _, err := streamsum.Setup(ctx, cfg); err != nil {
			return err
		}
		var err error
		prod, err = streamsum.NewProducer(ctx, journals)
		return err
	})
	w := &sums{streams: streamsum.NewStreams(seed, "s", 16), prod: prod, stopc: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	s.t.Cleanup(func() { w.stop() })
	return w
}

func (w *sums) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stopc:
			return
		default:
		}
		w.publish(w.streams.Next(chunksPerTxn))
	}
}

func (w *sums) publish(chunks []*streamsum.Chunk) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := w.prod.Publish(ctx, chunks)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.streams.Published(chunks, err)
	if err != nil {
		w.failed++
		return
	}
	w.times = append(w.times, time.Now())
}

// committed are the times at which transactions committed, so far.
func (w *sums) committed() []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Time{}, w.times...)
}

// lastCommit is when the latest transaction committed.
func (w *sums) lastCommit() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.times) == 0 {
		return time.Time{}
	}
	return w.times[len(w.times)-1]
}

// stop ends the producing, and finishes every open stream.
func (w *sums) stop() {
	select {
	case <-w.stopc:
		return
	default:
		close(w.stopc)
	}
	<-w.done
	w.publish(w.streams.Finish())
	w.prod.Close()
}

// checkSums waits until the shards have summed every finished stream (or
// for 3 minutes), and checks every sum.
func (s *soak) checkSums(w *sums) streamsum.Report {
	s.t.Helper()
	w.stop()
	r, err := w.streams.Await(context.Background(), s.c.Journals(), 3*time.Minute)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, p := range r.Problems {
		s.t.Error(p)
	}
	if !r.OK() {
		s.t.Errorf("stream sums: %s", r)
	}
	return r
}
