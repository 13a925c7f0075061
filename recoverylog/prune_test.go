package recoverylog

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/protocol"
)

// persistedLog starts a broker and creates journal with fragments of
// length bytes that persist within a second.
func persistedLog(t testing.TB, journal string, length int64) (*brokertest.Cluster, *client.Client) {
	t.Helper()
	c := brokertest.New(t)
	cl := c.Client(c.Start("b1"))
	spec := &protocol.JournalSpec{Name: journal, Replication: 1, Fragment: &protocol.JournalSpec_Fragment{
		Length:          length,
		FlushInterval:   durationpb.New(time.Second),
		RefreshInterval: durationpb.New(time.Second),
	}}
	if _, err := cl.Apply(testContext(t), &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{{Upsert: spec}}}); err != nil {
		t.Fatal(err)
	}
	// An empty append, retried until the journal has a primary.
	if _, err := cl.Append(testContext(t), client.AppendRequest{Journal: journal}, nil); err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// storeFragments lists the fragments of journal in the cluster's store.
func storeFragments(t testing.TB, c *brokertest.Cluster, journal string) []fragment.Fragment {
	t.Helper()
	st, err := fragment.Open(context.Background(), c.Store)
	if err != nil {
		t.Fatal(err)
	}
	var out []fragment.Fragment
	if err := st.List(context.Background(), journal, func(f fragment.Fragment) error {
		out = append(out, f)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitPersisted waits until the store holds the log up to offset.
func waitPersisted(t testing.TB, c *brokertest.Cluster, journal string, offset int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var end int64
		for _, f := range storeFragments(t, c, journal) {
			end = max(end, f.End)
		}
		if end >= offset {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store holds %s up to %d, not %d", journal, end, offset)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPrune(t *testing.T) {
	const journal = "recovery/pruned"
	c, cl := persistedLog(t, journal, 16<<10)
	dir := filepath.Join(t.TempDir(), "primary")
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	db := openRecorded(t, dir, rec)
	defer func() { db.Close() }()
	model := map[string]string{}
	rng := rand.New(rand.NewPCG(11, 11))
	for range 4 {
		workload(t, rng, db, model, 250)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openRecorded(t, dir, rec)
	workload(t, rng, db, model, 250)
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	h = roundTrip(t, h)
	before := h.PruneBefore()
	waitPersisted(t, c, journal, h.Offset)
	listed := storeFragments(t, c, journal)

	// Hints of another log, or beyond the log, are refused.
	other := *h
	other.Log = "recovery/other"
	if _, err := Prune(testContext(t), cl, journal, &other); !errors.Is(err, ErrBadHints) {
		t.Fatalf("pruning with another log's hints: %v", err)
	}
	ahead := *h
	ahead.Offset += 1 << 30
	if _, err := Prune(testContext(t), cl, journal, &ahead); !errors.Is(err, ErrBadHints) {
		t.Fatalf("pruning with hints beyond the log: %v", err)
	}

	res, err := Prune(testContext(t), cl, journal, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pruned %d fragments, %d bytes, before offset %d of %d; kept %d", len(res.Removed), res.RemovedBytes, before, h.Offset, res.Kept)
	if len(res.Removed) == 0 || res.Before != before {
		t.Fatalf("nothing pruned before %d: %+v", before, res)
	}
	// Exactly the stored fragments that end by the offset are gone.
	left := map[fragment.Fragment]bool{}
	for _, f := range storeFragments(t, c, journal) {
		f.ModTime = time.Time{}
		left[f] = true
	}
	for _, f := range listed {
		f.ModTime = time.Time{}
		if dead := f.End <= before; dead == left[f] {
			t.Fatalf("fragment [%d, %d): dead %v, still stored %v", f.Begin, f.End, dead, left[f])
		}
	}

	// Playback from the hints, and from later ones, still succeeds.
	workload(t, rng, db, model, 250)
	h2, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	for i, hints := range []*Hints{h, roundTrip(t, h2)} {
		played, p := playWith(t, PlayerConfig{Client: cl, Journal: journal, Hints: hints})
		t.Logf("hints %d: read %d bytes, skipped %d", i, p.Progress().BytesRead, p.Progress().BytesSkipped)
		copyDB := openDB(t, played, vfs.Default)
		sameContents(t, "played after pruning", contents(t, copyDB), model)
		copyDB.Close()
	}

	// Playback from the start no longer can, once the broker has
	// re-listed its store: its content is gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, err := NewPlayer(PlayerConfig{Client: cl, Journal: journal, Dir: filepath.Join(t.TempDir(), "full")})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Play(testContext(t))
		if err != nil && client.IsOffsetJump(err) {
			t.Logf("playback from the start: %v", err)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("playback from the start after pruning: %v, want an offset jump", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPruneHintsInSpool prunes with hints whose offset lies in content the
// brokers still spool (not listed as fragments yet): it is no error, and
// removes nothing it should keep.
func TestPruneHintsInSpool(t *testing.T) {
	const journal = "recovery/pruned-spool"
	cl := cluster(t, journal)
	dir := t.TempDir()
	rec := newRecorder(t, cl, journal, dir, "primary-1", nil)
	if err := writeFile(rec, filepath.Join(dir, "one"), "content", true); err != nil {
		t.Fatal(err)
	}
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Prune(testContext(t), cl, journal, h)
	if err != nil || len(res.Removed) != 0 {
		t.Fatalf("Prune = %+v, %v; want nothing removed, no error", res, err)
	}
	ahead := *h
	ahead.Offset += 1 << 20
	if _, err := Prune(testContext(t), cl, journal, &ahead); !errors.Is(err, ErrBadHints) || !strings.Contains(err.Error(), "write head") {
		t.Fatalf("pruning with hints beyond the write head: %v; want ErrBadHints naming the write head", err)
	}
}
