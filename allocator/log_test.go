package allocator

import (
	"log/slog"
	"testing"

	"github.com/quire-dev/quire/internal/logtest"
)

// The leader logs each round that changes assignments at info, with its
// counts, and nothing for rounds that change nothing.
func TestRoundsThatChangeAssignmentsAreLogged(t *testing.T) {
	f := newFleet(t)
	var log logtest.Log
	f.logger = log.Logger(slog.LevelInfo)
	f.join("z1", "m1", 10)
	f.join("z2", "m2", 10)
	f.items(3, 2)
	f.awaitConverged()
	f.awaitIdle()

	added := 0
	for _, r := range log.Records(t, nil) {
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
	before := len(log.Records(t, nil))
	f.item("item-000", 2)
	f.awaitIdle()
	if after := log.Records(t, nil); len(after) != before {
		t.Errorf("a round that changed nothing logged %v", after[before:])
	}
}
