package recoverylog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Write-at and truncate ops travel in frames of version 2; the other
// kinds stay in version 1 frames, which players that know only version 1
// read as before.
func TestInPlaceOpFrames(t *testing.T) {
	ops := []Op{
		{Kind: KindWriteAt, Seq: 7, Author: "a", Node: 3, Offset: 4096, Data: []byte("page")},
		{Kind: KindTruncate, Seq: 8, Author: "a", Node: 3, Offset: 1 << 40},
		{Kind: KindTruncate, Seq: 9, Author: "a", Node: 3},
	}
	for i := range ops {
		b := AppendOp(nil, &ops[i])
		if b[2] != 2 {
			t.Errorf("%v: frame version %d, want 2", &ops[i], b[2])
		}
		op, n, err := DecodeOp(b)
		if err != nil || n != len(b) || op.String() != ops[i].String() || !bytes.Equal(op.Data, ops[i].Data) {
			t.Fatalf("%v: decoded %v (%d of %d bytes), %v", &ops[i], &op, n, len(b), err)
		}
		// The same op in a version 1 frame is refused: a writer of
		// version 1 never made one.
		b[2] = 1
		if _, _, err := DecodeOp(b); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "frame of version 1") {
			t.Errorf("%v in a version 1 frame: %v", &ops[i], err)
		}
	}
	for _, op := range sampleOps() {
		if b := AppendOp(nil, &op); op.Kind <= KindWrite && b[2] != 1 {
			t.Errorf("%v: frame version %d, want 1", &op, b[2])
		}
	}
	cases := []struct {
		op   Op
		want string
	}{
		{Op{Kind: KindWriteAt, Seq: 1, Author: "a", Node: 1, Offset: 3}, "write of no data"},
		{Op{Kind: KindTruncate, Seq: 1, Author: "a", Node: 1, Offset: -1}, "truncate to length -1"},
		{Op{Kind: KindWriteAt, Seq: 1, Author: "a", Node: 1, Offset: -5, Data: []byte("x")}, "at offset -5"},
	}
	for _, c := range cases {
		if err := c.op.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error containing %q", &c.op, err, c.want)
		}
	}
}

// The FSM's rules for ops in place: a write-at lands anywhere and grows
// the node to its end; a truncate sets the length; an appending write
// must still land at the length.
func TestFSMInPlace(t *testing.T) {
	f := NewFSM(0)
	seq := uint64(0)
	apply := func(op Op) error {
		seq++
		op.Seq, op.Author = seq, "a"
		err := f.Apply(&op, int64(seq*100), int64(seq*100+50))
		if err != nil {
			seq--
		}
		return err
	}
	steps := []struct {
		op      Op
		ok      bool
		wantLen int64
	}{
		{Op{Kind: KindCreate, Node: 1, Path: "db"}, true, 0},
		{Op{Kind: KindWriteAt, Node: 1, Offset: 100, Data: []byte("abc")}, true, 103},
		{Op{Kind: KindWriteAt, Node: 1, Offset: 0, Data: []byte("xy")}, true, 103},
		{Op{Kind: KindWrite, Node: 1, Offset: 0, Data: []byte("no")}, false, 103},
		{Op{Kind: KindTruncate, Node: 1, Offset: 10}, true, 10},
		{Op{Kind: KindWrite, Node: 1, Offset: 10, Data: []byte("end")}, true, 13},
		{Op{Kind: KindTruncate, Node: 1, Offset: 4096}, true, 4096},
		{Op{Kind: KindTruncate, Node: 9, Offset: 1}, false, 4096},
		{Op{Kind: KindWriteAt, Node: 9, Offset: 1, Data: []byte("x")}, false, 4096},
	}
	for i, s := range steps {
		err := apply(s.op)
		if (err == nil) != s.ok {
			t.Fatalf("step %d (%v): error %v, want ok %v", i, &s.op, err, s.ok)
		}
		if n, _ := f.Lookup("db"); n.Length != s.wantLen {
			t.Fatalf("step %d (%v): length %d, want %d", i, &s.op, n.Length, s.wantLen)
		}
	}
	if n, _ := f.Lookup("db"); n.EndOffset != int64(seq*100+50) {
		t.Errorf("end offset %d, want that of the last op, %d", n.EndOffset, seq*100+50)
	}
}

