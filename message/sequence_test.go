package message_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/message"
)

// seqMsg is the message of the sequencer's tests: a UUID and a body that
// names it.
type seqMsg struct {
	uuid message.UUID
	body string
}

func (m *seqMsg) GetUUID() message.UUID                     { return m.uuid }
func (m *seqMsg) SetUUID(u message.UUID)                    { m.uuid = u }
func (m *seqMsg) NewAcknowledgement(string) message.Message { return new(seqMsg) }

// Producers of the table tests.
var (
	prodA = message.ProducerID{0xa}
	prodB = message.ProducerID{0xb}
)

// ev is a message of a table test's journal. Each ev is a new message
// value, as a reader decodes each frame into a new message.
type ev struct {
	p    message.ProducerID
	c    message.Clock
	f    message.Flags
	body string
}

func out(p message.ProducerID, c message.Clock, body string) ev {
	return ev{p, c, message.OutsideTxn, body}
}
func cont(p message.ProducerID, c message.Clock, body string) ev {
	return ev{p, c, message.ContinueTxn, body}
}
func ack(p message.ProducerID, c message.Clock) ev { return ev{p, c, message.AckTxn, ""} }

// msg returns a new message of e: without a UUID if e has no producer.
func (e ev) msg() *seqMsg {
	if e.p == (message.ProducerID{}) {
		return &seqMsg{body: e.body}
	}
	return &seqMsg{uuid: message.BuildUUID(e.p, e.c, e.f), body: e.body}
}

// msgSize is the size of each message of the table tests' journals: the
// i-th message is at [i*msgSize, (i+1)*msgSize).
const msgSize = 10

// queueAll queues the journal's messages from index from, and returns the
// bodies delivered.
func queueAll(t *testing.T, s *message.Sequencer, journal []ev, from int) []string {
	t.Helper()
	var got []string
	for i := from; i < len(journal); i++ {
		ds, err := s.Queue(journal[i].msg(), int64(i)*msgSize, int64(i+1)*msgSize)
		if err != nil {
			t.Fatalf("Queue(#%d): %v", i, err)
		}
		for _, d := range ds {
			if d.Begin%msgSize != 0 || d.End != d.Begin+msgSize {
				t.Errorf("delivery %+v: offsets are not a message's", d)
			}
			got = append(got, d.Message.(*seqMsg).body)
		}
	}
	return got
}

