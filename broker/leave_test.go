package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

// A replica that leaves a journal's route just as an append commits on
// it, but not on the others, holds bytes the journal does not: the
// others write the next append over those offsets. Its spool is kept out
// of the store (quarantined), rather than persisted as a fragment that
// contradicts the journal.
func TestLeavingReplicaKeepsItsLoneCommitOutOfTheStore(t *testing.T) {
	const journal = "log/left"
	c := newCluster(t)
	primary, held, leaving := c.threeReplicas(journal)

	// The next commit does not reach held until the leaving replica is off
	// the route; the leaving replica commits it.
	release, blocked := make(chan struct{}), make(chan struct{})
	var once, hooked sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	proposalHook = func(r *replica, req *protocol.ReplicateRequest) error {
		if r.srv != held.srv || r.journal != journal || req.Proposal.GetEnd() != 7 {
			return nil
		}
		var err error
		hooked.Do(func() {
			close(blocked)
			<-release
			err = errors.New("test: this commit does not reach this replica")
		})
		return err
	}
	t.Cleanup(func() { proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil } })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	failed := make(chan error, 1)
	go func() {
		resp, err := appendOnce(ctx, primary, &protocol.AppendRequest{Journal: journal}, []byte("lone\n"))
		if err == nil && resp.Status == protocol.Status_OK {
			err = errors.New("the append committed")
		}
		failed <- err
	}()
	<-blocked
	awaitCommitted(ctx, t, leaving, journal, 7)
	if got, st, err := readHere(ctx, leaving, journal, 2); err != nil || got != "" || st != protocol.Status_NOT_PRIMARY {
		t.Fatalf("the leaving replica serves %q, then %s, %v; want none of its unacknowledged commit, and a redirect", got, st, err)
	}

	// It leaves: the journal's replication drops to 2, and its assignment
	// goes, in one transaction (so the allocator does not assign it again).
	spec := &protocol.JournalSpec{Name: journal, Replication: 2, Fragment: &protocol.JournalSpec_Fragment{Length: 1 << 20}}
	raw, err := protocol.MarshalSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	assignments, err := c.etcd.Get(ctx, c.root+allocator.AssignmentsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	ops := []clientv3.Op{clientv3.OpPut(allocator.ItemKey(c.root, journal), string(raw))}
	for _, kv := range assignments.Kvs {
		if k := string(kv.Key); strings.Contains(k, journal) && strings.Contains(k, "#"+leaving.name) {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	if len(ops) != 2 {
		t.Fatalf("found %d assignments of the leaving replica, want 1", len(ops)-1)
	}
	if _, err := c.etcd.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	// The primary must know the new route before the commit fails: on the
	// old one, its next pipeline would include the leaving replica and
	// copy the lone commit from it (as it should: see catchUp), leaving
	// nothing to quarantine. (Under load, a CI run caught that.)
	c.awaitRouteWithout(primary, journal, leaving)
	once.Do(func() { close(release) })
	if err := <-failed; err == nil {
		t.Fatal("the append succeeded, though a replica failed it")
	}
	c.appendRetry(primary, journal, []byte("other content\n"))

	quarantined := filepath.Join(leaving.dir, "#quarantine")
	for {
		if _, err := os.Stat(quarantined); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the leaving replica's spool was not quarantined")
		}
		time.Sleep(10 * time.Millisecond) // Until the leaving replica ends.
	}
	store, err := fragment.Open(ctx, c.store)
	if err != nil {
		t.Fatal(err)
	}
	err = store.List(ctx, journal, func(f fragment.Fragment) error {
		if f.End == 7 {
			t.Errorf("the store holds the leaving replica's fragment %s", f.Name())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "a\nother content\n"
	for _, b := range []*testBroker{primary, held} {
		if got := string(c.readAll(b, journal)); got != want {
			t.Errorf("%s reads %q, want %q", b.name, got, want)
		}
	}
}

// An append that committed on one replica only (another failed it) is
// rolled past by the next pipeline; the primary copies it from that
// replica as it synchronizes, so it is not lost with that replica, and
// readers of the primary get it at once, without waiting for the store
// (held back here: nothing is persisted).
func TestPrimaryCopiesACommitOnlyAPeerHolds(t *testing.T) {
	const journal = "log/copied"
	c := holdPersistence(t, journal)
	primary, holder, failing := c.threeReplicas(journal)

	failCommitOnce(t, failing, journal, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resp, err := appendOnce(ctx, primary, &protocol.AppendRequest{Journal: journal}, []byte("lone\n")); err == nil && resp.Status == protocol.Status_OK {
		t.Fatal("the append committed, though a replica failed it")
	}
	if got, err := readRange(ctx, holder, journal, 2, 7); err != nil || string(got) != "lone\n" {
		t.Fatalf("the holder serves %q, %v; want the commit only it holds", got, err)
	}
	c.appendRetry(primary, journal, []byte("next\n")) // A new pipeline: the primary copies the holder's commit.

	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	got, err := readRange(short, primary, journal, 0, 12)
	if err != nil || string(got) != "a\nlone\nnext\n" {
		t.Fatalf("the primary serves %q, %v; want the commit it copied from the holder", got, err)
	}
	if got := string(c.readAll(failing, journal)); got != "a\nlone\nnext\n" {
		t.Errorf("%s reads %q", failing.name, got)
	}
}

// threeReplicas starts three brokers and journal, of replication 3, with
// "a\n" appended, and returns its primary and other replicas in route
// order.
func (c *cluster) threeReplicas(journal string) (primary, second, third *testBroker) {
	c.t.Helper()
	for _, name := range []string{"b1", "b2", "b3"} {
		c.start(name, "")
	}
	// With every broker a member before the journal exists, the first
	// route the allocator gives it is the one it keeps: a primary moved
	// later (to balance a fleet that grew) would make the test's second
	// or third broker the primary.
	c.awaitMembers(c.brokers["b1"], 3)
	c.journal(c.brokers["b1"], journal, 3)
	route := c.awaitRoute(c.brokers["b1"], journal, 3)
	primary, second, third = c.brokers[route.Members[0].Suffix], c.brokers[route.Members[1].Suffix], c.brokers[route.Members[2].Suffix]
	c.appendRetry(primary, journal, []byte("a\n"))
	return primary, second, third
}

// holdPersistence returns a new cluster whose brokers persist no fragment
// of journal until the test ends (then, before the brokers stop).
func holdPersistence(t *testing.T, journal string) *cluster {
	release := make(chan struct{})
	persistHook = func(f fragment.Fragment) {
		if f.Journal == journal {
			<-release
		}
	}
	t.Cleanup(func() { persistHook = func(fragment.Fragment) {} })
	c := newCluster(t)
	t.Cleanup(func() { close(release) }) // Before the brokers stop.
	return c
}

// A retry of an append that failed, but committed on one replica, is
// answered with that commit's range, not committed again: the primary
// that copies the commit from the replica (see catchUp) takes its
// registers too, the writer's last append among them. (Found by the soak:
// under a zone cut, retries committed twice.)
func TestRetryOfACommitOnlyAPeerHoldsCommitsOnce(t *testing.T) {
	const journal = "log/retried"
	c := holdPersistence(t, journal)
	primary, _, failing := c.threeReplicas(journal)

	failCommitOnce(t, failing, journal, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &protocol.AppendRequest{Journal: journal, Writer: "w1", Sequence: 1}
	if resp, err := appendOnce(ctx, primary, req, []byte("lone\n")); err == nil && resp.Status == protocol.Status_OK {
		t.Fatal("the append committed, though a replica failed it")
	}
	retry := appendAs(t, primary, journal, "w1", 1, "lone\n")
	if !retry.AlreadyCommitted || retry.Commit.Begin != 2 || retry.Commit.End != 7 {
		t.Errorf("retry: %v, want already committed at [2, 7)", retry)
	}
	if got := string(c.readAll(failing, journal)); got != "a\nlone\n" {
		t.Errorf("%s reads %q, want the append once", failing.name, got)
	}
}

// failCommitOnce makes broker b fail the first proposal of journal that
// commits through end, as if it had not reached b.
func failCommitOnce(t *testing.T, b *testBroker, journal string, end int64) {
	var hooked sync.Once
	proposalHook = func(r *replica, req *protocol.ReplicateRequest) error {
		var err error
		if r.srv == b.srv && r.journal == journal && req.Proposal.GetEnd() == end {
			hooked.Do(func() { err = errors.New("test: this commit does not reach this replica") })
		}
		return err
	}
	t.Cleanup(func() { proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil } })
}

// holdLone makes broker b's replica of journal hold "lone\n" at [10, 15)
// alone, in a spool that begins at 10: b was rolled there by an earlier
// primary, lacking what came before (which that primary held), then took
// a commit that failed on the others. The primary's pipeline is dropped
// first, as its stream to b holds b's replica.
func holdLone(t *testing.T, primary, b *testBroker, journal string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, _ := primary.srv.resolver.replica(journal)
	if err := p.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	p.dropPipeline()
	p.release()
	r, _ := b.srv.resolver.replica(journal)
	if err := r.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.release()
	r.expectBefore(10)
	if err := r.roll(10); err != nil {
		t.Fatal(err)
	}
	s := r.spool()
	if _, err := s.Write([]byte("lone\n")); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(r.registers); err != nil {
		t.Fatal(err)
	}
	r.committed()
}

// A peer that alone holds a commit, in a spool that begins past the
// primary's end, serves the primary what its spool holds: the primary
// copies that much, rather than asking for offsets the peer lacks, being
// refused, and rolling past the commit relying on the peer alone. (Found
// by the soak's long form: the peer was lost with its disk, and the gap
// left in a recovery log failed its shard at playback.)
func TestPrimaryCopiesACommitFromASpoolBeginningPastItsEnd(t *testing.T) {
	const journal = "log/copiedpast"
	c := holdPersistence(t, journal)
	primary, holder, _ := c.threeReplicas(journal)
	holdLone(t, primary, holder, journal)

	if resp := c.appendRetry(primary, journal, []byte("next\n")); resp.Commit.Begin != 15 {
		t.Fatalf("append at %d, want 15 (past the holder's commit)", resp.Commit.Begin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := readRange(ctx, primary, journal, 10, 20); err != nil || string(got) != "lone\nnext\n" {
		t.Fatalf("the primary serves %q, %v; want the commit it copied from the holder", got, err)
	}
}

// A primary that cannot copy a commit only a peer holds builds no
// pipeline, rather than roll past the commit at once: appends wait until
// the copy succeeds.
func TestPrimaryRetriesACopyBeforeRollingPast(t *testing.T) {
	const journal = "log/copyretried"
	c := holdPersistence(t, journal)
	primary, holder, _ := c.threeReplicas(journal)
	failures := failCopies(t, journal, 3)
	holdLone(t, primary, holder, journal)

	c.appendRetry(primary, journal, []byte("next\n"))
	if n := failures.Load(); n <= 3 {
		t.Fatalf("the copy was tried %d times, want more than the 3 that failed", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := readRange(ctx, primary, journal, 10, 20); err != nil || string(got) != "lone\nnext\n" {
		t.Fatalf("the primary serves %q, %v; want the commit it copied from the holder", got, err)
	}
}

// A primary acknowledges only content it holds. A retry of an append
// that committed on a peer alone, which the primary cannot copy, is not
// answered from the peer's registers (that would acknowledge a commit
// whose one copy is a spool the peer may lose before persisting it): it
// commits again, and the first commit, if the peer persists it, is a
// duplicate. (Found by the soak's long form: an acknowledged append was
// lost with a broker's spool disk.)
func TestRetryIsNotAnsweredFromAPeersUncopiedCommit(t *testing.T) {
	const journal = "log/uncopied"
	c := holdPersistence(t, journal)
	primary, holder, failing := c.threeReplicas(journal)
	patience := catchUpPatience
	catchUpPatience = 100 * time.Millisecond
	t.Cleanup(func() { catchUpPatience = patience })
	failCopies(t, journal, -1)

	failCommitOnce(t, failing, journal, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &protocol.AppendRequest{Journal: journal, Writer: "w1", Sequence: 1}
	if resp, err := appendOnce(ctx, primary, req, []byte("lone\n")); err == nil && resp.Status == protocol.Status_OK {
		t.Fatal("the append committed, though a replica failed it")
	}
	if got, err := readRange(ctx, holder, journal, 2, 7); err != nil || string(got) != "lone\n" {
		t.Fatalf("the holder serves %q, %v; want the commit only it holds", got, err)
	}
	retry := appendAs(t, primary, journal, "w1", 1, "lone\n")
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	got, err := readRange(short, primary, journal, retry.Commit.Begin, retry.Commit.End)
	if err != nil || string(got) != "lone\n" {
		t.Fatalf("the retry was acknowledged at [%d, %d) (already committed: %t), where the primary serves %q, %v",
			retry.Commit.Begin, retry.Commit.End, retry.AlreadyCommitted, got, err)
	}
}

// Nor does a failed copy leave the primary with the holder's registers:
// once the holder is gone, the next pipeline rolls past the commit
// without it, and a retry of its append commits again rather than be
// answered with a range that no live replica holds.
func TestFailedCopyLeavesNoRegistersOfTheCommit(t *testing.T) {
	const journal = "log/copyfailed"
	c := holdPersistence(t, journal)
	primary, holder, failing := c.threeReplicas(journal)
	failCopies(t, journal, -1)

	failCommitOnce(t, failing, journal, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &protocol.AppendRequest{Journal: journal, Writer: "w1", Sequence: 1}
	if resp, err := appendOnce(ctx, primary, req, []byte("lone\n")); err == nil && resp.Status == protocol.Status_OK {
		t.Fatal("the append committed, though a replica failed it")
	}
	// The retry's first try finds the holder, fails to copy from it, and
	// fails; then the holder is gone, its spool never persisted.
	if resp, err := appendOnce(ctx, primary, req, []byte("lone\n")); err == nil && resp.Status == protocol.Status_OK {
		t.Fatalf("the retry was acknowledged (%v) though the primary could not copy the commit", resp)
	}
	c.stop(holder)
	retry := appendAs(t, primary, journal, "w1", 1, "lone\n")
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	got, err := readRange(short, primary, journal, retry.Commit.Begin, retry.Commit.End)
	if err != nil || string(got) != "lone\n" {
		t.Fatalf("the retry was acknowledged at [%d, %d) (already committed: %t), where the primary serves %q, %v",
			retry.Commit.Begin, retry.Commit.End, retry.AlreadyCommitted, got, err)
	}
}

// failCopies makes the first times copies of journal from a holder fail
// (every copy, if times is negative), and returns the count of copies
// tried.
func failCopies(t *testing.T, journal string, times int32) *atomic.Int32 {
	var tried atomic.Int32
	copyHook = func(r *replica, endpoint string) error {
		if r.journal == journal && (tried.Add(1) <= times || times < 0) {
			return errors.New("test: the holder does not answer")
		}
		return nil
	}
	t.Cleanup(func() { copyHook = func(*replica, string) error { return nil } })
	return &tried
}

// awaitCommitted waits until b's replica of journal has committed
// through end.
func awaitCommitted(ctx context.Context, t *testing.T, b *testBroker, journal string, end int64) {
	t.Helper()
	r, _ := b.srv.resolver.replica(journal)
	for {
		r.mu.Lock()
		head, changed := r.head, r.headCh
		r.mu.Unlock()
		if head >= end {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("%s committed %s through %d, want %d", b.name, journal, head, end)
		}
	}
}

// readHere reads journal at b from offset, without blocking and without
// b passing the read to the primary, and returns the content b served and
// the status it ended with.
func readHere(ctx context.Context, b *testBroker, journal string, offset int64) (string, protocol.Status, error) {
	stream, err := protocol.NewJournalClient(b.conn).Read(ctx, &protocol.ReadRequest{Journal: journal, Offset: offset, DoNotProxy: true})
	if err != nil {
		return "", 0, err
	}
	var out []byte
	for {
		resp, err := stream.Recv()
		switch {
		case errors.Is(err, io.EOF):
			return string(out), protocol.Status_OK, nil
		case err != nil:
			return string(out), 0, err
		case resp.Status != protocol.Status_OK:
			return string(out), resp.Status, nil
		}
		out = append(out, resp.Content...)
	}
}

// readToHeadNow reads journal through b from its start to its write head,
// without blocking, and returns the content and the head it reported.
func readToHeadNow(ctx context.Context, b *testBroker, journal string) (string, int64, error) {
	stream, err := protocol.NewJournalClient(b.conn).Read(ctx, &protocol.ReadRequest{Journal: journal})
	if err != nil {
		return "", 0, err
	}
	var out []byte
	for {
		resp, err := stream.Recv()
		switch {
		case err != nil:
			return string(out), 0, err
		case resp.Status == protocol.Status_OFFSET_NOT_YET_AVAILABLE:
			return string(out), resp.WriteHead, nil
		case resp.Status != protocol.Status_OK:
			return string(out), 0, fmt.Errorf("read: %s", resp.Status)
		}
		out = append(out, resp.Content...)
	}
}

// A primary whose commit failed after a peer committed it does not tell
// a reader that the journal ends at its own head, short of that commit,
// which the peer may have served already; it waits until its next
// pipeline settles what the journal holds. (Found by the soak's long
// form: a read returned a record that an append had committed on a peer,
// and later reads, at a new primary not yet synchronized, returned less.)
func TestUnsettledPrimaryDoesNotEndTheJournalAtItsHead(t *testing.T) {
	const journal = "log/unsettled"
	c := holdPersistence(t, journal)
	primary, second, third := c.threeReplicas(journal)

	release := make(chan struct{})
	var failed, passed atomic.Bool
	proposalHook = func(r *replica, req *protocol.ReplicateRequest) error {
		switch {
		case r.journal != journal:
		case r.srv == third.srv && req.Proposal.GetEnd() == 7 && !failed.Swap(true):
			return errors.New("test: this commit does not reach this replica")
		case r.srv == second.srv && passed.Load():
			<-release // The primary's next pipeline stalls here.
		case r.srv == second.srv && req.Proposal.GetEnd() == 7:
			passed.Store(true)
		}
		return nil
	}
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil } })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if resp, err := appendOnce(ctx, primary, &protocol.AppendRequest{Journal: journal}, []byte("lone\n")); err == nil && resp.Status == protocol.Status_OK {
		t.Fatal("the append committed, though a replica failed it")
	}
	awaitCommitted(ctx, t, second, journal, 7)
	if got, st, err := readHere(ctx, second, journal, 2); err != nil || got != "" || st != protocol.Status_NOT_PRIMARY {
		t.Fatalf("the peer serves %q, then %s, %v; want none of the commit the primary failed, and a redirect", got, st, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	got, head, err := readToHeadNow(short, primary, journal)
	cancelShort()
	if err == nil {
		t.Fatalf("the unsettled primary says the journal ends at %d (%q), short of the peer's commit", head, got)
	}
	unblock()
	if got, head, err := readToHeadNow(ctx, primary, journal); err != nil || got != "a\nlone\n" || head != 7 {
		t.Fatalf("once settled, the primary reads %q to head %d, %v; want the peer's commit", got, head, err)
	}
	// The pipeline that settled it made it the journal's: the peer serves it now.
	if got, err := readRange(ctx, second, journal, 2, 7); err != nil || string(got) != "lone\n" {
		t.Fatalf("once settled, the peer serves %q, %v; want the commit", got, err)
	}
}

// A primary whose commit is out (a peer committed it, another has yet to
// answer) does not tell a reader that began meanwhile that the journal
// ends at its head: the committed peer may have served the append.
func TestPrimaryWithACommitOutWaitsBeforeEndingTheJournal(t *testing.T) {
	const journal = "log/out"
	c := holdPersistence(t, journal)
	primary, second, third := c.threeReplicas(journal)

	release := make(chan struct{})
	proposalHook = func(r *replica, req *protocol.ReplicateRequest) error {
		if r.journal == journal && r.srv == third.srv && req.Proposal.GetEnd() == 7 {
			<-release // This replica answers late.
		}
		return nil
	}
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(func() { unblock(); proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil } })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	appended := make(chan error, 1)
	go func() {
		_, err := appendOnce(ctx, primary, &protocol.AppendRequest{Journal: journal}, []byte("lone\n"))
		appended <- err
	}()
	awaitCommitted(ctx, t, second, journal, 7)
	if got, st, err := readHere(ctx, second, journal, 2); err != nil || got != "" || st != protocol.Status_NOT_PRIMARY {
		t.Fatalf("the peer serves %q, then %s, %v; want none of the commit not yet acknowledged, and a redirect", got, st, err)
	}
	// A reader waiting at the peer gets the commit once the primary
	// acknowledges it.
	served := make(chan string, 1)
	go func() {
		got, err := readRange(ctx, second, journal, 2, 7)
		if err != nil {
			served <- err.Error()
		}
		served <- string(got)
	}()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	got, head, err := readToHeadNow(short, primary, journal)
	cancelShort()
	if err == nil {
		t.Fatalf("with its commit out, the primary says the journal ends at %d (%q)", head, got)
	}
	unblock()
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if got := <-served; got != "lone\n" {
		t.Fatalf("once acknowledged, the peer serves %q; want the commit", got)
	}
	if got, head, err := readToHeadNow(ctx, primary, journal); err != nil || got != "a\nlone\n" || head != 7 {
		t.Fatalf("once committed, the primary reads %q to head %d, %v", got, head, err)
	}
}

// A read to the head without blocking ends under steady appends: it
// waits for commits out when it began, not for later ones.
func TestReadToTheHeadEndsUnderSteadyAppends(t *testing.T) {
	const journal = "log/steady"
	c := newCluster(t)
	primary, _, _ := c.threeReplicas(journal)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			appendOnce(ctx, primary, &protocol.AppendRequest{Journal: journal}, []byte("x\n"))
		}
	})
	for range 20 {
		if _, _, err := readToHeadNow(ctx, primary, journal); err != nil {
			t.Fatalf("a read to the head under steady appends: %v", err)
		}
	}
}

// A read at the head of a new journal, which waits while the primary is
// new to its route, ends as soon as the primary's pipeline settles the
// route, without an append to move the head. (A shard's new primary took
// a second to play its empty recovery log: its read came before the
// log's primary had synchronized its first pipeline, and waited out the
// read's bound.)
func TestReadAtANewPrimarysHeadEndsAsItSettles(t *testing.T) {
	const journal = "log/settling"
	c := newCluster(t)
	for _, name := range []string{"b1", "b2", "b3"} {
		c.start(name, "")
	}
	c.awaitMembers(c.brokers["b1"], 3)

	release, waiting := make(chan struct{}), make(chan struct{})
	var releaseOnce, waitingOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	proposalHook = func(r *replica, _ *protocol.ReplicateRequest) error {
		if r.journal == journal {
			<-release // The primary's first pipeline stalls until the read waits.
		}
		return nil
	}
	awaitHeadHook = func(r *replica) {
		if r.journal == journal {
			waitingOnce.Do(func() { close(waiting) })
		}
	}
	defer func(d time.Duration) { headWait = d }(headWait)
	headWait = time.Hour // Only settling ends the read's wait.
	t.Cleanup(func() {
		unblock()
		proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil }
		awaitHeadHook = func(*replica) {}
	})

	c.journal(c.brokers["b1"], journal, 3)
	primary := c.brokers[c.awaitRoute(c.brokers["b1"], journal, 3).Members[0].Suffix]
	c.awaitRoute(primary, journal, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		got  string
		head int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		got, head, err := readToHeadNow(ctx, primary, journal)
		done <- result{got, head, err}
	}()
	select {
	case <-waiting:
	case res := <-done:
		t.Fatalf("the read at the unsettled primary's head ended at once: %q, head %d, %v", res.got, res.head, res.err)
	}
	unblock()
	if res := <-done; res.err != nil || res.got != "" || res.head != 0 {
		t.Fatalf("once settled, the read at the head returns %q, head %d, %v; want none, head 0", res.got, res.head, res.err)
	}
}
