package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/protocol"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

var testLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// cluster is several in-process brokers sharing a real etcd and a file
// fragment store, each with its own gRPC listener and spool directory.
type cluster struct {
	t       testing.TB
	etcd    *clientv3.Client
	root    string
	store   string
	brokers map[string]*testBroker
	rev     int64 // of the last Apply: requests wait for brokers to see it
}

type testBroker struct {
	name   string
	srv    *Server
	grpc   *grpc.Server
	conn   *grpc.ClientConn
	dir    string
	cancel context.CancelFunc
	drain  chan struct{}
	done   chan error
	// stopping is set once the test stops the broker, whose Run then
	// returns ErrMemberGone as a matter of course (see stop).
	stopping atomic.Bool
}

func newCluster(t testing.TB) *cluster {
	client, root := etcdtest.Client(t)
	c := &cluster{t: t, etcd: client, root: root,
		store: "file://" + filepath.Join(t.TempDir(), "store") + "/", brokers: map[string]*testBroker{}}
	t.Cleanup(func() {
		for _, b := range c.brokers {
			c.stop(b)
		}
	})
	return c
}

// leaseTTL is the test brokers' lease, as long as a production broker's:
// etcd's client gives a lease up once an answer to its keepalive is a TTL
// late, which the race detector on a loaded 2-core machine can make a 3 s
// lease's, stopping its broker mid-test. Tests of what a lease's expiry
// ends (a broker cut from etcd, or crashed without revoking it) take
// shortLease, through their edits.
const (
	leaseTTL   = 10 * time.Second
	shortLease = 3 * time.Second
)

// start runs a broker with its spools in dir (a fresh directory if empty).
func (c *cluster) start(name, dir string) *testBroker {
	c.t.Helper()
	return c.startWith(name, dir, c.etcd, nil)
}

// startWith runs a broker that uses etcd through client, with edit (if
// not nil) applied to its config.
func (c *cluster) startWith(name, dir string, client *clientv3.Client, edit func(*Config)) *testBroker {
	c.t.Helper()
	if dir == "" {
		dir = c.t.TempDir()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := Config{Etcd: client, Root: c.root, Zone: "z" + name[len(name)-1:], Suffix: name,
		Endpoint: lis.Addr().String(), Dir: dir, DefaultStore: c.store, LeaseTTL: leaseTTL, Logger: testLogger}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	b := &testBroker{name: name, srv: srv, grpc: grpc.NewServer(rpcbuf.ServerOptions()...), dir: dir,
		drain: make(chan struct{}), done: make(chan error, 1)}
	protocol.RegisterJournalServer(b.grpc, srv)
	go b.grpc.Serve(lis)
	var ctx context.Context
	ctx, b.cancel = context.WithCancel(context.Background())
	go func() {
		err := srv.Run(ctx, b.drain)
		if err != nil && !errors.Is(err, context.Canceled) && !(b.stopping.Load() && errors.Is(err, allocator.ErrMemberGone)) {
			c.t.Logf("broker %s: Run: %v", name, err)
		}
		b.done <- err
	}()
	if b.conn, err = grpc.NewClient(lis.Addr().String(), append(rpcbuf.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...); err != nil {
		c.t.Fatal(err)
	}
	c.brokers[name] = b
	return b
}

// stop ends a broker at once, as a crash would: its lease is revoked, so
// its journals fail over now rather than after the lease's TTL.
func (c *cluster) stop(b *testBroker) {
	if _, ok := c.brokers[b.name]; !ok {
		return
	}
	delete(c.brokers, b.name)
	b.stopping.Store(true)
	c.revokeLease(b)
	b.cancel()
	b.grpc.Stop()
	b.conn.Close()
	<-b.done
}

func (c *cluster) revokeLease(b *testBroker) {
	resp, err := c.etcd.Get(context.Background(), allocator.MemberKey(c.root, b.srv.cfg.Zone, b.srv.cfg.Suffix))
	if err == nil && len(resp.Kvs) == 1 {
		c.etcd.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease))
	}
}

func (c *cluster) journal(b *testBroker, name string, replication int32, edits ...func(*protocol.JournalSpec)) {
	c.t.Helper()
	spec := &protocol.JournalSpec{Name: name, Replication: replication,
		Fragment: &protocol.JournalSpec_Fragment{Length: 1 << 20}}
	for _, edit := range edits {
		edit(spec)
	}
	jc := protocol.NewJournalClient(b.conn)
	var rev int64
	if list, err := jc.List(context.Background(), &protocol.ListRequest{Selector: "name=" + name}); err == nil && len(list.Journals) == 1 {
		rev = list.Journals[0].ModRevision
	}
	resp, err := jc.Apply(context.Background(), &protocol.ApplyRequest{
		Changes: []*protocol.ApplyRequest_Change{{Upsert: spec, ExpectModRevision: rev}}})
	if err != nil || resp.Status != protocol.Status_OK {
		c.t.Fatalf("applying %s: %v %v", name, resp, err)
	}
	c.rev = resp.Revision
}

