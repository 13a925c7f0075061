package store

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/recoverylog"
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
	benchCommits(b, "pebble", func(b *testing.B, fs vfs.FS, dir string) func(context.Context, int) {
		p, err := OpenPebble(dir, fs, &pebble.Options{Logger: quietLogger{}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		return func(ctx context.Context, i int) {
			batch := p.Batch()
			benchKeys(i, func(key, value []byte) {
				if err := batch.Set(key, value, nil); err != nil {
					b.Fatal(err)
				}
			})
			if err := p.StartCommit(ctx, checkpoint(i%200+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchCommits runs the commits of a store's benchmark, on a local
// directory and recorded into a recovery log, and reports commits/s,
// keys/s and, recorded, bytes of log per commit. open opens the store in
// dir over fs, and returns what makes its commit i of benchKeys(i).
func benchCommits(b *testing.B, name string, open func(b *testing.B, fs vfs.FS, dir string) func(context.Context, int)) {
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
			var rec *recoverylog.Recorder
			if recorded {
				runs++ // Each run records into a new log.
				journal := fmt.Sprintf("bench/%s-%d", name, runs)
				c.Journals(cl, 1, journal)
				rec = newRecorder(b, cl, journal, dir)
				fs = rec
			}
			commit := open(b, fs, dir)
			ctx := testContext(b)
			var start int64
			if rec != nil {
				start = rec.FSM().Offset
			}
			b.ResetTimer()
			for i := range b.N {
				commit(ctx, i)
			}
			b.StopTimer()
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "commits/s")
			b.ReportMetric(float64(b.N*100)/secs, "keys/s")
			if rec != nil {
				b.ReportMetric(float64(rec.FSM().Offset-start)/float64(b.N), "log-B/commit")
			}
		})
	}
}

// benchKeys calls set with the 100 keys (16 bytes, of a million) and
// values (32 bytes) of commit i.
func benchKeys(i int, set func(key, value []byte)) {
	value := make([]byte, 32)
	key := make([]byte, 0, 16)
	for j := range 100 {
		key = fmt.Appendf(key[:0], "key-%011d", (i*100+j)%1000000)
		value[0], value[1] = byte(i), byte(j)
		set(key, value)
	}
}

// BenchmarkSQLiteCommit measures the transactions of BenchmarkPebbleCommit
// (100 upserts of 16-byte keys and 32-byte values, committed with a
// checkpoint) on a SQLite store, on a local directory and recorded into a
// recovery log. It reports commits/s, keys/s and, recorded, the log's
// bytes per commit (the WAL's pages, and the database's at checkpoints).
func BenchmarkSQLiteCommit(b *testing.B) {
	benchCommits(b, "sqlite", func(b *testing.B, fs vfs.FS, dir string) func(context.Context, int) {
		s := openSQLite(b, fs, dir)
		b.Cleanup(func() { s.Close() })
		exec(b, s, `CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)`)
		if err := s.StartCommit(testContext(b), checkpoint(1)); err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, i int) {
			tx, err := s.Tx(ctx)
			if err != nil {
				b.Fatal(err)
			}
			benchKeys(i, func(key, value []byte) {
				if _, err := tx.ExecContext(ctx, `INSERT INTO kv (k, v) VALUES (?, ?)
					ON CONFLICT (k) DO UPDATE SET v = excluded.v`, key, value); err != nil {
					b.Fatal(err)
				}
			})
			if err := s.StartCommit(ctx, checkpoint(i%200+1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
