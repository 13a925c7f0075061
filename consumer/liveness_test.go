package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/protocol"
)

// List says that a crashed process's replicas are dying as soon as its
// lease falls below what renewal keeps, before the lease expires and the
// shard fails over; live processes are LIVE meanwhile.
func TestListShowsACrashedProcessBeforeItsLeaseExpires(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.LeaseTTL = 6 * time.Second
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	const shard = "alive/shard-0"
	c.apply(c.shardSpec(shard, 1, "alive/in-0"))
	crashed := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
	c.awaitStandby(shard)
	var survivor *consumertest.Process
	for _, p := range c.fleet.Procs {
		if p != crashed {
			survivor = p
		}
	}
	for _, r := range c.listReplicas(survivor, shard) {
		if r.Liveness != protocol.ProcessLiveness_LIVE || r.GetLeaseRemainingSeconds() <= 0 {
			t.Errorf("before the crash, replica of %s: %s, %ds left; want LIVE", r.ProcessId.Suffix, r.Liveness, r.GetLeaseRemainingSeconds())
		}
	}

	c.fleet.Crash(crashed) // Its lease is left to expire.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs := c.listReplicas(survivor, shard)
		var dying *protocol.ShardListResponse_Replica
		for _, r := range rs {
			switch {
			case r.ProcessId.Suffix == crashed.Name && r.Liveness == protocol.ProcessLiveness_LEASE_EXPIRING:
				dying = r
			case r.ProcessId.Suffix == survivor.Name && r.Liveness != protocol.ProcessLiveness_LIVE:
				t.Fatalf("the live process %s is listed %s", survivor.Name, r.Liveness)
			}
		}
		if dying != nil {
			if dying.Slot != 0 || dying.GetLeaseRemainingSeconds() < 0 || dying.LeaseRemainingSeconds == nil {
				t.Errorf("the crashed primary listed at slot %d with %v s left, want slot 0 and its lease not yet expired",
					dying.Slot, dying.LeaseRemainingSeconds)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the crashed process %s is still listed alive: %v", crashed.Name, rs)
		}
		time.Sleep(50 * time.Millisecond) // Polling: a lease runs down without an event.
	}
}

// listReplicas lists shard's replicas through process p.
func (c *cluster) listReplicas(p *consumertest.Process, shard string) []*protocol.ShardListResponse_Replica {
	c.t.Helper()
	resp, err := c.fleet.Client(p).List(context.Background(), &protocol.ShardListRequest{Selector: "id=" + shard})
	if err != nil || len(resp.Shards) != 1 {
		c.t.Fatalf("listing %s through %s: %v %v", shard, p.Name, resp, err)
	}
	return resp.Shards[0].Replicas
}
