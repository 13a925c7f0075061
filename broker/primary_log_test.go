package broker

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/quire-dev/quire/internal/logtest"
)

// primaryChanges returns what broker logged at info of being journal's
// primary, in order.
func primaryChanges(t *testing.T, log *logtest.Log, broker, journal string) []string {
	t.Helper()
	var out []string
	for _, r := range log.Records(t, logtest.Record{"level": "INFO", "broker": broker, "journal": journal}) {
		if strings.HasSuffix(r.Msg(), "the journal's primary") {
			out = append(out, r.Msg())
		}
	}
	return out
}

// A broker logs at info when it becomes a journal's primary, as when it
// takes over from one that died.
func TestPrimaryChangesAreLogged(t *testing.T) {
	c := newCluster(t)
	var log logtest.Log
	logger := log.Logger(slog.LevelInfo)
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
	if got := primaryChanges(t, &log, name(primary), journal); len(got) == 0 || got[len(got)-1] != "serving as the journal's primary" {
		t.Errorf("primary %s logged %q", primary.name, got)
	}
	c.stop(primary)
	c.appendRetry(survivor, journal, []byte("after\n")) // Once the survivor serves as primary.
	if got := primaryChanges(t, &log, name(survivor), journal); len(got) == 0 || got[len(got)-1] != "serving as the journal's primary" {
		t.Errorf("survivor %s logged %q after the primary died, want that it serves as primary", survivor.name, got)
	}
}
