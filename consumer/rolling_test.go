package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/protocol"
)

// The brokers are restarted one at a time, each drained (as SIGTERM
// does) and started again on its disk and address, as in a rolling
// upgrade, while messages are published to two shards' sources. The
// fleet has as many brokers as the journals' replication, so a draining
// broker's journals have nowhere to go: it gives them up after its drain
// timeout. No publish fails, no shard fails, and every message is counted
// exactly once.
func TestBrokersRollingRestartCountsOnce(t *testing.T) {
	c := newCluster(t, counter{})
	r := c.startRolling(map[string]string{"c1": "za", "c2": "zb"})
	for _, name := range []string{"b1", "b2", "b3"} {
		b := c.brokers.Brokers[name]
		c.brokers.Drain(b)
		c.brokers.Restart(b)
		c.awaitReplicated(3, r.sources...)
	}
	r.check()
}

// The consumer processes are restarted one at a time, each drained (as
// SIGTERM does) and started again, as in a rolling upgrade, while messages
// are published to two shards with a standby each. With two processes, a
// draining process's standbys have nowhere to go (the other process holds
// the shard already): it gives them up after its drain timeout. No shard
// fails, and every message is counted exactly once.
func TestProcessesRollingRestartCountsOnce(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.Configure = func(cfg *consumer.Config) { cfg.DrainTimeout = 2 * time.Second }
	zones := map[string]string{"c1": "za", "c2": "zb"}
	r := c.startRolling(zones)
	for _, name := range []string{"c1", "c2"} {
		if err := c.fleet.Drain(c.fleet.Procs[name]); err != nil {
			t.Fatalf("draining %s: %v", name, err)
		}
		restarted := c.fleet.Start(name, zones[name])
		for _, shard := range r.shards {
			awaitReplica(t, c, restarted, shard, restarted, protocol.ReplicaCode_STANDBY)
		}
	}
	r.check()
}

// rolling is two counting shards, with a standby each, whose sources a
// publisher writes to until check.
type rolling struct {
	c               *cluster
	shards, sources []string
	p               *publisher
	want            []map[string]uint64 // per shard; the publisher's until it stops
	stop            chan struct{}
	published       chan error
}

// startRolling starts consumer processes (name to zone), the shards, and
// the publisher.
func (c *cluster) startRolling(procs map[string]string) *rolling {
	c.t.Helper()
	for name, zone := range procs {
		c.fleet.Start(name, zone)
	}
	r := &rolling{c: c, shards: []string{"counts/shard-0", "counts/shard-1"}, sources: []string{"counts/in-0", "counts/in-1"},
		stop: make(chan struct{}), published: make(chan error, 1)}
	for i := range r.shards {
		c.apply(c.shardSpec(r.shards[i], 1, r.sources[i]))
		r.want = append(r.want, map[string]uint64{})
	}
	for _, shard := range r.shards {
		c.awaitStatus(shard, protocol.ReplicaCode_PRIMARY)
	}
	r.p = c.publisher()
	go r.publish()
	return r
}

// publish publishes rounds of messages to the sources in turn until stop.
func (r *rolling) publish() {
	for round := 0; ; round++ {
		select {
		case <-r.stop:
			r.published <- nil
			return
		default:
		}
		i := round % len(r.shards)
		if err := r.p.publishRound(r.sources[i], round, 10, r.want[i]); err != nil {
			r.published <- err
			return
		}
	}
}

// check stops the publisher, and checks that no publish failed, and that
// each shard read through the publisher's appends to its source, counted
// each message once, and is PRIMARY.
func (r *rolling) check() {
	c := r.c
	c.t.Helper()
	close(r.stop)
	if err := <-r.published; err != nil {
		c.t.Fatalf("a publish failed during the rolling restart: %v", err)
	}
	for i, shard := range r.shards {
		c.stat(shard, map[string]int64{r.sources[i]: r.p.ends[r.sources[i]]})
		keys := make([]string, 0, len(r.want[i]))
		for k := range r.want[i] {
			keys = append(keys, k)
		}
		got := c.counts(shard, keys...)
		for _, k := range keys {
			if got[k] != r.want[i][k] {
				c.t.Errorf("%s: count of %s = %d, want %d", shard, k, got[k], r.want[i][k])
			}
		}
		if st := c.shardStatus(shard); st.GetCode() != protocol.ReplicaCode_PRIMARY {
			c.t.Errorf("%s: status %v, want PRIMARY", shard, st)
		}
	}
}

// publishRound publishes n counting messages to journal, waits until
// they are appended, and adds them to want.
func (p *publisher) publishRound(journal string, round, n int, want map[string]uint64) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := make([]string, n)
	for j := range keys {
		keys[j] = fmt.Sprintf("k%d", (round*n+j)%7)
		h, err := p.pub.PublishCommitted(ctx, journal, &countMsg{Key: keys[j]})
		if err != nil {
			return err
		}
		if j < n-1 {
			continue
		}
		f, err := h.Wait(ctx)
		if err != nil {
			return fmt.Errorf("publishing to %s: %w", journal, err)
		}
		p.mu.Lock()
		p.ends[journal] = max(p.ends[journal], f.End)
		p.mu.Unlock()
	}
	for _, k := range keys {
		want[k]++
	}
	return nil
}

// awaitReplicated waits until each journal's route has n brokers.
func (c *cluster) awaitReplicated(n int, journals ...string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, j := range journals {
		for {
			resp, err := c.journals.List(ctx, &protocol.ListRequest{Selector: "name=" + j})
			if err == nil && len(resp.Journals) == 1 && len(resp.Journals[0].Route.GetMembers()) == n {
				break
			}
			if ctx.Err() != nil {
				c.t.Fatalf("journal %s never had %d brokers: %v %v", j, n, resp, err)
			}
			time.Sleep(50 * time.Millisecond) // Polling the allocator's progress.
		}
	}
}
