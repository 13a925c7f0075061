package broker

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quire-dev/quire/protocol"
)

// Whole appends that wait for the token commit together, each answered
// with its own range; a retry queued behind its first attempt is answered
// with that attempt's range; and an append whose client leaves while it
// waits is not appended.
func TestWholeAppendsCommitTogether(t *testing.T) {
	for _, replication := range []int{1, 3} {
		t.Run(map[int]string{1: "r1", 3: "r3"}[replication], func(t *testing.T) {
			c := newCluster(t)
			var b *testBroker
			for _, name := range []string{"b1", "b2", "b3"}[:replication] {
				b = c.start(name, "")
			}
			const journal = "batch/j"
			c.journal(b, journal, int32(replication))
			c.appendRetry(b, journal, []byte("warm\n"))
			route := c.awaitRoute(b, journal, replication)
			primary := c.brokers[route.Members[0].Suffix]
			_, _, r := primary.srv.resolver.resolve(journal)

			// Hold the token, as an append in progress does, while appends queue.
			if err := r.acquire(context.Background()); err != nil {
				t.Fatal(err)
			}
			reqs := []*protocol.AppendRequest{
				{Journal: journal, Writer: "w1", Sequence: 1, Content: []byte("one\n"), Commit: true},
				{Journal: journal, Writer: "w2", Sequence: 7, Content: []byte("two\n"), Commit: true},
				{Journal: journal, Writer: "w3", Sequence: 1, Content: []byte("gone\n"), Commit: true},
				{Journal: journal, Writer: "w1", Sequence: 1, Content: []byte("one\n"), Commit: true}, // A retry.
			}
			resps := make([]*protocol.AppendResponse, len(reqs))
			errs := make([]error, len(reqs))
			leave, left := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i, req := range reqs {
				ctx := context.Background()
				if i == 2 {
					ctx = leave
				}
				wg.Go(func() { resps[i], errs[i] = appendMessage(ctx, primary, req) })
				awaitQueued(t, r, i+1)
			}
			commits := testutil.ToFloat64(appendCommits)
			left()
			awaitQueued(t, r, len(reqs)-1)
			r.release()
			wg.Wait()

			for i, want := range []struct {
				begin, end int64
				again      bool
			}{{5, 9, false}, {9, 13, false}, {}, {5, 9, true}} {
				if i == 2 {
					if errs[i] == nil {
						t.Errorf("append %d, whose client left: %v, want an error", i, resps[i])
					}
					continue
				}
				resp := resps[i]
				if errs[i] != nil || resp.Status != protocol.Status_OK || resp.Commit.Begin != want.begin || resp.Commit.End != want.end || resp.AlreadyCommitted != want.again {
					t.Errorf("append %d: %v %v; want OK at [%d, %d), already committed %v", i, resp, errs[i], want.begin, want.end, want.again)
				}
			}
			if got := testutil.ToFloat64(appendCommits) - commits; got != 1 {
				t.Errorf("the queued appends made %v commits, want 1", got)
			}
			if got, want := string(c.readAll(primary, journal)), "warm\none\ntwo\n"; got != want {
				t.Errorf("journal holds %q, want %q", got, want)
			}
		})
	}
}

// awaitQueued waits until n whole appends wait in r's queue.
func awaitQueued(t *testing.T, r *replica, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		queued := len(r.wholes)
		r.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued, want %d", queued, n)
		}
		time.Sleep(time.Millisecond) // Polling the queue.
	}
}

// Appends that commit together are written and sent to peers in runs of
// at most wholeRun bytes, or one append's content if it is larger; every
// replica holds them in order.
func TestWholeAppendsInRuns(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"b1", "b2", "b3"} {
		c.start(name, "")
	}
	const journal = "batch/runs"
	c.journal(c.brokers["b1"], journal, 3)
	route := c.awaitRoute(c.brokers["b1"], journal, 3)
	c.appendRetry(c.brokers["b1"], journal, []byte("warm\n"))
	primary := c.brokers[route.Members[0].Suffix]
	_, _, r := primary.srv.resolver.resolve(journal)

	if err := r.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []byte("warm\n")
	var wg sync.WaitGroup
	for i, size := range []int{100 << 10, 100 << 10, 100 << 10, 10, wholeRun + 1, 20} {
		content := bytes.Repeat([]byte{'a' + byte(i)}, size)
		want = append(want, content...)
		wg.Go(func() {
			resp, err := appendMessage(context.Background(), primary, &protocol.AppendRequest{Journal: journal, Content: content, Commit: true})
			if err != nil || resp.Status != protocol.Status_OK {
				t.Errorf("append %d: %v %v", i, resp, err)
			}
		})
		awaitQueued(t, r, i+1)
	}
	r.release()
	wg.Wait()
	for _, b := range c.brokers {
		if got := c.readAll(b, journal); !bytes.Equal(got, want) {
			t.Errorf("read through %s: %d bytes, want the %d appended in order", b.name, len(got), len(want))
		}
	}
}

