package message_test

import (
	"math/rand/v2"
	"testing"

	"github.com/quire-dev/quire/message"
)

// BenchmarkSequencer measures the sequencer's throughput on the model's
// mixed workload: one to four producers, committed messages, transactions
// (some rolled back), retried appends, and crashed and succeeded
// producers. It logs the workload's counts (go test -bench -v).
func BenchmarkSequencer(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	journal, want := genModelJournal(r, 100_000, true)
	msgs := make([]*seqMsg, len(journal))
	for i, e := range journal {
		msgs[i] = &seqMsg{uuid: e.uuid, body: e.body}
	}
	b.ReportAllocs()
	var s *message.Sequencer
	for b.Loop() {
		var err error
		s, err = message.NewSequencer("bench", message.Checkpoint{})
		if err != nil {
			b.Fatal(err)
		}
		delivered := 0
		for i, e := range journal {
			ds, err := s.Queue(msgs[i], e.begin, e.end)
			if err != nil {
				b.Fatal(err)
			}
			delivered += len(ds)
		}
		if delivered != len(want) {
			b.Fatalf("delivered %d messages, want %d", delivered, len(want))
		}
	}
	b.Logf("%d messages: %+v", len(journal), s.Stats())
	b.ReportMetric(float64(b.N*len(journal))/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(journal)), "ns/msg")
}

// BenchmarkSequencerCheckpoint measures Checkpoint with 1000 producers.
func BenchmarkSequencerCheckpoint(b *testing.B) {
	s, err := message.NewSequencer("bench", message.Checkpoint{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 1000 {
		id := message.ProducerID{byte(i), byte(i >> 8)}
		if _, err := s.Queue(&seqMsg{uuid: message.BuildUUID(id, 1, message.ContinueTxn)}, int64(i), int64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if cp := s.Checkpoint(); len(cp.Producers) != 1000 {
			b.Fatal(len(cp.Producers))
		}
	}
}
