package broker

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// jsonLog is a JSON log, shared by brokers, that tests read back.
type jsonLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *jsonLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// primaryChanges returns what broker logged at info of being journal's
// primary, in order.
func (l *jsonLog) primaryChanges(t *testing.T, broker, journal string) []string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := r["msg"].(string); r["level"] == "INFO" && r["broker"] == broker && r["journal"] == journal &&
			strings.HasSuffix(msg, "the journal's primary") {
			out = append(out, msg)
		}
	}
	return out
}

// A broker logs at info when it becomes a journal's primary, as when it
// takes over from one that died.
func TestPrimaryChangesAreLogged(t *testing.T) {
	c := newCluster(t)
	var log jsonLog
	logger := slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	withLog := func(cfg *Config) { cfg.Logger = logger }
	b1 := c.startWith("b1", "", c.etcd, withLog)
	b2 := c.startWith("b2", "", c.etcd, withLog)
	const journal = "logged/j"
	c.journal(b1, journal, 2)
	c.appendRetry(b1, journal, []byte("before\n"))
	route := c.awaitRoute(b1, journal, 2)
	primary, survivor := b1, b2
	if route.Members[0].Suffix == "b2" {
		primary, survivor = b2, b1
	}
	name := func(b *testBroker) string { return b.srv.cfg.Zone + "#" + b.srv.cfg.Suffix }
	if got := log.primaryChanges(t, name(primary), journal); len(got) == 0 || got[len(got)-1] != "serving as the journal's primary" {
		t.Errorf("primary %s logged %q", primary.name, got)
	}
	c.stop(primary)
	c.appendRetry(survivor, journal, []byte("after\n")) // Once the survivor serves as primary.
	if got := log.primaryChanges(t, name(survivor), journal); len(got) == 0 || got[len(got)-1] != "serving as the journal's primary" {
		t.Errorf("survivor %s logged %q after the primary died, want that it serves as primary", survivor.name, got)
	}
}
