package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"testing"

	"github.com/quire-dev/quire/protocol"
)

// listFragments lists journal's fragments through b alone.
func (c *cluster) listFragments(b *testBroker, req *protocol.FragmentsRequest) []*protocol.Fragment {
	c.t.Helper()
	req.DoNotProxy = true
	resp, err := protocol.NewJournalClient(b.conn).ListFragments(context.Background(), req)
	if err != nil || resp.Status != protocol.Status_OK {
		c.t.Fatalf("listing fragments of %s through %s: %v %v", req.Journal, b.name, resp.GetStatus(), err)
	}
	var out []*protocol.Fragment
	for _, info := range resp.Fragments {
		out = append(out, info.Fragment)
	}
	if resp.NextPageToken != 0 {
		req.NextPageToken = resp.NextPageToken
		out = append(out, c.listFragments(b, req)...)
	}
	return out
}

// A listing ends with the spool being written, so that it shows where all
// of a journal's content is: spooled, not persisted, as far as a reader
// may read it from the broker answering.
func TestListingShowsTheOpenSpool(t *testing.T) {
	c := newCluster(t)
	primary, second, _ := c.threeReplicas("log/open")

	sum := sha256.Sum256([]byte("a\n"))
	got := c.listFragments(primary, &protocol.FragmentsRequest{Journal: "log/open"})
	if len(got) != 1 || got[0].Begin != 0 || got[0].End != 2 || got[0].Store != "" || got[0].ModTime != 0 ||
		!bytes.Equal(got[0].Sum, sum[:]) || got[0].Codec == protocol.Codec_CODEC_UNSPECIFIED {
		t.Fatalf("the primary lists %v, want the open spool [0, 2), spooled, with its sum and codec", got)
	}
	if got := c.listFragments(primary, &protocol.FragmentsRequest{Journal: "log/open", BeginModTime: 1}); len(got) != 0 {
		t.Errorf("persisted since 1970: %v, want none (the open spool is not persisted)", got)
	}

	// A peer lists what its primary acknowledged, which rides on the next
	// commit: through "a\n" once "b\n" commits, and a sum only of its head.
	c.appendRetry(primary, "log/open", []byte("b\n"))
	got = c.listFragments(second, &protocol.FragmentsRequest{Journal: "log/open"})
	all := sha256.Sum256([]byte("a\nb\n"))
	switch {
	case len(got) != 1 || got[0].Begin != 0 || got[0].End < 2 || got[0].End > 4:
		t.Errorf("a peer lists %v, want [0, 2) to [0, 4)", got)
	case got[0].End == 4 && !bytes.Equal(got[0].Sum, all[:]), got[0].End < 4 && len(got[0].Sum) != 0:
		t.Errorf("a peer lists %v: want the sum of its head, or none short of it", got)
	}

	// Pages: the open spool comes after the rolled one, on a page of its own.
	c.journal(primary, "log/rolled", 1, func(s *protocol.JournalSpec) { s.Fragment.Length = 1024 })
	b := primary
	if route := c.awaitRoute(primary, "log/rolled", 1); route.Members[0].Suffix != primary.name {
		b = c.brokers[route.Members[0].Suffix]
	}
	c.appendRetry(b, "log/rolled", bytes.Repeat([]byte("x"), 1024))
	c.appendRetry(b, "log/rolled", []byte("y")) // Rolls the spool of the x's.
	got = c.listFragments(b, &protocol.FragmentsRequest{Journal: "log/rolled", PageLimit: 1})
	if len(got) != 2 || got[0].Begin != 0 || got[0].End != 1024 || got[1].Begin != 1024 || got[1].End != 1025 || got[1].Store != "" {
		t.Errorf("pages of one list %v, want [0, 1024) then the open [1024, 1025)", got)
	}
}
