package client

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// readAll reads r to io.EOF, collecting offset jumps.
func readAll(t *testing.T, r *Reader) (string, []OffsetJumpError) {
	t.Helper()
	var out strings.Builder
	var jumps []OffsetJumpError
	buf := make([]byte, 7) // Small, so responses span Reads.
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		var jump *OffsetJumpError
		switch {
		case err == io.EOF:
			return out.String(), jumps
		case errors.As(err, &jump):
			if n != 0 {
				t.Fatalf("Read returned %d bytes with an offset jump", n)
			}
			jumps = append(jumps, *jump)
		case err != nil:
			t.Fatalf("read at offset %d: %v", r.Offset(), err)
		}
	}
}

// writeFragments writes each part as its own fragment.
func writeFragments(c *fakeCluster, journal string, parts ...string) {
	for _, p := range parts {
		c.write(journal, p)
		c.roll(journal)
	}
}

func TestReaderFollowsFragments(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 1)
	c.readChunk = 4
	writeFragments(c, "j", "first fragment,", "second,", "third and last")
	cl := newTestClient(t, c, 0, "")

	tests := []struct {
		name       string
		req        ReadRequest
		want       string
		wantOffset int64
	}{
		{"all", ReadRequest{Journal: "j"}, "first fragment,second,third and last", 36},
		{"from the middle", ReadRequest{Journal: "j", Offset: 18}, "ond,third and last", 36},
		{"to an end", ReadRequest{Journal: "j", Offset: 3, EndOffset: 20}, "st fragment,secon", 20},
		{"at the write head", ReadRequest{Journal: "j", Offset: -1}, "", 36},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cl.NewReader(context.Background(), tt.req)
			defer r.Close()
			got, jumps := readAll(t, r)
			if got != tt.want || len(jumps) != 0 {
				t.Fatalf("read %q with jumps %v, want %q", got, jumps, tt.want)
			}
			if r.Offset() != tt.wantOffset {
				t.Fatalf("offset = %d, want %d", r.Offset(), tt.wantOffset)
			}
			if tt.req.EndOffset == 0 && r.WriteHead() != 36 {
				t.Fatalf("write head = %d, want 36", r.WriteHead())
			}
		})
	}
	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j", Offset: 25, EndOffset: 26})
	readAll(t, r)
	if f, _ := r.Fragment(); f.GetBegin() != 22 || f.GetEnd() != 36 {
		t.Fatalf("fragment = %v, want [22, 36)", f)
	}
	// Reads, like appends, teach the client the route, and then go to a
	// replica directly.
	if got := c.brokers[1].readDirect.Load(); got == 0 {
		t.Fatal("no read went to the replica directly")
	}
}

func TestReaderResumesAfterBrokenStream(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.addJournal("j", 1, 2)
	c.readChunk = 5
	var want strings.Builder
	for i := range 20 {
		part := strings.Repeat(string(rune('a'+i)), 11)
		want.WriteString(part)
		c.write("j", part)
		if i%4 == 3 {
			c.roll("j")
		}
	}
	// Streams break after odd numbers of bytes, mid-response and
	// mid-fragment, and before sending anything.
	c.breakReads("j", 7, 0, 13, 1, 50, 3)
	cl := newTestClient(t, c, 0, "")

	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j"})
	got, jumps := readAll(t, r)
	if got != want.String() || len(jumps) != 0 {
		t.Fatalf("read %q with jumps %v,\nwant %q", got, jumps, want.String())
	}
	// The read moved between the journal's replicas as streams broke.
	if c.brokers[1].reads.Load() == 0 || c.brokers[2].reads.Load() == 0 {
		t.Fatalf("reads on replicas: %d, %d; want both", c.brokers[1].reads.Load(), c.brokers[2].reads.Load())
	}
}

func TestReaderReportsOffsetJumps(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	writeFragments(c, "j", "0123456789", "ABCDEFGHIJ", "klmnopqrst", "uvwxyz")
	c.remove("j", 10, 30) // Two fragments are gone.
	cl := newTestClient(t, c, 0, "")

	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j"})
	got, jumps := readAll(t, r)
	if got != "0123456789uvwxyz" {
		t.Fatalf("read %q", got)
	}
	if len(jumps) != 1 || jumps[0] != (OffsetJumpError{Journal: "j", From: 10, To: 30}) {
		t.Fatalf("jumps = %v, want one from 10 to 30", jumps)
	}
	if msg := jumps[0].Error(); !strings.Contains(msg, `journal "j"`) || !strings.Contains(msg, "from 10 to 30") {
		t.Fatalf("message %q does not name the journal and offsets", msg)
	}
	if !errors.Is(&jumps[0], ErrOffsetJump) || !IsOffsetJump(&jumps[0]) {
		t.Fatal("OffsetJumpError does not match ErrOffsetJump")
	}

	// Reading from within the gap jumps too.
	r = cl.NewReader(context.Background(), ReadRequest{Journal: "j", Offset: 15})
	if got, jumps := readAll(t, r); got != "uvwxyz" || len(jumps) != 1 || jumps[0].From != 15 {
		t.Fatalf("read %q with jumps %v", got, jumps)
	}

	r = cl.NewReader(context.Background(), ReadRequest{Journal: "j", SkipGaps: true})
	if got, jumps := readAll(t, r); got != "0123456789uvwxyz" || len(jumps) != 0 {
		t.Fatalf("with SkipGaps, read %q with jumps %v", got, jumps)
	}
}

