package consumer_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// countMsg and counter: the counting application of consumertest.
type (
	countMsg = consumertest.CountMsg
	counter  = consumertest.Counter
)

var readCount = consumertest.ReadCount

type quietPebble = consumertest.QuietPebble

// cluster is 3 brokers and a consumer fleet of the counter.
type cluster struct {
	t        testing.TB
	brokers  *brokertest.Cluster
	first    *brokertest.Broker // The journals client's broker.
	journals *client.Client
	fleet    *consumertest.Fleet
	root     string
}

func newCluster(t *testing.T, app consumer.Application) *cluster { return newClusterTB(t, app, 3) }

// newClusterTB starts n brokers and an empty fleet.
func newClusterTB(t testing.TB, app consumer.Application, n int) *cluster {
	bc := brokertest.New(t)
	b := bc.Start("b1")
	for i := 2; i <= n; i++ {
		bc.Start(fmt.Sprintf("b%d", i))
	}
	cl := bc.Client(b)
	root := strings.TrimSuffix(bc.Root, "/") + "-consumers/"
	return &cluster{t: t, brokers: bc, first: b, journals: cl, root: root,
		fleet: consumertest.New(t, bc.Etcd, cl, root, app)}
}

// shardSpec is a counting shard reading source, with a recovery log.
func (c *cluster) shardSpec(id string, standbys int, sources ...string) *consumer.ShardSpec {
	spec := &consumer.ShardSpec{ID: id, RecoveryLogPrefix: "recovery", HintPrefix: c.root + "hints/",
		HotStandbys: standbys, MaxTxnDuration: 50 * time.Millisecond}
	for _, s := range sources {
		spec.Sources = append(spec.Sources, consumer.Source{Journal: s})
	}
	return spec
}

// apply creates shard specs and their journals (sources and recovery
// logs, replication 3).
func (c *cluster) apply(specs ...*consumer.ShardSpec) { c.applyR(3, specs...) }

// applyR creates shard specs, and their journals with replication r.
func (c *cluster) applyR(r int32, specs ...*consumer.ShardSpec) {
	c.t.Helper()
	var journals []string
	for _, s := range specs {
		for _, src := range s.Sources {
			journals = append(journals, src.Journal)
		}
		journals = append(journals, s.RecoveryLog())
	}
	c.brokers.Journals(c.journals, r, journals...)
	c.applySpecs(specs...)
}

// applySpecs creates shard specs.
func (c *cluster) applySpecs(specs ...*consumer.ShardSpec) {
	c.t.Helper()
	req := &protocol.ShardApplyRequest{}
	for _, s := range specs {
		raw, err := consumer.MarshalShardSpec(s.WithDefaults())
		if err != nil {
			c.t.Fatal(err)
		}
		req.Changes = append(req.Changes, &protocol.ShardApplyRequest_Change{Upsert: raw})
	}
	resp, err := c.shardClient().Apply(context.Background(), req)
	if err != nil || resp.Status != protocol.Status_OK {
		c.t.Fatalf("applying shards: %v %v", resp, err)
	}
}

// publisher publishes committed counting messages.
type publisher struct {
	pub      *message.Publisher
	appender *client.Appender
	mu       sync.Mutex
	ends     map[string]int64 // per journal, the end of the last append
}

func (c *cluster) publisher() *publisher {
	a := c.journals.NewAppender(context.Background(), client.AppenderConfig{})
	c.t.Cleanup(func() { a.Close() })
	return &publisher{appender: a, ends: map[string]int64{},
		pub: message.NewPublisher(a, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now()))}
}

func (p *publisher) publish(t testing.TB, journal string, msgs ...*countMsg) {
	t.Helper()
	var last *client.AppendHandle
	for _, m := range msgs {
		h, err := p.pub.PublishCommitted(context.Background(), journal, m)
		if err != nil {
			t.Fatal(err)
		}
		last = h
	}
	if last == nil {
		return
	}
	f, err := last.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ends[journal] = max(p.ends[journal], f.End)
	p.mu.Unlock()
}

// endsNow returns a copy of ends, for a test that publishes from another
// goroutine than the one that reads.
func (p *publisher) endsNow() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.ends)
}

// shardClient returns a Shard client of any process of the fleet, or of
// a process started for the purpose if there is none.
func (c *cluster) shardClient() protocol.ShardClient {
	for _, p := range c.fleet.Procs {
		return c.fleet.Client(p)
	}
	c.t.Fatal("no consumer process")
	return nil
}

// stat waits until shard has read through the publisher's appends to its
// sources.
func (c *cluster) stat(shard string, readThrough map[string]int64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		var p *consumertest.Process
		for _, p = range c.fleet.Procs {
			break
		}
		resp, err := c.fleet.Client(p).Stat(ctx, &protocol.ShardStatRequest{Shard: shard, ReadThrough: readThrough})
		if err == nil && resp.Status == protocol.Status_OK {
			return
		}
		if ctx.Err() != nil {
			c.t.Fatalf("stat of %s: %v %v", shard, resp, err)
		}
		time.Sleep(50 * time.Millisecond) // The shard is failing over: ask again.
	}
}

// counts reads the counts of keys from shard's primary store.
func (c *cluster) counts(shard string, keys ...string) map[string]uint64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		for _, p := range c.fleet.Procs {
			res, err := p.Server.Resolve(ctx, shard)
			if err != nil || res.Store == nil {
				continue
			}
			out := map[string]uint64{}
			for _, k := range keys {
				n, err := readCount(res.Store.(*store.Pebble).DB(), []byte("count/"+k))
				if err != nil {
					c.t.Fatal(err)
				}
				out[k] = n
			}
			res.Done()
			return out
		}
		if ctx.Err() != nil {
			c.t.Fatalf("no primary of %s found", shard)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCountingShard(t *testing.T) {
	c := newCluster(t, counter{})
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	c.apply(c.shardSpec("counts/shard-0", 1, "counts/in-0"))
	p := c.publisher()
	for i := range 100 {
		p.publish(t, "counts/in-0", &countMsg{Key: fmt.Sprintf("k%d", i%5)})
	}
	c.stat("counts/shard-0", p.ends)
	got := c.counts("counts/shard-0", "k0", "k1", "k4")
	for k, n := range got {
		if n != 20 {
			t.Errorf("count of %s = %d, want 20", k, n)
		}
	}
	// Stat counts the primary's commits: at least one took the 100
	// messages, and at most one a message.
	resp, err := c.shardClient().Stat(context.Background(), &protocol.ShardStatRequest{Shard: "counts/shard-0"})
	if err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("Stat: %v, %v", resp, err)
	}
	if resp.Transactions < 1 || resp.Transactions > 100 {
		t.Errorf("Stat says %d transactions committed, want 1 to 100", resp.Transactions)
	}
}