// appendOnce appends data in one Append RPC through b.
func appendOnce(ctx context.Context, b *testBroker, req *protocol.AppendRequest, data []byte) (*protocol.AppendResponse, error) {
	stream, err := protocol.NewJournalClient(b.conn).Append(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(req); err != nil {
		return stream.CloseAndRecv()
	}
	for len(data) > 0 {
		n := min(len(data), 64<<10)
		if err := stream.Send(&protocol.AppendRequest{Content: data[:n]}); err != nil {
			return stream.CloseAndRecv()
		}
		data = data[n:]
	}
	if err := stream.Send(&protocol.AppendRequest{}); err != nil {
		return stream.CloseAndRecv()
	}
	return stream.CloseAndRecv()
}

// appendRetry appends, retrying while the journal has no primary yet or a
// pipeline is being rebuilt.
func (c *cluster) appendRetry(b *testBroker, journal string, data []byte) *protocol.AppendResponse {
	t := c.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := appendOnce(context.Background(), b, &protocol.AppendRequest{Journal: journal,
			Header: &protocol.Header{Revision: c.rev}}, data)
		if err == nil && resp.Status == protocol.Status_OK {
			return resp
		}
		if !transient(resp, err) || time.Now().After(deadline) {
			t.Fatalf("append to %s: %v %v", journal, resp, err)
		}
		time.Sleep(20 * time.Millisecond) // Retry pacing, as a client's backoff.
	}
}

func transient(resp *protocol.AppendResponse, err error) bool {
	if err != nil {
		c := status.Code(err)
		return c == codes.Unavailable || c == codes.Canceled || c == codes.Unknown
	}
	switch resp.Status {
	case protocol.Status_NO_PRIMARY, protocol.Status_INSUFFICIENT_REPLICAS,
		// The route's primary has yet to make its replica of a new
		// journal (clients retry this too).
		protocol.Status_NOT_PRIMARY:
		return true
	}
	return false
}

// readRange reads [from, to) of journal through b, blocking for content.
func readRange(ctx context.Context, b *testBroker, journal string, from, to int64) ([]byte, error) {
	stream, err := protocol.NewJournalClient(b.conn).Read(ctx, &protocol.ReadRequest{
		Journal: journal, Offset: from, Block: true, EndOffset: to})
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	next := from
	for next < to {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return out.Bytes(), err
		}
		if resp.Status != protocol.Status_OK {
			return out.Bytes(), fmt.Errorf("read status %s", resp.Status)
		}
		if len(resp.Content) == 0 {
			if resp.Offset > next && out.Len() > 0 {
				return out.Bytes(), fmt.Errorf("read jumped from %d to %d", next, resp.Offset)
			}
			continue
		}
		if resp.Offset != next {
			return out.Bytes(), fmt.Errorf("content at %d, want %d", resp.Offset, next)
		}
		out.Write(resp.Content)
		next += int64(len(resp.Content))
	}
	return out.Bytes(), nil
}

func readRetry(t testing.TB, b *testBroker, journal string, from, to int64) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := readRange(ctx, b, journal, from, to)
		cancel()
		if err == nil && int64(len(got)) == to-from {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading %s [%d, %d): got %d bytes, %v", journal, from, to, len(got), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAppendAndReadOneBroker(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "a/one", 1)
	var want bytes.Buffer
	for i := range 20 {
		data := []byte(fmt.Sprintf("record %d\n", i))
		resp := c.appendRetry(b, "a/one", data)
		if resp.Commit.Begin != int64(want.Len()) || resp.Commit.End != int64(want.Len()+len(data)) {
			t.Fatalf("append %d committed [%d, %d), want [%d, %d)", i, resp.Commit.Begin, resp.Commit.End, want.Len(), want.Len()+len(data))
		}
		want.Write(data)
	}
	got := readRetry(t, b, "a/one", 0, int64(want.Len()))
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %q, want %q", got, want.Bytes())
	}
}

func TestReplicationThree(t *testing.T) {
	c := newCluster(t)
	bs := []*testBroker{c.start("b1", ""), c.start("b2", ""), c.start("b3", "")}
	c.journal(bs[0], "a/three", 3)
	var want bytes.Buffer
	for i := range 30 {
		data := bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i)
		resp := c.appendRetry(bs[i%3], "a/three", data)
		if resp.Commit.Begin != int64(want.Len()) {
			t.Fatalf("append %d at %d, want %d", i, resp.Commit.Begin, want.Len())
		}
		want.Write(data)
	}
	for _, b := range bs {
		got := readRetry(t, b, "a/three", 0, int64(want.Len()))
		if !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("broker %s read differs", b.name)
		}
	}
}
