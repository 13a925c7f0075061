package recoverylog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// recordedOptions are the options of a small Pebble on fs, with
// PebbleOptions: frequent flushes and compactions, and MANIFEST rollover.
func recordedOptions(t testing.TB, fs vfs.FS) *pebble.Options {
	opts := &pebble.Options{FS: fs, MemTableSize: 256 << 10, Logger: quietLogger{t}, L0CompactionThreshold: 2,
		MaxManifestFileSize: 32 << 10}
	PebbleOptions(opts)
	return opts
}

// openRecorded opens Pebble on a recorder, with recordedOptions.
func openRecorded(t testing.TB, dir string, rec *Recorder) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, recordedOptions(t, rec))
	if err != nil {
		t.Fatalf("opening pebble at %s: %v", dir, err)
	}
	return db
}

// dirSums returns the SHA-256 of each file under dir, by relative path.
func dirSums(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func playWith(t testing.TB, cfg PlayerConfig) (string, *Player) {
	t.Helper()
	cfg.Dir = filepath.Join(t.TempDir(), "played")
	p, err := NewPlayer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	return cfg.Dir, p
}

// roundTrip encodes and decodes hints, as a consumer keeping them in etcd.
func roundTrip(t testing.TB, h *Hints) *Hints {
	t.Helper()
	js, err := MarshalHints(h)
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalHints(js)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// Random workloads, with reopens, on a recorded Pebble; hints are taken
// at many points. Playback from each hints, and from the log's start,
// gives exactly the directory and the database of the last commit.
func TestPlayFromHints(t *testing.T) {
	cl := cluster(t, "recovery/hinted-1", "recovery/hinted-2")
	for seed := range uint64(2) {
		journal := fmt.Sprintf("recovery/hinted-%d", seed+1)
		t.Run(journal, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			dir := filepath.Join(t.TempDir(), "primary")
			rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
			model := map[string]string{}
			var hints []*Hints
			db := openRecorded(t, dir, rec)
			for round := range 8 {
				workload(t, rng, db, model, 250)
				if round%3 == 2 {
					if err := db.Close(); err != nil {
						t.Fatal(err)
					}
					db = openRecorded(t, dir, rec)
				}
				h, err := rec.Hints()
				if err != nil {
					t.Fatal(err)
				}
				hints = append(hints, roundTrip(t, h))
			}
			workload(t, rng, db, model, 100) // Ops after the last hints.
			defer db.Close()

			full, pFull := playWith(t, PlayerConfig{Client: cl, Journal: journal})
			want := dirSums(t, full)
			log := pFull.Progress().Offset
			for i, h := range hints {
				played, p := playWith(t, PlayerConfig{Client: cl, Journal: journal, Hints: h})
				pr := p.Progress()
				inline, js := 0, 0
				for _, n := range h.Nodes {
					if n.Inline {
						inline++
						js += len(n.Content)
					}
				}
				t.Logf("hints %d (offset %d of %d; %d nodes, %d inline with %d bytes): read %d bytes, skipped %d; replay from %d, prune before %d",
					i, h.Offset, log, len(h.Nodes), inline, js, pr.BytesRead, pr.BytesSkipped, h.ReplayFrom(), h.PruneBefore())
				if pr.Offset != log || pr.BytesRead+pr.BytesSkipped != log {
					t.Fatalf("hints %d: progress %+v, log of %d bytes", i, pr, log)
				}
				if got := dirSums(t, played); !mapsEqual(got, want) {
					t.Fatalf("hints %d: played directory %v differs from the full playback's %v", i, keys(got), keys(want))
				}
				if fmt.Sprint(p.FSM().Nodes()) != fmt.Sprint(pFull.FSM().Nodes()) || p.FSM().LastSeq != pFull.FSM().LastSeq {
					t.Fatalf("hints %d: played state differs from the full playback's", i)
				}
				copyDB := openDB(t, played, vfs.Default)
				sameContents(t, fmt.Sprintf("played from hints %d", i), contents(t, copyDB), model)
				copyDB.Close()
			}
			last := hints[len(hints)-1]
			if last.ReplayFrom() == 0 || last.PruneBefore() == 0 {
				t.Errorf("the last hints need the log from offset %d (prune before %d): nothing skipped",
					last.ReplayFrom(), last.PruneBefore())
			}
		})
	}
}

func mapsEqual(a, b map[string][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func keys(m map[string][32]byte) string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	return strings.Join(s, ",")
}

// A standby tailing from hints follows the primary and hands over.
func TestHotStandbyFromHints(t *testing.T) {
	const journal = "recovery/standby-hinted"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "primary")
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	db := openRecorded(t, dir, rec)
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(5, 5))
	workload(t, rng, db, model, 400)
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlayer(PlayerConfig{Client: cl, Journal: journal, Dir: filepath.Join(t.TempDir(), "standby"),
		Tail: true, Hints: roundTrip(t, h)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Play(testContext(t)) }()
	workload(t, rng, db, model, 400)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	p.FinishAtWriteHead()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rec2 := newRecorder(t, cl, journal, p.cfg.Dir, "primary-2", p.FSM())
	db2 := openRecorded(t, p.cfg.Dir, rec2)
	sameContents(t, "standby from hints", contents(t, db2), model)
	workload(t, rng, db2, model, 200)
	h2, err := rec2.Hints()
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	played, _ := playWith(t, PlayerConfig{Client: cl, Journal: journal, Hints: roundTrip(t, h2)})
	again := openDB(t, played, vfs.Default)
	defer again.Close()
	sameContents(t, "played from the new primary's hints", contents(t, again), model)
}

func TestHintsValidation(t *testing.T) {
	good := &Hints{Log: "l", Offset: 100, LastSeq: 10, Nodes: []HintNode{
		{Node: 2, FirstOffset: 10, EndOffset: 20, Length: 3, Links: []string{"a"}, Inline: true, Content: []byte("abc")},
		{Node: 5, FirstOffset: 30, EndOffset: 90, Length: 300, Links: []string{"b", "d/c"}},
	}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(h *Hints){
		"must be sorted":      func(h *Hints) { h.Nodes[1].Node = 1 },
		"after the last op":   func(h *Hints) { h.Nodes[1].Node = 11 },
		"are not within":      func(h *Hints) { h.Nodes[1].EndOffset = 101 },
		"bytes of inline":     func(h *Hints) { h.Nodes[0].Content = []byte("ab") },
		"not inline":          func(h *Hints) { h.Nodes[1].Content = []byte("x") },
		"links nodes 2 and 5": func(h *Hints) { h.Nodes[1].Links = []string{"a"} },
		"not a clean":         func(h *Hints) { h.Nodes[1].Links = []string{"../x"} },
		"has no links":        func(h *Hints) { h.Nodes[1].Links = nil },
	}
	for want, edit := range cases {
		js, _ := MarshalHints(good)
		h, _ := UnmarshalHints(js)
		edit(h)
		js, _ = MarshalHints(h)
		if _, err := UnmarshalHints(js); !errors.Is(err, ErrBadHints) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", want, err)
		}
	}
	if segs := good.Segments(0); len(segs) != 1 || segs[0] != (Segment{30, 90}) {
		t.Fatalf("segments %v", segs)
	}
	if good.ReplayFrom() != 30 || good.PruneBefore() != 10 {
		t.Fatalf("replay from %d, prune before %d", good.ReplayFrom(), good.PruneBefore())
	}
	good.Nodes[0].Sealed = true
	if good.PruneBefore() != 30 {
		t.Fatalf("prune before %d with a sealed inline node", good.PruneBefore())
	}
}
