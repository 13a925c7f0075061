package wordcount_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/protocol"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// proc is a process of the application, as `wordcount serve` runs one: a
// consumer.Server with the Shard service and the application's own.
// (internal/consumertest's processes serve only the Shard service.)
type proc struct {
	name, zone, addr string
	srv              *consumer.Server
	cancel           context.CancelFunc
	done             chan error
	conn             *grpc.ClientConn
}

type fleet struct {
	t     *testing.T
	bc    *brokertest.Cluster
	root  string
	procs map[string]*proc
}

func (f *fleet) start(name, zone string) *proc {
	t := f.t
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var b *brokertest.Broker
	for _, b = range f.bc.Brokers {
		break
	}
	p := &proc{name: name, zone: zone, addr: lis.Addr().String(), done: make(chan error, 1)}
	p.srv, err = consumer.New(consumer.Config{App: wordcount.App{}, Etcd: f.bc.Etcd, Journals: f.bc.Client(b),
		Root: f.root, Zone: zone, Suffix: name, Endpoint: p.addr, Dir: t.TempDir(), LeaseTTL: 3 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	protocol.RegisterShardServer(gs, p.srv)
	wordcount.App{}.Register(gs, p.srv)
	var ctx context.Context
	ctx, p.cancel = context.WithCancel(context.Background())
	go func() { p.done <- consumer.Serve(ctx, nil, p.srv, gs, lis) }()
	if p.conn, err = grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	f.procs[name] = p
	t.Cleanup(func() { f.kill(p) })
	return p
}

// kill stops a process at once, as a crash would, and revokes its lease so
// that its shards fail over now.
func (f *fleet) kill(p *proc) {
	if f.procs[p.name] != p {
		return
	}
	delete(f.procs, p.name)
	p.cancel()
	if err := <-p.done; err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, allocator.ErrMemberGone) {
		f.t.Logf("process %s: %v", p.name, err)
	}
	p.conn.Close()
	ctx := context.Background()
	if resp, err := f.bc.Etcd.Get(ctx, allocator.MemberKey(f.root, p.zone, p.name)); err == nil && len(resp.Kvs) == 1 {
		f.bc.Etcd.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	}
}

// primaries returns each shard's primary process (by name), once every
// shard has a PRIMARY and its standby is ready (if want says so).
func (f *fleet) primaries(via *proc, standbys bool) map[string]string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		list, err := protocol.NewShardClient(via.conn).List(ctx, &protocol.ShardListRequest{Selector: wordcount.Selector})
		out := map[string]string{}
		if err == nil {
			for _, sh := range list.Shards {
				spec, _ := consumer.UnmarshalShardSpec(sh.Spec)
				r := sh.Replicas
				if len(r) == 0 || r[0].Slot != 0 || r[0].Status.GetCode() != protocol.ReplicaCode_PRIMARY {
					continue
				}
				if standbys && (len(r) < 2 || r[1].Status.GetCode() != protocol.ReplicaCode_STANDBY) {
					continue
				}
				out[spec.ID] = r[0].ProcessId.Suffix
			}
			if len(out) == wordcount.Partitions {
				return out
			}
		}
		if ctx.Err() != nil {
			f.t.Fatalf("shards not served: %v %v", list, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// text returns lines of words, and the count of each word.
func text(seed, lines int) (string, map[string]uint64) {
	counts := map[string]uint64{}
	var b strings.Builder
	n := seed
	for range lines {
		for k := range 7 {
			n = (n*1103515245 + 12345) & 0x7fffffff
			w := fmt.Sprintf("w%d", n%23)
			counts[w]++
			if k > 0 {
				b.WriteString(" \t"[k%2 : k%2+1])
			}
			b.WriteString(w)
		}
		b.WriteString("\n")
	}
	return b.String(), counts
}

func query(t *testing.T, p *proc, words []string) map[string]*wordcountpb.CountResponse_Count {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := wordcountpb.NewWordCountClient(p.conn).Count(ctx, &wordcountpb.CountRequest{Words: words, Sync: true})
	if err != nil {
		t.Fatalf("count via %s: %v", p.name, err)
	}
	out := map[string]*wordcountpb.CountResponse_Count{}
	for i, c := range resp.Counts {
		if c.Word != words[i] {
			t.Fatalf("count %d is of %q, want %q", i, c.Word, words[i])
		}
		out[c.Word] = c
	}
	return out
}

func checkCounts(t *testing.T, got map[string]*wordcountpb.CountResponse_Count, want map[string]uint64) {
	t.Helper()
	for w, n := range want {
		if got[w].GetCount() != n {
			t.Errorf("count of %s = %d, want %d", w, got[w].GetCount(), n)
		}
	}
}

// Words published are counted exactly once, and any process answers the
// count of any word, forwarding it to the primary of its shard; after a
// primary crashes, its standbys take over and nothing is lost or counted
// twice.
func TestWordCount(t *testing.T) {
	bc := brokertest.New(t)
	bc.Start("b1")
	b2 := bc.Start("b2")
	journals := bc.Client(b2)
	f := &fleet{t: t, bc: bc, root: strings.TrimSuffix(bc.Root, "/") + "-wordcount/", procs: map[string]*proc{}}
	c1 := f.start("c1", "za")
	c2 := f.start("c2", "zb")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	cfg := wordcount.SetupConfig{Journals: journals, Shards: protocol.NewShardClient(c1.conn), Root: f.root,
		Replication: 2, HotStandbys: 1, MaxTxnDuration: 50 * time.Millisecond}
	created, err := wordcount.Setup(ctx, cfg)
	if err != nil || len(created) != 3*wordcount.Partitions {
		t.Fatalf("setup created %v: %v", created, err)
	}
	if created, err := wordcount.Setup(ctx, cfg); err != nil || len(created) != 0 {
		t.Fatalf("setup again created %v: %v", created, err)
	}
	primaries := f.primaries(c1, true)

	in, want := text(1, 300)
	n, err := wordcount.Publish(ctx, journals, wordcount.Selector, strings.NewReader(in))
	if err != nil || n != 7*300 {
		t.Fatalf("published %d words: %v", n, err)
	}
	words := slices.Sorted(func(yield func(string) bool) {
		for w := range want {
			if !yield(w) {
				return
			}
		}
	})
	words = append(words, "never-published")
	// Each process answers for every word, forwarding those of shards it
	// is not the primary of.
	forwarded := 0
	var got map[string]*wordcountpb.CountResponse_Count
	for _, p := range []*proc{c1, c2} {
		got = query(t, p, words)
		checkCounts(t, got, want)
		if got["never-published"].GetCount() != 0 {
			t.Errorf("count of a word never published: %d", got["never-published"].GetCount())
		}
		shardsOf := map[string]bool{}
		for _, c := range got {
			shardsOf[c.Shard] = true
			if primaries[c.Shard] != p.name {
				forwarded++
			}
		}
		if len(shardsOf) != wordcount.Partitions {
			t.Errorf("words counted in %d shards, want all %d", len(shardsOf), wordcount.Partitions)
		}
	}
	if forwarded == 0 {
		t.Errorf("no word forwarded (primaries %v)", primaries)
	}

	// A process asked not to forward refuses words of shards it is not the
	// primary of, and bad requests are refused.
	for _, c := range got {
		for _, p := range []*proc{c1, c2} {
			if primaries[c.Shard] == p.name {
				continue
			}
			_, err := wordcountpb.NewWordCountClient(p.conn).Count(ctx, &wordcountpb.CountRequest{Words: []string{c.Word}, DoNotProxy: true})
			if status.Code(err) != codes.FailedPrecondition {
				t.Errorf("count of %s not forwarded from %s: %v, want FailedPrecondition", c.Word, p.name, err)
			}
		}
	}
	for _, req := range []*wordcountpb.CountRequest{{}, {Words: []string{"a", ""}}} {
		if _, err := wordcountpb.NewWordCountClient(c1.conn).Count(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("count %v: %v, want InvalidArgument", req, err)
		}
	}

	// c2 crashes: its standbys on c1 take over, and a new process c3 gets
	// the standbys. Words published since are counted once, and those
	// before are not counted again.
	f.kill(c2)
	c3 := f.start("c3", "zb")
	more, wantMore := text(2, 200)
	if _, err := wordcount.Publish(ctx, journals, wordcount.Selector, strings.NewReader(more)); err != nil {
		t.Fatal(err)
	}
	for w, n := range wantMore {
		want[w] += n
	}
	checkCounts(t, query(t, c3, words), want)
	for sh, p := range f.primaries(c3, false) {
		if p == c2.name {
			t.Errorf("shard %s: primary is still %s, which crashed", sh, p)
		}
	}
}
