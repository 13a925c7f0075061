package store

import (
	"flag"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/internal/brokertest"
)

var benchSpools = flag.String("bench.spools", "", "directory for the brokers' spools in benchmarks (e.g. /dev/shm)")

// BenchmarkPebbleCommit measures transactions of 100 small keys (16-byte
// keys, 32-byte values), each committed with a checkpoint by StartCommit,
// on a local directory and recorded into a recovery log (one broker,
// replication 1). It reports commits/s and keys/s.
//
// With -bench.spools=/dev/shm the broker keeps its spools in memory, off
// the disk Pebble syncs to, as a broker on another machine would.
func BenchmarkPebbleCommit(b *testing.B) {
	c := brokertest.New(b)
	if *benchSpools != "" {
		c.KeepUnder(*benchSpools)
	}
	cl := c.Client(c.Start("b1"))
	runs := 0
	for _, recorded := range []bool{false, true} {
		b.Run(fmt.Sprintf("recorded=%v", recorded), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "db")
			var fs vfs.FS = vfs.Default
			if recorded {
				runs++ // Each run records into a new log.
				journal := fmt.Sprintf("bench/store-%d", runs)
				c.Journals(cl, 1, journal)
				fs = newRecorder(b, cl, journal, dir)
			}
			p, err := OpenPebble(dir, fs, &pebble.Options{Logger: quietLogger{}})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			ctx := testContext(b)
			value := make([]byte, 32)
			key := make([]byte, 0, 16)
			b.ResetTimer()
			for i := range b.N {
				batch := p.Batch()
				for j := range 100 {
					key = fmt.Appendf(key[:0], "key-%011d", (i*100+j)%1000000)
					value[0], value[1] = byte(i), byte(j)
					if err := batch.Set(key, value, nil); err != nil {
						b.Fatal(err)
					}
				}
				if err := p.StartCommit(ctx, checkpoint(i%200+1)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "commits/s")
			b.ReportMetric(float64(b.N*100)/secs, "keys/s")
		})
	}
}
