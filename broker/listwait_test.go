package broker_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/protocol"
)

// A List that waits for a revision the broker has not reached answers
// only once a write reaches it, with what the write changed; one whose
// context ends first fails with the context's error.
func TestListWaitsForRevision(t *testing.T) {
	c := brokertest.New(t)
	a := c.Start("a")
	c.Journals(c.Client(a), 1, "watch/one")
	jc := conn(t, a, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := jc.List(ctx, &protocol.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A revision nothing will reach while the test runs: the List waits
	// until its context ends.
	far := first.Header.Revision + 1_000_000
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := jc.List(short, &protocol.ListRequest{WaitForRevision: far}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("List waiting for revision %d: %v, want DeadlineExceeded", far, err)
	}

	// A watcher's loop: each List waits for the revision after the last
	// answer's. (The allocator may still be writing the first journal's
	// route, which wakes it before the Apply below.)
	type answer struct {
		resp *protocol.ListResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		rev := first.Header.Revision + 1
		for {
			resp, err := jc.List(ctx, &protocol.ListRequest{WaitForRevision: rev, Selector: "prefix=watch/"})
			if err == nil && resp.Header.Revision < rev {
				t.Errorf("answered at revision %d, before the %d waited for", resp.Header.Revision, rev)
			}
			if err != nil || len(resp.Journals) == 2 {
				done <- answer{resp, err}
				return
			}
			rev = resp.Header.Revision + 1
		}
	}()
	c.Journals(c.Client(a), 1, "watch/two")
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.resp.Journals[1].Spec.Name != "watch/two" {
		t.Errorf("the List that waited lists %v, want watch/one and watch/two", got.resp.Journals)
	}
	if _, err := jc.List(ctx, &protocol.ListRequest{WaitForRevision: -1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("List waiting for revision -1: %v, want InvalidArgument", err)
	}
}
