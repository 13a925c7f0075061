package message

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// A Sequencer reads the messages of one journal, in offset order, and
// returns the committed ones, each exactly once, in the order in which
// their commit made them visible. It is the reader's half of exactly-once
// processing; Publisher is the writer's.
//
// # Rules
//
// The Sequencer keeps, for each producer (the ProducerID of a message's
// UUID), its acknowledged clock A, the greatest clock that the producer
// has committed in the journal, and its pending messages: ContinueTxn
// messages, in the order read, all with clocks after A. A producer's
// "seen" clock S is the greatest of A, the clock of its last pending
// message, and the clock of the last OutsideTxn message delivered while
// it had pending ones. Queue applies to a message of clock C:
//
//   - OutsideTxn: if C ≤ S, the message is a duplicate and is dropped.
//     Otherwise it is delivered at once. If the producer has no pending
//     messages, A becomes C; if it has, they remain pending, and the next
//     acknowledgement decides them as usual (a producer may publish
//     committed messages in the middle of a transaction).
//   - ContinueTxn: if C ≤ S, the message is a duplicate (of a message
//     already committed, pending, or delivered) and is dropped. Otherwise
//     it becomes pending, after the producer's other pending messages.
//   - AckTxn: the producer's pending messages with clocks ≤ C are
//     delivered, in the order read; those with clocks > C are discarded,
//     as a transaction that was rolled back; A becomes the greatest of A,
//     C and the OutsideTxn clocks delivered meanwhile. The acknowledgement
//     itself is never delivered (SequencerStats.Acks counts it). An
//     acknowledgement with nothing pending only raises A to C, if greater:
//     a duplicate acknowledgement changes nothing.
//
// Messages with the zero UUID (written by tools, not by a Publisher) are
// delivered as they are read, without deduplication. A new producer's A is
// 0, so a message with clock 0 is a duplicate; a Publisher's clocks are
// far later (see Clock).
//
// A rollback sets A to the acknowledged clock, not to the clocks it
// discarded: a producer's successor, restored from a checkpoint, may
// publish new messages with the clocks of its predecessor's rolled-back
// ones. See "What producers must guarantee".
//
// # Checkpoints and restarts
//
// Checkpoint returns the Sequencer's state: per producer, A and the offset
// of its first pending message (Begin, or -1), and two journal offsets,
// Read, the end of the last message queued, and Offset, where to resume
// reading, the least Begin or else Read. A consumer stores it atomically
// with the effects of every message delivered so far. NewSequencer builds
// a Sequencer from it; its caller reads the journal from cp.Offset and
// queues every message from there. A message that ends at or before
// cp.Read was queued before the checkpoint, so it is replayed, not
// delivered: it is dropped, except that, from a producer's Begin on, the
// producer's messages run through the rules above again, with nothing
// delivered, which restores its pending messages exactly (the messages
// from Begin to Read are the same, so they reach the same state). Messages
// after cp.Read are sequenced as usual. Until then, Checkpoint returns cp
// again (with Offset no later than cp.Offset). Resuming from an offset
// before cp.Offset is also correct, only slower.
//
// # Memory
//
// A Sequencer holds every pending message in memory: the open
// transactions of all producers in this journal. That is bounded by what
// producers write between their acknowledgements. A producer whose
// transaction is never acknowledged (its publisher died and was never
// succeeded) keeps its messages pending, and keeps Checkpoint's Offset at
// its Begin, for good. The Sequencer also keeps a few words per producer
// ever seen, and so does its Checkpoint.
//
// # What producers must guarantee
//
// These rules deliver every committed message exactly once if:
//
//  1. A producer's messages appear in a journal in increasing clock order,
//     apart from duplicates; the UUID of an acknowledgement has a clock at
//     or after every message of the transaction it commits.
//  2. A duplicate (a retried append) appears before the producer's next
//     distinct message in that journal. Otherwise it is ambiguous: a
//     duplicate of an old acknowledgement, read after newer pending
//     messages, looks exactly like a successor's rollback.
//  3. An acknowledgement is written only once every message it commits
//     has been written (its append acknowledged).
//  4. A successor (a producer restarted from a checkpoint with the same
//     ProducerID) writes its rollback acknowledgement, with the clock of
//     the last committed transaction, to every journal its predecessor may
//     have written uncommitted messages to, before any new message of its
//     own there; its new clocks are after every clock committed by its
//     predecessor (including OutsideTxn messages); and no message of its
//     predecessor appears after that acknowledgement.
//  5. A producer writes no message of its next transaction to a journal
//     before the acknowledgement of its previous transaction there:
//     pending messages with clocks after an acknowledgement's are rolled
//     back, whether they belong to a dead transaction or a live one. With
//     a client.Appender, which keeps the order of Append calls per
//     journal, calling WriteAckIntents before publishing the next
//     transaction's messages is enough.
//
// A Sequencer is not safe for concurrent use.
type Sequencer struct {
	journal string
	// read is the end of the last message queued: initially the
	// checkpoint's Offset. Queue requires offsets at or after it.
	read int64
	// replay is the checkpoint's Read: messages that end at or before it
	// were queued before the checkpoint.
	replay    int64
	producers map[ProducerID]*producer
	stats     SequencerStats
	// out is the slice that Queue returns, reused by the next call.
	out []Delivery
	// last is the state of lastID, the producer most recently looked up
	// (if not nil): runs of one producer's messages skip the map. Prune
	// clears it as it removes producers.
	lastID ProducerID
	last   *producer
}

