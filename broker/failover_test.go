package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/protocol"
)

// readAll reads journal through b from 0 to its write head.
func (c *cluster) readAll(b *testBroker, journal string) []byte {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := readToHead(b, journal)
		if err == nil {
			return got
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("reading %s through %s: %v", journal, b.name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readToHead(b *testBroker, journal string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := protocol.NewJournalClient(b.conn).Read(ctx, &protocol.ReadRequest{Journal: journal})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		} else if err != nil {
			return nil, err
		}
		switch {
		case resp.Status == protocol.Status_OFFSET_NOT_YET_AVAILABLE:
			return out.Bytes(), nil
		case resp.Status != protocol.Status_OK:
			return nil, fmt.Errorf("status %s", resp.Status)
		case len(resp.Content) == 0:
			if resp.Offset != int64(out.Len()) {
				return nil, fmt.Errorf("read jumped from %d to %d", out.Len(), resp.Offset)
			}
		case resp.Offset != int64(out.Len()):
			return nil, fmt.Errorf("content at %d, want %d", resp.Offset, out.Len())
		default:
			out.Write(resp.Content)
		}
	}
}

type acked struct {
	record     string
	begin, end int64
}

// Concurrent writers append to a journal replicated three ways while one
// broker is killed and another joins. Every acknowledged append reads back
// exactly where it was acknowledged, once, in each writer's order; records
// whose appends failed may appear, but only whole.
func TestFailoverKeepsEveryAcknowledgedAppend(t *testing.T) {
	for _, victim := range []string{"a replica", "the primary"} {
		t.Run(victim, func(t *testing.T) { testFailover(t, victim == "the primary") })
	}
}

func testFailover(t *testing.T, killPrimary bool) {
	c := newCluster(t)
	c.start("b1", "")
	c.start("b2", "")
	c.start("b3", "")
	c.journal(c.brokers["b1"], "logs/failover", 3)
	c.appendRetry(c.brokers["b1"], "logs/failover", []byte("start\n"))
	route := c.awaitRoute(c.brokers["b1"], "logs/failover", 3)
	victim := c.brokers[route.Members[1].Suffix]
	if killPrimary {
		victim = c.brokers[route.Members[0].Suffix]
	}
	var survivors []*testBroker
	for _, b := range c.brokers {
		if b != victim {
			survivors = append(survivors, b)
		}
	}

	w := startWriters(t, "logs/failover", survivors, 4)
	w.await(t, 50)
	c.stop(victim)
	w.await(t, 150)
	joined := c.start("b4", "")
	w.await(t, 300)
	ok, failed := w.stop()
	c.appendRetry(joined, "logs/failover", []byte("end\n")) // Synchronizes every replica (see testPartitioned).

	content := c.readAll(joined, "logs/failover")
	for _, b := range survivors {
		if again := c.readAll(b, "logs/failover"); !bytes.Equal(content, again) {
			t.Fatalf("brokers b4 and %s read different content (%d and %d bytes)", b.name, len(content), len(again))
		}
	}
	checkRecords(t, content, ok, failed)
	t.Logf("%d appends acknowledged, %d failed, %d bytes", len(ok), len(failed), len(content))
}

func checkRecords(t *testing.T, content []byte, ok []acked, failed map[string]bool) {
	t.Helper()
	seen := map[string]int{}
	for _, line := range strings.SplitAfter(string(content), "\n") {
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, "\n") || (line != "start\n" && line != "end\n" && len(line) != len("w0-00000\n")) {
			t.Fatalf("torn record %q", line)
		}
		seen[line]++
	}
	last := map[byte]int64{}
	for _, a := range ok {
		if a.end > int64(len(content)) || string(content[a.begin:a.end]) != a.record {
			t.Fatalf("acknowledged %q at [%d, %d) not found there", a.record, a.begin, a.end)
		}
		if seen[a.record] != 1 {
			t.Fatalf("acknowledged %q appears %d times", a.record, seen[a.record])
		}
		w := a.record[1]
		if a.begin < last[w] {
			t.Fatalf("writer %c's %q at %d precedes its earlier append at %d", w, a.record, a.begin, last[w])
		}
		last[w] = a.begin
	}
	for rec, n := range seen {
		if rec == "start\n" || rec == "end\n" {
			continue // Markers, appended with retries: at least once.
		}
		if n > 1 {
			t.Fatalf("record %q appears %d times", rec, n)
		}
		if !failed[rec] && !acknowledged(ok, rec) {
			t.Fatalf("record %q was never appended", rec)
		}
	}
}

func acknowledged(ok []acked, rec string) bool {
	for _, a := range ok {
		if a.record == rec {
			return true
		}
	}
	return false
}

// awaitMembers waits until b sees n brokers announced.
func (c *cluster) awaitMembers(b *testBroker, n int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if state, _ := b.srv.resolver.snapshot(); state != nil && len(state.Members) == n {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("broker %s never saw %d brokers", b.name, n)
		}
		time.Sleep(10 * time.Millisecond) // Polling the brokers' announcements.
	}
}

// awaitRoute waits until b's route of journal has n brokers.
func (c *cluster) awaitRoute(b *testBroker, journal string, n int) *protocol.Route {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, route, _ := b.srv.resolver.resolve(journal)
		if len(route.Members) == n {
			return route
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("route of %s has %d brokers, want %d", journal, len(route.Members), n)
		}
		time.Sleep(10 * time.Millisecond) // Polling the allocator's progress.
	}
}
