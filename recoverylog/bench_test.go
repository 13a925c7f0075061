package recoverylog

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/internal/brokertest"
)

// writeHeavy writes n batches of 100 keys with 1 KiB values, each batch
// synced: a write-heavy workload whose every commit is durable.
func writeHeavy(b *testing.B, db *pebble.DB, rng *rand.Rand, n int) {
	value := make([]byte, 1024)
	for i := range n {
		batch := db.NewBatch()
		for j := range 100 {
			for k := range value {
				value[k] = byte(rng.Uint32())
			}
			if err := batch.Set([]byte(fmt.Sprintf("key-%08d", (i*100+j)%200000)), value, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(pebble.Sync); err != nil {
			b.Fatal(err)
		}
	}
}

func benchOptions(fs vfs.FS) *pebble.Options {
	return &pebble.Options{FS: fs, Logger: quietLogger{}}
}

// BenchmarkPebbleWrites compares Pebble's write throughput on a local
// directory with and without recording (one broker, replication 1).
func BenchmarkPebbleWrites(b *testing.B) {
	c := brokertest.New(b)
	cl := c.Client(c.Start("b1"))
	runs := 0
	for _, recorded := range []bool{false, true} {
		b.Run(fmt.Sprintf("recorded=%v", recorded), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "db")
			var fs vfs.FS = vfs.Default
			if recorded {
				runs++ // Each run records into a new log.
				journal := fmt.Sprintf("bench/writes-%d", runs)
				c.Journals(cl, 1, journal)
				fs = newRecorder(b, cl, journal, dir, "bench", nil)
			}
			db, err := pebble.Open(dir, benchOptions(fs))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			b.SetBytes(100 * (1024 + 12))
			b.ResetTimer()
			writeHeavy(b, db, rand.New(rand.NewPCG(1, 2)), b.N)
			b.StopTimer()
		})
	}
}

// BenchmarkPlayback measures playback throughput of a recorded log of a
// few tens of MB, from the broker (and its fragment store).
func BenchmarkPlayback(b *testing.B) {
	const journal = "bench/playback"
	cl := cluster(b, journal)
	dir := filepath.Join(b.TempDir(), "db")
	rec := newRecorder(b, cl, journal, dir, "bench", nil)
	db, err := pebble.Open(dir, benchOptions(rec))
	if err != nil {
		b.Fatal(err)
	}
	writeHeavy(b, db, rand.New(rand.NewPCG(1, 2)), 400)
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	size := rec.FSM().Offset
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		p, err := NewPlayer(PlayerConfig{Client: cl, Journal: journal, Dir: filepath.Join(b.TempDir(), "played")})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Play(testContext(b)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(size)/(1<<20), "log-MB")
}