func newSeq(t *testing.T, cp message.Checkpoint) *message.Sequencer {
	t.Helper()
	s, err := message.NewSequencer("test/journal", cp)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seqCases are the table tests of the sequencer's rules: a journal, and
// the bodies that an uninterrupted sequencer delivers.
var seqCases = []struct {
	name    string
	journal []ev
	want    []string
	stats   message.SequencerStats // checked if Queued != 0
}{{
	name:    "outside messages are delivered at once, duplicates dropped",
	journal: []ev{out(prodA, 1, "a1"), out(prodA, 2, "a2"), out(prodA, 2, "a2"), out(prodA, 3, "a3"), out(prodA, 1, "a1")},
	want:    []string{"a1", "a2", "a3"},
	stats:   message.SequencerStats{Queued: 5, Delivered: 3, Duplicates: 2},
}, {
	name:    "clock 0 is before every clock",
	journal: []ev{out(prodA, 0, "a0"), out(prodA, 1, "a1")},
	want:    []string{"a1"},
}, {
	name:    "a transaction is delivered, in order, at its acknowledgement",
	journal: []ev{cont(prodA, 1, "a1"), cont(prodA, 2, "a2"), out(prodB, 1, "b1"), ack(prodA, 3), out(prodB, 2, "b2")},
	want:    []string{"b1", "a1", "a2", "b2"},
	stats:   message.SequencerStats{Queued: 5, Delivered: 4, Acks: 1},
}, {
	name:    "an acknowledgement of a pending clock commits it",
	journal: []ev{cont(prodA, 1, "a1"), cont(prodA, 2, "a2"), ack(prodA, 2)},
	want:    []string{"a1", "a2"},
}, {
	name:    "a pending duplicate is dropped",
	journal: []ev{cont(prodA, 1, "a1"), cont(prodA, 1, "a1"), cont(prodA, 2, "a2"), cont(prodA, 2, "a2"), cont(prodA, 1, "a1"), ack(prodA, 2)},
	want:    []string{"a1", "a2"},
	stats:   message.SequencerStats{Queued: 6, Delivered: 2, Duplicates: 3, Acks: 1},
}, {
	name:    "a duplicate of a committed message is dropped",
	journal: []ev{cont(prodA, 1, "a1"), ack(prodA, 1), cont(prodA, 1, "a1"), ack(prodA, 1), out(prodA, 1, "a1?"), cont(prodA, 2, "a2"), ack(prodA, 2)},
	want:    []string{"a1", "a2"},
}, {
	name:    "an acknowledgement rolls back later clocks",
	journal: []ev{cont(prodA, 1, "a1"), cont(prodA, 2, "a2"), cont(prodA, 3, "a3"), ack(prodA, 2)},
	want:    []string{"a1", "a2"},
	stats:   message.SequencerStats{Queued: 4, Delivered: 2, Acks: 1, RolledBack: 1},
}, {
	name: "a successor rolls back and reuses the clocks",
	journal: []ev{
		cont(prodA, 1, "a1"), ack(prodA, 1), // committed
		cont(prodA, 2, "a2 lost"), cont(prodA, 3, "a3 lost"), // crash
		ack(prodA, 1), // successor's rollback, a copy of the last acknowledgement
		cont(prodA, 2, "a2 new"), out(prodA, 3, "a3 new"), ack(prodA, 4),
	},
	want:  []string{"a1", "a3 new", "a2 new"},
	stats: message.SequencerStats{Queued: 8, Delivered: 3, Acks: 3, RolledBack: 2},
}, {
	name:    "an acknowledgement with nothing pending raises the acknowledged clock",
	journal: []ev{ack(prodA, 5), cont(prodA, 4, "a4"), out(prodA, 5, "a5"), cont(prodA, 6, "a6"), ack(prodA, 6), ack(prodA, 6)},
	want:    []string{"a6"},
	stats:   message.SequencerStats{Queued: 6, Delivered: 1, Duplicates: 2, Acks: 3},
}, {
	name:    "an acknowledgement of an older clock with nothing pending changes nothing",
	journal: []ev{out(prodA, 5, "a5"), ack(prodA, 3), out(prodA, 4, "a4"), out(prodA, 6, "a6")},
	want:    []string{"a5", "a6"},
}, {
	name:    "outside messages leave a transaction pending",
	journal: []ev{cont(prodA, 1, "a1"), out(prodA, 2, "a2"), cont(prodA, 3, "a3"), out(prodA, 2, "a2"), ack(prodA, 4), out(prodA, 2, "a2")},
	want:    []string{"a2", "a1", "a3"},
	stats:   message.SequencerStats{Queued: 6, Delivered: 3, Duplicates: 2, Acks: 1},
}, {
	name:    "a rollback keeps the outside messages delivered meanwhile",
	journal: []ev{cont(prodA, 1, "a1"), out(prodA, 2, "a2"), cont(prodA, 3, "a3"), ack(prodA, 0), out(prodA, 2, "a2"), cont(prodA, 3, "a3 new"), ack(prodA, 3)},
	want:    []string{"a2", "a3 new"},
}, {
	name:    "an outside message after pending ones is not a duplicate",
	journal: []ev{cont(prodA, 1, "a1"), out(prodA, 2, "a2"), ack(prodA, 1), out(prodA, 3, "a3")},
	want:    []string{"a2", "a1", "a3"},
}, {
	name: "producers are independent",
	journal: []ev{
		cont(prodA, 5, "a5"), cont(prodB, 1, "b1"), out(prodB, 2, "b2"), cont(prodA, 6, "a6"),
		ack(prodB, 0), ack(prodA, 7), cont(prodB, 1, "b1"), cont(prodB, 3, "b3"), ack(prodB, 3),
	},
	want: []string{"b2", "a5", "a6", "b3"},
}, {
	name: "a rollback is replayed after a restart",
	journal: []ev{
		cont(prodA, 1, "a1"), cont(prodB, 1, "b1 lost"), cont(prodB, 2, "b2 lost"), ack(prodB, 0),
		cont(prodB, 1, "b1"), ack(prodB, 1), ack(prodA, 1),
	},
	want: []string{"b1", "a1"},
}, {
	name:    "messages without a UUID are delivered as read",
	journal: []ev{cont(prodA, 1, "a1"), {body: "x"}, {body: "x"}, ack(prodA, 1)},
	want:    []string{"x", "x", "a1"},
}}

func TestSequencerRules(t *testing.T) {
	for _, tc := range seqCases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSeq(t, message.Checkpoint{})
			got := queueAll(t, s, tc.journal, 0)
			if !slices.Equal(got, tc.want) {
				t.Errorf("delivered %q, want %q", got, tc.want)
			}
			if tc.stats.Queued != 0 {
				if st := s.Stats(); st != tc.stats {
					t.Errorf("stats %+v, want %+v", st, tc.stats)
				}
			}
		})
	}
}

