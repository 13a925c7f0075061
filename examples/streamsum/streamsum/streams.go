package streamsum

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/message"
)

// Streams makes the chunks of many streams, a few open at a time, and
// keeps account of what was published: what each stream's sum must be.
// It is not safe for concurrent use.
type Streams struct {
	rnd    *rand.Rand
	prefix string
	open   []*openStream
	width  int // streams open at a time
	made   int
	ledger map[string]*expected
}

// openStream is a stream that takes more chunks.
type openStream struct {
	name        string
	seq, length int
}

// expected is what a stream's sum must be.
type expected struct {
	// sum and chunks are of its committed chunks.
	sum    uint64
	chunks int
	state  streamState
	// maybeSum is the sum if the uncertain transaction of its last chunk
	// committed (state maybeFinished).
	maybeSum uint64
}

type streamState int

const (
	// open: its last chunk is not published; it has no sum.
	open streamState = iota
	// finished: its last chunk committed; it has its sum exactly once.
	finished
	// maybeFinished: the transaction of its last chunk may have
	// committed; it has its sum (the one with that transaction's chunks)
	// at most once.
	maybeFinished
)

// NewStreams returns Streams named prefix + a number, from seed, with
// open streams taking chunks at a time.
func NewStreams(seed uint64, prefix string, open int) *Streams {
	s := &Streams{rnd: rand.New(rand.NewPCG(seed, 0x5a3)), prefix: prefix, width: max(open, 1), ledger: map[string]*expected{}}
	for range s.width {
		s.open = append(s.open, s.newStream())
	}
	return s
}

func (s *Streams) newStream() *openStream {
	s.made++
	o := &openStream{name: fmt.Sprintf("%s%06d", s.prefix, s.made), length: 2 + s.rnd.IntN(20)}
	s.ledger[o.name] = &expected{}
	return o
}

// Next returns the chunks of the next transaction: n chunks, each the
// next of an open stream chosen at random. A stream that takes its last
// chunk is replaced by a new one.
func (s *Streams) Next(n int) []*Chunk {
	chunks := make([]*Chunk, 0, n)
	for range n {
		i := s.rnd.IntN(len(s.open))
		o := s.open[i]
		o.seq++
		c := &Chunk{Stream: o.name, Seq: o.seq, Value: 1 + s.rnd.Uint64N(1000), Last: o.seq == o.length}
		chunks = append(chunks, c)
		if c.Last {
			s.open[i] = s.newStream()
		}
	}
	return chunks
}

// Finish returns the last chunk of every open stream, and opens no more:
// Next must not be called after it.
func (s *Streams) Finish() []*Chunk {
	var chunks []*Chunk
	for _, o := range s.open {
		chunks = append(chunks, &Chunk{Stream: o.name, Seq: o.seq + 1, Value: 1 + s.rnd.Uint64N(1000), Last: true})
	}
	s.open = nil
	return chunks
}

// Published accounts for a transaction of chunks that Producer.Publish
// returned err for. The streams of a transaction that failed take no
// more chunks (a chunk that did not commit would be due again).
func (s *Streams) Published(chunks []*Chunk, err error) {
	if err == nil {
		for _, c := range chunks {
			e := s.ledger[c.Stream]
			e.sum, e.chunks = e.sum+c.Value, c.Seq
			if c.Last {
				e.state = finished
			}
		}
		return
	}
	uncertain := !errors.Is(err, ErrAborted)
	txnSum := map[string]uint64{}
	for _, c := range chunks {
		txnSum[c.Stream] += c.Value
		s.open = slices.DeleteFunc(s.open, func(o *openStream) bool { return o.name == c.Stream })
		if e := s.ledger[c.Stream]; uncertain && c.Last {
			e.state, e.maybeSum = maybeFinished, e.sum+txnSum[c.Stream]
		}
	}
	for len(s.open) < s.width {
		s.open = append(s.open, s.newStream())
	}
}

// Count is the number of streams made so far.
func (s *Streams) Count() int { return len(s.ledger) }

