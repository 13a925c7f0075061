package consumer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/authtest"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/protocol"
)

// appScope is the counting application's token selector: its source
// journals and shards (counts/…) and its recovery logs.
const appScope = "prefix in (counts/, recovery/counts/)"

// newAuthCluster is newCluster with authorization on in brokers and
// consumer processes: the brokers hold their own token, and the
// application's processes (and the test's publisher) one scoped to
// appScope.
func newAuthCluster(t *testing.T, app counter) (*cluster, *authtest.Key) {
	key := authtest.NewKey(t)
	bc := brokertest.New(t)
	bc.Auth = key.Authorizer()
	bc.Token = auth.StaticToken(key.Token("brokers", authtest.Broker, "", time.Hour))
	b := bc.Start("b1")
	bc.Start("b2")
	bc.Start("b3")
	appToken := auth.StaticToken(key.Token("counts", auth.List|auth.Read|auth.Append|auth.Apply|auth.Stat, appScope, time.Hour))
	cl := bc.ClientWith(b, appToken)
	root := strings.TrimSuffix(bc.Root, "/") + "-consumers/"
	fleet := consumertest.New(t, bc.Etcd, cl, root, app)
	fleet.Auth, fleet.Token = key.Authorizer(), appToken
	return &cluster{t: t, brokers: bc, journals: cl, root: root, fleet: fleet}, key
}

// An application whose token reaches only its own journals and shards
// runs, fails over when its primaries are killed, and still counts every
// message exactly once.
func TestScopedApplicationFailsOverExactlyOnce(t *testing.T) {
	c, _ := newAuthCluster(t, counter{})
	c.fleet.Start("c1", "za")
	c.fleet.Start("c2", "zb")
	shard := "counts/shard-0"
	c.apply(c.shardSpec(shard, 1, "counts/in-0"))
	pub := c.publisher()
	want := map[string]uint64{}
	for round := range 3 {
		batch := make([]*countMsg, 50)
		for i := range batch {
			k := fmt.Sprintf("k%d", i%5)
			batch[i] = &countMsg{Key: k}
			want[k]++
		}
		pub.publish(t, "counts/in-0", batch...)
		if round < 2 {
			p := c.primaryOf(shard, protocol.ReplicaCode_PRIMARY)
			t.Logf("killing %s, primary of %s", p.Name, shard)
			c.fleet.Kill(p)
			c.fleet.Start(fmt.Sprintf("c%d", 3+round), "za")
		}
	}
	c.stat(shard, map[string]int64{"counts/in-0": pub.ends["counts/in-0"]})
	got := c.counts(shard, "k0", "k1", "k2", "k3", "k4")
	for k, n := range want {
		if got[k] != n {
			t.Errorf("count of %s = %d, want %d", k, got[k], n)
		}
	}
}

// A token for another application's journals and shards reaches none of
// this one's: it can neither read nor append its journals, nor see or
// ask its shards.
func TestOtherApplicationsTokenIsRefused(t *testing.T) {
	c, key := newAuthCluster(t, counter{})
	p := c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("counts/shard-0", 0, "counts/in-0"))
	other := auth.StaticToken(key.Token("billing", authtest.All, "prefix in (billing/, recovery/billing/)", time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	stranger := c.brokers.ClientWith(c.brokers.Brokers["b2"], other)
	_, err := stranger.Append(ctx, client.AppendRequest{Journal: "counts/in-0"}, strings.NewReader("forged\n"))
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("append to counts/in-0 with billing's token: %v, want PermissionDenied", err)
	}
	r := stranger.NewReader(ctx, client.ReadRequest{Journal: "recovery/counts/shard-0"})
	if _, err := r.Read(make([]byte, 1)); status.Code(err) != codes.PermissionDenied {
		t.Errorf("read of recovery/counts/shard-0 with billing's token: %v, want PermissionDenied", err)
	}

	shards := c.fleet.ClientWith(p, other)
	list, err := shards.List(ctx, &protocol.ShardListRequest{})
	if err != nil || len(list.Shards) != 0 {
		t.Errorf("List with billing's token: %v %v, want no shard", list, err)
	}
	for name, call := range map[string]func() error{
		"Stat": func() error {
			_, err := shards.Stat(ctx, &protocol.ShardStatRequest{Shard: "counts/shard-0"})
			return err
		},
		"GetHints": func() error {
			_, err := shards.GetHints(ctx, &protocol.GetHintsRequest{Shard: "counts/shard-0"})
			return err
		},
		"Unassign": func() error {
			_, err := shards.Unassign(ctx, &protocol.UnassignRequest{Shards: []string{"counts/shard-0"}})
			return err
		},
		"Apply delete": func() error {
			_, err := shards.Apply(ctx, &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{{Delete: "counts/shard-0", ExpectModRevision: 1}}})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s of counts/shard-0 with billing's token: %v, want PermissionDenied", name, err)
		}
	}
}

