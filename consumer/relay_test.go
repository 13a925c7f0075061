package consumer_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// relay publishes, for each message it consumes, one message to its
// output journal, within the transaction: the output commits with the
// transaction's store commit, through its acknowledgements.
type relay struct{ counter }

const relayOut = "relay/out"

func (relay) Consume(sh *consumer.Shard, _ store.Store, env consumer.Envelope) error {
	_, err := sh.Publisher().PublishUncommitted(sh.Context(), relayOut, &countMsg{Key: env.Message.(*countMsg).Key})
	return err
}

// TestRelayExactlyOnce kills the primary of a relaying shard repeatedly
// while a producer publishes: a reader of the output journal reads each
// input's output exactly once — nothing of a transaction that did not
// commit, and no commit twice.
func TestRelayExactlyOnce(t *testing.T) {
	c := newCluster(t, relay{})
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	c.fleet.Start("c3", "za")
	spec := c.shardSpec("relay/shard", 1, "relay/in")
	c.brokers.Journals(c.journals, 3, relayOut)
	c.apply(spec)

	const total = 600
	p := c.publisher()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i += 20 {
			batch := make([]*countMsg, 20)
			for j := range batch {
				batch[j] = &countMsg{Key: fmt.Sprintf("m%04d", i+j)}
			}
			p.publish(t, "relay/in", batch...)
		}
	}()
	rng := rand.New(rand.NewPCG(3, 3))
	for kill := range *relayKills {
		time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond) // A random point.
		c.fleet.Kill(c.primaryOf(spec.ID, protocol.ReplicaCode_PRIMARY))
		c.fleet.Start(fmt.Sprintf("c%d", 4+kill), []string{"za", "zb"}[kill%2])
	}
	wg.Wait()
	c.stat(spec.ID, p.ends)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rd, err := message.NewReader(ctx, c.journals, message.ReaderConfig{Journal: relayOut, Framing: message.JSONLines,
		New: func() message.Message { return &countMsg{} }, Block: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	seen := map[string]int{}
	for len(seen) < total {
		d, err := rd.Next()
		if err != nil {
			dumpJournal(t, c, relayOut)
			t.Fatalf("reading the output after %d messages: %v", len(seen), err)
		}
		k := d.Message.(*countMsg).Key
		if seen[k]++; seen[k] > 1 {
			t.Errorf("output %s read twice", k)
		}
	}
	// Nothing more is committed: read to the write head without blocking.
	tail, err := message.NewReader(ctx, c.journals, message.ReaderConfig{Journal: relayOut, Framing: message.JSONLines,
		New: func() message.Message { return &countMsg{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer tail.Close()
	n := 0
	for {
		if _, err := tail.Next(); err != nil {
			break
		}
		n++
	}
	if n != total {
		t.Errorf("the output holds %d committed messages, want %d", n, total)
	}
}

// dumpJournal logs every message of journal, with its UUID's parts.
func dumpJournal(t *testing.T, c *cluster, journal string) {
	dec := message.NewDecoder(context.Background(), c.journals, message.ReaderConfig{Journal: journal,
		Framing: message.JSONLines, New: func() message.Message { return &countMsg{} }})
	defer dec.Close()
	for {
		m, begin, _, err := dec.Next()
		if err != nil {
			t.Logf("end: %v", err)
			return
		}
		u := m.GetUUID()
		t.Logf("%6d %x clock=%d flags=%d key=%s", begin, u.ProducerID(), u.Clock(), u.Flags(), m.(*countMsg).Key)
	}
}

var relayKills = flag.Int("relay.kills", 3, "kills of TestRelayExactlyOnce")
