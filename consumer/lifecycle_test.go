package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// flaky is the counter, failing on messages that ask to while failing is
// set, and recording when each transaction finished.
type flaky struct {
	counter
	failing atomic.Bool
	mu      sync.Mutex
	commits map[string][]time.Time
}

func (f *flaky) Consume(sh *consumer.Shard, st store.Store, env consumer.Envelope) error {
	m := env.Message.(*countMsg)
	if m.Fail && !f.failing.Load() {
		m.Fail = false
	}
	return f.counter.Consume(sh, st, env)
}

func (f *flaky) FinishedTxn(sh *consumer.Shard, _ store.Store, err error) {
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits[sh.ID()] = append(f.commits[sh.ID()], time.Now())
}

// shardStatus returns a shard's combined status, as List reports it.
func (c *cluster) shardStatus(shard string) *protocol.ReplicaStatus {
	for _, p := range c.fleet.Procs {
		resp, err := c.fleet.Client(p).List(context.Background(), &protocol.ShardListRequest{Selector: "id=" + shard})
		if err != nil || len(resp.Shards) != 1 {
			c.t.Fatalf("listing %s: %v %v", shard, resp, err)
		}
		return resp.Shards[0].Status
	}
	return nil
}

func (c *cluster) awaitStatus(shard string, code protocol.ReplicaCode) *protocol.ReplicaStatus {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if st := c.shardStatus(shard); st.GetCode() == code {
			return st
		}
		time.Sleep(20 * time.Millisecond) // Polling the replicas' progress.
	}
	c.t.Fatalf("shard %s is not %s: %v", shard, code, c.shardStatus(shard))
	return nil
}

// TestFailedShardAndUnassign: an application error fails its shard, with
// the error in its status, while the process's other shards go on; once
// the cause is gone, unassigning the failed shard recovers it, and nothing
// is counted twice.
func TestFailedShardAndUnassign(t *testing.T) {
	app := &flaky{commits: map[string][]time.Time{}}
	app.failing.Store(true)
	c := newCluster(t, app)
	c1 := c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("counts/shard-0", 0, "counts/in-0"), c.shardSpec("counts/shard-1", 0, "counts/in-1"))
	p := c.publisher()
	p.publish(t, "counts/in-0", &countMsg{Key: "a"}, &countMsg{Key: "a"})
	c.stat("counts/shard-0", p.ends)
	p.publish(t, "counts/in-0", &countMsg{Key: "a"}, &countMsg{Key: "b", Fail: true}, &countMsg{Key: "a"})

	st := c.awaitStatus("counts/shard-0", protocol.ReplicaCode_FAILED)
	if !strings.Contains(st.Error, "asks to fail") || !strings.Contains(st.Error, "counts/in-0") {
		t.Errorf("FAILED status error = %q; want the application's error, naming the journal", st.Error)
	}
	// The other shard keeps working.
	p.publish(t, "counts/in-1", &countMsg{Key: "x"})
	c.stat("counts/shard-1", map[string]int64{"counts/in-1": p.ends["counts/in-1"]})

	sc := c.fleet.Client(c1)
	ctx := context.Background()
	dry, err := sc.Unassign(ctx, &protocol.UnassignRequest{OnlyFailed: true, DryRun: true})
	if err != nil || !slices.Equal(dry.Shards, []string{"counts/shard-0"}) {
		t.Fatalf("dry-run unassign: %v %v; want counts/shard-0", dry, err)
	}
	if st := c.shardStatus("counts/shard-0"); st.Code != protocol.ReplicaCode_FAILED {
		t.Fatalf("a dry run changed the shard: %v", st)
	}
	app.failing.Store(false)
	if resp, err := sc.Unassign(ctx, &protocol.UnassignRequest{OnlyFailed: true}); err != nil || len(resp.Shards) != 1 {
		t.Fatalf("unassign: %v %v", resp, err)
	}
	c.stat("counts/shard-0", map[string]int64{"counts/in-0": p.ends["counts/in-0"]})
	got := c.counts("counts/shard-0", "a", "b")
	if got["a"] != 4 || got["b"] != 1 {
		t.Errorf("counts after recovery = %v, want a:4 b:1", got)
	}
}

// TestFailedShardRestarts: with UnassignFailedAfter, a FAILED replica is
// unassigned by its process after that long, and the shard restarts on
// its own; once the cause is gone it processes on, and nothing is counted
// twice.
func TestFailedShardRestarts(t *testing.T) {
	app := &flaky{commits: map[string][]time.Time{}}
	app.failing.Store(true)
	c := newCluster(t, app)
	c.fleet.Configure = func(cfg *consumer.Config) { cfg.UnassignFailedAfter = 300 * time.Millisecond }
	c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("counts/shard-0", 0, "counts/in-0"))
	p := c.publisher()
	p.publish(t, "counts/in-0", &countMsg{Key: "a"}, &countMsg{Key: "b", Fail: true}, &countMsg{Key: "a"})
	c.awaitStatus("counts/shard-0", protocol.ReplicaCode_FAILED)
	app.failing.Store(false)
	// No operator: the process unassigns the replica, and the allocator
	// assigns the shard afresh.
	c.stat("counts/shard-0", map[string]int64{"counts/in-0": p.ends["counts/in-0"]})
	got := c.counts("counts/shard-0", "a", "b")
	if got["a"] != 2 || got["b"] != 1 {
		t.Errorf("counts after the restart = %v, want a:2 b:1", got)
	}
}

