package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

func TestConditionalAppends(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/fenced", 1)
	c.appendRetry(b, "log/fenced", []byte("first "))
	ctx := context.Background()

	take := &protocol.AppendRequest{Journal: "log/fenced", CheckRegisters: "!author",
		UnionRegisters: []*protocol.Label{{Name: "author", Value: "a"}}}
	resp, err := appendOnce(ctx, b, take, []byte("by-a "))
	if err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("taking the journal: %v %v", resp, err)
	}
	if got := protocol.LabelsOf(resp.Registers).String(); got != "author=a" {
		t.Errorf("registers after taking: %q", got)
	}
	before := c.readAll(b, "log/fenced")

	// A writer expecting another author is refused, and writes nothing.
	resp, err = appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/fenced", CheckRegisters: "author=b"}, []byte("by-b "))
	if err != nil || resp.Status != protocol.Status_REGISTER_MISMATCH {
		t.Fatalf("mismatched append: %v %v; want REGISTER_MISMATCH", resp, err)
	}
	if after := c.readAll(b, "log/fenced"); !bytes.Equal(after, before) {
		t.Fatalf("a refused append changed the journal: %q -> %q", before, after)
	}
	// The current author may write, and may hand over.
	resp, err = appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/fenced", CheckRegisters: "author=a",
		SubtractRegisters: []*protocol.Label{{Name: "author"}}, UnionRegisters: []*protocol.Label{{Name: "author", Value: "b"}}},
		[]byte("handover "))
	if err != nil || resp.Status != protocol.Status_OK || protocol.LabelsOf(resp.Registers).String() != "author=b" {
		t.Fatalf("handover: %v %v", resp, err)
	}
	// An expected offset that is not the write head is refused.
	off := int64(1)
	resp, err = appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/fenced", Offset: &off}, []byte("x"))
	if err != nil || resp.Status != protocol.Status_WRONG_APPEND_OFFSET {
		t.Fatalf("append at a wrong offset: %v %v", resp, err)
	}
	if got := string(c.readAll(b, "log/fenced")); got != "first by-a handover " {
		t.Errorf("journal holds %q", got)
	}
}

func TestBadRequestsNameTheField(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	ctx := context.Background()
	_, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: "bad//name"}, []byte("x"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "journal") {
		t.Errorf("append to a bad name: %v, want InvalidArgument naming journal", err)
	}
	stream, err := protocol.NewJournalClient(b.conn).Read(ctx, &protocol.ReadRequest{Journal: "ok", Offset: -5})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "offset") {
		t.Errorf("read at offset -5: %v, want InvalidArgument naming offset", err)
	}
	_, err = protocol.NewJournalClient(b.conn).Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Upsert: &protocol.JournalSpec{Name: "x", Replication: 0}}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "replication") {
		t.Errorf("apply with replication 0: %v, want InvalidArgument naming replication", err)
	}
}

