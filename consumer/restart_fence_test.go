package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// renameGate is a vfs.FS whose next Rename, once armed, waits at a gate.
type renameGate struct {
	vfs.FS
	g *gateState
}

type gateState struct {
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	release chan struct{}
}

func (f renameGate) Rename(oldname, newname string) error {
	f.g.mu.Lock()
	armed := f.g.armed
	f.g.armed = false
	f.g.mu.Unlock()
	if armed {
		close(f.g.reached)
		<-f.g.release
	}
	return f.FS.Rename(oldname, newname)
}

// fenceApp counts into a JSONFile store; it records each shard replica's
// commits (as the framework judges them: the store's result, then the
// recorder's soundness), and holds every replica but the first one's
// FinalizeTxn until told.
type fenceApp struct {
	jsonCounter
	g *gateState

	mu        sync.Mutex
	first     *consumer.Shard
	newStores chan *consumer.Shard
	oldCommit chan error    // the first replica's commit that passed the gate
	holdNew   chan struct{} // closed to let later replicas commit
	oldDone   chan struct{} // closed to let later replicas open their store
}

type fenceStore struct {
	*store.JSONFile[map[string]uint64]
	sh    *consumer.Shard
	app   *fenceApp
	gated bool
}

func (s *fenceStore) StartCommit(ctx context.Context, cp store.Checkpoint) error {
	err := s.JSONFile.StartCommit(ctx, cp)
	if err == nil {
		err = s.sh.Recorder().Err() // What the framework checks next.
	}
	s.app.mu.Lock()
	isFirst := s.sh == s.app.first
	s.app.mu.Unlock()
	if isFirst && s.gated {
		s.app.oldCommit <- err
		s.gated = false
	}
	return err
}

func (a *fenceApp) NewStore(sh *consumer.Shard) (store.Store, error) {
	a.mu.Lock()
	later := a.first != nil
	a.mu.Unlock()
	if later {
		// The successor has taken over the log: let the test finish the
		// predecessor's commit before the successor goes on.
		a.newStores <- sh
		<-a.oldDone
	}
	st, err := store.OpenJSONFile[map[string]uint64](renameGate{sh.FS(), a.g}, sh.Dir())
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.first == nil {
		a.first = sh
	}
	a.mu.Unlock()
	if !later {
		a.newStores <- sh
	}
	return &fenceStore{JSONFile: st, sh: sh, app: a}, nil
}

func (a *fenceApp) Consume(sh *consumer.Shard, st store.Store, env consumer.Envelope) error {
	fs := st.(*fenceStore)
	a.g.mu.Lock()
	fs.gated = fs.gated || a.g.armed
	a.g.mu.Unlock()
	fs.State[env.Message.(*countMsg).Key]++
	return nil
}

func (a *fenceApp) FinalizeTxn(sh *consumer.Shard, _ store.Store) error {
	a.mu.Lock()
	isFirst := sh == a.first
	a.mu.Unlock()
	if !isFirst {
		<-a.holdNew
	}
	return nil
}

// Editing a running shard's sources restarts its primary in the same
// process, at the same assignment. The new replica takes over the
// recovery log; the old one, stopped but still finishing a commit, is
// fenced from then on. (Both recorders had the author
// ZONE.SUFFIX.CREATEREVISION, the same, so the register did not fence the
// old one: its commit landed in the log after the new primary restored
// the previous checkpoint, and the new primary failed. Found by review.)
func TestRestartedPrimaryFencesItsPredecessor(t *testing.T) {
	app := &fenceApp{g: &gateState{reached: make(chan struct{}), release: make(chan struct{})},
		newStores: make(chan *consumer.Shard, 4), oldCommit: make(chan error, 1), holdNew: make(chan struct{}), oldDone: make(chan struct{})}
	c := newCluster(t, app)
	var releaseOnce, holdOnce, oldOnce sync.Once
	t.Cleanup(func() {
		oldOnce.Do(func() { close(app.oldDone) })
		releaseOnce.Do(func() { close(app.g.release) })
		holdOnce.Do(func() { close(app.holdNew) })
	})
	c.fleet.Start("c1", "za")
	spec := c.shardSpec("counts/fence", 0, "counts/fence-in-0")
	c.brokers.Journals(c.journals, 3, "counts/fence-in-0", "counts/fence-in-1", spec.RecoveryLog())
	c.applySpecs(spec)
	<-app.newStores

	p := c.publisher()
	p.publish(t, "counts/fence-in-0", &countMsg{Key: "a"})
	c.stat(spec.ID, p.ends)

	// The next commit stops between its temporary file (synced: in the
	// log) and its rename.
	app.g.mu.Lock()
	app.g.armed = true
	app.g.mu.Unlock()
	p.publish(t, "counts/fence-in-0", &countMsg{Key: "a"})
	select {
	case <-app.g.reached:
	case <-time.After(30 * time.Second):
		t.Fatal("the commit did not reach the gate")
	}

	// A new source: the primary is restarted in place.
	spec2 := c.shardSpec("counts/fence", 0, "counts/fence-in-0", "counts/fence-in-1")
	list, err := c.shardClient().List(context.Background(), &protocol.ShardListRequest{Selector: "id=" + spec.ID})
	if err != nil || len(list.Shards) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	raw, err := consumer.MarshalShardSpec(spec2.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := c.shardClient().Apply(context.Background(), &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{
		{Upsert: raw, ExpectModRevision: list.Shards[0].ModRevision}}}); err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("apply: %v %v", resp, err)
	}
	select {
	case <-app.newStores: // The new primary took over the log and opened its store.
	case <-time.After(30 * time.Second):
		t.Fatal("no new primary")
	}

	// The old replica's commit goes on: it must be refused.
	releaseOnce.Do(func() { close(app.g.release) })
	select {
	case err = <-app.oldCommit:
	case <-time.After(30 * time.Second):
		t.Fatal("the old commit did not finish")
	}
	t.Logf("old commit: %v", err)
	if err == nil {
		t.Errorf("the stopped primary committed into the recovery log after its successor took it over")
	}
	oldOnce.Do(func() { close(app.oldDone) })
	holdOnce.Do(func() { close(app.holdNew) })
	// The successor goes on.
	p.publish(t, "counts/fence-in-0", &countMsg{Key: "a"})
	c.stat(spec.ID, p.ends)
	if st := c.shardStatus(spec.ID); st.GetCode() == protocol.ReplicaCode_FAILED {
		t.Fatalf("the successor failed: %v", st)
	}
}