// Under steady appends a peer learns that the primary acknowledged a
// commit from the next commit's message, rather than from a message of its
// own; once no append waits to commit next, from a message of its own, at
// once, so that the peer serves the last commit to its readers.
func TestAcknowledgementRidesOnTheNextCommit(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"b1", "b2"} {
		c.start(name, "")
	}
	const journal = "batch/acked"
	c.journal(c.brokers["b1"], journal, 2)
	c.appendRetry(c.brokers["b1"], journal, []byte("warm\n")) // [0, 5)
	route := c.awaitRoute(c.brokers["b1"], journal, 2)
	primary, peer := c.brokers[route.Members[0].Suffix], c.brokers[route.Members[1].Suffix]
	_, _, r := primary.srv.resolver.resolve(journal)
	// The primary's maintenance takes the token once to record the new
	// route, sending the acknowledgement alone: let it be done first.
	awaitRouteRecorded(t, primary, journal, route)
	if err := r.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.release()

	// The peer holds the proposal of "one\n" until "two\n" queues behind it.
	acked := make(chan int64, 8) // The acknowledgement each proposal carried, by end.
	ends := make(chan int64, 8)
	hold := make(chan struct{})
	var unhold sync.Once
	t.Cleanup(func() { unhold.Do(func() { close(hold) }) })
	proposalHook = func(pr *replica, req *protocol.ReplicateRequest) error {
		if pr.journal != journal || len(req.Content) == 0 {
			return nil
		}
		ends <- req.Proposal.End
		acked <- req.Acknowledged
		if req.Proposal.End == 9 {
			<-hold
		}
		return nil
	}
	t.Cleanup(func() { proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil } })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for _, content := range []string{"one\n", "two\n"} {
		go func() {
			resp, err := appendMessage(ctx, primary, &protocol.AppendRequest{Journal: journal, Content: []byte(content), Commit: true})
			if err == nil && resp.Status != protocol.Status_OK {
				err = fmt.Errorf("append of %q: %s", content, resp.Status)
			}
			errs <- err
		}()
		if content == "one\n" {
			if end := <-ends; end != 9 {
				t.Fatalf("first proposal ends at %d, want 9", end)
			}
			<-acked
		}
	}
	awaitQueued(t, r, 1)
	unhold.Do(func() { close(hold) })
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if end, ack := <-ends, <-acked; end != 13 || ack != 9 {
		t.Errorf("the second commit's proposal ends at %d carrying acknowledgement %d; want 13 carrying 9, the first's end", end, ack)
	}

	// Nothing commits after "two\n": the peer learns of it all the same.
	stream, err := protocol.NewJournalClient(peer.conn).Read(ctx, &protocol.ReadRequest{
		Journal: journal, Offset: 9, Block: true, EndOffset: 13, DoNotProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < 4 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("reading the last commit at the peer: %v (read %q)", err, got)
		}
		if resp.Status != protocol.Status_OK {
			t.Fatalf("reading the last commit at the peer: %s", resp.Status)
		}
		got = append(got, resp.Content...)
	}
	if string(got) != "two\n" {
		t.Errorf("the peer served %q, want %q", got, "two\n")
	}
}

// awaitRouteRecorded waits until every assignment of journal records
// route, as the primary's maintenance does once it has synchronized it.
// It waits on the broker's keyspace, whose observers (the resolver among
// them) have run by the time its change channel closes.
func awaitRouteRecorded(t *testing.T, b *testBroker, journal string, route *protocol.Route) {
	t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		changed := b.srv.ks.Changed() // Before the snapshot: no change is missed.
		state, _ := b.srv.resolver.snapshot()
		as := state.ItemAssignments(journal)
		recorded := len(as) != 0
		for _, a := range as {
			recorded = recorded && string(a.KV.Value) == routeText(route)
		}
		if recorded {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("the assignments of %s do not record its route %s", journal, routeText(route))
		}
	}
}