// producer returns the state of producer id, or nil if it has none.
func (s *Sequencer) producer(id ProducerID) *producer {
	if s.last != nil && s.lastID == id {
		return s.last
	}
	p := s.producers[id]
	if p != nil {
		s.lastID, s.last = id, p
	}
	return p
}

// producer is the state of one producer of the journal.
type producer struct {
	// acked is the greatest clock committed. Invariant: every pending
	// message has a clock > acked.
	acked Clock
	// outside is the greatest clock of an OutsideTxn message delivered
	// while pending was not empty, or 0. It is folded into acked when
	// pending empties.
	outside Clock
	// begin is the offset of the first pending message, or -1 if there is
	// none. After a restart it is the checkpoint's Begin while pending is
	// still empty, until the replay reads that message again.
	begin int64
	// pending are the producer's uncommitted messages, in the order read,
	// with strictly increasing clocks.
	pending []Delivery
}

// seen returns the clock at or before which a message of the producer is
// a duplicate.
func (p *producer) seen() Clock {
	s := max(p.acked, p.outside)
	if n := len(p.pending); n != 0 {
		s = max(s, p.pending[n-1].Message.GetUUID().Clock())
	}
	return s
}

// Delivery is a committed message that Queue returns, with its offsets in
// the journal: it was read at [Begin, End).
type Delivery struct {
	Message    Message
	Begin, End int64
}

// SequencerStats counts what a Sequencer did, for metrics. Counters
// start at zero in each Sequencer (they are not in its Checkpoint).
type SequencerStats struct {
	Queued     uint64 // messages queued
	Delivered  uint64 // messages returned by Queue
	Duplicates uint64 // messages dropped as duplicates
	Acks       uint64 // acknowledgements read (never delivered)
	RolledBack uint64 // pending messages discarded by an acknowledgement
	Replayed   uint64 // messages read again after a restart whose effect the checkpoint holds
	Pending    int    // messages pending now
	Pruned     uint64 // producers forgotten by Prune
	Skipped    uint64 // bad frames passed over (Skip)
}

// NewSequencer returns a Sequencer of journal that resumes from cp (the
// zero Checkpoint starts at offset 0). The caller then queues every
// message of the journal from cp.Offset on. It fails if cp is not valid
// (see Checkpoint.Validate). The Sequencer does not keep cp.Producers.
func NewSequencer(journal string, cp Checkpoint) (*Sequencer, error) {
	if err := cp.Validate(); err != nil {
		return nil, fmt.Errorf("message: sequencer of %s: %w", journal, err)
	}
	s := &Sequencer{
		journal:   journal,
		read:      cp.Offset,
		replay:    cp.Read,
		producers: make(map[ProducerID]*producer, len(cp.Producers)),
	}
	for id, ps := range cp.Producers {
		s.producers[id] = &producer{acked: ps.LastAck, begin: ps.Begin}
	}
	return s, nil
}

