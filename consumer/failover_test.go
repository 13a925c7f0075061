package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/protocol"
)

// primaryOf returns the process holding shard's primary, waiting for one.
func (c *cluster) primaryOf(shard string, status protocol.ReplicaCode) *consumertest.Process {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range c.fleet.Procs {
			resp, err := c.fleet.Client(p).List(context.Background(), &protocol.ShardListRequest{Selector: "id=" + shard})
			if err != nil || len(resp.Shards) != 1 {
				break
			}
			for _, r := range resp.Shards[0].Replicas {
				if r.Slot == 0 && r.Status.GetCode() == status {
					if q, ok := c.fleet.Procs[r.ProcessId.Suffix]; ok {
						return q
					}
				}
			}
			break
		}
		time.Sleep(20 * time.Millisecond) // Polling the fleet's progress.
	}
	c.t.Fatalf("shard %s has no %s primary", shard, status)
	return nil
}

// TestKillPrimaries runs a counting application with one hot standby per
// shard over 3 brokers and 3 consumer processes in 2 zones, while several
// producers publish and the primary's process of a shard is killed (no
// graceful stop) at random points, again and again. The counts must equal
// what was published exactly.
func TestKillPrimaries(t *testing.T) {
	c := newCluster(t, counter{})
	zones := []string{"za", "zb"}
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	c.fleet.Start("c3", "za")
	shards := []string{"counts/shard-0", "counts/shard-1"}
	c.apply(c.shardSpec(shards[0], 1, "counts/in-0"), c.shardSpec(shards[1], 1, "counts/in-1"))

	const producers, perProducer, keys = 3, 600, 7
	want := map[string]map[string]uint64{shards[0]: {}, shards[1]: {}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	pubs := make([]*publisher, producers)
	for i := range producers {
		pubs[i] = c.publisher()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for n := 0; n < perProducer; n += 10 {
				part := rng.IntN(2)
				batch := make([]*countMsg, 10)
				mu.Lock()
				for j := range batch {
					k := fmt.Sprintf("k%d", rng.IntN(keys))
					batch[j] = &countMsg{Key: k}
					want[shards[part]][k]++
				}
				mu.Unlock()
				pubs[i].publish(t, fmt.Sprintf("counts/in-%d", part), batch...)
			}
		}()
	}

	rng := rand.New(rand.NewPCG(7, 7))
	for kill := range 4 {
		time.Sleep(time.Duration(50+rng.IntN(300)) * time.Millisecond) // A random point of processing.
		p := c.primaryOf(shards[kill%2], protocol.ReplicaCode_PRIMARY)
		t.Logf("killing %s, primary of %s", p.Name, shards[kill%2])
		c.fleet.Kill(p)
		c.fleet.Start(fmt.Sprintf("c%d", 4+kill), zones[kill%2])
	}
	wg.Wait()

	for part, shard := range shards {
		ends := map[string]int64{}
		for _, p := range pubs {
			if e := p.ends[fmt.Sprintf("counts/in-%d", part)]; e > ends[fmt.Sprintf("counts/in-%d", part)] {
				ends[fmt.Sprintf("counts/in-%d", part)] = e
			}
		}
		c.stat(shard, ends)
		var ks []string
		for k := range want[shard] {
			ks = append(ks, k)
		}
		got := c.counts(shard, ks...)
		for k, n := range want[shard] {
			if got[k] != n {
				t.Errorf("%s: count of %s = %d, want %d", shard, k, got[k], n)
			}
		}
	}
}

var _ = consumer.Ready
