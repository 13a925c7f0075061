package recoverylog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
)

// cluster starts one broker and creates the journals.
func cluster(t testing.TB, journals ...string) *client.Client {
	t.Helper()
	c := brokertest.New(t)
	b := c.Start("b1")
	cl := c.Client(b)
	c.Journals(cl, 1, journals...)
	return cl
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newRecorder(t testing.TB, cl *client.Client, journal, dir, author string, fsm *FSM) *Recorder {
	t.Helper()
	rec, err := NewRecorder(testContext(t), RecorderConfig{Client: cl, Journal: journal, Author: author, Dir: dir, FSM: fsm})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

type quietLogger struct{ t testing.TB }

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (l quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func openDB(t testing.TB, dir string, fs vfs.FS) *pebble.DB {
	t.Helper()
	opts := &pebble.Options{FS: fs, MemTableSize: 256 << 10, Logger: quietLogger{t}, L0CompactionThreshold: 2}
	if fs == nil {
		opts.FS = vfs.Default
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		t.Fatalf("opening pebble at %s: %v", dir, err)
	}
	return db
}

// contents returns every key and value of db.
func contents(t testing.TB, db *pebble.DB) map[string]string {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

func play(t testing.TB, cl *client.Client, journal string) (string, *Player) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "played")
	p, err := NewPlayer(PlayerConfig{Client: cl, Journal: journal, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	return dir, p
}

func sameContents(t testing.TB, what string, got, want map[string]string) {
	t.Helper()
	if maps.Equal(got, want) {
		return
	}
	n := 0
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			if n++; n <= 5 {
				t.Errorf("%s: key %q: got %d bytes (present %v), want %d bytes", what, k, len(g), ok, len(v))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if n++; n <= 10 {
				t.Errorf("%s: unexpected key %q", what, k)
			}
		}
	}
	t.Fatalf("%s: %d keys differ (got %d keys, want %d)", what, n, len(got), len(want))
}

// workload applies random puts, deletes, batches, flushes and compactions
// to db and model; most writes are not synced, the last one is.
func workload(t testing.TB, rng *rand.Rand, db *pebble.DB, model map[string]string, steps int) {
	t.Helper()
	key := func() string { return fmt.Sprintf("key-%05d", rng.IntN(600)) }
	value := func() string { return strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(3000)) }
	must := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatal(err)
		}
	}
	for i := range steps {
		sync := pebble.NoSync
		if rng.IntN(10) == 0 || i == steps-1 {
			sync = pebble.Sync
		}
		switch r := rng.IntN(100); {
		case r < 55:
			k, v := key(), value()
			must(db.Set([]byte(k), []byte(v), sync))
			model[k] = v
		case r < 70:
			k := key()
			must(db.Delete([]byte(k), sync))
			delete(model, k)
		case r < 90:
			b := db.NewBatch()
			for range 1 + rng.IntN(20) {
				if k := key(); rng.IntN(4) == 0 {
					must(b.Delete([]byte(k), nil))
					delete(model, k)
				} else {
					v := value()
					must(b.Set([]byte(k), []byte(v), nil))
					model[k] = v
				}
			}
			must(b.Commit(sync))
		case r < 95:
			must(db.Flush())
		default:
			lo, hi := key(), key()
			if lo > hi {
				lo, hi = hi, lo
			}
			must(db.Compact(context.Background(), []byte(lo), []byte(hi+"\xff"), rng.IntN(2) == 0))
		}
	}
	must(db.Set([]byte("last"), []byte("synced"), pebble.Sync))
	model["last"] = "synced"
}

