package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/faultnet"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/protocol"
)

// partitionable is a broker's connections: to etcd, and to clients and
// other brokers.
type partitionable struct{ etcd, net faultnet.Switch }

// startPartitionable runs a broker whose connections to etcd go through
// sw.etcd, and whose connections from clients and brokers (it advertises
// a proxy) and to other brokers go through sw.net, with edit (if not nil)
// applied to its config.
func (c *cluster) startPartitionable(name string, sw *partitionable, edit func(*Config)) *testBroker {
	c.t.Helper()
	target := strings.TrimPrefix(c.etcd.Endpoints()[0], "http://")
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + sw.etcd.Proxy(c.t, target)},
		DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { etcd.Close() })
	return c.startWith(name, "", etcd, func(cfg *Config) {
		cfg.LeaseTTL = shortLease // Cut from etcd, it runs out.
		cfg.Endpoint = sw.net.Proxy(c.t, cfg.Endpoint)
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(sw.net.Dial)}
		if edit != nil {
			edit(cfg)
		}
	})
}

// A primary is partitioned while writers append: from everything (the
// writers then append through the other brokers), or from etcd alone (the
// writers go on appending through it too). The others take its journal
// over once its lease expires; a primary that lost etcd acknowledges no
// append that its successors do not hold. When the partition heals, it
// finds its member key gone and stops, and restarts on its disk; every
// acknowledged append reads back exactly where it was acknowledged, once,
// in each writer's order, from every broker.
//
// Cut from the other brokers (and its clients) but not from etcd, it
// keeps its lease, and nothing else would drop it from the route: it
// resigns once it has reached none of its peers for its isolation
// timeout, and the others take its journal over then.
func TestPartitionedPrimaryLosesNoAcknowledgedAppend(t *testing.T) {
	for _, from := range []string{"everything", "etcd", "peers"} {
		t.Run("from="+from, func(t *testing.T) { testPartitioned(t, 0, from) })
	}
}

// The same, with a replica other than the primary partitioned from
// everything: appends fail until the others drop it from the route.
func TestPartitionedReplicaLosesNoAcknowledgedAppend(t *testing.T) {
	testPartitioned(t, 1, "everything")
}

// testPartitioned partitions the broker in slot of a journal's route, from
// everything, etcd alone, or its peers (and clients) alone, while writers
// append.
func testPartitioned(t *testing.T, slot int, from string) {
	c := newCluster(t)
	switches := map[string]*partitionable{}
	for _, name := range []string{"b1", "b2", "b3"} {
		switches[name] = &partitionable{}
		c.startPartitionable(name, switches[name], func(cfg *Config) { cfg.IsolationTimeout = 4 * time.Second })
	}
	const journal = "logs/partition"
	c.journal(c.brokers["b1"], journal, 3)
	c.appendRetry(c.brokers["b1"], journal, []byte("start\n"))
	route := c.awaitRoute(c.brokers["b1"], journal, 3)
	victim := c.brokers[route.Members[slot].Suffix]
	var survivors []*testBroker
	for _, b := range c.brokers {
		if b != victim {
			survivors = append(survivors, b)
		}
	}
	via := survivors
	if from == "etcd" {
		via = append(via, victim)
	}

	w := startWriters(t, journal, via, 6)
	w.await(t, 50)
	sw := switches[victim.name]
	if from != "peers" {
		sw.etcd.Cut()
	}
	if from != "etcd" {
		sw.net.Cut()
	}
	c.awaitRouteWithout(survivors[0], journal, victim) // Its lease expired, or it resigned.
	w.await(t, 150)
	sw.etcd.Heal()
	sw.net.Heal()
	// It resigned, or its member key expired: once it sees that, it stops,
	// and a supervisor restarts it on its disk (its spools are recovered).
	// Cut from everything, it may have resigned too (its revoke failed).
	select {
	case err := <-victim.done:
		victim.done <- err
		switch {
		case from == "peers" && !errors.Is(err, ErrIsolated):
			t.Errorf("the broker cut from its peers stopped with %v, want ErrIsolated", err)
		case from == "etcd" && !errors.Is(err, allocator.ErrMemberGone):
			t.Errorf("the broker cut from etcd stopped with %v, want ErrMemberGone", err)
		case from == "everything" && !errors.Is(err, allocator.ErrMemberGone) && !errors.Is(err, ErrIsolated):
			t.Errorf("the partitioned broker stopped with %v, want ErrMemberGone or ErrIsolated", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the partitioned broker still runs 30s after the partition healed, its member key gone")
	}
	c.stop(victim)
	restarted := c.start(victim.name, victim.dir)
	w.await(t, 250)
	ok, failed := w.stop()
	// An append that failed may have committed on some replicas only; the
	// next append synchronizes them all (rolling them to the greatest end),
	// and then every broker reads the same journal.
	c.appendRetry(survivors[0], journal, []byte("end\n"))

	content := c.readAll(restarted, journal)
	for _, b := range survivors {
		if again := c.readAll(b, journal); string(content) != string(again) {
			i := 0
			for i < min(len(content), len(again)) && content[i] == again[i] {
				i++
			}
			t.Fatalf("brokers %s (restarted) and %s read different content (%d and %d bytes), from offset %d: %q and %q",
				restarted.name, b.name, len(content), len(again), i, content[i:min(i+40, len(content))], again[i:min(i+40, len(again))])
		}
	}
	checkRecords(t, content, ok, failed)
	t.Logf("%d appends acknowledged, %d failed, %d bytes", len(ok), len(failed), len(content))
}

// awaitRouteWithout waits until b's route of journal leaves out broker
// gone.
func (c *cluster) awaitRouteWithout(b *testBroker, journal string, gone *testBroker) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, route, _ := b.srv.resolver.resolve(journal)
		if indexOf(route, gone.srv.id) < 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the route of %s still holds %s: %v", journal, gone.name, route)
		}
		time.Sleep(10 * time.Millisecond) // Polling the allocator's progress.
	}
}

