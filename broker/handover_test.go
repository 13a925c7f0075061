package broker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A replica that is no longer its journal's primary builds no pipeline,
// even for an append that acquired it before the route moved on: it
// answers at once, so that the writer goes to the new primary. Before,
// it built a pipeline on the new route as if it were primary, holding
// its replica while it waited for a peer that the new primary's pipeline
// held, and the new primary waited for it: the drain that moved the
// journal stalled until its timeout (the soak's long form, seed 16,
// cycle 148: appends to a journal stopped for 20 s while a broker
// drained).
func TestNoPipelineOnceNoLongerPrimary(t *testing.T) {
	c := newCluster(t)
	const journal = "handover/j"
	primary, second, _ := c.threeReplicas(journal)
	r, _ := second.srv.resolver.replica(journal)
	if r == nil {
		t.Fatalf("%s holds no replica of %s", second.name, journal)
	}
	// The primary's pipeline holds the replica's token, as it would hold
	// it on the old primary in the stall; this replica never was primary,
	// so its pipeline is nil and the call touches nothing the holder uses.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := r.ensurePipeline(ctx)
	if !errors.Is(err, errNotPrimary) {
		t.Fatalf("ensurePipeline at %s, not the primary (%s): %v after %s, want errNotPrimary at once",
			second.name, primary.name, err, time.Since(start).Round(time.Millisecond))
	}
	// The journal still takes appends through its primary meanwhile.
	c.appendRetry(primary, journal, []byte("b\n"))
}
