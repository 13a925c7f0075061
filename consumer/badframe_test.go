package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
)

// A frame of a source that is not a message is passed over, and the
// transaction that passes over it commits the source's offsets past it:
// a shard whose source ends with one reads through to the write head (no
// lag for good), and goes on with the messages after it.
func TestShardPassesOverBadFrames(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("bad/shard-0", 0, "bad/in"))
	p := c.publisher()
	for range 3 {
		p.publish(t, "bad/in", &countMsg{Key: "k"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := c.journals.Append(ctx, client.AppendRequest{Journal: "bad/in"}, strings.NewReader("not a message\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.stat("bad/shard-0", map[string]int64{"bad/in": f.End}) // Waits until read through the bad frame.

	p.publish(t, "bad/in", &countMsg{Key: "k"}, &countMsg{Key: "k"})
	c.stat("bad/shard-0", p.ends)
	if got := c.counts("bad/shard-0", "k"); got["k"] != 5 {
		t.Errorf("count %d, want the 5 messages around the bad frame", got["k"])
	}
}
