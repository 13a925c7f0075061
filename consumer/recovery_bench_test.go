package consumer_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/recoverylog"
)

var benchRecoveryMB = flag.Int("bench.recovery-mb", 256, "size of the store BenchmarkRecovery recovers, in MiB of keys and values")

// BenchmarkRecovery measures bringing up a primary with no standby from a
// recorded store of -bench.recovery-mb MiB: from the shard's assignment to
// its primary serving (playback of the recovery log from hints, takeover,
// opening Pebble, restoring the checkpoint). The log is all persisted to
// the brokers' fragment store first; direct plays it straight from
// the store (the client's default), through-brokers through the broker
// (client.Config.ReadThroughBrokers).
func BenchmarkRecovery(b *testing.B) {
	for _, through := range []bool{false, true} {
		name := "direct"
		if through {
			name = "through-brokers"
		}
		b.Run(name, func(b *testing.B) { benchmarkRecovery(b, through) })
	}
}

func benchmarkRecovery(b *testing.B, throughBrokers bool) {
	c := newClusterTB(b, newTally(), 1)
	if throughBrokers {
		cl, err := client.New(context.Background(), client.Config{Broker: c.first.Endpoint,
			DialOptions: c.brokers.DialOptions, ReadThroughBrokers: true})
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		c.fleet.Journals = cl
	}
	c.fleet.Start("c1", "za")
	for i := range b.N {
		spec := c.shardSpec(fmt.Sprintf("bench/recovery-%d", i), 0, "bench/recovery-in")
		c.brokers.Journals(c.journals, 1, "bench/recovery-in")
		c.brokers.Apply(c.journals, &protocol.JournalSpec{Name: spec.RecoveryLog(), Replication: 1,
			Fragment: &protocol.JournalSpec_Fragment{FlushInterval: durationpb.New(time.Second)}})
		dbSize, logSize := c.recordStore(b, spec.RecoveryLog(), spec.HintKey(), *benchRecoveryMB<<20)
		c.awaitPersisted(b, spec.RecoveryLog(), logSize)
		// The setup's gigabytes would otherwise go to disk during the
		// recovery, and its time would vary with how much had.
		syscall.Sync()
		b.StartTimer()
		start := time.Now()
		c.applySpecs(spec)
		c.awaitStatus(spec.ID, protocol.ReplicaCode_PRIMARY)
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(took.Seconds(), "recovery-s")
		b.ReportMetric(float64(dbSize)/took.Seconds()/1e6, "db-MB/s")
		b.ReportMetric(float64(dbSize)/1e6, "db-MB")
		b.ReportMetric(float64(logSize)/1e6, "log-MB")
	}
}

// awaitPersisted waits until the brokers' fragment store holds journal up
// to end.
func (c *cluster) awaitPersisted(b *testing.B, journal string, end int64) {
	st, err := fragment.Open(context.Background(), c.brokers.Store)
	if err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var persisted int64
		if err := st.List(context.Background(), journal, func(f fragment.Fragment) error {
			persisted = max(persisted, f.End)
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		if persisted >= end {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the store holds %s up to %d, not %d", journal, persisted, end)
		}
		time.Sleep(100 * time.Millisecond) // Polling the store.
	}
}

// recordStore writes a Pebble store of about size bytes of keys and
// values into a recovery log, stores its hints at hintKey, and returns the
// database's size on disk and the log's size.
func (c *cluster) recordStore(b *testing.B, log, hintKey string, size int) (int64, int64) {
	b.StopTimer()
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "db")
	rec, err := recoverylog.NewRecorder(ctx, recoverylog.RecorderConfig{
		Client: c.journals, Journal: log, Author: "bench-writer", Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	opts := &pebble.Options{FS: rec, Logger: quietPebble{}}
	recoverylog.PebbleOptions(opts)
	db, err := pebble.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	value := make([]byte, 1024)
	for n := 0; n < size; n += 1000 * len(value) {
		batch := db.NewBatch()
		for j := range 1000 {
			for k := range value {
				value[k] = byte(rng.Uint32())
			}
			if err := batch.Set([]byte(fmt.Sprintf("key-%012d", n/len(value)+j)), value, nil); err != nil {
				b.Fatal(err)
			}
		}
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		b.Fatal(err)
	}
	m := db.Metrics()
	dbSize := int64(m.DiskSpaceUsage())
	if err := db.Close(); err != nil {
		b.Fatal(err)
	}
	h, err := rec.Hints()
	if err != nil {
		b.Fatal(err)
	}
	if err := recoverylog.StoreHints(ctx, c.brokers.Etcd, hintKey, h, 2); err != nil {
		b.Fatal(err)
	}
	return dbSize, rec.FSM().Offset
}
