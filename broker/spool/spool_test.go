package spool

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quire-dev/quire/labels"
)

func mustWrite(t *testing.T, s *Spool, data string) {
	t.Helper()
	if _, err := s.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
}

func mustCommit(t *testing.T, s *Spool, registers string) {
	t.Helper()
	set, err := labels.Parse(registers)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(set); err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, r *Recovered) string {
	t.Helper()
	rc, err := r.Reader()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCommitRollbackRead(t *testing.T) {
	root := t.TempDir()
	s, err := Create(root, "a/b", 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove()
	mustWrite(t, s, "hello ")
	mustCommit(t, s, "author=x")
	mustWrite(t, s, "doomed")
	if s.End() != 106 || s.Pending() != 112 {
		t.Fatalf("end %d pending %d, want 106 and 112", s.End(), s.Pending())
	}
	if err := s.Rollback(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, s, "world")
	mustCommit(t, s, "author=y")
	r := s.Reader()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello world" {
		t.Fatalf("content %q, want %q", got, "hello world")
	}
	if s.Sum() != sha256.Sum256([]byte("hello world")) {
		t.Error("sum does not match the committed content after a rollback")
	}
	if err := r.Verify(s.Sum()); err != nil {
		t.Errorf("the content read back after a rollback does not verify: %v", err)
	}
	buf := make([]byte, 5)
	if _, err := s.ReadAt(buf, 106); err != nil || string(buf) != "world" {
		t.Errorf("ReadAt(106) = %q, %v", buf, err)
	}
	if _, err := s.ReadAt(buf, 99); err == nil {
		t.Error("ReadAt before begin succeeded")
	}
}

// A spool's Reader vouches for the content it read (so that a persister
// need not hash it again) only if it read all of it, the sum asked for is
// the spool's, and the bytes are those written: a change to the spool's
// file since is caught by the CRC32C kept as they were written.
func TestReaderVerifies(t *testing.T) {
	root := t.TempDir()
	s, err := Create(root, "j", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove()
	content := bytes.Repeat([]byte("0123456789"), 10_000)
	mustWrite(t, s, string(content))
	mustCommit(t, s, "")
	mustWrite(t, s, "pending, not read")
	sum := sha256.Sum256(content)
	if s.Sum() != sum {
		t.Fatal("the spool's sum is not its content's")
	}
	readWhole := func() *Reader {
		r := s.Reader()
		if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, content) {
			t.Fatalf("reading the spool: %v (equal: %v)", err, bytes.Equal(got, content))
		}
		return r
	}
	if err := readWhole().Verify(sum); err != nil {
		t.Errorf("intact content: %v", err)
	}
	if err := readWhole().Verify(sha256.Sum256([]byte("other"))); err == nil {
		t.Error("another sum verified")
	}
	part := s.Reader()
	if _, err := io.ReadFull(part, make([]byte, 999)); err != nil {
		t.Fatal(err)
	}
	if err := part.Verify(sum); err == nil {
		t.Error("content read in part verified")
	}

	// A byte of the file changed behind the spool's back.
	f, err := os.OpenFile(s.content.Name(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'x'}, 54_321); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := s.Reader()
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(sum); err == nil || !strings.Contains(err.Error(), "CRC32C") {
		t.Errorf("changed content: Verify = %v, want an error naming the CRC32C", err)
	}
}

// A process killed mid-append loses nothing committed and nothing pending
// appears: its files are recovered to the last commit.
func TestRecoverAfterProcessCrash(t *testing.T) {
	root := t.TempDir()
	s, err := Create(root, "logs/x", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := range 50 {
		data := bytes.Repeat([]byte{byte('a' + i%26)}, 100+i)
		mustWrite(t, s, string(data))
		mustCommit(t, s, "n="+string(rune('a'+i%26)))
		want.Write(data)
	}
	mustWrite(t, s, "pending, never acknowledged")
	// The process dies: nothing is closed or synced.

	rs, err := Recover(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("recovered %d spools, want 1", len(rs))
	}
	r := rs[0]
	if r.Journal != "logs/x" || r.Begin != 0 || r.End != int64(want.Len()) || r.Lost != 0 {
		t.Fatalf("recovered %+v, want logs/x [0, %d) with nothing lost", r, want.Len())
	}
	if r.Sum != sha256.Sum256(want.Bytes()) || r.Registers != "n=x" {
		t.Errorf("recovered sum or registers %q wrong", r.Registers)
	}
	if got := readAll(t, r); got != want.String() {
		t.Errorf("recovered content differs from the committed content")
	}
	if err := r.Remove(); err != nil {
		t.Fatal(err)
	}
	if rs, _ := Recover(root); len(rs) != 0 {
		t.Errorf("removed spool recovered again")
	}
}

func TestRecoverDamage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		damage   func(t *testing.T, content, commits string)
		wantEnd  int64
		wantLost int64
	}{
		{"torn last record", func(t *testing.T, _, commits string) {
			appendFile(t, commits, []byte{0x30, 0, 0, 0, 1, 2, 3})
		}, 9, 0},
		{"content cut short", func(t *testing.T, content, _ string) {
			if err := os.Truncate(content, 7); err != nil {
				t.Fatal(err)
			}
		}, 6, 3},
		{"content flipped", func(t *testing.T, content, _ string) {
			b, _ := os.ReadFile(content)
			b[7] ^= 0xff
			os.WriteFile(content, b, 0o644)
		}, 6, 3},
		{"garbage record", func(t *testing.T, _, commits string) {
			b, _ := os.ReadFile(commits)
			b[len(b)-10] ^= 0xff // Inside the last record.
			os.WriteFile(commits, b, 0o644)
		}, 6, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			s, err := Create(root, "j", 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustWrite(t, s, "abcdef")
			mustCommit(t, s, "")
			mustWrite(t, s, "ghi")
			mustCommit(t, s, "")
			s.Close()
			content, commits := paths(root, "j", 0)
			tc.damage(t, content, commits)
			rs, err := Recover(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 1 || rs[0].End != tc.wantEnd || rs[0].Lost != tc.wantLost {
				t.Fatalf("recovered %+v, want end %d lost %d", rs, tc.wantEnd, tc.wantLost)
			}
			if got := readAll(t, rs[0]); got != "abcdefghi"[:tc.wantEnd] {
				t.Errorf("content %q", got)
			}
		})
	}
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func TestRecoverManyJournalsInOrder(t *testing.T) {
	root := t.TempDir()
	for _, j := range []struct {
		name  string
		begin int64
	}{{"b/x", 20}, {"a", 5}, {"b/x", 3}, {"a/y", 0}} {
		s, err := Create(root, j.name, j.begin, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, j.name)
		mustCommit(t, s, "")
		s.Close()
	}
	// A crash inside Create leaves a commits file with no record.
	if err := os.WriteFile(Dir(root, "a")+"/00000000000000ff.commits", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(Dir(root, "a")+"/00000000000000ff.content", nil, 0o644)
	rs, err := Recover(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Journal+"@"+string(rune('0'+r.Begin%10)))
	}
	want := []string{"a@5", "a/y@0", "b/x@3", "b/x@0"}
	if len(got) != len(want) {
		t.Fatalf("recovered %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("recovered %v, want %v", got, want)
		}
	}
	if _, err := os.Stat(Dir(root, "a") + "/00000000000000ff.commits"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spool without a record was not removed: %v", err)
	}
}

func TestCreateRefusesExisting(t *testing.T) {
	root := t.TempDir()
	s, err := Create(root, "j", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove()
	if _, err := Create(root, "j", 0, nil); err == nil {
		t.Fatal("created a spool over an existing one")
	}
	if _, err := Create(root, "j", -1, nil); err == nil {
		t.Fatal("created a spool at a negative offset")
	}
}

// A commit whose registers a record cannot hold fails, rather than write
// a record that recovery would take for damage.
func TestCommitRefusesRegistersTooLarge(t *testing.T) {
	s, err := Create(t.TempDir(), "j", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Remove()
	mustWrite(t, s, "abc")
	huge := labels.Set{{Name: "big", Value: string(make([]byte, maxRegisters))}}
	if err := s.Commit(huge); err == nil {
		t.Fatal("committed registers of more than maxRegisters bytes")
	}
	if s.End() != 0 {
		t.Errorf("end %d after a failed commit, want 0", s.End())
	}
}

// encode is r's record, as a commit appends it.
func (r record) encode() []byte {
	b, _ := appendRecord(nil, r.end, r.sum, func(b []byte) []byte { return append(b, r.registers...) })
	return b
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(record{end: 5, registers: "a=b"}.encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeRecord(b)
		if err != nil {
			return
		}
		if n > len(b) || r.end < 0 {
			t.Fatalf("decoded %+v of length %d from %d bytes", r, n, len(b))
		}
		if again := r.encode(); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs")
		}
		// Appended after other bytes, the record encodes the same.
		after, err := appendRecord([]byte("prefix"), r.end, r.sum, func(b []byte) []byte { return append(b, r.registers...) })
		if err != nil || string(after[:6]) != "prefix" || !bytes.Equal(after[6:], b[:n]) {
			t.Fatalf("appending the record after other bytes encodes it differently")
		}
	})
}

// Callers that arrive while a flush runs share the next one, and each
// returns only after a flush that began after its call.
func TestSyncerGroupsCallers(t *testing.T) {
	var (
		g         Syncer
		starts    atomic.Int64
		completed atomic.Int64 // start number of the last completed flush
		gate      = make(chan struct{})
	)
	flush := func() error {
		n := starts.Add(1)
		if n == 1 {
			<-gate
		}
		completed.Store(n)
		return nil
	}
	var wg sync.WaitGroup
	call := func() {
		defer wg.Done()
		before := starts.Load()
		if err := g.Sync(flush); err != nil {
			t.Error(err)
		}
		if completed.Load() <= before {
			t.Errorf("Sync returned before a flush that began after the call")
		}
	}
	wg.Add(1)
	go call()
	for starts.Load() == 0 {
		waitBriefly()
	}
	const callers = 10
	wg.Add(callers)
	for range callers {
		go call()
	}
	for {
		g.mu.Lock()
		w := g.waiting
		g.mu.Unlock()
		if w == callers {
			break
		}
		waitBriefly()
	}
	close(gate)
	wg.Wait()
	if g.Flushes != 2 {
		t.Errorf("%d flushes for 1+%d callers, want 2 (the waiting callers share one)", g.Flushes, callers)
	}
}

// waitBriefly yields while polling a condition another goroutine will make
// true; it is not used to order events.
func waitBriefly() { runtime.Gosched() }

// Spools moved aside (a broker's quarantine, "#quarantine" in its spool
// directory) are not recovered, and do not stop the recovery of the
// others; a live spool moved aside keeps its content.
func TestRecoverSkipsSpoolsMovedAside(t *testing.T) {
	root := t.TempDir()
	for _, journal := range []string{"logs/kept", "logs/moved"} {
		s, err := Create(root, journal, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, s, journal)
		mustCommit(t, s, "")
		if journal == "logs/moved" {
			if err := s.MoveTo(root + "/#quarantine"); err != nil {
				t.Fatal(err)
			}
		} else if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	recovered, err := Recover(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(recovered) != 1 || recovered[0].Journal != "logs/kept" || readAll(t, recovered[0]) != "logs/kept" {
		t.Fatalf("recovered %v, want logs/kept alone", recovered)
	}
	moved, err := Recover(root + "/#quarantine")
	if err != nil || len(moved) != 1 || readAll(t, moved[0]) != "logs/moved" {
		t.Fatalf("the spool moved aside: %v, %v", moved, err)
	}
}
