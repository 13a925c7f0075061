package broker

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/fragment"
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

// A broker whose drain times out (no other broker can take its journals,
// of replication 3 on three brokers) gives them up, and persists their
// spools before it exits, once their primary serves the same content;
// restarted, it serves the journal again, and every broker reads the
// same journal.
func TestDrainTimeoutPersistsSpools(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"b1", "b2", "b3"} {
		c.startWith(name, "", c.etcd, func(cfg *Config) { cfg.DrainTimeout = time.Second })
	}
	const journal = "log/given-up"
	c.journal(c.brokers["b1"], journal, 3)
	c.awaitRoute(c.brokers["b1"], journal, 3)
	c.appendRetry(c.brokers["b1"], journal, []byte("before\n"))
	b3 := c.brokers["b3"]
	close(b3.drain)
	select {
	case err := <-b3.done:
		b3.done <- err
		if err != nil {
			t.Fatalf("the drain returned %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain did not give up")
	}
	c.stop(b3)
	if recovered, err := spool.Recover(b3.dir); err != nil || len(recovered) != 0 {
		t.Fatalf("the broker that gave its journal up left spools %v, %v; want them persisted", recovered, err)
	}
	store, err := fragment.Open(context.Background(), c.store)
	if err != nil {
		t.Fatal(err)
	}
	stored := false
	if err := store.List(context.Background(), journal, func(f fragment.Fragment) error {
		stored = stored || f.Begin == 0 && f.End == 7
		return nil
	}); err != nil || !stored {
		t.Fatalf("no fragment [0, 7) of %s in the store (%v)", journal, err)
	}
	c.appendRetry(c.brokers["b1"], journal, []byte("after\n"))
	restarted := c.start("b3", b3.dir)
	c.awaitRoute(c.brokers["b1"], journal, 3)
	c.appendRetry(c.brokers["b1"], journal, []byte("end\n"))
	want := "before\nafter\nend\n"
	for _, b := range []*testBroker{c.brokers["b1"], c.brokers["b2"], restarted} {
		if got := string(c.readAll(b, journal)); got != want {
			t.Errorf("%s reads %q, want %q", b.name, got, want)
		}
	}
}
