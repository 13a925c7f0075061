package consumer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// tally is the benchmarks' counting application: it keeps every count
// in memory too (its store is the shard's own, so memory is a faithful
// cache of it), counts there within a transaction, and writes the counts
// that changed into the store in FinalizeTxn, as a real aggregation would.
type tally struct {
	counter
	mu     sync.Mutex
	shards map[*consumer.Shard]*tallyShard
	// firstBegin is when the first transaction began.
	firstBegin time.Time
}

type tallyShard struct {
	counts  map[string]uint64
	changed map[string]bool
}

func newTally() *tally { return &tally{shards: map[*consumer.Shard]*tallyShard{}} }

func (a *tally) shard(sh *consumer.Shard) *tallyShard {
	a.mu.Lock()
	defer a.mu.Unlock()
	ts := a.shards[sh]
	if ts == nil {
		ts = &tallyShard{counts: map[string]uint64{}, changed: map[string]bool{}}
		a.shards[sh] = ts
	}
	return ts
}

func (a *tally) BeginTxn(*consumer.Shard, store.Store) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.firstBegin.IsZero() {
		a.firstBegin = time.Now()
	}
	return nil
}

func (a *tally) Consume(sh *consumer.Shard, _ store.Store, env consumer.Envelope) error {
	ts := a.shard(sh)
	k := env.Message.(*countMsg).Key
	ts.counts[k]++
	ts.changed[k] = true
	return nil
}

// FinalizeTxn writes the changed counts. (The benchmarks' stores start
// empty, so the cache needs no loading.)
func (a *tally) FinalizeTxn(sh *consumer.Shard, st store.Store) error {
	ts := a.shard(sh)
	b := st.(*store.Pebble).Batch()
	for k := range ts.changed {
		if err := b.Set([]byte("count/"+k), binary.AppendUvarint(nil, ts.counts[k]), nil); err != nil {
			return err
		}
	}
	clear(ts.changed)
	return nil
}

// encodeMessages returns n committed counting messages over keys keys, as
// JSON lines with UUIDs, as a publisher writes them.
func encodeMessages(n, keys int) []byte {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	producer, clock := message.NewProducerID(), message.NewClock(time.Now())
	for i := range n {
		clock.Tick()
		m := &countMsg{UUID: message.BuildUUID(producer, clock, message.OutsideTxn), Key: fmt.Sprintf("key-%03d", i%keys)}
		if err := message.JSONLines.Marshal(m, w); err != nil {
			panic(err)
		}
	}
	w.Flush()
	return buf.Bytes()
}

// appendAll appends data to journal in pieces of about 1 MiB, at line
// boundaries, and returns the journal's end.
func appendAll(b testing.TB, cl *client.Client, journal string, data []byte) int64 {
	var end int64
	for len(data) > 0 {
		n := min(len(data), 1<<20)
		if i := bytes.LastIndexByte(data[:n], '\n'); i >= 0 {
			n = i + 1
		}
		f, err := cl.Append(context.Background(), client.AppendRequest{Journal: journal}, bytes.NewReader(data[:n]))
		if err != nil {
			b.Fatal(err)
		}
		end, data = f.End, data[n:]
	}
	return end
}

var benchMessages = flag.Int("bench.messages", 500_000, "messages per shard in BenchmarkShardThroughput")