// Queue sequences m, which the caller read from the journal at [begin,
// end), and returns the messages that this makes deliverable, in order:
// m itself (OutsideTxn), the transaction that m acknowledges (AckTxn), or
// none. The returned slice is valid until the next call.
//
// Messages must be queued in offset order: begin is at or after the end
// of the previous message (or the checkpoint's Offset), and end is after
// begin. Gaps are allowed (frames the caller could not decode). Queue
// fails, and changes nothing, if m is nil, its offsets are out of order,
// it straddles the checkpoint's Read, or its flags are not OutsideTxn,
// ContinueTxn or AckTxn.
func (s *Sequencer) Queue(m Message, begin, end int64) ([]Delivery, error) {
	var u UUID
	if m != nil {
		u = m.GetUUID()
	}
	if err := s.check(m, u, begin, end); err != nil {
		return nil, err
	}
	s.read = end
	s.stats.Queued++
	clear(s.out)
	s.out = s.out[:0]

	replaying := end <= s.replay
	if u.IsZero() {
		if replaying {
			s.stats.Replayed++
		} else {
			s.deliver(Delivery{m, begin, end})
		}
		return s.out, nil
	}

	p := s.producer(u.ProducerID())
	if replaying && (p == nil || p.begin < 0 || begin < p.begin) {
		// Queued before the checkpoint, and not part of a transaction
		// that was pending at the checkpoint: its effect is in the
		// checkpoint already.
		s.stats.Replayed++
		return s.out, nil
	}
	if p == nil {
		p = &producer{begin: -1}
		s.producers[u.ProducerID()] = p
		s.lastID, s.last = u.ProducerID(), p
	}
	// From here on, a replayed message runs through the rules with its
	// deliveries suppressed: see "Checkpoints and restarts".
	d := Delivery{m, begin, end}
	switch u.Flags() {
	case OutsideTxn:
		s.queueOutside(p, d, u.Clock(), replaying)
	case ContinueTxn:
		s.queueContinue(p, d, u.Clock())
	case AckTxn:
		s.queueAck(p, u.Clock(), replaying)
	}
	return s.out, nil
}

// Skip passes over a frame at [begin, end) that the caller read but could
// not decode (a BadFrameError): the Checkpoint's offsets move past it as
// past a message, so that a journal that ends with a bad frame is read to
// its end, and not read again from the frame after a restart. Offsets are
// checked as Queue checks them; a frame that fails the check changes
// nothing.
func (s *Sequencer) Skip(begin, end int64) error {
	if err := s.checkOffsets(begin, end); err != nil {
		return err
	}
	s.read = end
	s.stats.Skipped++
	return nil
}

// checkOffsets returns why a frame at [begin, end) is out of order, or
// nil.
func (s *Sequencer) checkOffsets(begin, end int64) error {
	switch {
	case begin < s.read:
		return fmt.Errorf("message: sequencer of %s: frame at offset %d is before the end of the previous one, %d", s.journal, begin, s.read)
	case end <= begin:
		return fmt.Errorf("message: sequencer of %s: frame at offset %d has end %d, want after its begin", s.journal, begin, end)
	case begin < s.replay && s.replay < end:
		return fmt.Errorf("message: sequencer of %s: frame at [%d, %d) straddles the checkpoint's read offset %d", s.journal, begin, end, s.replay)
	}
	return nil
}

