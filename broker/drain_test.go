package broker

import (
	"bytes"
	"testing"
	"time"
)

// A draining broker hands its journals to another, even journals nobody
// appends to (the primary synchronizes a new route on its own), persists
// its spools, and returns; the other broker serves everything.
func TestDrainMovesIdleJournal(t *testing.T) {
	c := newCluster(t)
	b1 := c.start("b1", "")
	c.journal(b1, "idle/j", 1)
	c.appendRetry(b1, "idle/j", []byte("content\n"))
	b2 := c.start("b2", "")
	close(b1.drain)
	select {
	case err := <-b1.done:
		b1.done <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second): // Generous: CI runs packages' tests side by side on 2 cores.
		t.Fatal("b1 did not finish draining its idle journal within 60s")
	}
	if got := c.readAll(b2, "idle/j"); !bytes.Equal(got, []byte("content\n")) {
		t.Fatalf("after the drain, b2 reads %q", got)
	}
}