// The table of the Shard service: every RPC, with its capability and a
// matching selector, and without each part of a valid token.
func TestEveryShardRPCChecksItsCapability(t *testing.T) {
	c, key := newAuthCluster(t, counter{})
	p := c.fleet.Start("c1", "za")
	spec := c.shardSpec("counts/shard-0", 0, "counts/in-0")
	c.apply(spec)
	raw, err := consumer.MarshalShardSpec(spec.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	other := authtest.NewKey(t)
	rpcs := []struct {
		name string
		want auth.Capability
		call func(ctx context.Context, sc protocol.ShardClient) error
	}{
		{"List", auth.List, func(ctx context.Context, sc protocol.ShardClient) error {
			resp, err := sc.List(ctx, &protocol.ShardListRequest{Selector: "id=counts/shard-0"})
			if err == nil && len(resp.Shards) == 0 {
				err = status.Error(codes.PermissionDenied, "counts/shard-0 is not listed") // A List filters.
			}
			return err
		}},
		{"Stat", auth.Stat, func(ctx context.Context, sc protocol.ShardClient) error {
			_, err := sc.Stat(ctx, &protocol.ShardStatRequest{Shard: "counts/shard-0"})
			return err
		}},
		{"GetHints", auth.Stat, func(ctx context.Context, sc protocol.ShardClient) error {
			_, err := sc.GetHints(ctx, &protocol.GetHintsRequest{Shard: "counts/shard-0"})
			return err
		}},
		{"Apply", auth.Apply, func(ctx context.Context, sc protocol.ShardClient) error {
			_, err := sc.Apply(ctx, &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{{Upsert: raw, ExpectModRevision: 1}}})
			return err
		}},
		{"Unassign", auth.Unassign, func(ctx context.Context, sc protocol.ShardClient) error {
			_, err := sc.Unassign(ctx, &protocol.UnassignRequest{Shards: []string{"counts/shard-0"}, DryRun: true})
			return err
		}},
	}
	for _, rpc := range rpcs {
		granted := key.Token("w", rpc.want, "prefix=counts/", time.Hour)
		parts := strings.Split(granted, ".")
		wider := strings.Split(other.Token("w", authtest.All, "", time.Hour), ".")
		for _, tc := range []struct {
			name, token string
			want        codes.Code
		}{
			{"granted", granted, codes.OK},
			{"by id", key.Token("w", rpc.want, "id=counts/shard-0", time.Hour), codes.OK},
			{"lacking the capability", key.Token("w", authtest.All&^rpc.want, "prefix=counts/", time.Hour), codes.PermissionDenied},
			{"outside the selector", key.Token("w", rpc.want, "prefix=billing/", time.Hour), codes.PermissionDenied},
			{"expired", key.Token("w", rpc.want, "prefix=counts/", -time.Hour), codes.Unauthenticated},
			{"unknown key", other.Token("w", rpc.want, "prefix=counts/", time.Hour), codes.Unauthenticated},
			{"tampered", parts[0] + "." + wider[1] + "." + parts[2], codes.Unauthenticated},
			{"no token", "", codes.Unauthenticated},
		} {
			t.Run(rpc.name+"/"+tc.name, func(t *testing.T) {
				var src auth.TokenSource
				if tc.token != "" {
					src = auth.StaticToken(tc.token)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := rpc.call(ctx, c.fleet.ClientWith(p, src))
				got := status.Code(err)
				refused := got == codes.Unauthenticated || got == codes.PermissionDenied
				switch {
				case tc.want == codes.OK && refused:
					t.Fatalf("refused: %v", err)
				case tc.want != codes.OK && got != tc.want:
					t.Fatalf("error %v, want %s", err, tc.want)
				}
			})
		}
	}
}
