package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/protocol"
)

type appended struct {
	record []byte
	h      *AppendHandle
}

func TestAppenderCommitRanges(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	journals := []string{"j/0", "j/1", "j/2"}
	for i, j := range journals {
		c.addJournal(j, i, (i+1)%3)
	}
	cl := newTestClient(t, c, 0, "")
	a := cl.NewAppender(context.Background(), AppenderConfig{MaxBatchBytes: 4 << 10})

	const writers, records = 12, 150
	got := make([][]appended, writers) // Per writer, in the order appended.
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range records {
				journal := journals[(w+i)%len(journals)]
				rec := []byte(fmt.Sprintf("<w%d r%d %s>", w, i, bytes.Repeat([]byte{'.'}, (w*i)%50)))
				h, err := a.Append(context.Background(), journal, rec)
				if err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], appended{rec, h})
			}
		})
	}
	wg.Wait()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	content := make(map[string][]byte)
	ranges := make(map[string][]*protocol.Fragment)
	for _, j := range journals {
		content[j] = c.content(j)
	}
	for w, recs := range got {
		last := make(map[string]int64)
		for _, r := range recs {
			select {
			case <-r.h.Done():
			default:
				t.Fatal("a record is not done after Close")
			}
			if err := r.h.Err(); err != nil {
				t.Fatal(err)
			}
			cm := r.h.Commit()
			// The commit range holds exactly the record...
			if body := content[cm.Journal][cm.Begin:cm.End]; !bytes.Equal(body, r.record) {
				t.Fatalf("writer %d: %s [%d, %d) holds %q, want %q", w, cm.Journal, cm.Begin, cm.End, body, r.record)
			}
			// ...after the writer's earlier records to the journal.
			if cm.Begin < last[cm.Journal] {
				t.Fatalf("writer %d: record %q committed at %d, before its predecessor's end %d", w, r.record, cm.Begin, last[cm.Journal])
			}
			last[cm.Journal] = cm.End
			ranges[cm.Journal] = append(ranges[cm.Journal], cm)
		}
	}
	// The records of each journal tile it, with nothing else in it.
	rpcs := 0
	for _, j := range journals {
		rs := ranges[j]
		slices.SortFunc(rs, func(a, b *protocol.Fragment) int { return int(a.Begin - b.Begin) })
		var next int64
		for _, r := range rs {
			if r.Begin != next {
				t.Fatalf("%s: record at [%d, %d), want it at %d", j, r.Begin, r.End, next)
			}
			next = r.End
		}
		if next != int64(len(content[j])) {
			t.Fatalf("%s: records end at %d, journal at %d", j, next, len(content[j]))
		}
		rpcs += len(c.commits(j))
	}
	if total := writers * records; rpcs > total {
		t.Fatalf("%d appends for %d records", rpcs, total)
	}
	t.Logf("%d records in %d appends", writers*records, rpcs)
}

