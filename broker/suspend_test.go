package broker

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/protocol"
)

// suspend suspends journal through b, and waits until no broker holds a
// replica of it.
func (c *cluster) suspend(b *testBroker, journal string) *protocol.Suspension {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := protocol.NewJournalClient(b.conn).Suspend(ctx, &protocol.SuspendRequest{Journal: journal})
	if err != nil || resp.Status != protocol.Status_OK {
		c.t.Fatalf("suspending %s: %v %v", journal, resp, err)
	}
	c.awaitNoReplicas(journal)
	return resp.Suspension
}

// awaitNoReplicas waits until no broker of the cluster holds a replica of
// journal.
func (c *cluster) awaitNoReplicas(journal string) {
	c.t.Helper()
	for _, b := range c.brokers {
		c.awaitRoute(b, journal, 0)
		deadline := time.Now().Add(30 * time.Second)
		for {
			if r, _ := b.srv.resolver.replica(journal); r == nil {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("broker %s still holds a replica of suspended %s", b.name, journal)
			}
			time.Sleep(10 * time.Millisecond) // Polling the replica's end.
		}
	}
}

// A suspended journal holds no replicas; any broker serves its content
// from the store; an append resumes it, at the offset it was suspended at
// and with its registers: a retry of a writer's last append before the
// suspension commits nothing.
func TestSuspendedJournalIsReadFromTheStoreAndResumedByAnAppend(t *testing.T) {
	const journal = "logs/suspended"
	c := newCluster(t)
	b1, b2 := c.start("b1", ""), c.start("b2", "")
	c.awaitMembers(b1, 2)
	c.journal(b1, journal, 2)
	c.awaitRoute(b1, journal, 2)
	appendAs(t, b1, journal, "w1", 1, "a\n")
	appendAs(t, b1, journal, "w1", 2, "b\n")

	sp := c.suspend(b2, journal)
	if !sp.Active || sp.Offset != 4 || protocol.LabelsOf(sp.Registers).String() == "" {
		t.Fatalf("suspension %v: want active at offset 4, with the writer's registers", sp)
	}
	for _, b := range []*testBroker{b1, b2} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := readRange(ctx, b, journal, 0, 4)
		cancel()
		if err != nil || string(got) != "a\nb\n" {
			t.Fatalf("%s serves %q, %v; want the suspended journal's content", b.name, got, err)
		}
	}
	if head := writeHead(t, b1, journal); head != 4 {
		t.Fatalf("a non-blocking read at the head says it is %d, want 4", head)
	}

	if retry := appendAs(t, b1, journal, "w1", 2, "b\n"); !retry.AlreadyCommitted || retry.Commit.Begin != 2 || retry.Commit.End != 4 {
		t.Fatalf("retry of the last append before the suspension: %v; want it already committed at [2, 4)", retry)
	}
	if resp := appendAs(t, b1, journal, "w1", 3, "c\n"); resp.Commit.Begin != 4 {
		t.Fatalf("append after resuming at %d, want 4", resp.Commit.Begin)
	}
	if got := string(c.readAll(b2, journal)); got != "a\nb\nc\n" {
		t.Fatalf("the resumed journal reads %q", got)
	}
	spec, _, _ := b1.srv.resolver.resolve(journal)
	if spec.Suspended() {
		t.Fatal("the journal is still suspended after an append")
	}
}

// writeHead reads journal's write head through b with a non-blocking read
// at the head.
func writeHead(t *testing.T, b *testBroker, journal string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := protocol.NewJournalClient(b.conn).Read(ctx, &protocol.ReadRequest{Journal: journal, Offset: -1})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("reading the head of %s: %v", journal, err)
		}
		if resp.Status == protocol.Status_OFFSET_NOT_YET_AVAILABLE {
			return resp.WriteHead
		}
		if resp.Status != protocol.Status_OK {
			t.Fatalf("reading the head of %s: %s", journal, resp.Status)
		}
	}
}

// A spec applied to a suspended journal keeps its suspension (spec files
// hold none), and one that changes the suspension is refused: only a
// primary that persisted everything may suspend.
func TestApplyKeepsASuspension(t *testing.T) {
	const journal = "logs/kept"
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, journal, 1)
	c.appendRetry(b, journal, []byte("x\n"))
	c.suspend(b, journal)

	c.journal(b, journal, 1, func(s *protocol.JournalSpec) { s.Labels = []*protocol.Label{{Name: "team", Value: "a"}} })
	spec, _, _ := b.srv.resolver.resolve(journal)
	if !spec.Suspended() || spec.Suspension.Offset != 2 {
		t.Fatalf("after an apply, suspension %v; want it kept, at 2", spec.Suspension)
	}

	jc := protocol.NewJournalClient(b.conn)
	list, err := jc.List(context.Background(), &protocol.ListRequest{Selector: "name=" + journal})
	if err != nil {
		t.Fatal(err)
	}
	forged := &protocol.JournalSpec{Name: journal, Replication: 1, Suspension: &protocol.Suspension{Active: true, Offset: 100}}
	_, err = jc.Apply(context.Background(), &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Upsert: forged, ExpectModRevision: list.Journals[0].ModRevision}}})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("applying a forged suspension: %v; want InvalidArgument", err)
	}
}

// A broker suspends the journals it is primary of once no one appended to
// them for Config.SuspendIdle.
func TestIdleJournalIsSuspended(t *testing.T) {
	const journal = "logs/idle"
	c := newCluster(t)
	b := c.startWith("b1", "", c.etcd, func(cfg *Config) { cfg.SuspendIdle = 200 * time.Millisecond })
	c.journal(b, journal, 1)
	c.appendRetry(b, journal, []byte("x\n"))
	c.awaitNoReplicas(journal)
	spec, _, _ := b.srv.resolver.resolve(journal)
	if !spec.Suspended() || spec.Suspension.Offset != 2 {
		t.Fatalf("suspension %v; want the idle journal suspended at 2", spec.Suspension)
	}
	if resp := c.appendRetry(b, journal, []byte("y\n")); resp.Commit.Begin != 2 {
		t.Fatalf("append after the idle suspension at %d, want 2", resp.Commit.Begin)
	}
}
