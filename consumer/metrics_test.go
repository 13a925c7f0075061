package consumer_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quire-dev/quire/protocol"
)

// lagMetric returns quire_consumer_source_lag_bytes of a shard's source,
// and whether the series exists.
func lagMetric(t *testing.T, shard, journal string) (float64, bool) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "quire_consumer_source_lag_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["shard"] == shard && labels["journal"] == journal {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// A primary exports its sources' lag, 0 once it has read through what was
// written; the series goes when the shard does.
func TestSourceLagMetric(t *testing.T) {
	c := newCluster(t, counter{})
	p1 := c.fleet.Start("c1", "za")
	const shard, journal = "lag/shard-0", "lag/in-0"
	c.apply(c.shardSpec(shard, 0, journal))
	p := c.publisher()
	p.publish(t, journal, &countMsg{Key: "a"}, &countMsg{Key: "b"})
	c.stat(shard, p.ends)
	if lag, ok := lagMetric(t, shard, journal); !ok || lag != 0 {
		t.Fatalf("lag of %s once read through: %v (present %v), want 0", journal, lag, ok)
	}

	ctx := context.Background()
	list, err := c.fleet.Client(p1).List(ctx, &protocol.ShardListRequest{Selector: "id=" + shard})
	if err != nil || len(list.Shards) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if resp, err := c.fleet.Client(p1).Apply(ctx, &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{
		{Delete: shard, ExpectModRevision: list.Shards[0].ModRevision}}}); err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("delete: %v %v", resp, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := lagMetric(t, shard, journal); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lag series outlived its shard")
		}
		time.Sleep(20 * time.Millisecond) // Polling for the replica to stop.
	}
}

// The lag series of a source exists once the primary serves, before the
// shard reads any message.
func TestSourceLagSeriesFromTheStart(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.Start("c1", "za")
	const shard, journal = "lag/idle-0", "lag/idle-in-0"
	c.apply(c.shardSpec(shard, 0, journal))
	c.stat(shard, nil) // A primary serves.
	if lag, ok := lagMetric(t, shard, journal); !ok || lag != 0 {
		t.Fatalf("lag of the idle source %s: %v (present %v), want a series at 0", journal, lag, ok)
	}
}