// TestDrainHandsOff stops a primary's process gracefully while producers
// publish: its shards move to their standbys, nothing is counted twice or
// lost, and the processing gap is logged.
func TestDrainHandsOff(t *testing.T) {
	app := &flaky{commits: map[string][]time.Time{}}
	c := newCluster(t, app)
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	c.fleet.Start("c3", "za")
	shard := "counts/shard-0"
	c.apply(c.shardSpec(shard, 1, "counts/in-0"))
	c.awaitStatus(shard, protocol.ReplicaCode_PRIMARY)
	primary := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)

	p := c.publisher()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var published atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			p.publish(t, "counts/in-0", &countMsg{Key: "k"})
			published.Add(1)
		}
	}()
	time.Sleep(300 * time.Millisecond) // Let processing run before the drain.
	drainAt := time.Now()
	if err := c.fleet.Drain(primary); err != nil {
		t.Fatalf("drain: %v", err)
	}
	t.Logf("drain of %s took %v", primary.Name, time.Since(drainAt))
	time.Sleep(300 * time.Millisecond) // And after it.
	close(stop)
	wg.Wait()

	c.stat(shard, p.ends)
	if got := c.counts(shard, "k")["k"]; got != uint64(published.Load()) {
		t.Errorf("count = %d, want %d", got, published.Load())
	}
	app.mu.Lock()
	defer app.mu.Unlock()
	var gap time.Duration
	ts := app.commits[shard]
	for i := 1; i < len(ts); i++ {
		if ts[i].After(drainAt) {
			gap = max(gap, ts[i].Sub(ts[i-1]))
		}
	}
	t.Logf("longest gap between commits after the drain began: %v (%d commits)", gap, len(ts))
}

// TestBadRequests: malformed specs and requests are refused with the field
// named, and change nothing.
func TestBadRequests(t *testing.T) {
	c := newCluster(t, counter{})
	p := c.fleet.Start("c1", "za")
	sc := c.fleet.Client(p)
	ctx := context.Background()
	good := func(id string) []byte {
		raw, err := consumer.MarshalShardSpec(c.shardSpec(id, 0, "counts/in-0").WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	for _, tc := range []struct {
		name    string
		changes []*protocol.ShardApplyRequest_Change
		want    string
	}{
		{"none", nil, "changes: none given"},
		{"both", []*protocol.ShardApplyRequest_Change{{Upsert: good("a"), Delete: "a"}}, "exactly one of upsert and delete"},
		{"bad json", []*protocol.ShardApplyRequest_Change{{Upsert: []byte(`{"id":`)}}, "changes[0]: upsert"},
		{"no sources", []*protocol.ShardApplyRequest_Change{{Upsert: []byte(`{"id":"a"}`)}}, "sources"},
		{"standbys", []*protocol.ShardApplyRequest_Change{{Upsert: []byte(`{"id":"a","sources":[{"journal":"x"}],"hotStandbys":99}`)}}, "hotStandbys"},
		{"bad id", []*protocol.ShardApplyRequest_Change{{Delete: "a//b"}}, "changes[0]: delete"},
		{"twice", []*protocol.ShardApplyRequest_Change{{Upsert: good("a")}, {Delete: "a"}}, "changed twice"},
		{"negative revision", []*protocol.ShardApplyRequest_Change{{Upsert: good("a"), ExpectModRevision: -1}}, "expectModRevision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sc.Apply(ctx, &protocol.ShardApplyRequest{Changes: tc.changes})
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply: %v; want InvalidArgument naming %q", err, tc.want)
			}
		})
	}
	// A stale revision is refused as a whole.
	resp, err := sc.Apply(ctx, &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{
		{Upsert: good("b")}, {Upsert: good("c"), ExpectModRevision: 12345}}})
	if err != nil || resp.Status != protocol.Status_REVISION_MISMATCH {
		t.Errorf("Apply with a stale revision: %v %v; want REVISION_MISMATCH", resp, err)
	}
	if list, err := sc.List(ctx, &protocol.ShardListRequest{}); err != nil || len(list.Shards) != 0 {
		t.Errorf("refused applies changed shards: %v %v", list, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"list selector", func() error {
			_, err := sc.List(ctx, &protocol.ShardListRequest{Selector: "a in (b"})
			return err
		}, "selector"},
		{"stat shard", func() error {
			_, err := sc.Stat(ctx, &protocol.ShardStatRequest{Shard: "/x"})
			return err
		}, "shard"},
		{"stat offset", func() error {
			_, err := sc.Stat(ctx, &protocol.ShardStatRequest{Shard: "x", ReadThrough: map[string]int64{"j": -2}})
			return err
		}, "readThrough[j]"},
		{"hints shard", func() error {
			_, err := sc.GetHints(ctx, &protocol.GetHintsRequest{Shard: ""})
			return err
		}, "shard"},
		{"unassign shard", func() error {
			_, err := sc.Unassign(ctx, &protocol.UnassignRequest{Shards: []string{"ok", "bad//"}})
			return err
		}, "shards[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v; want InvalidArgument naming %q", err, tc.want)
			}
		})
	}
	if resp, err := sc.Stat(ctx, &protocol.ShardStatRequest{Shard: "missing"}); err != nil || resp.Status != protocol.Status_SHARD_NOT_FOUND {
		t.Errorf("Stat of a missing shard: %v %v; want SHARD_NOT_FOUND", resp, err)
	}
	ur, err := sc.Unassign(ctx, &protocol.UnassignRequest{Shards: []string{"missing", "also-missing"}})
	if err != nil || ur.Status != protocol.Status_SHARD_NOT_FOUND || !slices.Equal(ur.Shards, []string{"also-missing", "missing"}) {
		t.Errorf("Unassign of missing shards: %v %v; want SHARD_NOT_FOUND naming both", ur, err)
	}
	_ = fmt.Sprint
}