// check returns why Queue refuses m at [begin, end), or nil.
func (s *Sequencer) check(m Message, u UUID, begin, end int64) error {
	switch {
	case m == nil:
		return fmt.Errorf("message: sequencer of %s: nil message at offset %d", s.journal, begin)
	}
	if err := s.checkOffsets(begin, end); err != nil {
		return err
	}
	switch f := u.Flags(); f {
	case OutsideTxn, ContinueTxn, AckTxn:
		return nil
	default:
		return fmt.Errorf("message: sequencer of %s: message at offset %d has unknown flags %#x", s.journal, begin, uint16(f))
	}
}

// queueOutside applies the OutsideTxn rule to d, of clock c.
func (s *Sequencer) queueOutside(p *producer, d Delivery, c Clock, replaying bool) {
	if c <= p.seen() {
		s.stats.Duplicates++
		return
	}
	if len(p.pending) == 0 {
		p.acked = c
	} else {
		p.outside = c
	}
	if replaying {
		s.stats.Replayed++
		return
	}
	s.deliver(d)
}

// queueContinue applies the ContinueTxn rule to d, of clock c.
func (s *Sequencer) queueContinue(p *producer, d Delivery, c Clock) {
	if c <= p.seen() {
		s.stats.Duplicates++
		return
	}
	if len(p.pending) == 0 {
		p.begin = d.Begin
	}
	p.pending = append(p.pending, d)
	s.stats.Pending++
}

// queueAck applies the AckTxn rule to an acknowledgement of clock c.
func (s *Sequencer) queueAck(p *producer, c Clock, replaying bool) {
	s.stats.Acks++
	// Pending clocks increase, so those ≤ c are a prefix.
	n := 0
	for n < len(p.pending) && p.pending[n].Message.GetUUID().Clock() <= c {
		n++
	}
	if replaying {
		s.stats.Replayed += uint64(n)
	} else {
		for _, d := range p.pending[:n] {
			s.deliver(d)
		}
	}
	s.stats.RolledBack += uint64(len(p.pending) - n)
	s.stats.Pending -= len(p.pending)

	p.acked = max(p.acked, c, p.outside)
	p.outside = 0
	p.begin = -1
	clear(p.pending) // Drop the references to delivered messages.
	if cap(p.pending) > 64 {
		p.pending = nil // Don't hold a large transaction's array.
	} else {
		p.pending = p.pending[:0]
	}
}

// deliver appends d to the messages that Queue returns.
func (s *Sequencer) deliver(d Delivery) {
	s.out = append(s.out, d)
	s.stats.Delivered++
}

// Stats returns the Sequencer's counters.
func (s *Sequencer) Stats() SequencerStats { return s.stats }

// Prune forgets the producers that have nothing pending and whose last
// acknowledged clock is more than horizon older than the newest clock
// any producer of the journal had acknowledged, and returns how many it
// forgot. A zero or negative horizon forgets none.
//
// Why: a Checkpoint holds every producer the journal has seen, and a
// store commits it with each transaction, so without pruning a journal
// whose publishers come and go (a producer per process, per request)
// makes every transaction write more. The cost: should a forgotten
// producer's message come again (a publisher replaying a transaction
// after more than horizon), it is taken as new and delivered a second
// time. Clocks, not the reader's wall time, measure the age, so a
// replay prunes as the first reading did; a producer whose clock runs
// far ahead of the others makes them look old.
func (s *Sequencer) Prune(horizon time.Duration) int {
	if horizon <= 0 || len(s.producers) == 0 {
		return 0
	}
	var newest Clock
	for _, p := range s.producers {
		newest = max(newest, p.acked)
	}
	cutoff := NewClock(newest.Time().Add(-horizon))
	n := 0
	for id, p := range s.producers {
		if len(p.pending) == 0 && p.begin < 0 && p.acked < cutoff {
			delete(s.producers, id)
			n++
		}
	}
	if n > 0 {
		s.lastID, s.last = ProducerID{}, nil
		s.stats.Pruned += uint64(n)
	}
	return n
}