func TestRecordAndPlayRandomWorkloads(t *testing.T) {
	cl := cluster(t, "recovery/random-1", "recovery/random-2", "recovery/random-3")
	for seed := range uint64(3) {
		journal := fmt.Sprintf("recovery/random-%d", seed+1)
		t.Run(journal, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			dir := filepath.Join(t.TempDir(), "primary")
			rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
			model := map[string]string{}

			db := openDB(t, dir, rec)
			workload(t, rng, db, model, 600)
			sameContents(t, "primary before reopen", contents(t, db), model)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db = openDB(t, dir, rec) // Reopen on the same recorder.
			workload(t, rng, db, model, 600)
			sameContents(t, "primary", contents(t, db), model)

			// Play while the primary is still open: as after a crash.
			played, p := play(t, cl, journal)
			pr := p.Progress()
			t.Logf("played %d ops, %d bytes, to offset %d (write head %d)", pr.Ops, pr.BytesRead, pr.Offset, pr.WriteHead)
			if pr.Offset != pr.WriteHead || pr.BytesRead != pr.Offset {
				t.Fatalf("progress %+v: did not play the whole log", pr)
			}
			kinds := map[Kind]int{}
			ops, _ := readOps(t, cl, journal)
			for _, op := range ops {
				kinds[op.Kind]++
			}
			t.Logf("ops by kind: %v", kinds)
			for _, k := range []Kind{KindCreate, KindWrite, KindUnlink, KindRename} {
				if kinds[k] == 0 {
					t.Errorf("the workload recorded no %s op", k)
				}
			}
			copyDB := openDB(t, played, nil)
			sameContents(t, "played", contents(t, copyDB), model)
			copyDB.Close()
			db.Close()
		})
	}
}

