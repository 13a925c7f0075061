package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

// restore persists content into the cluster's store as journal's fragment
// at begin, behind the brokers' back, as an operator restoring a backup
// would. It returns the fragment's end.
func (c *cluster) restore(journal string, begin int64, content []byte) int64 {
	c.t.Helper()
	ctx := context.Background()
	store, err := fragment.Open(ctx, c.store)
	if err != nil {
		c.t.Fatal(err)
	}
	f := fragment.Fragment{Journal: journal, Begin: begin, End: begin + int64(len(content)),
		Sum: sha256.Sum256(content), Codec: fragment.None}
	if err := store.Persist(ctx, f, bytes.NewReader(content)); err != nil {
		c.t.Fatal(err)
	}
	return f.End
}

// Content restored to a store past a journal's write head is never
// written over: an append at the restored content's end (what quire
// journals reset-head sends) moves the head there at once, though the
// brokers would list the store only an hour later; one at an offset inside
// it is refused.
func TestAppendAtStoredEndRollsTheHeadForward(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/restored", 1, func(s *protocol.JournalSpec) {
		s.Fragment.RefreshInterval = durationpb.New(time.Hour)
	})
	c.appendRetry(b, "log/restored", []byte("live\n"))
	restored := []byte("restored from a backup\n")
	end := c.restore("log/restored", 5, restored)
	ctx := context.Background()

	inside := int64(10)
	resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/restored", Offset: &inside}, []byte("over"))
	if err != nil || resp.Status != protocol.Status_WRONG_APPEND_OFFSET || resp.Commit.GetBegin() != end {
		t.Fatalf("append at %d, inside the restored content: %v %v; want WRONG_APPEND_OFFSET at %d", inside, resp, err, end)
	}
	resp, err = appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/restored", Offset: &end}, nil)
	if err != nil || resp.Status != protocol.Status_OK || resp.Commit.GetBegin() != end || resp.Commit.GetEnd() != end {
		t.Fatalf("empty append at the restored end %d: %v %v", end, resp, err)
	}
	if resp := c.appendRetry(b, "log/restored", []byte("after\n")); resp.Commit.Begin != end {
		t.Fatalf("next append at %d, want %d", resp.Commit.Begin, end)
	}
	want := "live\n" + string(restored) + "after\n"
	if got := string(readRetry(t, b, "log/restored", 0, int64(len(want)))); got != want {
		t.Fatalf("journal holds %q, want %q", got, want)
	}
}

// Without anyone asking, the primary rolls past restored content at its
// next listing of the stores, so that later appends do not write over it.
func TestListingRollsTheHeadPastStoredContent(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/relisted", 1, func(s *protocol.JournalSpec) {
		s.Fragment.RefreshInterval = durationpb.New(time.Second)
	})
	c.appendRetry(b, "log/relisted", []byte("live\n"))
	end := c.restore("log/relisted", 5, []byte("restored\n"))
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := c.appendRetry(b, "log/relisted", nil)
		if resp.Commit.Begin == end {
			break
		}
		if resp.Commit.Begin != 5 || time.Now().After(deadline) {
			t.Fatalf("empty append at %d; want 5 until the listing, then %d", resp.Commit.Begin, end)
		}
		time.Sleep(50 * time.Millisecond) // Waiting for the primary's next listing.
	}
	want := "live\nrestored\n"
	if got := string(readRetry(t, b, "log/relisted", 0, int64(len(want)))); got != want {
		t.Fatalf("journal holds %q, want %q", got, want)
	}
}
