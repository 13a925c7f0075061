package recoverylog

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// Playback from hints reads each persisted fragment once, however many
// of the hints' segments it holds. A read begun within a persisted
// fragment reads it from its beginning (compressed content cannot be
// entered elsewhere), so a read per segment would read a fragment again
// for each: a 1 GiB store's recovery read its log several times over.
func TestPlayFromHintsReadsEachFragmentOnce(t *testing.T) {
	const journal = "recovery/fragments"
	c, cl := persistedLog(t, journal, 64<<20)
	dir := filepath.Join(t.TempDir(), "primary")
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	// Without compactions, each flush leaves a live table between the
	// WAL's dead writes: one segment per table.
	opts := &pebble.Options{FS: rec, MemTableSize: 256 << 10, Logger: quietLogger{t},
		MaxManifestFileSize: 32 << 10, DisableAutomaticCompactions: true}
	PebbleOptions(opts)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(7, 7))
	value := make([]byte, 1024)
	for round := range 20 {
		for i := range 100 {
			for j := range value {
				value[j] = byte('a' + rng.IntN(26))
			}
			key := fmt.Sprintf("key-%02d-%03d", round, i)
			model[key] = string(value)
			if err := db.Set([]byte(key), value, pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitPersisted(t, c, journal, h.Offset)

	const gap = 1 // Every skipped op splits a segment.
	segs := h.Segments(gap)
	fragments := 0
	for _, f := range storeFragments(t, c, journal) {
		if f.End > segs[0].Begin && f.Begin < segs[len(segs)-1].End {
			fragments++
		}
	}
	t.Logf("%d segments of a %d byte log in %d fragments", len(segs), h.Offset, fragments)
	if len(segs) < 2*fragments {
		t.Fatalf("%d segments in %d fragments: too few to tell", len(segs), fragments)
	}
	before := directReads(t)
	played, p := playWith(t, PlayerConfig{Client: cl, Journal: journal, Hints: h, SegmentGap: gap})
	if got := directReads(t) - before; got > float64(fragments) {
		t.Errorf("playing %d segments of %d fragments fetched fragments %.0f times", len(segs), fragments, got)
	}
	if pr := p.Progress(); pr.Offset != h.Offset || pr.BytesRead+pr.BytesSkipped != h.Offset {
		t.Errorf("progress %+v, log of %d bytes", pr, h.Offset)
	}
	copyDB := openDB(t, played, nil)
	defer copyDB.Close()
	sameContents(t, "played from hints", contents(t, copyDB), model)
}

// directReads is the count of the client's direct fragment reads, of any
// result.
func directReads(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "quire_client_direct_reads_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
