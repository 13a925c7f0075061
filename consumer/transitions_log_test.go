package consumer_test

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/logtest"
	"github.com/quire-dev/quire/protocol"
)

// messages returns the messages that process logged at info about shard,
// in order.
func messages(t *testing.T, log *logtest.Log, process, shard string) []string {
	t.Helper()
	var out []string
	for _, r := range log.Records(t, logtest.Record{"level": "INFO", "consumer": process, "shard": shard}) {
		out = append(out, r.Msg())
	}
	return out
}

// Each replica transition of a failover is logged at info, naming the
// shard and the process: an operator sees it without watching etcd.
func TestReplicaTransitionsAreLogged(t *testing.T) {
	c := newCluster(t, counter{})
	var log logtest.Log
	logger := log.Logger(slog.LevelInfo)
	c.fleet.Configure = func(cfg *consumer.Config) { cfg.Logger = logger }
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	const shard = "logged/shard-0"
	c.apply(c.shardSpec(shard, 1, "logged/in-0"))
	old := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
	c.awaitStandby(shard)
	c.fleet.Kill(old)
	standby := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
	if standby == old {
		t.Fatalf("%s is primary again after it was killed", old.Name)
	}

	oldLog := messages(t, &log, old.Zone+"#"+old.Name, shard)
	if !slices.Contains(oldLog, "shard primary serving") || oldLog[len(oldLog)-1] != "shard primary stopped" {
		t.Errorf("the killed primary %s logged %q, want its serving and, last, its stop", old.Name, oldLog)
	}
	want := []string{"shard standby started", "recovery log played to its write head",
		"shard standby ready: tailing the recovery log", "shard standby promoted to primary", "shard primary serving"}
	if got := messages(t, &log, standby.Zone+"#"+standby.Name, shard); !slices.Equal(got, want) {
		t.Errorf("the standby %s logged %q, want %q", standby.Name, got, want)
	}
}
