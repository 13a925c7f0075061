package etcdclient_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/internal/etcdclient"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

const (
	brokersPrefix = "/quire/brokers/"
	appPrefix     = "/quire/consumers/counts/"
)

// lockDown makes users of an etcd without authentication: root, and one
// user per fleet whose role reads and writes only the fleet's prefix. Then
// it enables authentication. It returns each user.
func lockDown(t *testing.T, c *clientv3.Client, prefixes map[string]string) map[string]etcdclient.User {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	users := map[string]etcdclient.User{}
	add := func(name, role string) {
		t.Helper()
		pw := name + "-secret"
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.UserAdd(ctx, name, pw); err != nil {
			t.Fatal(err)
		}
		if _, err := c.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			t.Fatal(err)
		}
		if _, err := c.UserGrantRole(ctx, name, role); err != nil {
			t.Fatal(err)
		}
		users[name] = etcdclient.User{Name: name, PasswordFile: file}
	}
	add("root", "root")
	for name, prefix := range prefixes {
		add(name, name)
		if _, err := c.RoleGrantPermission(ctx, name, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	return users
}

// A broker fleet and a consumer application each run as an etcd user whose
// role holds only its own prefix: they serve, and count exactly, and
// neither can write the other's keys.
func TestFleetsRunAsPrefixScopedUsers(t *testing.T) {
	srv, err := etcdtest.Start("", etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	admin, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	users := lockDown(t, admin, map[string]string{"quire-brokers": brokersPrefix, "quire-counts": appPrefix})
	admin.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(user etcdclient.User, prefix string) (*clientv3.Client, error) {
		return etcdclient.Dial(ctx, srv.Endpoint(), tlsconfig.Files{}, user, prefix, 10*time.Second)
	}
	if _, err := dial(etcdclient.User{}, brokersPrefix); err == nil || !strings.Contains(err.Error(), "give --etcd-user") {
		t.Errorf("Dial without a user: %v, want a hint to give one", err)
	}
	wrong := users["quire-brokers"]
	wrong.PasswordFile = users["quire-counts"].PasswordFile
	if _, err := dial(wrong, brokersPrefix); err == nil || !strings.Contains(err.Error(), "refused user") {
		t.Errorf("Dial with a wrong password: %v, want it refused", err)
	}
	brokersEtcd, err := dial(users["quire-brokers"], brokersPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { brokersEtcd.Close() })
	appEtcd, err := dial(users["quire-counts"], appPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { appEtcd.Close() })

	bc := brokertest.New(t)
	bc.Etcd, bc.Root = brokersEtcd, brokersPrefix
	b := bc.Start("b1")
	journals := bc.Client(b)
	bc.Journals(journals, 1, "counts/in-0", "recovery/counts/shard-0")

	fleet := consumertest.New(t, appEtcd, journals, appPrefix, consumertest.Counter{})
	p := fleet.Start("c1", "za")
	spec := &consumer.ShardSpec{ID: "counts/shard-0", Sources: []consumer.Source{{Journal: "counts/in-0"}},
		RecoveryLogPrefix: "recovery", HintPrefix: appPrefix + "hints/", MaxTxnDuration: 50 * time.Millisecond}
	raw, err := consumer.MarshalShardSpec(spec.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	shards := fleet.Client(p)
	if resp, err := shards.Apply(ctx, &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{{Upsert: raw}}}); err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("applying the shard: %v %v", resp, err)
	}

	end := publish(t, ctx, journals, "counts/in-0", 20)
	awaitReadThrough(t, ctx, shards, "counts/shard-0", map[string]int64{"counts/in-0": end})
	res, err := p.Server.Resolve(ctx, "counts/shard-0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := consumertest.ReadCount(res.Store.(*store.Pebble).DB(), []byte("count/k"))
	res.Done()
	if err != nil || n != 20 {
		t.Fatalf("count of k = %d (%v), want 20", n, err)
	}

	for _, tc := range []struct {
		who *clientv3.Client
		key string
	}{{brokersEtcd, appPrefix + "forged"}, {appEtcd, brokersPrefix + "forged"}} {
		if _, err := tc.who.Put(ctx, tc.key, "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("Put %s by the other fleet's user: %v, want permission denied", tc.key, err)
		}
	}
}

// publish publishes n committed counting messages of key k to journal, and
// returns the end of the last append.
func publish(t *testing.T, ctx context.Context, journals *client.Client, journal string, n int) int64 {
	t.Helper()
	a := journals.NewAppender(ctx, client.AppenderConfig{})
	defer a.Close()
	pub := message.NewPublisher(a, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now()))
	var last *client.AppendHandle
	for range n {
		h, err := pub.PublishCommitted(ctx, journal, &consumertest.CountMsg{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		last = h
	}
	f, err := last.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return f.End
}

// awaitReadThrough waits until shard has read through the offsets.
func awaitReadThrough(t *testing.T, ctx context.Context, shards protocol.ShardClient, shard string, offsets map[string]int64) {
	t.Helper()
	for {
		resp, err := shards.Stat(ctx, &protocol.ShardStatRequest{Shard: shard, ReadThrough: offsets})
		if err == nil && resp.Status == protocol.Status_OK {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("stat of %s: %v %v", shard, resp, err)
		}
		time.Sleep(50 * time.Millisecond) // The shard is starting: ask again.
	}
}
