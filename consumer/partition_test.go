package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/internal/faultnet"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// A primary process cut off from etcd, while it can still read its sources
// and write its recovery log: its lease expires, its standby takes the
// shard over (fencing the recovery log), and it cannot commit after that.
// Every message published, before and during the partition, is counted
// exactly once by the successor.
func TestPartitionedPrimaryProcessCountsOnce(t *testing.T) {
	c := newCluster(t, counter{})
	switches := map[string]*faultnet.Switch{"c1": {}, "c2": {}}
	target := strings.TrimPrefix(c.brokers.Etcd.Endpoints()[0], "http://")
	c.fleet.Configure = func(cfg *consumer.Config) {
		etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + switches[cfg.Suffix].Proxy(t, target)},
			DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { etcd.Close() })
		cfg.Etcd = etcd
	}
	c.fleet.LeaseTTL = consumertest.ShortLeaseTTL // The cut-off primary's runs out.
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	const shard, journal = "counts/shard-0", "counts/in-0"
	c.apply(c.shardSpec(shard, 1, journal))
	primary := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
	var survivor *consumertest.Process
	for _, p := range c.fleet.Procs {
		if p != primary {
			survivor = p
		}
	}
	awaitReplica(t, c, survivor, shard, survivor, protocol.ReplicaCode_STANDBY)

	p := c.publisher()
	want := map[string]uint64{}
	publish := func(n int) {
		for i := range n {
			key := fmt.Sprintf("k%d", i%10)
			p.publish(t, journal, &countMsg{Key: key})
			want[key]++
		}
	}
	publish(50)
	switches[primary.Name].Cut()
	publish(50) // The cut-off primary may still read these.
	awaitReplica(t, c, survivor, shard, survivor, protocol.ReplicaCode_PRIMARY)
	publish(50)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		resp, err := c.fleet.Client(survivor).Stat(ctx, &protocol.ShardStatRequest{Shard: shard, ReadThrough: p.ends})
		if err == nil && resp.Status == protocol.Status_OK {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the successor never read through: %v %v", resp, err)
		}
		time.Sleep(50 * time.Millisecond) // Polling the successor's progress.
	}
	switches[primary.Name].Heal()
	c.fleet.Kill(primary)

	res, err := survivor.Server.Resolve(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Done()
	for key, n := range want {
		got, err := readCount(res.Store.(*store.Pebble).DB(), []byte("count/"+key))
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("count of %s = %d, want %d", key, got, n)
		}
	}
}

// awaitReplica waits until, as process via sees it, process who holds a
// replica of shard with status code.
func awaitReplica(t *testing.T, c *cluster, via *consumertest.Process, shard string, who *consumertest.Process, code protocol.ReplicaCode) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := c.fleet.Client(via).List(context.Background(), &protocol.ShardListRequest{Selector: "id=" + shard})
		if err == nil && len(resp.Shards) == 1 {
			for _, r := range resp.Shards[0].Replicas {
				if r.ProcessId.GetSuffix() == who.Name && r.Status.GetCode() == code {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds no %s replica of %s: %v %v", who.Name, code, shard, resp, err)
		}
		time.Sleep(20 * time.Millisecond) // Polling the fleet's progress.
	}
}
