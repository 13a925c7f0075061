package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/protocol"
)

// awaitReady waits until b.srv.Ready() matches want ("" for ready, else
// the start of its error).
func awaitReady(t *testing.T, b *testBroker, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := b.srv.Ready()
		if (want == "" && err == nil) || (want != "" && err != nil && strings.HasPrefix(err.Error(), want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker %s: Ready() = %v, want %q", b.name, err, want)
		}
		time.Sleep(10 * time.Millisecond) // Polling the broker's phase.
	}
}

// A broker is ready once announced, and not ready from the moment it
// starts draining, though its drain lasts until its journal is gone.
func TestReadinessFollowsTheDrain(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	awaitReady(t, b, "")
	c.journal(b, "ready/one", 1)
	c.appendRetry(b, "ready/one", []byte("x\n"))

	close(b.drain) // No other broker can take the journal: the drain waits.
	awaitReady(t, b, "draining")
	select {
	case err := <-b.done:
		t.Fatalf("the drain ended (%v) while the broker held its journal", err)
	default:
	}
	jc := protocol.NewJournalClient(b.conn)
	list, err := jc.List(context.Background(), &protocol.ListRequest{Selector: "name=ready/one"})
	if err != nil || len(list.Journals) != 1 {
		t.Fatalf("listing the journal: %v %v", list, err)
	}
	resp, err := jc.Apply(context.Background(), &protocol.ApplyRequest{
		Changes: []*protocol.ApplyRequest_Change{{Delete: "ready/one", ExpectModRevision: list.Journals[0].ModRevision}}})
	if err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("deleting the journal: %v %v", resp, err)
	}
	if err := <-b.done; err != nil {
		t.Fatalf("Run after the drain: %v", err)
	}
	delete(c.brokers, b.name)
	awaitReady(t, b, "stopped")
}
