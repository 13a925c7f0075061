package recoverylog

import (
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// openSeparated opens Pebble on fs with recordedOptions and
// SeparateValues (values of 512 bytes or more kept in blob files).
func openSeparated(t testing.TB, dir string, fs vfs.FS) *pebble.DB {
	t.Helper()
	opts := recordedOptions(t, fs)
	SeparateValues(opts, 512)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		t.Fatalf("opening pebble at %s: %v", dir, err)
	}
	return db
}

// blobFiles returns the names of the blob files in dir.
func blobFiles(t testing.TB, dir string) []string {
	t.Helper()
	names, err := vfs.Default.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".blob") {
			out = append(out, n)
		}
	}
	return out
}

// A recorded Pebble that keeps values in blob files plays back, from the
// log's start and from hints, to the same files and the same keys and
// values as the primary: blob files are recorded like any other file, and
// the compactions that reference them rather than rewrite them lose no
// value.
func TestRecordAndPlaySeparatedValues(t *testing.T) {
	const journal = "recovery/separated"
	cl := cluster(t, journal)
	rng := rand.New(rand.NewPCG(7, 7))
	dir := filepath.Join(t.TempDir(), "primary")
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	model := map[string]string{}
	db := openSeparated(t, dir, rec)
	workload(t, rng, db, model, 500)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openSeparated(t, dir, rec) // Reopen on the same recorder.
	workload(t, rng, db, model, 500)
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	h = roundTrip(t, h)
	workload(t, rng, db, model, 100) // Ops after the hints.
	sameContents(t, "primary", contents(t, db), model)
	// Closed, so that no compaction removes a blob file listed below.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	blobs := blobFiles(t, dir)
	if len(blobs) == 0 {
		t.Fatal("the primary has no blob files: its values were not kept apart")
	}

	for _, from := range []struct {
		name  string
		hints *Hints
	}{{"the log's start", nil}, {"hints", h}} {
		played, p := playWith(t, PlayerConfig{Client: cl, Journal: journal, Hints: from.hints})
		pr := p.Progress()
		t.Logf("played from %s: %d ops, read %d bytes, skipped %d, of %d", from.name, pr.Ops, pr.BytesRead, pr.BytesSkipped, pr.Offset)
		for _, b := range blobs {
			if _, err := vfs.Default.Stat(filepath.Join(played, b)); err != nil {
				t.Errorf("played from %s: the primary's blob file %s: %v", from.name, b, err)
			}
		}
		copyDB := openSeparated(t, played, vfs.Default)
		sameContents(t, "played from "+from.name, contents(t, copyDB), model)
		if err := copyDB.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
