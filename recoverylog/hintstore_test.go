package recoverylog

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/internal/etcdtest"
)

// Hints are stored with rotated backups, newest first; undecodable ones
// are left out.
func TestStoreAndLoadHints(t *testing.T) {
	etcd, prefix := etcdtest.Client(t)
	ctx := testContext(t)
	key := prefix + "hints"
	for i := range 4 {
		if err := StoreHints(ctx, etcd, key, &Hints{Log: "log", Offset: int64(i)}, 2); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LoadHints(ctx, etcd, key, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Offset != 3 || got[1].Offset != 2 || got[2].Offset != 1 {
		t.Fatalf("loaded hints at offsets %v, want 3, 2, 1", offsets(got))
	}
	if _, err := etcd.Put(ctx, key+".1", "{not json"); err != nil {
		t.Fatal(err)
	}
	if got, _ = LoadHints(ctx, etcd, key, 2); len(got) != 2 || got[0].Offset != 3 || got[1].Offset != 1 {
		t.Fatalf("with a broken backup, loaded %v, want 3, 1", offsets(got))
	}
}

func offsets(hs []*Hints) []int64 {
	var out []int64
	for _, h := range hs {
		out = append(out, h.Offset)
	}
	return out
}

// Playback falls back to older hints, then to the log's start, when newer
// hints do not play.
func TestPlayFirstFallsBack(t *testing.T) {
	const journal = "recovery/fallback"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "primary")
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	db := openRecorded(t, dir, rec)
	model := map[string]string{}
	workload(t, rand.New(rand.NewPCG(5, 5)), db, model, 300)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	// Damaged hints: a file longer than the log holds.
	bad := roundTrip(t, h)
	for i := range bad.Nodes {
		if !bad.Nodes[i].Inline {
			bad.Nodes[i].Length++
			break
		}
	}
	played := filepath.Join(t.TempDir(), "played")
	p, err := PlayFirst(testContext(t), PlayerConfig{Client: cl, Journal: journal, Dir: played}, []*Hints{bad, nil})
	if err != nil {
		t.Fatal(err)
	}
	if p.Progress().BytesSkipped != 0 {
		t.Errorf("fallen back to the log's start, yet %d bytes were skipped", p.Progress().BytesSkipped)
	}
	copyDB := openDB(t, played, vfs.Default)
	defer copyDB.Close()
	sameContents(t, "played after falling back", contents(t, copyDB), model)

	if _, err := PlayFirst(testContext(t), PlayerConfig{Client: cl, Journal: journal, Dir: filepath.Join(t.TempDir(), "none")},
		[]*Hints{bad}); err == nil {
		t.Fatal("playing only damaged hints succeeded")
	}

	// A directory that holds anything is refused, and left as it was.
	busy := t.TempDir()
	keep := filepath.Join(busy, "precious")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := PlayFirst(testContext(t), PlayerConfig{Client: cl, Journal: journal, Dir: busy}, []*Hints{nil}); err == nil ||
		!strings.Contains(err.Error(), "not empty") {
		t.Fatalf("playing into a directory that is not empty: %v, want an error saying so", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Fatalf("after a refused playback, the directory's file reads %q, %v", b, err)
	}
}
