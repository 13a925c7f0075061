package recoverylog

import (
	"context"
	"flag"
	"fmt"
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
	"github.com/quire-dev/quire/protocol"
)

// writeHeavy writes n batches of 100 keys with 1 KiB values, each batch
// synced: a write-heavy workload whose every commit is durable. Pipelined,
// each batch's commit waits for its sync only after the next batch is
// written and applied, as a consumer's transactions commit (see
// store.Pipeliner); otherwise each commit waits for its sync at once.
func writeHeavy(b *testing.B, db *pebble.DB, rng *rand.Rand, n int, pipelined bool) {
	value := make([]byte, 1024)
	var prev *pebble.Batch
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
		if !pipelined {
			if err := batch.Commit(pebble.Sync); err != nil {
				b.Fatal(err)
			}
			batch.Close()
			continue
		}
		if err := db.ApplyNoSyncWait(batch, pebble.Sync); err != nil {
			b.Fatal(err)
		}
		if prev != nil {
			if err := prev.SyncWait(); err != nil {
				b.Fatal(err)
			}
			prev.Close()
		}
		prev = batch
	}
	if prev != nil {
		if err := prev.SyncWait(); err != nil {
			b.Fatal(err)
		}
		prev.Close()
	}
}

var (
	benchSpools = flag.String("bench.spools", "", "directory for the brokers' spools in benchmarks (e.g. /dev/shm)")
	benchBroker = flag.String("bench.broker", "", "endpoint of a broker to record to (e.g. quire dev's 127.0.0.1:7700) instead of one in the benchmark's process")
	benchCodec  = flag.String("bench.codec", "zstd", "fragment codec of the benchmarks' recovery logs (none, gzip, zstd, snappy)")
)

func benchOptions(fs vfs.FS) *pebble.Options {
	return &pebble.Options{FS: fs, Logger: quietLogger{}}
}

// BenchmarkPebbleWrites compares Pebble's write throughput on a local
// directory with and without recording (one broker, replication 1). It
// reports the CPU time of the process per batch (Pebble's, and the
// broker's and client's when recorded: on a busy machine, throughput
// follows it), and for the recorder its appends and log bytes per batch.
// See benchBrokerClient for the broker.
func BenchmarkPebbleWrites(b *testing.B) {
	cl, apply := benchBrokerClient(b)
	runs := 0
	for _, pipelined := range []bool{false, true} {
		for _, recorded := range []bool{false, true} {
			b.Run(fmt.Sprintf("pipelined=%v/recorded=%v", pipelined, recorded), func(b *testing.B) {
				benchPebbleWrites(b, cl, apply, &runs, pipelined, recorded)
			})
		}
	}
}