// writers append records "wN-SEQ\n" to a journal through brokers, and
// keep what was acknowledged and what failed.
type writers struct {
	mu     sync.Mutex
	ok     []acked
	failed map[string]bool
	wg     sync.WaitGroup
	stopCh chan struct{}
}

func startWriters(t *testing.T, journal string, via []*testBroker, n int) *writers {
	w := &writers{failed: map[string]bool{}, stopCh: make(chan struct{})}
	for i := range n {
		w.wg.Go(func() {
			b := via[i%len(via)]
			for seq := 0; ; seq++ {
				select {
				case <-w.stopCh:
					return
				default:
				}
				rec := fmt.Sprintf("w%d-%05d\n", i, seq)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: journal}, []byte(rec))
				cancel()
				w.mu.Lock()
				if err == nil && resp.Status == protocol.Status_OK {
					w.ok = append(w.ok, acked{rec, resp.Commit.Begin, resp.Commit.End})
				} else {
					w.failed[rec] = true
				}
				w.mu.Unlock()
			}
		})
	}
	t.Cleanup(func() { w.stop() })
	return w
}

// await waits until n appends are acknowledged.
func (w *writers) await(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		w.mu.Lock()
		got := len(w.ok)
		w.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d appends acknowledged, want %d", got, n)
		}
		time.Sleep(10 * time.Millisecond) // Polling the writers' progress.
	}
}

// stop stops the writers, and returns what they saw.
func (w *writers) stop() ([]acked, map[string]bool) {
	select {
	case <-w.stopCh:
	default:
		close(w.stopCh)
	}
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ok, w.failed
}

// A reader tailing a journal through a broker that freezes (its machine
// stops answering, its connections stay open: a blackhole, not a cut) is
// not stuck on it: once the broker's lease expires and the others take
// the journal over, the reader's stream fails by keepalive, and the
// reader reads on through the others, with no byte missed or repeated.
func TestReaderOfAFrozenBrokerMovesOn(t *testing.T) {
	c := newCluster(t)
	switches := map[string]*partitionable{}
	for _, name := range []string{"b1", "b2", "b3"} {
		switches[name] = &partitionable{}
		c.startPartitionable(name, switches[name], nil)
	}
	b1, b2 := c.brokers["b1"], c.brokers["b2"]
	const journal = "logs/frozen"
	c.journal(b2, journal, 3)
	c.awaitRoute(b2, journal, 3)
	c.appendRetry(b2, journal, []byte("before\n"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Through b1, and in its zone, the client reads from b1.
	cl, err := client.New(ctx, client.Config{Broker: b1.srv.cfg.Endpoint, Zone: b1.srv.cfg.Zone})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := cl.NewReader(ctx, client.ReadRequest{Journal: journal, Block: true})
	lines, done := make(chan string), make(chan struct{})
	go func() {
		defer close(done)
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			select {
			case lines <- line:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-done // A Reader is not safe for concurrent use: Close once Read returned.
		r.Close()
	}()
	if got := <-lines; got != "before\n" {
		t.Fatalf("read %q, want before", got)
	}

	switches["b1"].net.Blackhole()
	switches["b1"].etcd.Blackhole()
	c.awaitRouteWithout(b2, journal, b1) // Its lease expired.
	c.appendRetry(b2, journal, []byte("after\n"))
	select {
	case got := <-lines:
		if got != "after\n" {
			t.Fatalf("read %q after the freeze, want after", got)
		}
	case <-time.After(30*time.Second + 3*(rpcbuf.KeepaliveTime+rpcbuf.KeepaliveTimeout)):
		t.Fatal("the reader is still stuck on the frozen broker")
	}
}