// inPlaceWorkload writes files in place through fs, as SQLite does: writes
// anywhere (over content, at the end, past it), truncates that cut and
// that grow, syncs; small files (inline in hints) and large ones.
func inPlaceWorkload(t testing.TB, rng *rand.Rand, fs vfs.FS, dir string, steps int) {
	t.Helper()
	names := []string{"main.db", "main.db-wal", "tiny"}
	files := map[string]vfs.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for range steps {
		name := names[rng.IntN(len(names))]
		f, ok := files[name]
		if !ok {
			var err error
			if f, err = fs.OpenReadWrite(filepath.Join(dir, name), vfs.WriteCategoryUnspecified); err != nil {
				t.Fatal(err)
			}
			files[name] = f
		}
		limit := int64(256 << 10)
		if name == "tiny" {
			limit = 8 << 10
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		switch k := rng.IntN(10); {
		case k < 6: // A page anywhere, or just past the end.
			page := make([]byte, 1+rng.IntN(4096))
			for i := range page {
				page[i] = byte(rng.Uint32())
			}
			off := rng.Int64N(min(st.Size()+8192, limit))
			if _, err := f.WriteAt(page, off); err != nil {
				t.Fatal(err)
			}
		case k < 7: // An append.
			if _, err := f.WriteAt([]byte(fmt.Sprint(rng.Uint64())), st.Size()); err != nil {
				t.Fatal(err)
			}
		case k < 8:
			if err := f.(interface{ Truncate(int64) error }).Truncate(rng.Int64N(limit)); err != nil {
				t.Fatal(err)
			}
		case k < 9:
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		default: // Close and reopen.
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			delete(files, name)
		}
	}
	for _, f := range files {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := recorderErr(fs); err != nil {
		t.Fatal(err)
	}
}

// Files written in place are played back byte for byte: from the log's
// start, from hints taken at many points, and after a second recorder
// continued from a player.
func TestRecordInPlaceWrites(t *testing.T) {
	const journal = "recovery/in-place"
	cl := cluster(t, journal)
	rng := rand.New(rand.NewPCG(7, 7))
	dir := filepath.Join(t.TempDir(), "primary")
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	if err := rec.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var hints []*Hints
	for range 6 {
		inPlaceWorkload(t, rng, rec, dir, 150)
		h, err := rec.Hints()
		if err != nil {
			t.Fatal(err)
		}
		hints = append(hints, roundTrip(t, h))
	}
	check := func(what string, want map[string][32]byte, cfg PlayerConfig) *Player {
		t.Helper()
		played, p := playWith(t, cfg)
		if got := dirSums(t, played); !mapsEqual(got, want) {
			t.Fatalf("%s: played files %v differ from the primary's %v", what, keys(got), keys(want))
		}
		return p
	}
	want := dirSums(t, dir)
	check("from the start", want, PlayerConfig{Client: cl, Journal: journal})
	last := hints[len(hints)-1]
	if !slices.ContainsFunc(last.Nodes, func(n HintNode) bool { return n.Inline }) {
		t.Errorf("no node of the last hints is inline: the small file should be")
	}
	p := check("from the last hints", want, PlayerConfig{Client: cl, Journal: journal, Hints: last})
	for i, h := range hints[:len(hints)-1] {
		check(fmt.Sprintf("from hints %d", i), want, PlayerConfig{Client: cl, Journal: journal, Hints: h})
	}

	// A successor continues from a player's directory and state.
	played := filepath.Join(t.TempDir(), "successor")
	if err := os.Rename(p.cfg.Dir, played); err != nil {
		t.Fatal(err)
	}
	next := newRecorder(t, cl, journal, played, "primary-2", p.FSM())
	inPlaceWorkload(t, rng, next, played, 200)
	h, err := next.Hints()
	if err != nil {
		t.Fatal(err)
	}
	want = dirSums(t, played)
	check("the successor's log from the start", want, PlayerConfig{Client: cl, Journal: journal})
	check("the successor's hints", want, PlayerConfig{Client: cl, Journal: journal, Hints: roundTrip(t, h)})
}
