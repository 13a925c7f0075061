package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/message"
)

// A shard's checkpoint forgets the producers of its sources that have
// been idle for a day (DefaultProducerPruneHorizon) by the clocks of the
// source's messages, so that publishers that come and go do not make
// each transaction write more; their messages are counted all the same.
func TestCheckpointForgetsIdleProducers(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("prune/shard-0", 0, "prune/in"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Messages framed by hand, with the clocks of their time: a
	// Publisher moves its clock to now.
	publishAt := func(at time.Time) int64 {
		m := &countMsg{Key: "k", UUID: message.BuildUUID(message.NewProducerID(), message.NewClock(at), message.OutsideTxn)}
		line, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.journals.Append(ctx, client.AppendRequest{Journal: "prune/in"}, bytes.NewReader(append(line, '\n')))
		if err != nil {
			t.Fatal(err)
		}
		return f.End
	}
	for range 20 {
		publishAt(time.Now().Add(-48 * time.Hour)) // Producers of two days ago, one message each.
	}
	end := publishAt(time.Now())
	c.stat("prune/shard-0", map[string]int64{"prune/in": end})
	if got := c.counts("prune/shard-0", "k"); got["k"] != 21 {
		t.Fatalf("count %d, want 21: pruning loses no message", got["k"])
	}
	for _, p := range c.fleet.Procs {
		res, err := p.Server.Resolve(ctx, "prune/shard-0")
		if err != nil || res.Store == nil {
			continue
		}
		cp, err := res.Store.RestoreCheckpoint(ctx)
		res.Done()
		if err != nil {
			t.Fatal(err)
		}
		if n := len(cp.Sources["prune/in"].Producers); n != 1 {
			t.Fatalf("checkpoint holds %d producers, want only the recent one", n)
		}
		return
	}
	t.Fatal("no primary of prune/shard-0")
}