// waitPersisted waits until the store holds fragments of journal up to end.
func (c *cluster) waitPersisted(b *testBroker, journal string, end int64) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := protocol.NewJournalClient(b.conn).ListFragments(context.Background(),
			&protocol.FragmentsRequest{Journal: journal})
		// Persisted through stored: every fragment up to there, not only
		// the last (the persister may store a later fragment first).
		var stored int64
		if err == nil {
			for _, f := range resp.Fragments { // In offset order.
				if f.Fragment.Store == "" || f.Fragment.ModTime == 0 || f.Fragment.Begin > stored {
					break
				}
				stored = max(stored, f.Fragment.End)
			}
		}
		if stored >= end {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("fragments of %s persisted to %d, want %d (%v)", journal, stored, end, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A broker with an empty disk serves what earlier brokers persisted.
func TestEmptyDiskServesFromStore(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/stored", 1) // Fragments roll at 1 MiB.
	var want bytes.Buffer
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	for i := range 9 {
		chunk[0] = byte('A' + i)
		c.appendRetry(b, "log/stored", chunk)
		want.Write(chunk)
	}
	c.waitPersisted(b, "log/stored", 2<<20)
	c.stop(b)
	fresh := c.start("b1", "") // A new, empty directory.
	got := readRetry(t, fresh, "log/stored", 0, 2<<20)
	if !bytes.Equal(got, want.Bytes()[:2<<20]) {
		t.Fatal("content read from the store differs")
	}
}

// A broker killed at replication 1 and restarted on its disk loses no
// acknowledged byte: it recovers its spool, persists it, and carries on
// after it.
func TestKilledBrokerRecoversItsSpool(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	b := c.start("b1", dir)
	c.journal(b, "log/killed", 1)
	var want bytes.Buffer
	for i := range 50 {
		rec := []byte(strings.Repeat(string(rune('a'+i%26)), 100) + "\n")
		c.appendRetry(b, "log/killed", rec)
		want.Write(rec)
	}
	// No drain, no flush: as kill -9, then its lease expiring (sooner).
	// Revoked first, the lease would let the broker see its journal go,
	// and persist its spool as a replica leaving a route does.
	c.crash(b)
	c.revokeLease(b)
	entries, _ := os.ReadDir(filepath.Join(dir, "log%2Fkilled"))
	if len(entries) == 0 {
		t.Fatal("the killed broker left no spool behind")
	}
	b = c.start("b1", dir)
	c.waitPersisted(b, "log/killed", int64(want.Len()))
	resp := c.appendRetry(b, "log/killed", []byte("after\n"))
	if resp.Commit.Begin != int64(want.Len()) {
		t.Fatalf("append after recovery at %d, want %d", resp.Commit.Begin, want.Len())
	}
	want.WriteString("after\n")
	if got := c.readAll(b, "log/killed"); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("after recovery the journal holds %d bytes, want %d", len(got), want.Len())
	}
}

// An append racing a route change either commits whole or leaves nothing.
func TestRouteChangeFencesAnAppendInFlight(t *testing.T) {
	c := newCluster(t)
	b1, _ := c.start("b1", ""), c.start("b2", "")
	c.journal(b1, "log/fence", 2)
	c.appendRetry(b1, "log/fence", []byte("before\n"))
	_, route, _ := b1.srv.resolver.resolve("log/fence")
	primary := c.brokers[route.Members[0].Suffix]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := protocol.NewJournalClient(primary.conn).Append(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&protocol.AppendRequest{Journal: "log/fence"})
	stream.Send(&protocol.AppendRequest{Content: []byte("half of an append, ")})
	// The route changes under the append: a third replica joins.
	c.start("b3", "")
	c.journal(b1, "log/fence", 3)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, r, _ := primary.srv.resolver.resolve("log/fence"); len(r.Members) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("route never gained a third replica")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stream.Send(&protocol.AppendRequest{Content: []byte("and the other half\n")})
	stream.Send(&protocol.AppendRequest{})
	resp, err := stream.CloseAndRecv()
	committed := err == nil && resp.Status == protocol.Status_OK
	c.appendRetry(b1, "log/fence", []byte("after\n"))
	got := string(c.readAll(b1, "log/fence"))
	switch {
	case committed && got != "before\nhalf of an append, and the other half\nafter\n":
		t.Fatalf("committed append, but the journal holds %q", got)
	case !committed && got != "before\nafter\n":
		t.Fatalf("failed append (%v %v), but the journal holds %q", resp, err, got)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal("append cancelled by the test")
	}
}

// An idle spool rolls at its flush interval, so content reaches the store
// without further appends; fragments past their retention are removed, and
// reads then skip to the content that remains.
func TestFlushIntervalAndRetention(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/flushed", 1, func(s *protocol.JournalSpec) {
		s.Fragment.FlushInterval = durationpb.New(time.Second)
		s.Fragment.RefreshInterval = durationpb.New(time.Second)
	})
	c.appendRetry(b, "log/flushed", []byte("flush me\n"))
	c.waitPersisted(b, "log/flushed", 9)

	c.journal(b, "log/flushed", 1, func(s *protocol.JournalSpec) {
		s.Fragment.FlushInterval = durationpb.New(time.Second)
		s.Fragment.RefreshInterval = durationpb.New(time.Second)
		s.Fragment.Retention = durationpb.New(time.Second)
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := protocol.NewJournalClient(b.conn).ListFragments(context.Background(),
			&protocol.FragmentsRequest{Journal: "log/flushed"})
		if err == nil && len(resp.Fragments) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fragments past retention were not removed: %v %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp := c.appendRetry(b, "log/flushed", []byte("kept\n"))
	if resp.Commit.Begin != 9 {
		t.Fatalf("append after pruning at %d, want 9: offsets never move back", resp.Commit.Begin)
	}
	got, err := readRange(context.Background(), b, "log/flushed", 0, 14)
	if err == nil || string(got) != "" {
		// readRange reports the jump from 0 to 9 as an error before any content.
		t.Logf("read: %q %v", got, err)
	}
	if got := readRetry(t, b, "log/flushed", 9, 14); string(got) != "kept\n" {
		t.Fatalf("read after the gap: %q", got)
	}
}

// Appends beyond a journal's max append rate wait for it.
func TestMaxAppendRateThrottles(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/slow", 1, func(s *protocol.JournalSpec) { s.MaxAppendRate = 1000 })
	c.appendRetry(b, "log/slow", []byte("x")) // The journal is ready.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	// 5000 bytes at 1000 bytes/s need about four seconds beyond the first
	// second's burst: the append cannot finish within half a second.
	resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/slow"}, bytes.Repeat([]byte("y"), 5000))
	if err == nil && resp.Status == protocol.Status_OK {
		t.Fatalf("5000 bytes appended within 0.5s at 1000 bytes/s: %v", resp)
	}
	if got := c.readAll(b, "log/slow"); string(got) != "x" {
		t.Fatalf("a throttled, abandoned append left %d bytes", len(got))
	}
}

// At replication 1, a broker that stays down while its journal moves, then
// returns, must not bring back content at offsets another primary wrote
// since: offsets never change once acknowledged. Its recovered spool is
// quarantined, and every broker reads the same content.
func TestRecoveredSpoolConflictIsQuarantined(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	b1 := c.start("b1", dir)
	// No flush interval yet: b1's spool must not roll at a second's
	// boundary, and be persisted, before b1 stops.
	c.journal(b1, "log/moved", 1)
	c.appendRetry(b1, "log/moved", []byte("from-b1\n"))
	c.stop(b1) // Its spool stays on its disk.

	b2 := c.start("b2", "")
	c.journal(b2, "log/moved", 1, func(s *protocol.JournalSpec) {
		s.Fragment.FlushInterval = durationpb.New(time.Second)
		s.Fragment.RefreshInterval = durationpb.New(time.Second)
	})
	c.appendRetry(b2, "log/moved", []byte("from-b2\n"))
	c.waitPersisted(b2, "log/moved", 8)

	b1 = c.start("b1", dir)
	c.appendRetry(b1, "log/moved", []byte("after\n"))
	for _, b := range []*testBroker{b1, b2} {
		if got := string(c.readAll(b, "log/moved")); got != "from-b2\nafter\n" {
			t.Fatalf("%s reads %q", b.name, got)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "#quarantine", "log%2Fmoved"))
	if len(entries) != 2 {
		t.Fatalf("quarantine holds %d files, want the spool's 2", len(entries))
	}
}

// A flush interval given to a journal whose spool is idle takes effect at
// once: the spool rolls at the next boundary and is persisted, rather
// than when the replica's next refresh (a minute away by default) would
// have noticed the new spec.
func TestFlushIntervalSetLaterRollsAnIdleSpool(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/respec", 1) // No flush interval: rolls by length only.
	c.appendRetry(b, "log/respec", []byte("idle\n"))
	c.journal(b, "log/respec", 1, func(s *protocol.JournalSpec) {
		s.Fragment.FlushInterval = durationpb.New(time.Second)
	})
	c.waitPersisted(b, "log/respec", 5)
}

// A fragment removed from the store behind the brokers' back (as pruning
// a recovery log does) is skipped by reads, as removed content is, rather
// than failing them until the next listing.
func TestMissingFragmentIsSkipped(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/pruned", 1, func(s *protocol.JournalSpec) {
		s.Fragment.FlushInterval = durationpb.New(time.Second)
		s.Fragment.RefreshInterval = durationpb.New(time.Hour)
	})
	c.appendRetry(b, "log/pruned", []byte("pruned\n"))
	c.waitPersisted(b, "log/pruned", 7)
	c.appendRetry(b, "log/pruned", []byte("kept\n"))
	resp, err := protocol.NewJournalClient(b.conn).ListFragments(context.Background(),
		&protocol.FragmentsRequest{Journal: "log/pruned"})
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	for _, f := range resp.Fragments {
		if f.Fragment.Begin == 0 && f.Fragment.Store != "" {
			dir := strings.TrimPrefix(c.store, "file://")
			err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.Contains(path, "log/pruned") {
					removed = true
					return os.Remove(path)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if !removed {
		t.Fatalf("no persisted fragment at 0 to remove: %v", resp.Fragments)
	}
	if got := readRetry(t, b, "log/pruned", 7, 12); string(got) != "kept\n" {
		t.Fatalf("read after the removed fragment: %q", got)
	}
	// From 0, the read goes on at 7 (readRange reports the jump as
	// content at 7 where it wanted 0), rather than failing.
	got, err := readRange(context.Background(), b, "log/pruned", 0, 12)
	if !strings.Contains(fmt.Sprint(err), "content at 7, want 0") {
		t.Fatalf("read across the removed fragment: %q, %v; want a jump past it to 7, not a failure", got, err)
	}
}

// An append that requires an offset ahead of the write head waits for the
// appends before it, so a writer may pipeline appends at consecutive
// offsets; one whose predecessor never comes is refused, writing nothing.
func TestAppendAheadWaitsForItsPredecessor(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/ahead", 1)
	head := c.appendRetry(b, "log/ahead", []byte("first ")).Commit.End
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	waiting := make(chan struct{}, 1)
	aheadHook = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	defer func() { aheadHook = func() {} }()
	type result struct {
		resp *protocol.AppendResponse
		err  error
	}
	second := []byte("second ")
	third := make(chan result, 1)
	go func() {
		off := head + int64(len(second))
		resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/ahead", Offset: &off}, []byte("third"))
		third <- result{resp, err}
	}()
	select {
	case <-waiting:
	case r := <-third:
		t.Fatalf("an append ahead of the write head returned before its predecessor: %v %v", r.resp, r.err)
	}
	resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/ahead", Offset: &head}, second)
	if err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("the predecessor: %v %v", resp, err)
	}
	r := <-third
	if r.err != nil || r.resp.Status != protocol.Status_OK || r.resp.Commit.Begin != head+int64(len(second)) {
		t.Fatalf("the append that waited: %v %v", r.resp, r.err)
	}
	if got := string(c.readAll(b, "log/ahead")); got != "first second third" {
		t.Fatalf("journal holds %q", got)
	}

	// No predecessor: refused once the wait is over.
	defer func(d time.Duration) { offsetAheadWait = d }(offsetAheadWait)
	offsetAheadWait = 50 * time.Millisecond
	off := r.resp.Commit.End + 1
	resp, err = appendOnce(ctx, b, &protocol.AppendRequest{Journal: "log/ahead", Offset: &off}, []byte("lost"))
	if err != nil || resp.Status != protocol.Status_WRONG_APPEND_OFFSET {
		t.Fatalf("an append ahead with no predecessor: %v %v, want WRONG_APPEND_OFFSET", resp, err)
	}
	if got := string(c.readAll(b, "log/ahead")); got != "first second third" {
		t.Fatalf("after the refusal the journal holds %q", got)
	}
}

// The forms of an Append stream: the content in the first message and a
// commit flag (a single message), content then a flagged last chunk, and
// content then an empty message; through the primary and proxied by
// another broker. A stream that ends before its commit appends nothing.
func TestAppendStreamForms(t *testing.T) {
	c := newCluster(t)
	b1 := c.start("b1", "")
	b2 := c.start("b2", "")
	c.journal(b1, "forms/j", 2)
	c.appendRetry(b1, "forms/j", []byte("0"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(b *testBroker, msgs ...*protocol.AppendRequest) (*protocol.AppendResponse, error) {
		stream, err := protocol.NewJournalClient(b.conn).Append(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if err := stream.Send(m); err != nil {
				break
			}
		}
		return stream.CloseAndRecv()
	}
	want := "0"
	for _, b := range []*testBroker{b1, b2} {
		for i, msgs := range [][]*protocol.AppendRequest{
			{{Journal: "forms/j", Content: []byte("a"), Commit: true}},
			{{Journal: "forms/j", Content: []byte("b")}, {Content: []byte("c"), Commit: true}},
			{{Journal: "forms/j", Content: []byte("d")}, {Content: []byte("e")}, {}},
			{{Journal: "forms/j", Commit: true}}, // Nothing, committed.
		} {
			resp, err := send(b, msgs...)
			if err != nil || resp.Status != protocol.Status_OK {
				t.Fatalf("%s, form %d: %v %v", b.name, i, resp, err)
			}
			for _, m := range msgs {
				want += string(m.Content)
			}
		}
	}
	// Ended before its commit: nothing.
	if _, err := send(b1, &protocol.AppendRequest{Journal: "forms/j", Content: []byte("lost")}); err == nil {
		t.Error("an append stream that ended before its commit succeeded")
	}
	if got := string(c.readAll(b1, "forms/j")); got != want {
		t.Fatalf("journal holds %q, want %q", got, want)
	}
}

// A read of a rolled spool that is persisted and removed while the read
// is under way reads on from the store, without an error: a reader far
// behind the write head meets this whenever a fragment persists.
func TestReadOutlivesItsSpool(t *testing.T) {
	const journal = "log/outlived"
	release, removed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	persistHook = func(f fragment.Fragment) {
		if f.Journal == journal && f.Begin == 0 {
			<-release // Hold the first fragment local until the read is in it.
		}
	}
	sentHook = func(e entry) {
		if e.spool == nil || e.frag.Journal != journal {
			return
		}
		once.Do(func() {
			close(release)
			// Wait until the persister has removed the spool being read.
			for {
				if _, err := e.spool.ReadAt(make([]byte, 1), e.frag.Begin); errors.Is(err, spool.ErrClosed) {
					close(removed)
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	t.Cleanup(func() { persistHook, sentHook = func(fragment.Fragment) {}, func(entry) {} })

	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, journal, 1) // Fragments roll at 1 MiB.
	var want bytes.Buffer
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	for i := range 5 {
		chunk[0] = byte('A' + i)
		c.appendRetry(b, journal, chunk)
		want.Write(chunk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := readRange(ctx, b, journal, 0, 1<<20)
	if err != nil {
		t.Fatalf("read across the spool's removal: %v", err)
	}
	select {
	case <-removed:
	default:
		t.Fatal("the read did not meet the spool's removal")
	}
	if !bytes.Equal(got, want.Bytes()[:1<<20]) {
		t.Fatal("content read across the spool's removal differs")
	}
}

// A spool whose file changed after its content was written is not
// persisted: the persister checks what it reads back against the CRC32C
// the spool kept as the content was written (rather than hashing it
// again), fails, and tries again later, and the store never holds a
// fragment whose content is not what its name says.
func TestPersistRefusesAChangedSpool(t *testing.T) {
	const journal = "log/changed"
	dir := t.TempDir()
	changed := make(chan fragment.Fragment, 1)
	persistHook = func(f fragment.Fragment) {
		if f.Journal != journal || f.Begin != 0 {
			return
		}
		changeSpool(t, dir, f)
		select {
		case changed <- f:
		default:
		}
	}
	t.Cleanup(func() { persistHook = func(fragment.Fragment) {} })

	c := newCluster(t)
	b := c.start("b1", dir)
	c.journal(b, journal, 1) // Fragments roll at 1 MiB.
	failures := testutil.ToFloat64(persistErrors)
	appendChunks(c, b, journal, 5)
	f := awaitPersist(t, changed)
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(persistErrors) == failures {
		if time.Now().After(deadline) {
			t.Fatalf("persisting %s from a changed spool did not fail", f.Name())
		}
		time.Sleep(10 * time.Millisecond)
	}
	store, err := fragment.Open(context.Background(), c.store)
	if err != nil {
		t.Fatal(err)
	}
	err = store.List(context.Background(), journal, func(got fragment.Fragment) error {
		if got.Begin == f.Begin {
			return fmt.Errorf("the store holds %s", got.Name())
		}
		return nil
	})
	if err != nil {
		t.Errorf("after a failed persist of a changed spool: %v", err)
	}
}

// A journal created through one broker is never reported missing, or left
// out of a listing, by another whose watch has not delivered it yet:
// before answering JOURNAL_NOT_FOUND, a broker asks etcd, and before
// listing, it syncs its view with etcd. The second broker's etcd watch
// here delivers each response 200 ms late.
func TestNewJournalIsFoundThroughAnyBroker(t *testing.T) {
	c := newCluster(t)
	slow, err := clientv3.New(clientv3.Config{Endpoints: c.etcd.Endpoints(), Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(slowWatch(200 * time.Millisecond))}})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	b1 := c.start("b1", "")
	b2 := c.startWith("b2", "", slow, nil)
	for i := range 3 {
		name := fmt.Sprintf("log/new-%d", i)
		c.journal(b1, name, 1)
		resp, err := protocol.NewJournalClient(b2.conn).ListFragments(context.Background(),
			&protocol.FragmentsRequest{Journal: name})
		if err != nil || resp.Status == protocol.Status_JOURNAL_NOT_FOUND {
			t.Fatalf("%s, just created, through the other broker: %v %v", name, resp.GetStatus(), err)
		}
		// Listing too: the other broker syncs its view with etcd first.
		name = fmt.Sprintf("log/listed-%d", i)
		c.journal(b1, name, 1)
		list, err := protocol.NewJournalClient(b2.conn).List(context.Background(), &protocol.ListRequest{Selector: "name=" + name})
		if err != nil || len(list.Journals) != 1 {
			t.Fatalf("%s, just created, listed through the other broker: %v %v", name, list, err)
		}
	}
}

// slowWatch delays each message received on an etcd watch stream.
func slowWatch(d time.Duration) grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !strings.HasSuffix(method, "/Watch") {
			return s, err
		}
		return delayedStream{s, d}, nil
	}
}

type delayedStream struct {
	grpc.ClientStream
	d time.Duration
}

func (s delayedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	time.Sleep(s.d) // A slow network, not a synchronization.
	return err
}

// A read that its fragment store fails is answered Unavailable, which
// clients retry, and reads once the store serves again.
func TestStoreFailureIsRetryable(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "log/flaky", 1)                              // Fragments roll at 1 MiB.
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB
	for range 5 {
		c.appendRetry(b, "log/flaky", chunk)
	}
	c.waitPersisted(b, "log/flaky", 1<<20)
	c.stop(b)
	fresh := c.start("b1", "") // An empty disk: reads come from the store.

	// The store fails: it serves a fragment whose content is damaged.
	dir := filepath.Join(strings.TrimPrefix(c.store, "file://"), "log", "flaky")
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) == 0 {
		t.Fatalf("fragments in %s: %v %v", dir, ents, err)
	}
	path := filepath.Join(dir, ents[0].Name())
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	for i := len(bad) / 2; i < len(bad); i++ {
		bad[i] ^= 0x5a // Its content no longer matches its checksum.
	}
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = readRangeOnce(ctx, fresh, "log/flaky", 0, 1<<20)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("read of a fragment the store fails: %v, want Unavailable", err)
	}

	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := readRetry(t, fresh, "log/flaky", 0, 1<<20); !bytes.Equal(got, bytes.Repeat(chunk, 4)) {
		t.Fatal("content read once the store serves again differs")
	}
}

// readRangeOnce reads [from, to) in one stream, waiting for the journal's
// route first.
func readRangeOnce(ctx context.Context, b *testBroker, journal string, from, to int64) ([]byte, error) {
	for {
		got, err := readRange(ctx, b, journal, from, to)
		if err != nil && strings.Contains(err.Error(), "read status") && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond) // No route yet: poll for it.
			continue
		}
		return got, err
	}
}

// At replication 2 and more, a broker that comes back with a spool whose
// tail the journal's other brokers never got (the tail of an append that
// failed when it was cut off), and that the new primary has since written
// over with other content not yet persisted, keeps the spool out of the
// journal: the stores cannot show the conflict yet, the primary can.
func TestRecoveredSpoolDivergingFromPrimaryIsQuarantined(t *testing.T) {
	c := newCluster(t)
	b1 := c.start("b1", "")
	c.start("b2", "")
	c.journal(b1, "log/diverged", 2)
	c.appendRetry(b1, "log/diverged", []byte("shared\n"))
	c.appendRetry(b1, "log/diverged", []byte("theirs\n"))

	dir := t.TempDir() // A broker's disk, with its spool of the journal.
	s, err := spool.Create(dir, "log/diverged", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write([]byte("shared\nmine\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(nil); err != nil {
		t.Fatal(err)
	}
	s.Close()

	c.start("b3", dir)
	quarantine := filepath.Join(dir, "#quarantine", "log%2Fdiverged")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if entries, _ := os.ReadDir(quarantine); len(entries) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the diverging spool was not quarantined")
		}
		time.Sleep(20 * time.Millisecond) // Polling the broker's start.
	}
	for _, b := range c.brokers {
		if got := string(c.readAll(b, "log/diverged")); got != "shared\ntheirs\n" {
			t.Fatalf("%s reads %q", b.name, got)
		}
	}
}

// A replica that lacks content at an offset (it joined the route after
// the content was written, which is still in a peer's spool) and is asked
// not to proxy (a client reading from a route it cached) sends the reader
// to the primary, rather than have it skip the content as gone. A client
// reading from a replica of its zone gets the whole journal.
func TestReplicaRedirectsReadsOfContentItLacks(t *testing.T) {
	const journal = "log/redirected"
	c := holdPersistence(t, journal) // No replica finds the content in the store.
	for _, name := range []string{"b1", "b2", "b3"} {
		c.start(name, "")
	}
	c.journal(c.brokers["b1"], journal, 2)
	c.appendRetry(c.brokers["b1"], journal, []byte("hello\n"))
	first := c.awaitRoute(c.brokers["b1"], journal, 2)
	c.journal(c.brokers["b1"], journal, 3)
	c.awaitRoute(c.brokers["b1"], journal, 3)
	c.appendRetry(c.brokers["b1"], journal, []byte("world\n")) // Synchronizes the newcomer, at offset 6.
	var newcomer *testBroker
	for _, b := range c.brokers {
		if indexOf(first, b.srv.id) < 0 {
			newcomer = b
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := protocol.NewJournalClient(newcomer.conn).Read(ctx, &protocol.ReadRequest{Journal: journal, DoNotProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	var last *protocol.ReadResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if resp.Status == protocol.Status_OK && (resp.Offset != 0 || len(resp.Content) != 0) {
			t.Fatalf("the newcomer answered offset %d with %q: it does not hold offset 0", resp.Offset, resp.Content)
		}
		last = resp
	}
	if last.GetStatus() != protocol.Status_NOT_PRIMARY || last.GetHeader().GetRoute().GetMembers()[0].GetSuffix() != first.Members[0].Suffix {
		t.Fatalf("the newcomer's last answer %v, want NOT_PRIMARY naming the primary %s", last, first.Members[0].Suffix)
	}

	cl, err := client.New(ctx, client.Config{Broker: newcomer.srv.cfg.Endpoint, Zone: newcomer.srv.cfg.Zone})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.WriteHead(ctx, journal); err != nil { // Learns the route.
		t.Fatal(err)
	}
	rd := cl.NewReader(ctx, client.ReadRequest{Journal: journal})
	defer rd.Close()
	got, err := io.ReadAll(rd)
	if err != nil || string(got) != "hello\nworld\n" {
		t.Fatalf("a client of the newcomer's zone read %q, %v; want the whole journal", got, err)
	}
}

// The persister's backlog is measured: a rolled spool counts in
// quire_broker_persist_queue_fragments and _bytes from its roll until a
// store holds it, and a broker that stops takes its share out.
func TestPersistBacklogIsMeasured(t *testing.T) {
	const journal = "log/backlog"
	held, release := make(chan fragment.Fragment, 1), make(chan struct{})
	persistHook = func(f fragment.Fragment) {
		if f.Journal == journal && f.Begin == 0 {
			held <- f
			<-release
		}
	}
	t.Cleanup(func() { persistHook = func(fragment.Fragment) {} })
	fragments, bytes0 := testutil.ToFloat64(persistQueueFragments), testutil.ToFloat64(persistQueueBytes)

	c := newCluster(t)
	b := c.start("b1", t.TempDir())
	c.journal(b, journal, 1) // Fragments roll at 1 MiB.
	appendChunks(c, b, journal, 5)
	f := awaitPersist(t, held)
	if got := testutil.ToFloat64(persistQueueFragments) - fragments; got != 1 {
		t.Errorf("persisting %s: %v fragments queued, want 1", f.Name(), got)
	}
	if got := testutil.ToFloat64(persistQueueBytes) - bytes0; got != float64(f.Len()) {
		t.Errorf("persisting %s: %v bytes queued, want its %d", f.Name(), got, f.Len())
	}
	close(release)
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(persistQueueFragments) != fragments || testutil.ToFloat64(persistQueueBytes) != bytes0 {
		if time.Now().After(deadline) {
			t.Fatalf("after %s was persisted: %v fragments, %v bytes queued; want none", f.Name(),
				testutil.ToFloat64(persistQueueFragments)-fragments, testutil.ToFloat64(persistQueueBytes)-bytes0)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A broker stopped with a spool still to persist (here, one that
	// fails its check, changed on disk, and waits to be tried again)
	// leaves nothing in the gauges: it is recovered at the next start.
	failures := testutil.ToFloat64(persistErrors)
	persistHook = func(f fragment.Fragment) {
		if f.Journal == journal && f.Begin > 0 {
			changeSpool(t, b.dir, f)
		}
	}
	appendChunks(c, b, journal, 4)
	for testutil.ToFloat64(persistErrors) == failures {
		if time.Now().After(deadline) {
			t.Fatal("persisting the changed spool did not fail")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.stop(b)
	if got, gotBytes := testutil.ToFloat64(persistQueueFragments)-fragments, testutil.ToFloat64(persistQueueBytes)-bytes0; got != 0 || gotBytes != 0 {
		t.Errorf("after the broker stopped: %v fragments, %v bytes queued; want none", got, gotBytes)
	}
}

// changeSpool changes a byte of the spool of f under a broker's dir, as
// a failing disk would.
func changeSpool(t *testing.T, dir string, f fragment.Fragment) {
	name := filepath.Join(spool.Dir(dir, f.Journal), fmt.Sprintf("%016x.content", f.Begin))
	file, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err == nil {
		_, err = file.WriteAt([]byte{'!'}, 1000)
		file.Close()
	}
	if err != nil {
		t.Errorf("changing the spool's file %s: %v", name, err)
	}
}

// appendChunks appends n chunks of 256 KiB to journal: past a fragment,
// where fragments roll at 1 MiB.
func appendChunks(c *cluster, b *testBroker, journal string, n int) {
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 16<<10)
	for range n {
		c.appendRetry(b, journal, chunk)
	}
}

// awaitPersist returns the fragment that a persistHook sends on ch, within
// 30 s.
func awaitPersist(t *testing.T, ch <-chan fragment.Fragment) fragment.Fragment {
	t.Helper()
	select {
	case f := <-ch:
		return f
	case <-time.After(30 * time.Second):
		t.Fatal("the first fragment was never persisted")
		return fragment.Fragment{}
	}
}
