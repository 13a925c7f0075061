package consumer

import (
	"testing"
	"time"

	"github.com/quire-dev/quire/message"
)

type mcMsg struct{ u message.UUID }

func (m *mcMsg) GetUUID() message.UUID                     { return m.u }
func (m *mcMsg) SetUUID(u message.UUID)                    { m.u = u }
func (m *mcMsg) NewAcknowledgement(string) message.Message { return &mcMsg{} }

// TestSourceCheckpointKeepsTransactionsAfterMinOffset: raising a source's
// minOffset past the checkpoint's Offset (held back by a producer whose
// transaction began before minOffset) must not give up the pending
// transaction of another producer that began after minOffset: its
// acknowledgement, read later, must still deliver it.
func TestSourceCheckpointKeepsTransactionsAfterMinOffset(t *testing.T) {
	base := message.NewClock(time.Now())
	a, b := message.ProducerID{1}, message.ProducerID{2}
	type rec struct {
		m          *mcMsg
		begin, end int64
	}
	journal := []rec{
		{&mcMsg{message.BuildUUID(b, base+1, message.ContinueTxn)}, 10, 20}, // b's transaction, never acknowledged
		{&mcMsg{message.BuildUUID(a, base+5, message.ContinueTxn)}, 50, 60}, // a's transaction...
		{&mcMsg{message.BuildUUID(a, base+6, message.AckTxn)}, 100, 110},    // ...acknowledged after the checkpoint
	}
	seq, err := message.NewSequencer("j", message.Checkpoint{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range journal[:2] {
		if _, err := seq.Queue(r.m, r.begin, r.end); err != nil {
			t.Fatal(err)
		}
	}
	cp := seq.Checkpoint() // Offset 10 (b), Read 60, a's Begin 50.
	scp := sourceCheckpoint(cp, 30)
	seq2, err := message.NewSequencer("j", scp)
	if err != nil {
		t.Fatal(err)
	}
	delivered := 0
	for _, r := range journal {
		if r.begin < scp.Offset {
			continue // Not read: before where the reader starts.
		}
		ds, err := seq2.Queue(r.m, r.begin, r.end)
		if err != nil {
			t.Fatal(err)
		}
		delivered += len(ds)
	}
	if delivered != 1 {
		t.Errorf("delivered %d messages, want 1: a's message at offset 50 (after minOffset 30) was committed; checkpoint %+v became %+v",
			delivered, cp, scp)
	}
}