func benchPebbleWrites(b *testing.B, cl *client.Client, apply func(...*protocol.JournalSpec), runs *int, pipelined, recorded bool) {
	dir := filepath.Join(b.TempDir(), "db")
	var fs vfs.FS = vfs.Default
	if recorded {
		*runs++ // Each run records into a new log.
		journal := fmt.Sprintf("bench/writes-%d-%d", time.Now().UnixNano(), *runs)
		apply(logSpec(b, journal, *benchCodec))
		fs = newRecorder(b, cl, journal, dir, "bench", nil)
	}
	db, err := pebble.Open(dir, benchOptions(fs))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.SetBytes(100 * (1024 + 12))
	cpu := brokertest.CPUTime()
	b.ResetTimer()
	writeHeavy(b, db, rand.New(rand.NewPCG(1, 2)), b.N, pipelined)
	b.StopTimer()
	b.ReportMetric(float64((brokertest.CPUTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	if rec, ok := fs.(*Recorder); ok {
		rec.mu.Lock()
		st := rec.stats
		rec.mu.Unlock()
		b.ReportMetric(float64(st.flights)/float64(b.N), "appends/op")
		b.ReportMetric(float64(st.bytes)/float64(b.N), "log-B/op")
		b.ReportMetric(float64(st.resent)/float64(b.N), "resent/op")
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
	writeHeavy(b, db, rand.New(rand.NewPCG(1, 2)), 400, false)
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

// dirSize returns the total size of the files under dir.
func dirSize(b testing.TB, dir string) int64 {
	var n int64
	for _, s := range dirSizes(b, dir) {
		n += s
	}
	return n
}

func dirSizes(b testing.TB, dir string) map[string]int64 {
	out := map[string]int64{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && !e.IsDir() {
			out[e.Name()] = fi.Size()
		}
	}
	return out
}

// BenchmarkReplayHorizon overwrites the same key range many times on a
// recorded Pebble (PebbleOptions, default memtable and compactions), into
// a log whose fragments persist to the store within a second, then plays
// the log from fresh hints and from its start. It reports the log's
// size, the database's size on disk, the log bytes read from hints, and
// their ratio; the MB/s are of log bytes read from the fragment store.
func BenchmarkReplayHorizon(b *testing.B) {
	const (
		journal = "bench/horizon"
		keys    = 10000
		rounds  = 10
	)
	c, cl := persistedLog(b, journal, 8<<20)
	dir := filepath.Join(b.TempDir(), "db")
	rec := newRecorder(b, cl, journal, dir, "bench", nil)
	opts := benchOptions(rec)
	PebbleOptions(opts)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	value := make([]byte, 1024)
	for range rounds {
		perm := rng.Perm(keys)
		for i := 0; i < keys; i += 100 {
			batch := db.NewBatch()
			for _, k := range perm[i:min(i+100, keys)] {
				for j := range value {
					value[j] = byte(rng.Uint32())
				}
				if err := batch.Set([]byte(fmt.Sprintf("key-%08d", k)), value, nil); err != nil {
					b.Fatal(err)
				}
			}
			if err := batch.Commit(pebble.Sync); err != nil {
				b.Fatal(err)
			}
		}
	}
	h, err := rec.Hints()
	if err != nil {
		b.Fatal(err)
	}
	js, _ := MarshalHints(h)
	dbSize := dirSize(b, dir)
	defer db.Close()
	waitPersisted(b, c, journal, h.Offset)
	var read int64
	for _, s := range h.Segments(DefaultSegmentGap) {
		read += s.End - s.Begin
	}
	b.Logf("log %d bytes; database %d bytes on disk in %d files; hints %d bytes of JSON, %d nodes; from hints: read %d bytes (%.2f× the database)",
		h.Offset, dbSize, len(dirSizes(b, dir)), len(js), len(h.Nodes), read, float64(read)/float64(dbSize))
	for _, from := range []string{"hints", "start"} {
		b.Run("from="+from, func(b *testing.B) {
			cfg := PlayerConfig{Client: cl, Journal: journal}
			size := h.Offset
			if from == "hints" {
				cfg.Hints, size = h, read
			}
			b.SetBytes(size)
			for range b.N {
				cfg.Dir = filepath.Join(b.TempDir(), "played")
				p, err := NewPlayer(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Play(testContext(b)); err != nil {
					b.Fatal(err)
				}
				if pr := p.Progress(); pr.Offset < h.Offset || pr.BytesRead < size {
					b.Fatalf("played %+v", pr)
				}
				os.RemoveAll(cfg.Dir)
			}
			b.ReportMetric(float64(h.Offset)/(1<<20), "log-MB")
			b.ReportMetric(float64(dbSize)/(1<<20), "db-MB")
			b.ReportMetric(float64(size)/(1<<20), "read-MB")
			b.ReportMetric(float64(size)/float64(dbSize), "read/db")
		})
	}
}

// logSpec is the spec of a recovery log journal (replication 1) whose
// fragments are compressed with the named codec.
func logSpec(b *testing.B, journal, codec string) *protocol.JournalSpec {
	c, ok := protocol.Codec_value["CODEC_"+strings.ToUpper(codec)]
	if !ok {
		b.Fatalf("-bench.codec=%q: not a codec (none, gzip, zstd, snappy)", codec)
	}
	return &protocol.JournalSpec{Name: journal, Replication: 1, Fragment: &protocol.JournalSpec_Fragment{Codec: protocol.Codec(c)}}
}

// benchBrokerClient returns a client of the broker that -bench.broker
// names, or of a broker it starts in the process (and etcd with it), and a
// function that creates journals there.
//
// With -bench.spools=/dev/shm the in-process broker keeps its spools in
// memory, off the disk Pebble syncs to, as a broker on another machine
// would; on a single disk, the broker's writes otherwise slow Pebble's
// fsyncs.
func benchBrokerClient(b *testing.B) (*client.Client, func(...*protocol.JournalSpec)) {
	if *benchBroker != "" {
		cl, err := client.New(context.Background(), client.Config{Broker: *benchBroker})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.Close() })
		return cl, func(specs ...*protocol.JournalSpec) { brokertest.Apply(b, cl, specs...) }
	}
	c := brokertest.New(b)
	if *benchSpools != "" {
		c.KeepUnder(*benchSpools)
	}
	cl := c.Client(c.Start("b1"))
	return cl, func(specs ...*protocol.JournalSpec) { c.Apply(cl, specs...) }
}
