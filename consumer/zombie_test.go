package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// gated is the counter, whose FinalizeTxn waits at a gate once armed.
type gated struct {
	counter
	armed   chan struct{} // closed to arm the gate
	reached chan struct{} // closed when a transaction waits at the gate
	release chan struct{} // closed to let it go on
}

func (g *gated) FinalizeTxn(sh *consumer.Shard, st store.Store) error {
	select {
	case <-g.armed:
		close(g.reached)
		<-g.release
	default:
	}
	return nil
}

// TestZombiePrimaryIsFenced: a primary that no longer holds its shard but
// does not know it (a zombie) cannot commit once its successor began
// recovery, and none of its effects appear.
//
// The zombie is a process of another fleet (another etcd prefix) serving
// the same shard spec, so that nothing tells it of its successor: its
// view says it is primary, as a partitioned process's would.
func TestZombiePrimaryIsFenced(t *testing.T) {
	zombieApp := &gated{armed: make(chan struct{}), reached: make(chan struct{}), release: make(chan struct{})}
	c := newCluster(t, counter{})
	zombies, z, spec := zombieOf(t, c, zombieApp)

	p := c.publisher()
	p.publish(t, "counts/in-0", &countMsg{Key: "a"}, &countMsg{Key: "a"})
	// The zombie-to-be counts them and commits.
	statOf(t, zombies.Client(z), spec.ID, p.ends)

	// Its next transaction waits at the gate, holding a count of "a".
	close(zombieApp.armed)
	p.publish(t, "counts/in-0", &countMsg{Key: "a"})
	<-zombieApp.reached

	// The successor recovers the shard, fencing the zombie, and counts
	// on from the zombie's last commit.
	c.fleet.Start("c1", "zb")
	c.applySpecs(spec)
	c.stat(spec.ID, p.ends)

	// The zombie now tries to commit: it is refused, and fails.
	close(zombieApp.release)
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err := zombies.Client(z).List(context.Background(), &protocol.ShardListRequest{})
		if err == nil && len(list.Shards) == 1 && list.Shards[0].Status.GetCode() == protocol.ReplicaCode_FAILED {
			if e := list.Shards[0].Status.Error; !strings.Contains(e, "fenced") {
				t.Errorf("zombie's error %q does not say it was fenced", e)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the zombie did not fail: %v %v", list, err)
		}
		time.Sleep(20 * time.Millisecond) // Polling the zombie's status.
	}
	p.publish(t, "counts/in-0", &countMsg{Key: "a"})
	c.stat(spec.ID, p.ends)
	if got := c.counts(spec.ID, "a")["a"]; got != 4 {
		t.Errorf("count of a = %d, want 4 (each message once; nothing of the zombie's)", got)
	}
}

// statOf waits until a fleet's shard read through readThrough.
func statOf(t *testing.T, sc protocol.ShardClient, shard string, readThrough map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := sc.Stat(ctx, &protocol.ShardStatRequest{Shard: shard, ReadThrough: readThrough})
		if err == nil && resp.Status == protocol.Status_OK {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("stat of %s: %v %v", shard, resp, err)
		}
		time.Sleep(20 * time.Millisecond) // The shard is starting.
	}
}

// A successor whose takeover of the recovery log meets the appends of a
// zombie still committing (cut off from etcd, it commits until it finds
// its lease gone) keeps trying, and takes the shard over once the zombie
// stops, counting on from the zombie's last commit. (Found by the soak's
// long form: the takeover gave up after ten tries, in two seconds, and
// failed the shard.)
func TestTakeOverOutlastsAZombieStillCommitting(t *testing.T) {
	c := newCluster(t, counter{})
	zombies, z, spec := zombieOf(t, c, counter{})
	p := c.publisher()
	p.publish(t, "counts/in-0", &countMsg{Key: "a"})
	statOf(t, zombies.Client(z), spec.ID, p.ends)

	// Before each of the successor's first dozen attempts, the zombie
	// commits once more, moving the log past what the successor played.
	// The hook runs on the successor's goroutine; done tells the test
	// that the last of those commits is in.
	const zombieCommits = 12
	done := make(chan struct{})
	reset := consumer.SetTakeOverHook(func(shard string, attempt int) {
		if shard == spec.ID && attempt <= zombieCommits {
			p.publish(t, "counts/in-0", &countMsg{Key: "a"})
			statOf(t, zombies.Client(z), spec.ID, p.endsNow())
			if attempt == zombieCommits {
				close(done)
			}
		}
	})
	defer reset()
	c.fleet.Start("c1", "zb")
	c.applySpecs(spec)
	<-done
	c.stat(spec.ID, p.endsNow())
	if got := c.counts(spec.ID, "a")["a"]; got != 1+zombieCommits {
		t.Errorf("count of a = %d, want %d (each message once)", got, 1+zombieCommits)
	}
}

// zombieOf starts a process of another fleet (another etcd prefix) running
// app, and gives it shard counts/shard-0 of c, so that nothing tells it of
// a successor in c's fleet.
func zombieOf(t *testing.T, c *cluster, app consumer.Application) (*consumertest.Fleet, *consumertest.Process, *consumer.ShardSpec) {
	t.Helper()
	zombies := consumertest.New(t, c.brokers.Etcd, c.journals, strings.TrimSuffix(c.root, "/")+"-zombie/", app)
	z := zombies.Start("z1", "za")
	spec := c.shardSpec("counts/shard-0", 0, "counts/in-0")
	c.brokers.Journals(c.journals, 3, "counts/in-0", spec.RecoveryLog())
	raw, err := consumer.MarshalShardSpec(spec.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := zombies.Client(z).Apply(context.Background(), &protocol.ShardApplyRequest{
		Changes: []*protocol.ShardApplyRequest_Change{{Upsert: raw}}}); err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("apply: %v %v", resp, err)
	}
	return zombies, z, spec
}
