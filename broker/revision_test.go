package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/protocol"
)

// A request carrying a revision that the broker's keyspace has not seen,
// because etcd's later writes were all under other prefixes, is answered
// promptly: the broker asks its watch for progress rather than waiting out
// its five seconds for an event that never comes. A non-primary broker's
// List moves its own revision up to etcd's, and clients carry that into
// appends that the primary serves.
func TestRevisionOfWritesElsewhereIsReachedPromptly(t *testing.T) {
	c := newCluster(t)
	// Each broker with its own etcd client, as in its own process: a
	// progress request then moves only the asking broker's watch.
	b1, b2 := c.startWith("b1", "", ownClient(t), nil), c.startWith("b2", "", ownClient(t), nil)
	c.journal(b1, "rev/one", 1)
	resp := c.appendRetry(b1, "rev/one", []byte("first\n"))
	primary, other := b1, b2
	if indexOf(resp.Header.Route, b2.srv.id) == 0 {
		primary, other = b2, b1
	}
	for i := range 5 {
		if _, err := c.etcd.Put(context.Background(), fmt.Sprintf("%s-unrelated/%d", strings.TrimSuffix(c.root, "/"), i), "v"); err != nil {
			t.Fatal(err)
		}
		list, err := protocol.NewJournalClient(other.conn).List(context.Background(), &protocol.ListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		rev := list.Header.Revision
		for _, through := range []*testBroker{other, primary} {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			resp, err := appendOnce(ctx, through, &protocol.AppendRequest{Journal: "rev/one",
				Header: &protocol.Header{Revision: rev}}, []byte("x\n"))
			cancel()
			if err != nil || resp.Status != protocol.Status_OK {
				t.Fatalf("round %d: append at revision %d through %s: %v %v", i, rev, through.name, resp, err)
			}
		}
	}
}

// ownClient is a new client of the shared etcd, closed when the test ends.
func ownClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cl, err := etcdtest.Shared(t).Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