// TestSequencerRestartsAnywhere restarts each table test's sequencer from
// its checkpoint after every message, and checks that what is delivered
// before and after the restart is what an uninterrupted sequencer
// delivers.
func TestSequencerRestartsAnywhere(t *testing.T) {
	for _, tc := range seqCases {
		t.Run(tc.name, func(t *testing.T) {
			for cut := 0; cut <= len(tc.journal); cut++ {
				s := newSeq(t, message.Checkpoint{})
				got := queueAll(t, s, tc.journal[:cut], 0)
				cp := roundTrip(t, s.Checkpoint())
				s = newSeq(t, cp)
				// Replaying changes nothing in the checkpoint.
				replay := tc.journal[:cut]
				for i := int(cp.Offset / msgSize); i < len(replay); i++ {
					got = append(got, queueAll(t, s, replay[:i+1], i)...)
					if after := s.Checkpoint(); !reflect.DeepEqual(after, cp) {
						t.Fatalf("restarted after %d messages, from %+v: replaying #%d changed it to %+v", cut, cp, i, after)
					}
				}
				got = append(got, queueAll(t, s, tc.journal, max(cut, int(cp.Offset/msgSize)))...)
				if !slices.Equal(got, tc.want) {
					t.Errorf("restarted after %d messages, from %+v: delivered %q, want %q", cut, cp, got, tc.want)
				}
			}
		})
	}
}

// roundTrip returns cp after encoding it as JSON and decoding it.
func roundTrip(t *testing.T, cp message.Checkpoint) message.Checkpoint {
	t.Helper()
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	var got message.Checkpoint
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if !reflect.DeepEqual(got, cp) {
		t.Fatalf("checkpoint %+v decoded from %s as %+v", cp, b, got)
	}
	return got
}

