package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/etcdtest"
)

// decodeErrors is how many values keyspaces of this process failed to
// decode so far.
func decodeErrors(t *testing.T) float64 {
	return counterValue(t, "quire_keyspace_decode_errors_total")
}

// counterValue is the value of this process's counter name (one without
// labels), or zero if it is not registered.
func counterValue(t testing.TB, name string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// livePlan plans the live fleet under prefix, as JSON.
func livePlan(t *testing.T, prefix string, args ...string) allocator.Plan {
	t.Helper()
	out, err := run(t, append([]string{"allocator", "plan", "--etcd", etcdtest.Shared(t).Endpoint(), "--prefix", prefix, "-o", "json"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var plan allocator.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// The what-if planner reads real fleets: the brokers and their journals,
// and a consumer application's processes and shards, every value decoded
// (none logged as not decoding), planning every replica they want.
func TestPlanRealFleets(t *testing.T) {
	c := startShardsCluster(t)
	must(t, c.broker, strings.NewReader(shardsTestJournals), "journals", "apply", "-f", "-")
	c.must(strings.NewReader(shardsTestFile(c.root, 0)), "apply", "-f", "-")

	before := decodeErrors(t)
	brokersRoot := strings.TrimSuffix(c.root, "-consumers/") + "/"
	brokers := livePlan(t, brokersRoot)
	if brokers.Stats.DesiredSlots != 4 || brokers.Stats.AssignedSlots != 4 || len(brokers.Assignments) != 4 {
		t.Errorf("brokers' plan: %+v, want the 4 journals' replicas", brokers.Stats)
	}
	// shard-0 has a standby, shard-1 none; two processes hold them.
	shards := livePlan(t, c.root)
	if shards.Stats.DesiredSlots != 3 || shards.Stats.AssignedSlots != 3 {
		t.Errorf("consumers' plan: %+v, want shard-0's primary and standby and shard-1's primary", shards.Stats)
	}
	if again := livePlan(t, c.root, "--fleet", "consumers"); again.Stats.DesiredSlots != shards.Stats.DesiredSlots {
		t.Errorf("--fleet consumers planned %+v, auto %+v", again.Stats, shards.Stats)
	}
	if n := decodeErrors(t) - before; n != 0 {
		t.Errorf("planning real fleets logged %v values that do not decode", n)
	}
	if _, err := run(t, "allocator", "plan", "--etcd", etcdtest.Shared(t).Endpoint(), "--prefix", c.root, "--fleet", "journals"); !errors.As(err, new(usageError)) {
		t.Errorf("--fleet journals: %v, want a usage error", err)
	}
}