func TestHotStandby(t *testing.T) {
	const journal = "recovery/standby"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "primary")
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	db := openDB(t, dir, rec)
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(7, 7))
	workload(t, rng, db, model, 200)

	standbyDir := filepath.Join(t.TempDir(), "standby")
	p, err := NewPlayer(PlayerConfig{Client: cl, Journal: journal, Dir: standbyDir, Tail: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Play(testContext(t)) }()

	for range 3 {
		workload(t, rng, db, model, 300)
		time.Sleep(50 * time.Millisecond)
		if pr := p.Progress(); pr.Offset == 0 {
			t.Fatalf("the standby is not following: %+v", pr)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the standby stopped before it was told to: %v", err)
	default:
	}
	// A graceful handover: the primary closes (Pebble fails fatally on a
	// fenced WAL or MANIFEST write, so a fenced Pebble is not left open
	// here; TestFencing fences a recorder directly).
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	p.FinishAtWriteHead()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	standby := openDB(t, standbyDir, nil)
	sameContents(t, "standby", contents(t, standby), model)
	if err := standby.Close(); err != nil {
		t.Fatal(err)
	}

	// Hand over: the standby records the log from its state, and the
	// primary is fenced.
	rec2 := newRecorder(t, cl, journal, standbyDir, "primary-2", p.FSM())
	db2 := openDB(t, standbyDir, rec2)
	defer db2.Close()
	workload(t, rng, db2, model, 300)
	sameContents(t, "new primary", contents(t, db2), model)
	if err := writeFile(rec, filepath.Join(dir, "late"), "x", true); !errors.Is(err, ErrFenced) {
		t.Fatalf("the old primary's write: %v, want ErrFenced", err)
	}
	played, _ := play(t, cl, journal)
	again := openDB(t, played, nil)
	defer again.Close()
	sameContents(t, "played after the handover", contents(t, again), model)
}

// readOps returns every op of the log, and the offset of each.
func readOps(t testing.TB, cl *client.Client, journal string) ([]Op, []int64) {
	t.Helper()
	rd := cl.NewReader(testContext(t), client.ReadRequest{Journal: journal})
	all, err := io.ReadAll(rd)
	if err != nil {
		t.Fatal(err)
	}
	var ops []Op
	var offsets []int64
	for off := 0; off < len(all); {
		op, n, err := DecodeOp(all[off:])
		if err != nil {
			t.Fatalf("op at offset %d: %v", off, err)
		}
		op.Data = bytes.Clone(op.Data)
		ops, offsets = append(ops, op), append(offsets, int64(off))
		off += n
	}
	return ops, offsets
}

func writeFile(fs vfs.FS, name string, data string, sync bool) error {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write([]byte(data)); err != nil {
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	return recorderErr(fs)
}

// recorderErr returns the error of fs, if it is a recorder that failed:
// its file operations do not fail (Pebble would crash), Err tells.
func recorderErr(fs vfs.FS) error {
	if r, ok := fs.(*Recorder); ok {
		return r.Err()
	}
	return nil
}

func TestFencing(t *testing.T) {
	const journal = "recovery/fencing"
	cl := cluster(t, journal)
	dirA := t.TempDir()
	a := newRecorder(t, cl, journal, dirA, "recorder-a", nil)
	if err := writeFile(a, filepath.Join(dirA, "one"), "from a", true); err != nil {
		t.Fatal(err)
	}
	// A second recorder of the same log, from a player's state. A's
	// writes are buffered meanwhile, not yet synced.
	if err := writeFile(a, filepath.Join(dirA, "two"), "unsynced", false); err != nil {
		t.Fatal(err)
	}
	dirB, p := play(t, cl, journal)
	takeover := p.FSM().Offset
	b := newRecorder(t, cl, journal, dirB, "recorder-b", p.FSM())

	// A's next append fails, as does everything after it.
	err := a.Sync()
	if !errors.Is(err, ErrFenced) || !errors.Is(err, client.ErrRegisterMismatch) {
		t.Fatalf("A's sync after B took over: %v, want ErrFenced and ErrRegisterMismatch", err)
	}
	if err := writeFile(a, filepath.Join(dirA, "three"), "x", true); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's create after it was fenced: %v, want ErrFenced", err)
	}
	// A fenced recorder is the local file system, and records nothing.
	if err := a.Remove(filepath.Join(dirA, "one")); err != nil || !errors.Is(a.Err(), ErrFenced) {
		t.Fatalf("A's remove after it was fenced: %v, Err %v; want nil, ErrFenced", err, a.Err())
	}
	if _, err := os.Stat(filepath.Join(dirA, "one")); !os.IsNotExist(err) {
		t.Fatalf("A's remove after it was fenced left the file: %v", err)
	}
	// B records on.
	if err := writeFile(b, filepath.Join(dirB, "four"), "from b", true); err != nil {
		t.Fatal(err)
	}
	if err := b.Rename(filepath.Join(dirB, "one"), filepath.Join(dirB, "five")); err != nil {
		t.Fatal(err)
	}
	if err := b.MkdirAll(filepath.Join(dirB, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := b.Link(filepath.Join(dirB, "four"), filepath.Join(dirB, "sub/six")); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	// No op of A after the takeover.
	ops, offsets := readOps(t, cl, journal)
	for i, op := range ops {
		if offsets[i] >= takeover && op.Author != "recorder-b" {
			t.Fatalf("op at offset %d after the takeover at %d: %v", offsets[i], takeover, &op)
		}
	}
	// The log plays: B's files.
	played, p2 := play(t, cl, journal)
	if got := strings.Join(p2.FSM().Paths(), ","); got != "five,four,sub/six" {
		t.Fatalf("played paths %s, want five,four,sub/six", got)
	}
	for name, want := range map[string]string{"five": "from a", "four": "from b", "sub/six": "from b"} {
		if got, err := os.ReadFile(filepath.Join(played, name)); err != nil || string(got) != want {
			t.Fatalf("played %s: %q %v, want %q", name, got, err, want)
		}
	}

	// A recorder whose FSM is behind the log cannot take over.
	_, err = NewRecorder(testContext(t), RecorderConfig{Client: cl, Journal: journal, Author: "recorder-c", Dir: t.TempDir(), FSM: p.FSM()})
	if !errors.Is(err, client.ErrWrongAppendOffset) {
		t.Fatalf("takeover with a stale FSM: %v, want ErrWrongAppendOffset", err)
	}
}

func TestPlayerDetectsBadOps(t *testing.T) {
	journals := []string{"recovery/garbage", "recovery/replayed", "recovery/wrong-offset", "recovery/truncated"}
	cl := cluster(t, journals...)
	// Each log: a file created and written by a recorder, then something
	// appended directly.
	bad := map[string]func(last Op) []byte{
		"recovery/garbage": func(Op) []byte { return []byte("this is not an op frame at all") },
		"recovery/replayed": func(last Op) []byte {
			return AppendOp(nil, &last)
		},
		"recovery/wrong-offset": func(last Op) []byte {
			return AppendOp(nil, &Op{Kind: KindWrite, Seq: last.Seq + 1, Author: "x", Node: last.Node, Offset: 1, Data: []byte("z")})
		},
		"recovery/truncated": func(last Op) []byte {
			b := AppendOp(nil, &Op{Kind: KindUnlink, Seq: last.Seq + 1, Author: "x", Path: "f"})
			return b[:len(b)-2]
		},
	}
	want := map[string]string{
		"recovery/garbage":      "bad magic",
		"recovery/replayed":     "sequence number 2, expected 3",
		"recovery/wrong-offset": "write at offset 1 of node 1, whose length is 4",
		"recovery/truncated":    "cut short",
	}
	for _, journal := range journals {
		dir := t.TempDir()
		rec := newRecorder(t, cl, journal, dir, "r", nil)
		if err := writeFile(rec, filepath.Join(dir, "f"), "data", true); err != nil {
			t.Fatal(err)
		}
		ops, _ := readOps(t, cl, journal)
		head := rec.FSM().Offset
		if _, err := cl.Append(testContext(t), client.AppendRequest{Journal: journal}, bytes.NewReader(bad[journal](ops[len(ops)-1]))); err != nil {
			t.Fatal(err)
		}
		p, err := NewPlayer(PlayerConfig{Client: cl, Journal: journal, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Play(testContext(t))
		if err == nil || !strings.Contains(err.Error(), want[journal]) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", head)) {
			t.Errorf("%s: error %v, want one containing %q and naming offset %d", journal, err, want[journal], head)
		}
		if got := p.Progress().Offset; got != head {
			t.Errorf("%s: played to %d, want %d (the bad op not applied)", journal, got, head)
		}
	}
}

func TestHints(t *testing.T) {
	const journal = "recovery/hints"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "db")
	rec := newRecorder(t, cl, journal, dir, "r", nil)
	db := openDB(t, dir, rec)
	defer db.Close()
	workload(t, rand.New(rand.NewPCG(3, 3)), db, map[string]string{}, 800)
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	js, err := MarshalHints(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hints: %d nodes, %d bytes of JSON; replay from %d of %d", len(h.Nodes), len(js), h.ReplayFrom(), h.Offset)
	// Every live file of the directory is in the hints, with its length.
	ops, offsets := readOps(t, cl, journal)
	byOffset := map[int64]Op{}
	for i, op := range ops {
		byOffset[offsets[i]] = op
	}
	for _, n := range h.Nodes {
		if op, ok := byOffset[n.FirstOffset]; !ok || op.Kind != KindCreate || op.Node != n.Node {
			t.Fatalf("node %d: first offset %d is not its create op (%v)", n.Node, n.FirstOffset, &op)
		}
		for _, l := range n.Links {
			// A write-ahead log that Pebble recycled is longer locally:
			// the old log's stale bytes follow what was written to it,
			// which alone is in the log (ReuseForWrite).
			fi, err := os.Stat(filepath.Join(dir, l))
			if err != nil || fi.Size() != n.Length && !(strings.HasSuffix(l, ".log") && fi.Size() > n.Length) {
				t.Fatalf("node %d link %s: %v, size %v, want %d", n.Node, l, err, fi, n.Length)
			}
		}
	}
	var live int64
	for _, n := range h.Nodes {
		live += n.Length
	}
	// Without PebbleOptions' MANIFEST rollover, the first MANIFEST stays
	// live; TestPlayFromHints plays from hints with it.
	t.Logf("live content %d bytes of a %d-byte log", live, h.Offset)
}
