package message_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/message"
)

var (
	modelSeed  = flag.Uint64("seq.seed", 0, "run TestSequencerModel with this seed only")
	modelSeeds = flag.Int("seq.seeds", 2000, "number of random seeds of TestSequencerModel")
)

// TestSequencerModel checks the sequencer against a model of its
// producers and of a consumer: random journals of several producers that
// publish committed messages and transactions, crash (in a transaction,
// or after committing it but before writing its acknowledgement) and are
// succeeded, and retry appends; read by a consumer that checkpoints at
// random, and crashes at random, losing what it applied since its last
// checkpoint, and resumes from that checkpoint. The consumer must apply
// exactly the committed messages, each once, in commit order.
func TestSequencerModel(t *testing.T) {
	if *modelSeed != 0 {
		runModel(t, *modelSeed)
		return
	}
	n := *modelSeeds
	if testing.Short() {
		n /= 10
	}
	base := uint64(time.Now().UnixNano())
	var restarts, queued int
	for i := range n {
		seed := base + uint64(i)
		r, q := runModel(t, seed)
		if t.Failed() {
			t.Fatalf("failed with seed %d: go test ./message/ -run TestSequencerModel -seq.seed %d -v", seed, seed)
		}
		restarts += r
		queued += q
	}
	t.Logf("%d seeds from %d: %d messages queued, %d consumer restarts", n, base, queued, restarts)
}

// modelEntry is a message of a model's journal.
type modelEntry struct {
	uuid       message.UUID
	body       string // "" for acknowledgements
	begin, end int64
	bad        bool // a frame that is not a message, which the reader skips
}

func (e modelEntry) String() string {
	if e.bad {
		return fmt.Sprintf("[%d,%d) bad frame", e.begin, e.end)
	}
	if e.uuid.IsZero() {
		return fmt.Sprintf("[%d,%d) no UUID %q", e.begin, e.end, e.body)
	}
	p := e.uuid.ProducerID()
	return fmt.Sprintf("[%d,%d) p%d c%d %s %q", e.begin, e.end, p[0], e.uuid.Clock(),
		[]string{"outside", "continue", "ack"}[e.uuid.Flags()], e.body)
}

// modelProducer is a producer of a model's journal, as a Publisher and
// the consumer whose checkpoint restores it would behave.
type modelProducer struct {
	id    message.ProducerID
	gen   int // successors so far
	clock message.Clock
	// lastAck is the clock of the producer's last committed transaction:
	// its store's checkpoint, what a successor acknowledges again.
	lastAck message.Clock
	// lastOutside is the clock of its last OutsideTxn message.
	lastOutside message.Clock
	txn         []string // bodies of the transaction's messages in the journal
	committed   bool     // txn is committed but not yet acknowledged (crashed)
	down        bool     // crashed, not yet succeeded
	last        int      // index in the journal of its last distinct message, or -1
}

// tick advances p's clock as a Publisher's does, sometimes past clocks
// that it uses in other journals.
func (p *modelProducer) tick(r *rand.Rand) message.Clock {
	p.clock++
	if r.IntN(4) == 0 {
		p.clock += message.Clock(r.IntN(10))
	}
	return p.clock
}

// genModelJournal returns a random journal of about n messages, and the
// bodies of its committed messages in commit order. Unless mixing, no
// producer publishes an OutsideTxn message while it has a transaction
// open in the journal.
func genModelJournal(r *rand.Rand, n int, mixing bool) (journal []modelEntry, want []string) {
	producers := make([]*modelProducer, 1+r.IntN(4))
	for i := range producers {
		producers[i] = &modelProducer{id: message.ProducerID{byte(i)}, clock: message.Clock(r.IntN(100)), last: -1}
	}
	var offset int64
	write := func(p *modelProducer, u message.UUID, body string) {
		if r.IntN(50) == 0 {
			size := int64(1 + r.IntN(100))
			if r.IntN(2) == 0 {
				// A frame that is not a message: the reader passes over it.
				journal = append(journal, modelEntry{bad: true, begin: offset, end: offset + size})
			}
			offset += size // Else a gap: content the reader never sees.
		}
		size := int64(1 + r.IntN(100))
		journal = append(journal, modelEntry{uuid: u, body: body, begin: offset, end: offset + size})
		offset += size
		if p != nil {
			p.last = len(journal) - 1
		}
	}
	retry := func(p *modelProducer) {
		if p.last >= 0 {
			e := journal[p.last]
			write(nil, e.uuid, e.body)
		}
	}

	for len(journal) < n {
		p := producers[r.IntN(len(producers))]
		if p.down {
			if r.IntN(3) != 0 {
				retry(p) // The crashed publisher's append lands again.
				continue
			}
			// The successor restores the clock of its checkpoint (or,
			// sometimes, a later wall clock), and acknowledges its last
			// committed transaction again: that commits a transaction
			// committed but not acknowledged, and rolls back an
			// uncommitted one.
			p.down = false
			p.gen++
			p.clock = max(p.lastAck, p.lastOutside)
			if r.IntN(3) == 0 {
				p.clock += message.Clock(r.IntN(20))
			}
			write(p, message.BuildUUID(p.id, p.lastAck, message.AckTxn), "")
			if p.committed {
				want = append(want, p.txn...)
			}
			p.txn, p.committed = nil, false
			continue
		}
		switch x := r.IntN(100); {
		case x < 10:
			retry(p)
		case x < 12:
			write(nil, message.UUID{}, fmt.Sprintf("raw%d", len(journal)))
			want = append(want, journal[len(journal)-1].body)
		case x < 35 && (mixing || len(p.txn) == 0):
			c := p.tick(r)
			body := fmt.Sprintf("p%d.%d out c%d", p.id[0], p.gen, c)
			write(p, message.BuildUUID(p.id, c, message.OutsideTxn), body)
			want = append(want, body)
			p.lastOutside = c
		case x < 70:
			c := p.tick(r)
			body := fmt.Sprintf("p%d.%d txn c%d", p.id[0], p.gen, c)
			write(p, message.BuildUUID(p.id, c, message.ContinueTxn), body)
			p.txn = append(p.txn, body)
		case x < 90:
			// Commit: the store commits, then the acknowledgement
			// is written (even if the transaction wrote nothing
			// here, sometimes), unless the producer crashes first.
			c := p.tick(r)
			p.lastAck = c
			if r.IntN(8) == 0 {
				p.committed, p.down = true, true
				continue
			}
			if len(p.txn) != 0 || r.IntN(4) == 0 {
				write(p, message.BuildUUID(p.id, c, message.AckTxn), "")
			}
			want = append(want, p.txn...)
			p.txn = nil
		default:
			// Crash: the transaction is never committed.
			p.txn, p.down = nil, true
		}
	}
	return journal, want
}

