package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/protocol"
)

// Every process of an application may create its journals and shards at
// start: together, they create each once, and later calls create nothing
// and change nothing.
func TestCreateMissingCreatesEachOnce(t *testing.T) {
	c := newClusterTB(t, counter{}, 1)
	p := c.fleet.Start("p1", "za")
	shards := c.fleet.Client(p)
	var js []*protocol.JournalSpec
	var ss []*consumer.ShardSpec
	for n := range 3 {
		spec := c.shardSpec(fmt.Sprintf("setup/shard-%d", n), 0, fmt.Sprintf("setup/in/part-%d", n))
		ss = append(ss, spec)
		js = append(js, &protocol.JournalSpec{Name: spec.Sources[0].Journal, Replication: 1},
			&protocol.JournalSpec{Name: spec.RecoveryLog(), Replication: 1})
	}
	// One exists already, as an operator made it: it is left as it is.
	c.journals.Apply(context.Background(), &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Upsert: &protocol.JournalSpec{Name: js[0].Name, Replication: 1, Labels: []*protocol.Label{{Name: "made-by", Value: "operator"}}}}}})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const callers = 4
	var mu sync.Mutex
	var created []string
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			got, err := consumer.CreateMissing(ctx, c.journals, shards, js, ss)
			if err != nil {
				t.Errorf("CreateMissing: %v", err)
			}
			mu.Lock()
			created = append(created, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(created)
	var want []string
	for _, s := range js[1:] {
		want = append(want, s.Name)
	}
	for _, s := range ss {
		want = append(want, s.ID)
	}
	slices.Sort(want)
	if !slices.Equal(created, want) {
		t.Fatalf("%d callers created %q, want each of %q once", callers, created, want)
	}
	list, err := c.journals.ListAll(ctx, "name="+js[0].Name)
	if err != nil || len(list) != 1 || len(list[0].Spec.Labels) != 1 {
		t.Fatalf("the existing journal is now %v (%v), want it as the operator made it", list, err)
	}
	if again, err := consumer.CreateMissing(ctx, c.journals, shards, js, ss); err != nil || len(again) != 0 {
		t.Fatalf("a later call created %q: %v", again, err)
	}
}