// A read whose next content lies past its EndOffset reports the jump,
// then io.EOF. (Its Read panicked: a slice with a negative bound. Found by
// review.)
func TestReaderJumpPastEndOffset(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	writeFragments(c, "j", "0123456789", "ABCDEFGHIJ")
	c.remove("j", 0, 10)
	cl := newTestClient(t, c, 0, "")

	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j", EndOffset: 5})
	got, jumps := readAll(t, r)
	if got != "" || len(jumps) != 1 || jumps[0].From != 0 || jumps[0].To != 10 {
		t.Fatalf("read %q with jumps %v; want nothing, and a jump from 0 to 10", got, jumps)
	}
}

func TestReaderNonBlockingEOFAtWriteHead(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	c.write("j", "hello")
	cl := newTestClient(t, c, 0, "")

	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j"})
	if got, _ := readAll(t, r); got != "hello" {
		t.Fatalf("read %q", got)
	}
	if r.Offset() != 5 || r.WriteHead() != 5 {
		t.Fatalf("offset, write head = %d, %d; want 5, 5", r.Offset(), r.WriteHead())
	}
	// At the write head, Read keeps returning io.EOF, and picks up new
	// content once there is some.
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read = %d, %v; want 0, io.EOF", n, err)
	}
	c.write("j", " world")
	if got, _ := readAll(t, r); got != " world" {
		t.Fatalf("read %q", got)
	}
}

func TestReaderBlocksAtWriteHead(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 1)
	c.write("j", "old,")
	cl := newTestClient(t, c, 0, "")

	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j", Offset: 4, Block: true})
	got := make(chan string)
	go func() {
		buf := make([]byte, 100)
		n, err := io.ReadAtLeast(r, buf, 3)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	c.brokers[1].waitBlocked(t) // The read waits at the write head...
	if _, err := cl.Append(context.Background(), AppendRequest{Journal: "j"}, strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "new" { // ...until an append wakes it.
		t.Fatalf("read %q, want \"new\"", s)
	}
}

func TestReaderBlockedFailsOverKilledReplica(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.addJournal("j", 1, 2)
	c.write("j", "0123")
	cl := newTestClient(t, c, 0, "c")                               // Prefers the replica in zone c.
	if _, err := cl.ListAll(context.Background(), ""); err != nil { // Learn routes.
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := cl.NewReader(ctx, ReadRequest{Journal: "j", Offset: 2, Block: true})
	got := make(chan string)
	go func() {
		var out []byte
		buf := make([]byte, 100)
		for len(out) < 6 {
			n, err := r.Read(buf)
			if err != nil {
				got <- err.Error()
				return
			}
			out = append(out, buf[:n]...)
		}
		got <- string(out)
	}()
	c.brokers[2].waitBlocked(t) // Read "23" from the zone's replica, and waits.
	if c.brokers[2].readDirect.Load() != 1 || c.brokers[1].reads.Load() != 0 {
		t.Fatal("the read did not go to the replica in the client's zone, directly")
	}
	c.brokers[2].kill()
	c.setRoute("j", 1)
	c.brokers[1].waitBlocked(t) // Resumed on the other replica.
	c.write("j", "4567")
	if s := <-got; s != "234567" {
		t.Fatalf("read %q, want \"234567\"", s)
	}
}

func TestReaderFollowsNotReplica(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.addJournal("j", 1)
	c.write("j", "abc")
	cl := newTestClient(t, c, 0, "")
	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j"})
	if got, _ := readAll(t, r); got != "abc" {
		t.Fatalf("read %q", got)
	}
	c.setRoute("j", 2)
	c.write("j", "def")
	if got, _ := readAll(t, r); got != "def" {
		t.Fatalf("read %q", got)
	}
	if c.brokers[1].notReplica.Load() != 1 || c.brokers[2].readDirect.Load() != 1 {
		t.Fatalf("NOT_REPLICA answers %d, direct reads of the new replica %d; want 1, 1",
			c.brokers[1].notReplica.Load(), c.brokers[2].readDirect.Load())
	}
}

func TestReaderErrors(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	cl := newTestClient(t, c, 0, "")
	tests := []struct {
		name    string
		req     ReadRequest
		want    error
		message string
	}{
		{"not found", ReadRequest{Journal: "nope"}, ErrJournalNotFound, `journal "nope"`},
		{"bad name", ReadRequest{Journal: "/x"}, nil, `"/x"`},
		{"bad offset", ReadRequest{Journal: "j", Offset: -2}, nil, "offset -2"},
		{"bad end", ReadRequest{Journal: "j", Offset: 5, EndOffset: 5}, nil, "end offset 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cl.NewReader(context.Background(), tt.req).Read(make([]byte, 1))
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.want, tt.message)
			}
		})
	}
}

func TestReaderCancelled(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	cl := newTestClient(t, c, 0, "")
	ctx, cancel := context.WithCancel(context.Background())
	r := cl.NewReader(ctx, ReadRequest{Journal: "j", Block: true})
	errc := make(chan error)
	go func() {
		_, err := r.Read(make([]byte, 1))
		errc <- err
	}()
	c.brokers[0].waitBlocked(t)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestReaderFailsOverUnreachableReplica(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.addJournal("j", 1, 2)
	c.write("j", "content")
	cl := newTestClient(t, c, 0, "b") // Prefers broker 1, which is gone.
	if _, err := cl.ListAll(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	c.brokers[1].kill()
	r := cl.NewReader(context.Background(), ReadRequest{Journal: "j"})
	if got, _ := readAll(t, r); got != "content" {
		t.Fatalf("read %q", got)
	}
	if c.brokers[1].reads.Load() != 0 {
		t.Fatal("the killed broker served a read")
	}
}