func TestSequencerCheckpoint(t *testing.T) {
	s := newSeq(t, message.Checkpoint{})
	journal := []ev{
		out(prodB, 1, "b1"),  // [0, 10)
		cont(prodA, 7, "a7"), // [10, 20)
		cont(prodB, 2, "b2"), // [20, 30)
		out(prodB, 3, "b3"),  // [30, 40)
	}
	queueAll(t, s, journal, 0)
	want := message.Checkpoint{Offset: 10, Read: 40, Producers: map[message.ProducerID]message.ProducerState{
		prodA: {LastAck: 0, Begin: 10},
		prodB: {LastAck: 1, Begin: 20},
	}}
	cp := s.Checkpoint()
	if !reflect.DeepEqual(cp, want) {
		t.Fatalf("checkpoint %+v, want %+v", cp, want)
	}
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"offset":10,"read":40,"producers":{"0a0000000000":{"lastAck":0,"begin":10},"0b0000000000":{"lastAck":1,"begin":20}}}`
	if string(b) != wantJSON {
		t.Errorf("JSON %s, want %s", b, wantJSON)
	}

	// A restarted sequencer's checkpoint is the same until it reads past
	// the old one, whatever it has replayed.
	s = newSeq(t, cp)
	for i := 1; i < len(journal); i++ {
		if got := s.Checkpoint(); !reflect.DeepEqual(got, want) {
			t.Fatalf("restarted, replayed through #%d: checkpoint %+v, want %+v", i, got, want)
		}
		if _, err := s.Queue(journal[i].msg(), int64(i)*msgSize, int64(i+1)*msgSize); err != nil {
			t.Fatal(err)
		}
	}

	// Committing the transactions moves the offset to the end.
	ds, err := s.Queue(ack(prodB, 3).msg(), 45, 50) // After a gap.
	if err != nil || len(ds) != 1 || ds[0].Message.(*seqMsg).body != "b2" || ds[0].Begin != 20 || ds[0].End != 30 {
		t.Fatalf("Queue(ack B) = %+v, %v; want b2 at [20, 30)", ds, err)
	}
	if got := s.Checkpoint(); got.Offset != 10 || got.Producers[prodB] != (message.ProducerState{LastAck: 3, Begin: -1}) {
		t.Errorf("checkpoint %+v, want offset 10 and B acknowledged through 3", got)
	}
	if _, err := s.Queue(ack(prodA, 7).msg(), 50, 60); err != nil {
		t.Fatal(err)
	}
	if got := s.Checkpoint(); got.Offset != 60 || got.Read != 60 {
		t.Errorf("checkpoint %+v, want offset and read 60", got)
	}
}

func TestSequencerEmptyCheckpoint(t *testing.T) {
	s := newSeq(t, message.Checkpoint{Offset: 100, Read: 100})
	b, err := json.Marshal(s.Checkpoint())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"offset":100,"read":100,"producers":{}}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var cp message.Checkpoint
	if err := json.Unmarshal([]byte(`{"offset":7,"read":9}`), &cp); err != nil || cp.Offset != 7 || cp.Read != 9 || len(cp.Producers) != 0 {
		t.Errorf("decoded %+v, %v", cp, err)
	}
}

// TestSequencerRefuses checks that Queue refuses bad input with an error
// that names it, and that it changes nothing.
func TestSequencerRefuses(t *testing.T) {
	cp := message.Checkpoint{Offset: 100, Read: 130, Producers: map[message.ProducerID]message.ProducerState{
		prodA: {LastAck: 3, Begin: 110},
	}}
	s := newSeq(t, cp)
	if _, err := s.Queue(cont(prodA, 4, "a4").msg(), 110, 120); err != nil {
		t.Fatal(err)
	}
	before, stats := s.Checkpoint(), s.Stats()

	for _, tc := range []struct {
		m          message.Message
		begin, end int64
		want       string
	}{
		{nil, 120, 130, "nil message"},
		{out(prodA, 9, "").msg(), 115, 130, "before the end of the previous one, 120"},
		{out(prodA, 9, "").msg(), 125, 125, "has end 125, want after its begin"},
		{out(prodA, 9, "").msg(), 125, 135, "straddles the checkpoint's read offset 130"},
		{ev{prodA, 9, 3, ""}.msg(), 120, 130, "unknown flags 0x3"},
	} {
		_, err := s.Queue(tc.m, tc.begin, tc.end)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "test/journal") {
			t.Errorf("Queue(%v, %d, %d) error %v, want one naming the journal and %q", tc.m, tc.begin, tc.end, err, tc.want)
		}
	}
	if after := s.Checkpoint(); !reflect.DeepEqual(after, before) {
		t.Errorf("checkpoint changed from %+v to %+v", before, after)
	}
	if after := s.Stats(); after != stats {
		t.Errorf("stats changed from %+v to %+v", stats, after)
	}
}

// Skip passes over a frame that is not a message: the checkpoint's
// offsets move past it, but not past a producer's pending messages; a
// frame out of order is refused and changes nothing.
func TestSequencerSkip(t *testing.T) {
	s, err := message.NewSequencer("test/journal", message.Checkpoint{Offset: 100, Read: 130})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Skip(100, 110); err != nil { // Replayed: before the checkpoint's read.
		t.Fatal(err)
	}
	if cp := s.Checkpoint(); cp.Offset != 110 || cp.Read != 130 {
		t.Errorf("after a replayed skip: %+v, want offset 110, read 130", cp)
	}
	if err := s.Skip(130, 140); err != nil {
		t.Fatal(err)
	}
	if cp := s.Checkpoint(); cp.Offset != 140 || cp.Read != 140 {
		t.Errorf("after a skip: %+v, want offset and read 140", cp)
	}
	if _, err := s.Queue(cont(prodA, 4, "a4").msg(), 140, 150); err != nil {
		t.Fatal(err)
	}
	if err := s.Skip(150, 160); err != nil {
		t.Fatal(err)
	}
	if cp := s.Checkpoint(); cp.Offset != 140 || cp.Read != 160 {
		t.Errorf("after a skip past a pending message: %+v, want offset 140 (its begin), read 160", cp)
	}
	before, stats := s.Checkpoint(), s.Stats()
	if stats.Skipped != 3 {
		t.Errorf("stats count %d skipped frames, want 3", stats.Skipped)
	}
	for _, tc := range [][2]int64{{155, 170}, {170, 170}} {
		if err := s.Skip(tc[0], tc[1]); err == nil || !strings.Contains(err.Error(), "test/journal") {
			t.Errorf("Skip(%d, %d): %v, want an error naming the journal", tc[0], tc[1], err)
		}
	}
	if after := s.Checkpoint(); !reflect.DeepEqual(after, before) || s.Stats() != stats {
		t.Errorf("refused skips changed the checkpoint from %+v to %+v", before, after)
	}
	s2, err := message.NewSequencer("test/journal", message.Checkpoint{Offset: 100, Read: 130})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Skip(125, 135); err == nil || !strings.Contains(err.Error(), "straddles the checkpoint's read offset 130") {
		t.Errorf("a skip across the checkpoint's read: %v, want refused", err)
	}
}

func TestCheckpointValidate(t *testing.T) {
	ps := func(begin int64) map[message.ProducerID]message.ProducerState {
		return map[message.ProducerID]message.ProducerState{prodA: {LastAck: 1, Begin: begin}}
	}
	for _, tc := range []struct {
		cp   message.Checkpoint
		want string // "" if valid
	}{
		{message.Checkpoint{}, ""},
		{message.Checkpoint{Offset: 5, Read: 9, Producers: ps(5)}, ""},
		{message.Checkpoint{Offset: 5, Read: 9, Producers: ps(-1)}, ""},
		{message.Checkpoint{Offset: 0, Read: 9, Producers: ps(8)}, ""},
		{message.Checkpoint{Offset: -1}, "checkpoint offset -1 is negative"},
		{message.Checkpoint{Offset: 5, Read: 4}, "checkpoint read offset 4 is before its offset 5"},
		{message.Checkpoint{Offset: 5, Read: 9, Producers: ps(4)}, "producer 0a0000000000 has begin 4, want -1 or within [5, 9)"},
		{message.Checkpoint{Offset: 5, Read: 9, Producers: ps(9)}, "has begin 9"},
		{message.Checkpoint{Offset: 5, Read: 9, Producers: ps(-2)}, "has begin -2"},
	} {
		err := tc.cp.Validate()
		if tc.want == "" && err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", tc.cp, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cp, err, tc.want)
		}
		if _, nerr := message.NewSequencer("j", tc.cp); (nerr == nil) != (err == nil) {
			t.Errorf("NewSequencer(%+v) = %v, want Validate's %v", tc.cp, nerr, err)
		}
	}
}

func TestCheckpointUnmarshalErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"offset":"x"}`, "message: checkpoint: json: cannot unmarshal"},
		{`{"producers":{"0a00":{}}}`, `producer "0a00" has length 4, want 12 hex digits`},
		{`{"producers":{"0a000000000g":{}}}`, `producer "0a000000000g": encoding/hex: invalid byte`},
		{`{"producers":{"0a0000000000":{},"0A0000000000":{}}}`, "appears twice"},
		{`[]`, "message: checkpoint: json: cannot unmarshal array"},
	} {
		var cp message.Checkpoint
		err := json.Unmarshal([]byte(tc.in), &cp)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Unmarshal(%s) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestSequencerStatsPending checks the counts of a large transaction that
// is half rolled back.
func TestSequencerStatsPending(t *testing.T) {
	s := newSeq(t, message.Checkpoint{})
	var journal []ev
	for c := message.Clock(1); c <= 100; c++ {
		journal = append(journal, cont(prodA, c, fmt.Sprint(c)))
	}
	queueAll(t, s, journal, 0)
	if st := s.Stats(); st.Pending != 100 {
		t.Fatalf("pending %d, want 100", st.Pending)
	}
	if ds, err := s.Queue(ack(prodA, 50).msg(), 1000, 1010); err != nil || len(ds) != 50 {
		t.Fatalf("Queue(ack 50) delivered %d, %v; want 50", len(ds), err)
	}
	if st := s.Stats(); st.Pending != 0 || st.RolledBack != 50 || st.Delivered != 50 {
		t.Fatalf("stats %+v, want 0 pending, 50 rolled back, 50 delivered", st)
	}
}

// Prune forgets the producers idle for longer than the horizon before the
// newest acknowledged clock, never one with a transaction pending; a
// forgotten producer's message that comes again is delivered again, the
// documented cost.
func TestPruneForgetsOnlyIdleProducers(t *testing.T) {
	prodC := message.ProducerID{0xc}
	at := func(d time.Duration) message.Clock {
		return message.NewClock(time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC).Add(d))
	}
	journal := []ev{
		out(prodA, at(0), "a, long ago"),
		cont(prodC, at(time.Minute), "c, pending since long ago"),
		out(prodB, at(2*time.Hour), "b, lately"),
	}
	s := newSeq(t, message.Checkpoint{})
	if got := queueAll(t, s, journal, 0); !slices.Equal(got, []string{"a, long ago", "b, lately"}) {
		t.Fatalf("delivered %q", got)
	}
	if n := s.Prune(0); n != 0 {
		t.Fatalf("Prune(0) forgot %d producers, want none", n)
	}
	if n := s.Prune(time.Hour); n != 1 || s.Stats().Pruned != 1 {
		t.Fatalf("Prune(1h) forgot %d producers (stats %d), want 1: A", n, s.Stats().Pruned)
	}
	cp := s.Checkpoint()
	if _, ok := cp.Producers[prodA]; ok || len(cp.Producers) != 2 {
		t.Fatalf("checkpoint's producers %v; want B and the pending C, not A", cp.Producers)
	}
	again := append(journal, out(prodA, at(0), "a, again"), ack(prodC, at(time.Minute)))
	if got := queueAll(t, s, again, len(journal)); !slices.Equal(got, []string{"a, again", "c, pending since long ago"}) {
		t.Fatalf("after pruning, delivered %q; want A's repeat (forgotten) and C's transaction", got)
	}
}