// Checkpoint returns the Sequencer's state, from which NewSequencer
// resumes. The caller stores it once it has durably applied every message
// delivered so far (and no message delivered later).
func (s *Sequencer) Checkpoint() Checkpoint {
	cp := Checkpoint{
		Offset:    s.read,
		Read:      max(s.read, s.replay),
		Producers: make(map[ProducerID]ProducerState, len(s.producers)),
	}
	for id, p := range s.producers {
		cp.Producers[id] = ProducerState{LastAck: p.acked, Begin: p.begin}
		if p.begin >= 0 {
			cp.Offset = min(cp.Offset, p.begin)
		}
	}
	return cp
}

// Checkpoint is the state of a Sequencer (see Sequencer, "Checkpoints and
// restarts"). Its JSON form is stable, with producers keyed by the 12 hex
// digits of their ProducerID, in sorted order:
//
//	{"offset":100,"read":250,"producers":{"0123456789ab":{"lastAck":1234,"begin":100}}}
type Checkpoint struct {
	// Offset is where to resume reading the journal: the least Begin of
	// Producers, or else Read.
	Offset int64
	// Read is the end of the last message queued before the checkpoint.
	Read int64
	// Producers are the states of the producers seen in the journal.
	Producers map[ProducerID]ProducerState
}

// ProducerState is a producer's state in a Checkpoint.
type ProducerState struct {
	// LastAck is the greatest clock that the producer has committed in
	// the journal.
	LastAck Clock `json:"lastAck"`
	// Begin is the offset of the producer's first pending message, or -1
	// if it has none.
	Begin int64 `json:"begin"`
}

// Validate tells whether cp could be a Sequencer's state: 0 ≤ Offset ≤
// Read, and each producer's Begin is -1 or within [Offset, Read). Its
// error names what is wrong.
func (cp Checkpoint) Validate() error {
	if cp.Offset < 0 {
		return fmt.Errorf("checkpoint offset %d is negative", cp.Offset)
	}
	if cp.Read < cp.Offset {
		return fmt.Errorf("checkpoint read offset %d is before its offset %d", cp.Read, cp.Offset)
	}
	for id, ps := range cp.Producers {
		if ps.Begin != -1 && (ps.Begin < cp.Offset || ps.Begin >= cp.Read) {
			return fmt.Errorf("checkpoint producer %s has begin %d, want -1 or within [%d, %d)",
				hex.EncodeToString(id[:]), ps.Begin, cp.Offset, cp.Read)
		}
	}
	return nil
}

// checkpointJSON is the JSON form of a Checkpoint.
type checkpointJSON struct {
	Offset    int64                    `json:"offset"`
	Read      int64                    `json:"read"`
	Producers map[string]ProducerState `json:"producers"`
}

// MarshalJSON implements json.Marshaler.
func (cp Checkpoint) MarshalJSON() ([]byte, error) {
	j := checkpointJSON{Offset: cp.Offset, Read: cp.Read, Producers: make(map[string]ProducerState, len(cp.Producers))}
	for id, ps := range cp.Producers {
		j.Producers[hex.EncodeToString(id[:])] = ps
	}
	return json.Marshal(j) // Sorts the map's keys.
}

// UnmarshalJSON implements json.Unmarshaler. It checks the form of the
// producer IDs, not the offsets: see Validate.
func (cp *Checkpoint) UnmarshalJSON(b []byte) error {
	var j checkpointJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("message: checkpoint: %w", err)
	}
	producers := make(map[ProducerID]ProducerState, len(j.Producers))
	for key, ps := range j.Producers {
		var id ProducerID
		if len(key) != 2*len(id) {
			return fmt.Errorf("message: checkpoint producer %q has length %d, want %d hex digits", key, len(key), 2*len(id))
		}
		if _, err := hex.Decode(id[:], []byte(key)); err != nil {
			return fmt.Errorf("message: checkpoint producer %q: %w", key, err)
		}
		if _, dup := producers[id]; dup {
			return fmt.Errorf("message: checkpoint producer %q appears twice", key)
		}
		producers[id] = ps
	}
	*cp = Checkpoint{Offset: j.Offset, Read: j.Read, Producers: producers}
	return nil
}
