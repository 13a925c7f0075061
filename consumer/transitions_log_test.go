package consumer_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/protocol"
)

// jsonLog is a JSON log, shared by a fleet's processes, that tests read
// back.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jsonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *jsonLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// messages returns the messages that process logged at info about shard,
// in order.
func (l *jsonLog) messages(t *testing.T, process, shard string) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["level"] == "INFO" && r["consumer"] == process && r["shard"] == shard {
			out = append(out, r["msg"].(string))
		}
	}
	return out
}

// Each replica transition of a failover is logged at info, naming the
// shard and the process: an operator sees it without watching etcd.
func TestReplicaTransitionsAreLogged(t *testing.T) {
	c := newCluster(t, counter{})
	var log jsonLog
	logger := slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))
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

	oldLog := log.messages(t, old.Zone+"#"+old.Name, shard)
	if !slices.Contains(oldLog, "shard primary serving") || oldLog[len(oldLog)-1] != "shard primary stopped" {
		t.Errorf("the killed primary %s logged %q, want its serving and, last, its stop", old.Name, oldLog)
	}
	want := []string{"shard standby started", "recovery log played to its write head",
		"shard standby ready: tailing the recovery log", "shard standby promoted to primary", "shard primary serving"}
	if got := log.messages(t, standby.Zone+"#"+standby.Name, shard); !slices.Equal(got, want) {
		t.Errorf("the standby %s logged %q, want %q", standby.Name, got, want)
	}
}