func TestAppenderCloseFlushesLingeringBatches(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	cl := newTestClient(t, c, 0, "")
	a := cl.NewAppender(context.Background(), AppenderConfig{Linger: time.Hour})
	var hs []*AppendHandle
	for i := range 10 {
		h, err := a.Append(context.Background(), "j", []byte{byte('0' + i)})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	a.Close() // Does not wait an hour.
	for i, h := range hs {
		if cm := h.Commit(); cm.Begin != int64(i) || cm.End != int64(i+1) {
			t.Fatalf("record %d committed at %v", i, cm)
		}
	}
	if got := c.commits("j"); len(got) != 1 || string(got[0]) != "0123456789" {
		t.Fatalf("commits = %q, want one batch", got)
	}
	if _, err := a.Append(context.Background(), "j", []byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: err = %v, want ErrClosed", err)
	}
}

func TestAppenderBatchesWhileAppendInFlight(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	gate := make(chan struct{})
	c.gate = gate
	cl := newTestClient(t, c, 0, "")
	a := cl.NewAppender(context.Background(), AppenderConfig{MaxBatchBytes: 4})
	defer a.Close()

	first, err := a.Append(context.Background(), "j", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	<-c.atGate // The first append is in flight.
	// Until the first append commits, records queue in batches of at most
	// 4 bytes; a larger record is a batch of its own.
	var hs []*AppendHandle
	for _, rec := range []string{"ab", "cd", "ef", "ghijklm", "n"} {
		h, err := a.Append(context.Background(), "j", []byte(rec))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	close(gate)
	if cm := first.Commit(); cm.Begin != 0 || cm.End != 1 {
		t.Fatalf("first commit = %v", cm)
	}
	for _, h := range hs {
		if err := h.Err(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"1", "abcd", "ef", "ghijklm", "n"}
	var got []string
	for _, b := range c.commits("j") {
		got = append(got, string(b))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("batches = %q, want %q", got, want)
	}
	if cm := hs[3].Commit(); cm.Begin != 7 || cm.End != 14 {
		t.Fatalf("commit of ghijklm = %v, want [7, 14)", cm)
	}
}

func TestAppenderBackpressure(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	gate := make(chan struct{})
	c.gate = gate
	cl := newTestClient(t, c, 0, "")
	a := cl.NewAppender(context.Background(), AppenderConfig{MaxBufferedBytes: 10})
	defer a.Close()

	h1, err := a.Append(context.Background(), "j", []byte("0123456"))
	if err != nil {
		t.Fatal(err)
	}
	// 7 of 10 bytes are held until the gate opens: 4 more do not fit.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Append(ctx, "j", []byte("abcd")); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled while the buffer is full", err)
	}
	if _, err := a.Append(context.Background(), "j", bytes.Repeat([]byte("x"), 11)); err == nil {
		t.Fatal("a record larger than the buffer was accepted")
	}
	// A blocked Append proceeds once the buffer drains.
	done := make(chan error)
	go func() {
		h, err := a.Append(context.Background(), "j", []byte("abcd"))
		if err == nil {
			err = h.Err()
		}
		done <- err
	}()
	close(gate)
	if err := h1.Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := string(c.content("j")); got != "0123456abcd" {
		t.Fatalf("content = %q", got)
	}
}

func TestAppenderErrorsAndRetries(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 1)
	c.addJournal("ro", 1)
	c.setAccess("ro", protocol.Access_READ_ONLY)
	c.inject("j", fault{status: protocol.Status_NO_PRIMARY, afterContent: true},
		fault{status: protocol.Status_INSUFFICIENT_REPLICAS})
	cl := newTestClient(t, c, 0, "")
	a := cl.NewAppender(context.Background(), AppenderConfig{})

	ok, err := a.Append(context.Background(), "j", []byte("retried"))
	if err != nil {
		t.Fatal(err)
	}
	missing, err := a.Append(context.Background(), "missing", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	refused, err := a.Append(context.Background(), "ro", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(context.Background(), "bad//name", []byte("x")); err == nil {
		t.Fatal("an invalid journal name was accepted")
	}
	if _, err := a.Append(context.Background(), "j", nil); err == nil {
		t.Fatal("an empty record was accepted")
	}
	a.Close()
	if cm, err := ok.Wait(context.Background()); err != nil || cm.Begin != 0 || cm.End != 7 {
		t.Fatalf("Wait = %v, %v", cm, err)
	}
	if err := missing.Err(); !errors.Is(err, ErrJournalNotFound) || missing.Commit() != nil {
		t.Fatalf("err = %v, want ErrJournalNotFound", err)
	}
	if err := refused.Err(); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("err = %v, want ErrNotAllowed", err)
	}
}

func TestAppenderContextCancelled(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	c.gate = make(chan struct{}) // Never opens.
	cl := newTestClient(t, c, 0, "")
	ctx, cancel := context.WithCancel(context.Background())
	a := cl.NewAppender(ctx, AppenderConfig{})
	h, err := a.Append(context.Background(), "j", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	a.Close()
	if err := h.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestBudget(t *testing.T) {
	m := newBudget(10)
	ctx := context.Background()
	if err := m.acquire(ctx, 6); err != nil {
		t.Fatal(err)
	}
	// Waiters are served in order: a small request waits behind a large.
	large, small := make(chan error), make(chan error)
	go func() { large <- m.acquire(ctx, 8) }()
	waitWaiters(t, m, 1)
	go func() { small <- m.acquire(ctx, 1) }()
	waitWaiters(t, m, 2)
	m.release(6)
	if err := <-large; err != nil {
		t.Fatal(err)
	}
	if err := <-small; err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.acquire(cctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	m.release(9)
	if m.avail != 10 || len(m.waiters) != 0 {
		t.Fatalf("avail %d, %d waiters; want 10, 0", m.avail, len(m.waiters))
	}
}

// waitWaiters waits until m has n waiters.
func waitWaiters(t *testing.T, m *budget, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m.mu.Lock()
		k := len(m.waiters)
		m.mu.Unlock()
		if k == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", k, n)
		}
		runtime.Gosched()
	}
}
