package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
)

// peerCheck is one check of a broker's peers (Config.peersChecked).
type peerCheck struct {
	peers   int
	reached bool
}

// checks returns a Config edit that reports the broker's peer checks to
// the channel it returns, and applies edit too.
func checks(edit func(*Config)) (func(*Config), <-chan peerCheck) {
	ch := make(chan peerCheck, 1024)
	return func(cfg *Config) {
		cfg.peersChecked = func(peers int, reached bool) {
			select {
			case ch <- peerCheck{peers, reached}:
			default: // The test stopped listening.
			}
		}
		if edit != nil {
			edit(cfg)
		}
	}, ch
}

// awaitCheck waits for a peer check that satisfies ok.
func awaitCheck(t *testing.T, ch <-chan peerCheck, what string, ok func(peerCheck) bool) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case c := <-ch:
			if ok(c) {
				return
			}
		case <-timeout:
			t.Fatalf("no peer check %s within 30s", what)
		}
	}
}

// A broker that resigned because it could not reach its peers, and is
// restarted while it still cannot, does not announce itself (joining its
// journals' routes, it would make them refuse appends) until it reaches
// one.
func TestIsolatedBrokerWaitsForPeersToServe(t *testing.T) {
	c := newCluster(t)
	switches := map[string]*partitionable{}
	short := func(cfg *Config) { cfg.IsolationTimeout = 4 * time.Second }
	for _, name := range []string{"b1", "b2", "b3"} {
		switches[name] = &partitionable{}
		c.startPartitionable(name, switches[name], short)
	}
	b1, sw := c.brokers["b1"], switches["b1"]
	sw.net.Cut()
	awaitResigned(t, b1, "cut from its peers")
	c.stop(b1)

	edit, checked := checks(short)
	c.startPartitionable("b1", sw, edit)
	for range 2 {
		awaitCheck(t, checked, "reaching none of 2 peers", func(c peerCheck) bool { return c.peers == 2 && !c.reached })
	}
	c.awaitAnnouncedOnlyAfter(t, "b1", "its peers are reached again", sw.net.Heal)
}

// awaitResigned waits up to 30s for broker b, which is what says, to
// resign (its Run to end with ErrIsolated).
func awaitResigned(t *testing.T, b *testBroker, what string) {
	t.Helper()
	select {
	case err := <-b.done:
		b.done <- err // For the cleanup's stop.
		if !errors.Is(err, ErrIsolated) {
			t.Fatalf("%s, %s, stopped with %v, want ErrIsolated", b.name, what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s, %s, did not resign within 30s", b.name, what)
	}
}

// awaitAnnouncedOnlyAfter checks that broker name is not announced, then
// calls heal and waits until it is (for up to 30s).
func (c *cluster) awaitAnnouncedOnlyAfter(t *testing.T, name, healed string, heal func()) {
	t.Helper()
	key := allocator.MemberKey(c.root, "z"+name[len(name)-1:], name)
	resp, err := c.etcd.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("%s announced itself before %s", name, healed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	announced := c.etcd.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1))
	heal()
	for ev := range announced {
		if len(ev.Events) != 0 && ev.Events[0].Type == clientv3.EventTypePut {
			return
		}
	}
	t.Fatalf("%s did not announce itself within 30s once %s", name, healed)
}

// Peers that die (rather than become unreachable) leave etcd when their
// leases expire, before the isolation timeout (three lease TTLs by
// default): the broker left alone keeps serving.
func TestBrokerOutlivesDeadPeers(t *testing.T) {
	c := newCluster(t)
	short := func(cfg *Config) { cfg.LeaseTTL = shortLease } // The dead peers' run out.
	edit, checked := checks(short)
	b1 := c.startWith("b1", "", c.etcd, edit)
	c.startWith("b2", "", c.etcd, short)
	c.startWith("b3", "", c.etcd, short)
	const journal = "logs/lone"
	c.journal(b1, journal, 3)
	c.awaitRoute(b1, journal, 3)
	for _, name := range []string{"b2", "b3"} {
		c.crash(c.brokers[name])
	}
	awaitCheck(t, checked, "with no peer left", func(c peerCheck) bool { return c.peers == 0 })
	select {
	case err := <-b1.done:
		t.Fatalf("the broker whose peers died stopped: %v", err)
	default:
	}
	c.appendRetry(b1, journal, []byte("alone\n"))
	if got := string(c.readAll(b1, journal)); got != "alone\n" {
		t.Errorf("the journal holds %q, want %q", got, "alone\n")
	}
}

// crash ends a broker as a crash would, without revoking its lease: its
// keys stay until the lease expires.
func (c *cluster) crash(b *testBroker) {
	delete(c.brokers, b.name)
	b.cancel()
	b.grpc.Stop()
	b.conn.Close()
	<-b.done
}
