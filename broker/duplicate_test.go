package broker

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/protocol"
)

// A broker started with the name of a live broker opens no spool of that
// broker's journals (two spools of one replica would diverge): it waits,
// sees the holder renew its lease, and exits with ErrMemberHeld, while
// the live broker goes on serving.
func TestDuplicateNameServesNothing(t *testing.T) {
	c := newCluster(t)
	// The duplicate waits out what the holder's lease had left, and then
	// some, before it judges the holder alive.
	b1 := c.startWith("b1", "", c.etcd, func(cfg *Config) { cfg.LeaseTTL = shortLease })
	c.journal(b1, "dup/one", 1)
	c.appendRetry(b1, "dup/one", []byte("before\n"))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dup, err := New(Config{Etcd: c.etcd, Root: c.root, Zone: b1.srv.cfg.Zone, Suffix: b1.srv.cfg.Suffix,
		Endpoint: lis.Addr().String(), Dir: dir, DefaultStore: c.store, LeaseTTL: 3 * time.Second, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(rpcbuf.ServerOptions()...)
	protocol.RegisterJournalServer(gs, dup)
	go gs.Serve(lis)
	defer gs.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- dup.Run(ctx, nil) }()

	appends := 1
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		default: // The live broker serves appends while the duplicate waits.
			c.appendRetry(b1, "dup/one", []byte("during\n"))
			appends++
		}
	}
	if !errors.Is(err, allocator.ErrMemberHeld) {
		t.Fatalf("the duplicate's Run: %v, want ErrMemberHeld", err)
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("the duplicate's directory holds %d entries (%v): it opened spools", len(entries), err)
	}
	resp := c.appendRetry(b1, "dup/one", []byte("after\n"))
	if want := int64(len("before\n") + (appends-1)*len("during\n")); resp.Commit.Begin != want {
		t.Fatalf("append after the duplicate committed at %d, want %d", resp.Commit.Begin, want)
	}
}
