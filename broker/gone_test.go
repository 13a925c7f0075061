package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/protocol"
)

// A blocking read whose replica goes away (the journal is deleted, moved
// away by a drain or rebalance, or the broker stops) ends with gRPC's
// Unavailable, which clients retry where the route now says — here,
// learning that the journal is gone.
func TestBlockingReadEndsRetryablyWhenReplicaGoes(t *testing.T) {
	c := newCluster(t)
	b1 := c.start("b1", "")
	c.journal(b1, "tail/j", 1)
	resp := c.appendRetry(b1, "tail/j", []byte("before\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := protocol.NewJournalClient(b1.conn).Read(ctx, &protocol.ReadRequest{
		Journal: "tail/j", Offset: resp.Commit.End, Block: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // The metadata response: the read is at the write head.
		t.Fatal(err)
	}
	list, err := protocol.NewJournalClient(b1.conn).List(ctx, &protocol.ListRequest{Selector: "name=tail/j"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := protocol.NewJournalClient(b1.conn).Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Delete: "tail/j", ExpectModRevision: list.Journals[0].ModRevision}}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if code := status.Code(err); code == codes.Unknown {
		t.Errorf("blocking read ended with %v: code Unknown, which clients do not retry; want Unavailable (or a status)", err)
	}

	// The same through the client's Reader.
	c.journal(b1, "tail/k", 1)
	c.appendRetry(b1, "tail/k", []byte("before\n"))
	cl, err := client.New(ctx, client.Config{Broker: b1.srv.cfg.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := cl.NewReader(ctx, client.ReadRequest{Journal: "tail/k", Block: true})
	buf := make([]byte, 100)
	if n, err := r.Read(buf); err != nil || string(buf[:n]) != "before\n" {
		t.Fatalf("first read: %q, %v", buf[:n], err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.Read(buf); done <- err }() // Blocks at the write head.
	list, _ = protocol.NewJournalClient(b1.conn).List(ctx, &protocol.ListRequest{Selector: "name=tail/k"})
	protocol.NewJournalClient(b1.conn).Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Delete: "tail/k", ExpectModRevision: list.Journals[0].ModRevision}}})
	if err = <-done; !errors.Is(err, client.ErrJournalNotFound) {
		t.Errorf("Reader.Read returned %v; want client.ErrJournalNotFound after a retry", err)
	}
}
