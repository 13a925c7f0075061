package message_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
)

// A mapping spreads messages over the journals a selector picks, the same
// key to the same journal, and journals added later join the set.
func TestModuloMappingOverLivePartitions(t *testing.T) {
	cl := brokertest.New(t)
	c := cl.Client(cl.Start("b1"))
	ctx := context.Background()
	apply := func(names ...string) {
		req := &protocol.ApplyRequest{}
		for _, n := range names {
			req.Changes = append(req.Changes, &protocol.ApplyRequest_Change{Upsert: &protocol.JournalSpec{
				Name: n, Replication: 1, Labels: []*protocol.Label{{Name: "topic", Value: "clicks"}}}})
		}
		if _, err := c.Apply(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	apply("clicks/part-0", "clicks/part-1")
	parts, err := message.NewPartitions(ctx, c, "topic=clicks", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer parts.Close()
	key := func(m message.Message) []byte { return []byte(m.(*event).Body) }
	mapping := message.ModuloMapping(key, parts)

	seen := map[string]bool{}
	for _, k := range []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"} {
		j1, err := mapping(&event{Body: k})
		if err != nil {
			t.Fatal(err)
		}
		j2, _ := mapping(&event{Body: k})
		if j1 != j2 {
			t.Fatalf("key %s mapped to %s, then %s", k, j1, j2)
		}
		seen[j1] = true
	}
	if len(seen) != 2 {
		t.Errorf("8 keys mapped to %d of 2 partitions", len(seen))
	}
	apply("clicks/part-2")
	deadline := time.Now().Add(10 * time.Second)
	for len(parts.Journals()) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("partitions %v never gained clicks/part-2", parts.Journals())
		}
		time.Sleep(10 * time.Millisecond) // Polling the partitions' refresh.
	}

	empty, err := message.NewPartitions(ctx, c, "topic=none", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if _, err := message.ModuloMapping(key, empty)(&event{Body: "x"}); !errors.Is(err, message.ErrNoPartitions) {
		t.Errorf("mapping over no partitions: %v, want ErrNoPartitions", err)
	}
}