// A Report is what Check found.
type Report struct {
	Streams  int // streams published
	Finished int // of them, streams whose last chunk committed
	Right    int // finished streams with their right sum, once
	// Wrong counts sums whose value or number of chunks is not their
	// stream's, or that name a problem; Duplicated, sums published more
	// than once; Missing, finished streams without a sum; Unexpected,
	// sums of streams that never finished.
	Wrong, Duplicated, Missing, Unexpected int
	Problems                               []string
}

// OK tells whether the report found nothing wrong.
func (r Report) OK() bool { return r.Wrong+r.Duplicated+r.Missing+r.Unexpected == 0 }

func (r Report) String() string {
	return fmt.Sprintf("%d streams, %d finished, %d summed right; wrong %d, duplicated %d, missing %d, unexpected %d",
		r.Streams, r.Finished, r.Right, r.Wrong, r.Duplicated, r.Missing, r.Unexpected)
}

// Check compares sums (as read from SumsJournal) with what was published.
func (s *Streams) Check(sums []*Sum) Report {
	r := Report{Streams: len(s.ledger)}
	seen, bad := map[string]int{}, map[string]bool{}
	problem := func(stream, format string, args ...any) {
		bad[stream] = true
		r.Problems = append(r.Problems, "stream "+stream+": "+fmt.Sprintf(format, args...))
	}
	for _, sum := range sums {
		e, ok := s.ledger[sum.Stream]
		seen[sum.Stream]++
		switch {
		case sum.Problem != "":
			r.Wrong++
			problem(sum.Stream, "%s", sum.Problem)
		case !ok || e.state == open:
			r.Unexpected++
			problem(sum.Stream, "a sum (%d of %d chunks), but its last chunk was not published", sum.Sum, sum.Chunks)
		case seen[sum.Stream] > 1:
			r.Duplicated++
			problem(sum.Stream, "sum %d published %d times", sum.Sum, seen[sum.Stream])
		case e.state == finished && (sum.Sum != e.sum || sum.Chunks != e.chunks):
			r.Wrong++
			problem(sum.Stream, "sum %d of %d chunks, want %d of %d", sum.Sum, sum.Chunks, e.sum, e.chunks)
		case e.state == maybeFinished && sum.Sum != e.maybeSum:
			r.Wrong++
			problem(sum.Stream, "sum %d, want %d (its last transaction's outcome was unknown)", sum.Sum, e.maybeSum)
		}
	}
	for name, e := range s.ledger {
		if e.state != finished {
			continue
		}
		r.Finished++
		switch seen[name] {
		case 0:
			r.Missing++
			problem(name, "no sum, want %d of %d chunks", e.sum, e.chunks)
		case 1:
			if !bad[name] {
				r.Right++
			}
		}
	}
	slices.Sort(r.Problems)
	return r
}

// Await reads the sums and checks them (Check) until every finished
// stream has its sum, or until wait has passed, and returns the last
// Report.
func (s *Streams) Await(ctx context.Context, journals *client.Client, wait time.Duration) (Report, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		sums, err := ReadSums(ctx, journals)
		switch {
		case err != nil && ctx.Err() != nil:
			return Report{}, fmt.Errorf("streamsum: no sums read within %s: %w", wait, err)
		case err == nil:
			if r := s.Check(sums); r.Missing == 0 || ctx.Err() != nil {
				return r, nil
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ReadSums reads SumsJournal's committed sums, to its write head.
func ReadSums(ctx context.Context, journals *client.Client) ([]*Sum, error) {
	rd, err := message.NewReader(ctx, journals, message.ReaderConfig{Journal: SumsJournal,
		New: func() message.Message { return &Sum{} }})
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var sums []*Sum
	for {
		d, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return sums, nil
		} else if err != nil {
			return sums, fmt.Errorf("streamsum: reading %s: %w", SumsJournal, err)
		}
		if sum := d.Message.(*Sum); sum.Stream != "" {
			sums = append(sums, sum)
		}
	}
}