// BenchmarkShardThroughput measures messages/s through one shard of the
// counting application (Pebble store, recorded): the source holds
// -bench.messages small JSON messages (~95 bytes) before the shard starts,
// and the benchmark times the shard's reading, sequencing, consuming and
// committing of all of them. It reports, beside, the rate of decoding the
// same bytes alone (Unpack + Unmarshal), the framework's floor.
func BenchmarkShardThroughput(b *testing.B) {
	n := *benchMessages
	data := encodeMessages(n, 1000)
	b.Run("decode-only", func(b *testing.B) {
		for range b.N {
			r := bufio.NewReaderSize(bytes.NewReader(data), 256<<10)
			for {
				frame, err := message.JSONLines.Unpack(r)
				if err != nil {
					break
				}
				if err := message.JSONLines.Unmarshal(frame, &countMsg{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "msgs/s")
	})
	b.Run("shard", func(b *testing.B) {
		for i := range b.N {
			app := newTally()
			c := newBenchCluster(b, app)
			journal := fmt.Sprintf("bench/in-%d", i)
			spec := c.shardSpec(fmt.Sprintf("bench/shard-%d", i), 0, journal)
			spec.MaxTxnDuration = time.Second
			c.brokers.Journals(c.journals, 1, journal, spec.RecoveryLog())
			end := appendAll(b, c.journals, journal, data)
			c.fleet.Start("c1", "za")
			b.ResetTimer()
			start := time.Now()
			c.applySpecs(spec)
			c.stat(spec.ID, map[string]int64{journal: end})
			b.StopTimer()
			// From the first transaction's start: the shard's recovery
			// (an empty log here) is measured by BenchmarkRecovery.
			took := time.Since(app.firstBegin)
			b.ReportMetric(float64(n)/took.Seconds(), "msgs/s")
			b.ReportMetric(float64(len(data))/took.Seconds()/1e6, "MB/s")
			b.ReportMetric(app.firstBegin.Sub(start).Seconds()*1000, "startup-ms")
		}
	})
}

func newBenchCluster(b *testing.B, app consumer.Application) *cluster { return newClusterTB(b, app, 1) }

// BenchmarkFailover measures the time from a crash of a primary's process
// (its goroutines stop; its lease is left to expire) to its standby's
// first commit, with the lease TTL that the fleet uses.
func BenchmarkFailover(b *testing.B) {
	const ttl = 3 * time.Second
	app := &flaky{commits: map[string][]time.Time{}}
	c := newClusterTB(b, app, 3)
	c.fleet.LeaseTTL = ttl
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	shard := "bench/failover"
	c.apply(c.shardSpec(shard, 1, "bench/failover-in"))
	p := c.publisher()
	var took []time.Duration
	for i := range b.N {
		c.awaitStatus(shard, protocol.ReplicaCode_PRIMARY)
		c.awaitStandby(shard)
		p.publish(b, "bench/failover-in", &countMsg{Key: "k"})
		c.stat(shard, p.ends)
		primary := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
		app.mu.Lock()
		before := len(app.commits[shard])
		app.mu.Unlock()
		crashAt := time.Now()
		c.fleet.Crash(primary)
		// Publish continuously, so the new primary has something to commit.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for time.Since(crashAt) < 60*time.Second {
				p.publish(b, "bench/failover-in", &countMsg{Key: "k"})
				app.mu.Lock()
				n := len(app.commits[shard])
				app.mu.Unlock()
				if n > before {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		<-done
		app.mu.Lock()
		first := app.commits[shard][before]
		app.mu.Unlock()
		took = append(took, first.Sub(crashAt))
		c.fleet.Start(fmt.Sprintf("c%d", 3+i), []string{"za", "zb"}[i%2])
	}
	reportDurations(b, took, "failover")
	b.ReportMetric(ttl.Seconds(), "ttl-s")
}

// BenchmarkHandoff measures the pause in a shard's processing when its
// primary's process drains: the longest interval between consecutive
// commits while the handoff happens, with a producer publishing
// continuously.
func BenchmarkHandoff(b *testing.B) {
	app := &flaky{commits: map[string][]time.Time{}}
	c := newClusterTB(b, app, 3)
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	shard := "bench/handoff"
	spec := c.shardSpec(shard, 1, "bench/handoff-in")
	spec.MaxTxnDuration = 10 * time.Millisecond
	c.apply(spec)
	p := c.publisher()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.publish(b, "bench/handoff-in", &countMsg{Key: "k"})
		}
	}()
	var pauses []time.Duration
	for i := range b.N {
		c.awaitStatus(shard, protocol.ReplicaCode_PRIMARY)
		c.awaitStandby(shard)
		primary := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
		c.fleet.Start(fmt.Sprintf("c%d", 3+i), []string{"za", "zb"}[i%2])
		time.Sleep(200 * time.Millisecond) // Commits before the drain.
		drainAt := time.Now()
		if err := c.fleet.Drain(primary); err != nil {
			b.Fatal(err)
		}
		c.awaitStatus(shard, protocol.ReplicaCode_PRIMARY)
		time.Sleep(200 * time.Millisecond) // Commits after it.
		app.mu.Lock()
		ts := app.commits[shard]
		var pause time.Duration
		for j := 1; j < len(ts); j++ {
			if ts[j].After(drainAt) {
				pause = max(pause, ts[j].Sub(ts[j-1]))
			}
		}
		app.mu.Unlock()
		pauses = append(pauses, pause)
	}
	close(stop)
	wg.Wait()
	reportDurations(b, pauses, "pause")
}

// awaitStandby waits until shard has a STANDBY replica.
func (c *cluster) awaitStandby(shard string) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range c.fleet.Procs {
			resp, err := c.fleet.Client(p).List(context.Background(), &protocol.ShardListRequest{Selector: "id=" + shard})
			if err == nil && len(resp.Shards) == 1 && slices.ContainsFunc(resp.Shards[0].Replicas,
				func(r *protocol.ShardListResponse_Replica) bool {
					return r.Status.GetCode() == protocol.ReplicaCode_STANDBY
				}) {
				return
			}
			break
		}
		time.Sleep(20 * time.Millisecond) // Polling the standby's playback.
	}
	c.t.Fatalf("shard %s has no standby", shard)
}

func reportDurations(b *testing.B, ds []time.Duration, name string) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	p50 := ds[len(ds)/2]
	p99 := ds[min(len(ds)-1, len(ds)*99/100)]
	b.ReportMetric(p50.Seconds()*1000, name+"-p50-ms")
	b.ReportMetric(p99.Seconds()*1000, name+"-p99-ms")
	b.ReportMetric(ds[len(ds)-1].Seconds()*1000, name+"-max-ms")
}

var _ = consumertest.New
