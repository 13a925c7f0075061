package allocator

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// logLines is a JSON log that tests read back.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// records returns the records logged so far.
func (l *logLines) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// The leader logs each round that changes assignments at info, with its
// counts, and nothing for rounds that change nothing.
func TestRoundsThatChangeAssignmentsAreLogged(t *testing.T) {
	f := newFleet(t)
	var log logLines
	f.logger = slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	f.join("z1", "m1", 10)
	f.join("z2", "m2", 10)
	f.items(3, 2)
	f.awaitConverged()
	f.awaitIdle()

	added := 0
	for _, r := range log.records(t) {
		if r["msg"] != "leader changed assignments" {
			continue
		}
		if r["level"] != "INFO" || r["member"] != "z1#m1" {
			t.Errorf("round logged as %v, want at INFO by the leader z1#m1", r)
		}
		added += int(r["added"].(float64))
	}
	if added != 6 {
		t.Errorf("rounds logged %d assignments added, want 6 (3 items × 2 replicas)", added)
	}

	// A change that moves nothing: the leader plans a round, and says
	// nothing.
	before := len(log.records(t))
	f.item("item-000", 2)
	f.awaitIdle()
	if after := log.records(t); len(after) != before {
		t.Errorf("a round that changed nothing logged %v", after[before:])
	}
}
