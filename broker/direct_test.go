package broker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

// persistedJournal appends 2.25 MiB to journal through b, in fragments
// of 1 MiB, and waits until the first two are persisted: [0, 2 MiB) is
// in the store, the rest in the spool. It returns the content.
func (c *cluster) persistedJournal(b *testBroker, journal string) []byte {
	c.t.Helper()
	c.journal(b, journal, 1) // Fragments roll at 1 MiB.
	var want bytes.Buffer
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	for i := range 9 {
		chunk[0] = byte('A' + i)
		c.appendRetry(b, journal, chunk)
		want.Write(chunk)
	}
	c.waitPersisted(b, journal, 2<<20)
	return want.Bytes()
}

// directCount is quire_broker_reads_direct_total.
func directCount(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := readsDirect.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// readResponses makes one Read through b, returning every response until
// the stream ends.
func readResponses(t *testing.T, b *testBroker, req *protocol.ReadRequest) []*protocol.ReadResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := protocol.NewJournalClient(b.conn).Read(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var out []*protocol.ReadResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("read %v: %v (after %d responses)", req, err, len(out))
		}
		out = append(out, resp)
	}
}

// content is the content of resps, checked to be contiguous from offset.
func content(t *testing.T, resps []*protocol.ReadResponse, offset int64) []byte {
	t.Helper()
	var out []byte
	for _, r := range resps {
		if len(r.Content) == 0 {
			continue
		}
		if r.Offset != offset+int64(len(out)) {
			t.Fatalf("content at %d, want %d", r.Offset, offset+int64(len(out)))
		}
		out = append(out, r.Content...)
	}
	return out
}

// A direct read that reaches a persisted fragment is answered with the
// fragment and its URL, and no content, and ends there; the URL holds
// the fragment's stored bytes. Through a broker that is not a replica,
// which proxies the read, too.
func TestDirectReadOfPersistedFragmentGetsItsURL(t *testing.T) {
	c := newCluster(t)
	b1, b2 := c.start("b1", ""), c.start("b2", "")
	c.awaitMembers(b1, 2)
	want := c.persistedJournal(b1, "direct/stored")
	route := c.awaitRoute(b1, "direct/stored", 1)
	c.awaitRoute(b2, "direct/stored", 1)
	other := b1
	if route.Members[0].Suffix == "b1" {
		other = b2
	}
	for _, b := range []*testBroker{c.brokers[route.Members[0].Suffix], other} {
		before := directCount(t)
		resps := readResponses(t, b, &protocol.ReadRequest{Journal: "direct/stored", Offset: 100, Direct: true})
		if got := directCount(t) - before; got != 1 {
			t.Errorf("through %s: quire_broker_reads_direct_total rose by %v, want 1", b.name, got)
		}
		last := resps[len(resps)-1]
		if len(resps) != 2 || last.Status != protocol.Status_OK || last.FragmentUrl == "" || len(last.Content) != 0 ||
			last.Offset != 100 || last.Fragment.GetBegin() != 0 || last.Fragment.GetEnd() < 1<<20 ||
			last.Fragment.GetStore() != c.store || last.WriteHead != int64(len(want)) {
			t.Fatalf("through %s: direct read answered %v; want the metadata, then the fragment [0, ≥1 MiB) of %s "+
				"with a URL, no content, at offset 100, and the stream's end", b.name, resps, c.store)
		}
		u, err := url.Parse(last.FragmentUrl)
		if err != nil || u.Scheme != "file" {
			t.Fatalf("fragment URL %q: want a file URL (%v)", last.FragmentUrl, err)
		}
		file, err := os.Open(u.Path)
		if err != nil {
			t.Fatal(err)
		}
		f := fragment.Fragment{Journal: "direct/stored", Begin: last.Fragment.Begin, End: last.Fragment.End,
			Codec: fragment.Codec(last.Fragment.Codec - 1)}
		copy(f.Sum[:], last.Fragment.Sum)
		rc, err := fragment.NewReader(f, file)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want[f.Begin:f.End]) {
			t.Fatalf("the URL's fragment holds %d bytes (%v), which differ from the journal's [%d, %d)", len(got), err, f.Begin, f.End)
		}
	}
}

// Content not yet persisted is streamed to a direct read, as to any.
func TestDirectReadOfSpoolIsStreamed(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	want := c.persistedJournal(b, "direct/spool")
	from := int64(len(want) - 1000)
	resps := readResponses(t, b, &protocol.ReadRequest{Journal: "direct/spool", Offset: from, Direct: true})
	for _, r := range resps {
		if r.FragmentUrl != "" {
			t.Fatalf("a direct read of the spool answered with URL %q", r.FragmentUrl)
		}
	}
	if got := content(t, resps, from); !bytes.Equal(got, want[from:]) {
		t.Fatalf("direct read of the spool: %d bytes, which differ from the %d appended there", len(got), len(want[from:]))
	}
}

// unsignedStore is a store that cannot sign URLs.
type unsignedStore struct{ fragment.Store }

func (unsignedStore) SignURL(context.Context, fragment.Fragment, time.Duration) (string, error) {
	return "", errors.New("this store signs no URLs")
}

// A broker whose store cannot sign a URL serves a direct read's content
// itself.
func TestDirectReadOfUnsignableStoreIsStreamed(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	store, err := fragment.Open(context.Background(), c.store)
	if err != nil {
		t.Fatal(err)
	}
	b.srv.stores.mu.Lock()
	if b.srv.stores.stores == nil {
		b.srv.stores.stores = map[string]fragment.Store{}
	}
	b.srv.stores.stores[c.store] = unsignedStore{store}
	b.srv.stores.mu.Unlock()

	want := c.persistedJournal(b, "direct/unsigned")
	before := directCount(t)
	resps := readResponses(t, b, &protocol.ReadRequest{Journal: "direct/unsigned", Offset: 10, EndOffset: 2 << 20, Direct: true})
	for _, r := range resps {
		if r.FragmentUrl != "" {
			t.Fatalf("a direct read of a store that cannot sign answered with URL %q", r.FragmentUrl)
		}
	}
	if got := content(t, resps, 10); !bytes.Equal(got, want[10:2<<20]) {
		t.Fatalf("direct read of a store that cannot sign: %d bytes, which differ from the %d appended", len(got), len(want[10:2<<20]))
	}
	if got := directCount(t) - before; got != 0 {
		t.Errorf("quire_broker_reads_direct_total rose by %v, want 0", got)
	}
}

// A suspended journal, all of it in the store, is read directly too.
func TestDirectReadOfSuspendedJournal(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	want := c.persistedJournal(b, "direct/suspended")
	c.suspend(b, "direct/suspended")
	resps := readResponses(t, b, &protocol.ReadRequest{Journal: "direct/suspended", Offset: int64(len(want) - 10), Direct: true})
	last := resps[len(resps)-1]
	if last.FragmentUrl == "" || last.Fragment.GetEnd() != int64(len(want)) || len(last.Content) != 0 || last.WriteHead != int64(len(want)) {
		t.Fatalf("direct read of a suspended journal answered %v; want its last fragment, ending at %d, with a URL", resps, len(want))
	}
}