// runModel checks one random journal of seed, and returns the consumer's
// restarts and the messages queued.
func runModel(t *testing.T, seed uint64) (restarts, queued int) {
	r := rand.New(rand.NewPCG(seed, 0))
	mixing := r.IntN(2) == 0
	journal, want := genModelJournal(r, 1+r.IntN(400), mixing)

	var (
		cp      message.Checkpoint
		applied []string // durable: through cp
		pending []string // applied since cp
		s       *message.Sequencer
		next    int // index in journal of the next message to queue
	)
	resume := func() {
		from := cp
		if k := index(journal, from.Offset); k > 0 && r.IntN(4) == 0 {
			// Resuming before the checkpoint's offset is fine too.
			from.Offset = journal[r.IntN(k)].begin
		}
		var err error
		if s, err = message.NewSequencer("model", from); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		next = index(journal, from.Offset)
		pending = nil
	}
	resume()
	for next < len(journal) {
		e := journal[next]
		next++
		var ds []message.Delivery
		var err error
		if e.bad {
			err = s.Skip(e.begin, e.end)
		} else {
			ds, err = s.Queue(&seqMsg{uuid: e.uuid, body: e.body}, e.begin, e.end)
			queued++
		}
		if err != nil {
			t.Errorf("seed %d: queuing or skipping %v: %v", seed, e, err)
			return
		}
		if e.end <= cp.Read {
			// Replaying changes nothing in the checkpoint.
			if now := s.Checkpoint(); now.Read != cp.Read || !reflect.DeepEqual(now.Producers, cp.Producers) {
				t.Errorf("seed %d: replaying %v changed checkpoint %+v to %+v", seed, e, cp, now)
				return
			}
		}
		for _, d := range ds {
			m := d.Message.(*seqMsg)
			if d.Begin < 0 || d.End <= d.Begin || m.body == "" {
				t.Errorf("seed %d: delivered %+v at %v", seed, m, e)
			}
			pending = append(pending, m.body)
		}
		switch x := r.IntN(30); {
		case x == 0 || x == 1 && restarts < 30:
			// Commit: the store holds what was applied, and the
			// sequencer's checkpoint, through its JSON form.
			cp = roundTrip(t, s.Checkpoint())
			if err := cp.Validate(); err != nil {
				t.Fatalf("seed %d: checkpoint %+v: %v", seed, cp, err)
			}
			applied, pending = append(applied, pending...), nil
			if x == 1 {
				restarts++
				resume()
			}
		case x == 2 && restarts < 30:
			// Crash: what was applied since the checkpoint is lost.
			restarts++
			resume()
		}
	}
	applied = append(applied, pending...)

	if !slices.Equal(applied, want) {
		t.Errorf("seed %d (mixing %v): applied %d messages, want %d", seed, mixing, len(applied), len(want))
		for i := range max(len(applied), len(want)) {
			var a, w string
			if i < len(applied) {
				a = applied[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if a != w {
				t.Errorf("first difference at #%d: applied %q, want %q", i, a, w)
				break
			}
		}
		if len(journal) <= 60 {
			var b strings.Builder
			for _, e := range journal {
				fmt.Fprintln(&b, e)
			}
			t.Logf("journal:\n%s", b.String())
		}
		return
	}
	if !mixing {
		checkClockOrder(t, seed, journal, applied)
	}
	return restarts, queued
}

// checkClockOrder checks that each producer's messages were applied in
// clock order.
func checkClockOrder(t *testing.T, seed uint64, journal []modelEntry, applied []string) {
	clocks := make(map[string]message.UUID, len(journal))
	for _, e := range journal {
		clocks[e.body] = e.uuid
	}
	last := map[message.ProducerID]message.Clock{}
	for _, body := range applied {
		u := clocks[body]
		if u.IsZero() {
			continue
		}
		if c := u.Clock(); c <= last[u.ProducerID()] {
			t.Errorf("seed %d: %q applied after clock %d", seed, body, last[u.ProducerID()])
		}
		last[u.ProducerID()] = u.Clock()
	}
}

// index returns the index of the first message of journal that begins at
// or after offset.
func index(journal []modelEntry, offset int64) int {
	i, _ := slices.BinarySearchFunc(journal, offset, func(e modelEntry, o int64) int {
		switch {
		case e.begin < o:
			return -1
		case e.begin > o:
			return 1
		}
		return 0
	})
	return i
}
