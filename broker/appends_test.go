package broker

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/protocol"
)

// An Appends stream carries many appends, each answered under its tag with
// its own range, at replication 1 and 3: they read back in the order of
// their ranges, a retry is answered with its first attempt's range, an
// append to a journal of another primary is sent there (NOT_PRIMARY), and
// a message that does not commit is refused alone. Closing the stream's
// sending side ends it once everything is answered.
func TestAppendsStream(t *testing.T) {
	for _, replication := range []int{1, 3} {
		t.Run(fmt.Sprintf("r%d", replication), func(t *testing.T) {
			c := newCluster(t)
			var b *testBroker
			for _, name := range []string{"b1", "b2", "b3"}[:replication] {
				b = c.start(name, "")
			}
			const journal = "appends/j"
			c.journal(b, journal, int32(replication))
			c.appendRetry(b, journal, []byte("warm\n"))
			route := c.awaitRoute(b, journal, replication)
			primary := c.brokers[route.Members[0].Suffix]
			// "warm\n", or more than once if an attempt that committed
			// failed (appendRetry has no writer sequence).
			before := string(c.readAll(primary, journal))

			stream, err := protocol.NewJournalClient(primary.conn).Appends(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			const n = 200
			var reqs []*protocol.AppendRequest
			for i := range n {
				reqs = append(reqs, &protocol.AppendRequest{Journal: journal, Writer: fmt.Sprintf("w%d", i%16),
					Sequence: uint64(i + 1), Content: fmt.Appendf(nil, "append %03d\n", i), Commit: true, Tag: uint64(i + 1)})
			}
			last := reqs[n-1] // Its writer's latest append.
			retry := &protocol.AppendRequest{Journal: journal, Writer: last.Writer, Sequence: last.Sequence, Content: last.Content, Commit: true, Tag: 1000}
			partial := &protocol.AppendRequest{Journal: journal, Content: []byte("no commit\n"), Tag: 1001}
			for _, req := range append(reqs, partial) {
				if err := stream.Send(req); err != nil {
					t.Fatal(err)
				}
			}
			answers := receiveAll(t, stream, n+1)
			if err := stream.Send(retry); err != nil {
				t.Fatal(err)
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			again := receiveAll(t, stream, 1)[retry.Tag]
			if _, err := stream.Recv(); err != io.EOF {
				t.Errorf("after the last answer: %v, want io.EOF", err)
			}

			if got := answers[partial.Tag]; codes.Code(got.GetErrorCode()) != codes.InvalidArgument {
				t.Errorf("the append that does not commit was answered %v, want InvalidArgument", got)
			}
			type ranged struct {
				begin int64
				text  string
			}
			var got []ranged
			for i, req := range reqs {
				resp := answers[req.Tag]
				if resp.GetStatus() != protocol.Status_OK || resp.GetErrorCode() != 0 || resp.Commit.End-resp.Commit.Begin != int64(len(req.Content)) {
					t.Fatalf("append %d answered %v", i, resp)
				}
				got = append(got, ranged{resp.Commit.Begin, string(req.Content)})
			}
			if first := answers[last.Tag].Commit; !again.GetAlreadyCommitted() || again.Commit.Begin != first.Begin {
				t.Errorf("the retry of the last append was answered %v; want its first range %v", again, first)
			}
			slices.SortFunc(got, func(a, b ranged) int { return int(a.begin - b.begin) })
			var want strings.Builder
			want.WriteString(before)
			for _, r := range got {
				want.WriteString(r.text)
			}
			if read := string(c.readAll(primary, journal)); read != want.String() {
				t.Errorf("read back %q,\nwant the appends in the order of their ranges: %q", read, want.String())
			}
			if replication == 1 {
				return
			}
			other := c.brokers[route.Members[1].Suffix]
			stream, err = protocol.NewJournalClient(other.conn).Appends(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := stream.Send(&protocol.AppendRequest{Journal: journal, Content: []byte("x\n"), Commit: true, Tag: 7}); err != nil {
				t.Fatal(err)
			}
			resp := receiveAll(t, stream, 1)[7]
			if resp.Status != protocol.Status_NOT_PRIMARY || resp.Header.GetRoute().GetEndpoints()[0] != route.Endpoints[0] {
				t.Errorf("an append at a replica that is not primary was answered %v, want NOT_PRIMARY naming %s", resp, route.Endpoints[0])
			}
			stream.CloseSend()
		})
	}
}

// receiveAll receives n answers of an Appends stream, by tag.
func receiveAll(t *testing.T, stream protocol.Journal_AppendsClient, n int) map[uint64]*protocol.AppendResponse {
	t.Helper()
	out := make(map[uint64]*protocol.AppendResponse)
	for len(out) < n {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d answers of %d: %v", len(out), n, err)
		}
		if _, dup := out[resp.Tag]; dup {
			t.Fatalf("tag %d answered twice", resp.Tag)
		}
		out[resp.Tag] = resp
	}
	return out
}

// When a broker stops, it asks its Appends streams to end (the answer of
// tag 0); a client that then closes its side sees the stream end, so that
// the gRPC server's graceful stop need not wait for the stream.
func TestAppendsStreamEndsWhenTheBrokerStops(t *testing.T) {
	const journal = "appends/stop"
	b, stream := openAppends(t, newCluster(t), journal)
	if err := stream.Send(&protocol.AppendRequest{Journal: journal, Content: []byte("one\n"), Commit: true, Tag: 1}); err != nil {
		t.Fatal(err)
	}
	if resp := receiveAll(t, stream, 1)[1]; resp.Status != protocol.Status_OK {
		t.Fatalf("append answered %v", resp)
	}
	b.stopping.Store(true)
	b.cancel() // Run ends; the gRPC server still serves.
	resp, err := stream.Recv()
	if err != nil || resp.Tag != 0 || codes.Code(resp.ErrorCode) != codes.Unavailable {
		t.Fatalf("once the broker stopped: %v, %v; want the answer of tag 0, Unavailable", resp, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Errorf("after the client closed its side: %v, want io.EOF", err)
	}
}

// Tag 0 is the broker's own answer (see above), so an append sent under it
// ends the stream, once the appends before it are answered.
func TestAppendsStreamRefusesTagZero(t *testing.T) {
	const journal = "appends/zero"
	c := newCluster(t)
	b, stream := openAppends(t, c, journal)
	before := string(c.readAll(b, journal))
	for _, tag := range []uint64{1, 0} {
		if err := stream.Send(&protocol.AppendRequest{Journal: journal, Content: []byte("one\n"), Commit: true, Tag: tag}); err != nil {
			t.Fatal(err)
		}
	}
	if resp := receiveAll(t, stream, 1)[1]; resp.Status != protocol.Status_OK || resp.ErrorCode != 0 {
		t.Fatalf("the append of tag 1 was answered %v", resp)
	}
	if resp, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("after an append of tag 0: %v, %v; want the stream to end with InvalidArgument", resp, err)
	}
	if got := string(c.readAll(b, journal)); got != before+"one\n" {
		t.Errorf("read back %q, want only the append of tag 1 after %q", got, before)
	}
}

// openAppends starts a broker of c serving journal at replication 1,
// warms the journal up with an append, and opens an Appends stream to it.
func openAppends(t *testing.T, c *cluster, journal string) (*testBroker, protocol.Journal_AppendsClient) {
	t.Helper()
	b := c.start("b1", "")
	c.journal(b, journal, 1)
	c.appendRetry(b, journal, []byte("warm\n"))
	stream, err := protocol.NewJournalClient(b.conn).Appends(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return b, stream
}

// An Appends stream's OK answer leaves out the header that the stream's
// previous answer, to the same journal, carried: the first answer to each
// journal carries it, as does one after an answer to another journal, and
// any header that differs from the last one sent.
func TestAppendsStreamSendsARepeatedHeaderOnce(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	for _, j := range []string{"appends/one", "appends/two"} {
		c.journal(b, j, 1)
		c.appendRetry(b, j, []byte("warm\n"))
	}
	stream, err := protocol.NewJournalClient(b.conn).Appends(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stream.CloseSend()
	tag := uint64(0)
	appendTo := func(journal string) *protocol.AppendResponse {
		t.Helper()
		tag++
		if err := stream.Send(&protocol.AppendRequest{Journal: journal, Content: []byte("x\n"), Commit: true, Tag: tag}); err != nil {
			t.Fatal(err)
		}
		resp := receiveAll(t, stream, 1)[tag]
		if resp.GetStatus() != protocol.Status_OK || resp.GetErrorCode() != 0 {
			t.Fatalf("append %d to %s answered %v", tag, journal, resp)
		}
		return resp
	}
	omitted := 0
	for _, journal := range []string{"appends/one", "appends/two", "appends/one"} {
		var last *protocol.Header
		for i := range 5 {
			switch h := appendTo(journal).GetHeader(); {
			case h == nil && i == 0:
				t.Fatalf("append %d, the first to %s since an answer to another journal, has no header", tag, journal)
			case h == nil:
				omitted++
			case h.GetProcessId().GetSuffix() != "b1" || len(h.GetRoute().GetMembers()) != 1:
				t.Fatalf("append %d's header is %v, want b1's, with the route", tag, h)
			case last != nil && sameHeader(h, last):
				t.Fatalf("append %d repeats the header of the answer before it", tag)
			default:
				last = h
			}
		}
	}
	if omitted == 0 {
		t.Error("every answer carried its header; want those that repeat it left out")
	}
}

func TestRepeatedHeaders(t *testing.T) {
	route := &protocol.Route{Members: []*protocol.ProcessID{{Zone: "z", Suffix: "b1"}}, Endpoints: []string{"b1:1"}, Revision: 5}
	header := func(rev int64) *protocol.Header {
		return &protocol.Header{ProcessId: &protocol.ProcessID{Zone: "z", Suffix: "b1"}, Route: route, Revision: rev}
	}
	ok := func(journal string, h *protocol.Header) *protocol.AppendResponse {
		return &protocol.AppendResponse{Header: h, Commit: &protocol.Fragment{Journal: journal}}
	}
	var h repeatedHeaders
	for i, step := range []struct {
		resp *protocol.AppendResponse
		kept bool
	}{
		{ok("a", header(7)), true},
		{ok("a", header(7)), false},
		{ok("a", header(8)), true}, // The view moved on.
		{ok("b", header(8)), true}, // Another journal.
		{ok("a", header(8)), true},
		{&protocol.AppendResponse{Status: protocol.Status_NOT_PRIMARY, Header: header(8)}, true},
		{ok("a", header(8)), true}, // After an answer that was not OK.
		{&protocol.AppendResponse{Header: header(8), ErrorCode: 14, Commit: &protocol.Fragment{Journal: "a"}}, true},
		{ok("a", header(8)), true},
		{ok("a", header(8)), false},
	} {
		h.strip(step.resp)
		if kept := step.resp.Header != nil; kept != step.kept {
			t.Fatalf("step %d: header kept %v, want %v", i, kept, step.kept)
		}
	}
}
