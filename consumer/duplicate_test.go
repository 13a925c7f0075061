package consumer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/protocol"
)

// replicasStarted is how many replica directories process p has made.
func replicasStarted(t *testing.T, p *consumertest.Process) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(p.Dir, "replicas"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return len(entries)
}

// memberLease is the lease of member zone#name's key, or zero if it has none.
func (c *cluster) memberLease(zone, name string) clientv3.LeaseID {
	c.t.Helper()
	resp, err := c.brokers.Etcd.Get(context.Background(), allocator.MemberKey(c.root, zone, name))
	if err != nil {
		c.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// publishAndCheck publishes n messages of key k to journal and waits until
// shard counted exactly want of k.
func (c *cluster) publishAndCheck(p *publisher, shard, journal, k string, n int, want uint64) {
	c.t.Helper()
	for range n {
		p.publish(c.t, journal, &countMsg{Key: k})
	}
	c.stat(shard, p.ends)
	if got := c.counts(shard, k)[k]; got != want {
		c.t.Fatalf("count of %s = %d, want %d", k, got, want)
	}
}

// A second process started with the name of a live one serves none of
// its shards (it would record under the same author, fencing the first,
// and flip its status keys): it waits, sees the holder renew its lease,
// and exits with ErrMemberHeld, and the first goes on undisturbed.
func TestDuplicateNameServesNothing(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("dup/shard-0", 0, "dup/in-0"))
	p := c.publisher()
	c.publishAndCheck(p, "dup/shard-0", "dup/in-0", "k", 20, 20)

	dup := c.fleet.StartUnlisted("c1", "za")
	total := uint64(20)
	timeout := time.After(60 * time.Second)
	for waiting := true; waiting; {
		select {
		case <-dup.Exited():
			waiting = false
		case <-timeout:
			t.Fatal("the duplicate still runs after a minute")
		default: // Appends and commits while the duplicate waits.
			total += 5
			c.publishAndCheck(p, "dup/shard-0", "dup/in-0", "k", 5, total)
		}
	}
	if err := dup.Err(); !errors.Is(err, allocator.ErrMemberHeld) {
		t.Fatalf("the duplicate's Run: %v, want ErrMemberHeld", err)
	}
	if n := replicasStarted(t, dup); n != 0 {
		t.Fatalf("the duplicate started %d replicas", n)
	}
	if st := c.shardStatus("dup/shard-0"); st.GetCode() != protocol.ReplicaCode_PRIMARY {
		t.Fatalf("shard status %v after the duplicate, want PRIMARY", st)
	}
	c.publishAndCheck(p, "dup/shard-0", "dup/in-0", "k", 5, total+5)
}

// A process restarted within its predecessor's lease (kill -9, then a
// supervisor's restart) serves nothing while that lease lives, and then
// only under its own: its shards fail over once, not twice.
func TestRestartWithinLeaseServesUnderItsOwnLease(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.LeaseTTL = consumertest.ShortLeaseTTL // The test waits for the crashed process's to run out.
	old := c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("restart/shard-0", 0, "restart/in-0"))
	p := c.publisher()
	c.publishAndCheck(p, "restart/shard-0", "restart/in-0", "k", 20, 20)
	oldLease := c.memberLease("za", "c1")
	c.fleet.Crash(old) // Its lease is left to expire.

	fresh := c.fleet.Start("c1", "za")
	deadline := time.Now().Add(60 * time.Second)
	for lease := c.memberLease("za", "c1"); lease == oldLease || lease == 0; lease = c.memberLease("za", "c1") {
		if n := replicasStarted(t, fresh); n != 0 {
			t.Fatalf("the restarted process started %d replicas while its predecessor's lease %x lives", n, oldLease)
		}
		if time.Now().After(deadline) {
			t.Fatal("the restarted process never announced itself")
		}
		time.Sleep(20 * time.Millisecond) // Polling for the old lease's expiry.
	}
	c.publishAndCheck(p, "restart/shard-0", "restart/in-0", "k", 20, 40)
	resp, err := c.brokers.Etcd.Get(context.Background(), c.root+allocator.AssignmentsPrefix+"restart/shard-0#", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if lease := clientv3.LeaseID(kv.Lease); lease != c.memberLease("za", "c1") {
			t.Errorf("assignment %s under lease %x, not the process's own", kv.Key, lease)
		}
	}
}
