package consumer_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/authtest"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// appScope is the counting application's token selector: its source
// journals and shards (counts/…) and its recovery logs.
const appScope = "prefix in (counts/, recovery/counts/)"

// newAuthCluster is newCluster with authorization on in brokers and
// consumer processes: the brokers hold their own token, and the
// application's processes (and the test's publisher) one scoped to
// appScope.
func newAuthCluster(t *testing.T, app consumer.Application) (*cluster, *authtest.Key) {
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
	pub, err := os.ReadFile(key.Public)
	if err != nil {
		t.Fatal(err)
	}
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
			{"not yet valid", key.NotYetValid("w", rpc.want, "prefix=counts/"), codes.Unauthenticated},
			{"unknown key", other.Token("w", rpc.want, "prefix=counts/", time.Hour), codes.Unauthenticated},
			{"tampered", parts[0] + "." + wider[1] + "." + parts[2], codes.Unauthenticated},
			{"alg none", authtest.Forged(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType), codes.Unauthenticated},
			{"HMAC where only Ed25519 is trusted", authtest.Forged(t, jwt.SigningMethodHS256, authtest.HMACSecret(t)), codes.Unauthenticated},
			{"HMAC keyed by the public key", authtest.Forged(t, jwt.SigningMethodHS256, pub), codes.Unauthenticated},
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

// Apply checks both the shard as it is and its new spec: a token for
// shards labelled app=orders can neither take over another app's shard by
// relabelling it, nor move its own out of its selector by relabelling it.
// It creates shards with its labels, though: a shard that does not exist
// yet has only its new spec to check. A delete of a shard that does not
// exist is checked against the shard's ID alone.
func TestShardApplyChecksOldAndNewLabels(t *testing.T) {
	c, key := newAuthCluster(t, counter{})
	p := c.fleet.Start("c1", "za")
	labelled := func(id, app string) *consumer.ShardSpec {
		spec := c.shardSpec(id, 0, id+"-in")
		spec.Labels = labels.Set{{Name: "app", Value: app}}
		return spec
	}
	c.apply(labelled("counts/mine", "orders"), labelled("counts/theirs", "billing"))
	c.brokers.Journals(c.journals, 3, "counts/new-in", labelled("counts/new", "orders").RecoveryLog())
	revs := map[string]int64{}
	list, err := c.shardClient().List(context.Background(), &protocol.ShardListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Shards {
		spec, err := consumer.UnmarshalShardSpec(s.Spec)
		if err != nil {
			t.Fatal(err)
		}
		revs[spec.ID] = s.ModRevision
	}
	sc := c.fleet.ClientWith(p, auth.StaticToken(key.Token("w", auth.Apply, "app=orders", time.Hour)))
	upsert := func(spec *consumer.ShardSpec) error {
		t.Helper()
		raw, err := consumer.MarshalShardSpec(spec.WithDefaults())
		if err != nil {
			t.Fatal(err)
		}
		_, err = sc.Apply(context.Background(), &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{
			{Upsert: raw, ExpectModRevision: revs[spec.ID]}}})
		return err
	}
	for _, tc := range []struct {
		what string
		call func() error
		want codes.Code
	}{
		{"relabel counts/theirs app=orders", func() error { return upsert(labelled("counts/theirs", "orders")) }, codes.PermissionDenied},
		{"relabel counts/mine app=billing", func() error { return upsert(labelled("counts/mine", "billing")) }, codes.PermissionDenied},
		{"delete counts/theirs", func() error {
			_, err := sc.Apply(context.Background(), &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{
				{Delete: "counts/theirs", ExpectModRevision: revs["counts/theirs"]}}})
			return err
		}, codes.PermissionDenied},
		{"delete the missing counts/missing", func() error {
			_, err := sc.Apply(context.Background(), &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{
				{Delete: "counts/missing", ExpectModRevision: 1}}})
			return err
		}, codes.PermissionDenied},
		{"create counts/other labelled app=billing", func() error { return upsert(labelled("counts/other", "billing")) }, codes.PermissionDenied},
		// The create under a label selector.
		{"create counts/new labelled app=orders", func() error { return upsert(labelled("counts/new", "orders")) }, codes.OK},
	} {
		if err := tc.call(); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.what, err, tc.want)
		}
	}
}

// Unassign checks its caller's rights before it says whether the shards
// exist: a token outside a shard's selector learns nothing of it, not even
// that it is missing.
func TestUnassignChecksBeforeSayingNotFound(t *testing.T) {
	c, key := newAuthCluster(t, counter{})
	p := c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("counts/shard-0", 0, "counts/in-0"))
	unassign := func(token string, shards ...string) (*protocol.UnassignResponse, error) {
		sc := c.fleet.ClientWith(p, auth.StaticToken(token))
		return sc.Unassign(context.Background(), &protocol.UnassignRequest{Shards: shards, DryRun: true})
	}
	billing := key.Token("billing", auth.Unassign, "prefix=billing/", time.Hour)
	for _, shards := range [][]string{{"counts/shard-0"}, {"counts/missing"}, {"billing/missing", "counts/missing"}} {
		if resp, err := unassign(billing, shards...); status.Code(err) != codes.PermissionDenied {
			t.Errorf("Unassign %v with billing's token: %v %v, want PermissionDenied", shards, resp, err)
		}
	}
	// Within its selector, a missing shard is named.
	if resp, err := unassign(billing, "billing/missing"); err != nil || resp.Status != protocol.Status_SHARD_NOT_FOUND {
		t.Errorf("Unassign billing/missing with billing's token: %v %v, want SHARD_NOT_FOUND", resp, err)
	}
	counts := key.Token("counts", auth.Unassign, "prefix=counts/", time.Hour)
	if resp, err := unassign(counts, "counts/shard-0"); err != nil || resp.Status != protocol.Status_OK {
		t.Errorf("Unassign counts/shard-0 with its token: %v %v, want OK", resp, err)
	}
}

// guardedCounter is the counter with an RPC of its own, Check, that an
// application's capability bit guards: Check of a shard needs appBit over
// it.
type guardedCounter struct{ counter }

var appBit = auth.ApplicationBit(17)

const checkMethod = "/quiretest.Guarded/Check"

// guardedDesc serves Check by hand, without generated code: it takes a
// ShardStatRequest naming the shard and answers an empty ShardStatResponse.
var guardedDesc = grpc.ServiceDesc{
	ServiceName: "quiretest.Guarded",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Check", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		req := new(protocol.ShardStatRequest)
		if err := dec(req); err != nil {
			return nil, err
		}
		check := func(ctx context.Context, req any) (any, error) {
			if err := srv.(*consumer.Server).Require(ctx, appBit, req.(*protocol.ShardStatRequest).Shard); err != nil {
				return nil, err
			}
			return &protocol.ShardStatResponse{Status: protocol.Status_OK}, nil
		}
		if ic == nil {
			return check(ctx, req)
		}
		return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: checkMethod}, check)
	}}},
}

func (guardedCounter) Register(gs *grpc.Server, srv *consumer.Server) {
	gs.RegisterService(&guardedDesc, srv)
}

// An application's own RPC checks its own capability bit with
// consumer.Server.Require: granted by a token naming it (APP17) over the
// shard, and by no other bit, Quire's or the application's.
func TestApplicationBitGuardsAnApplicationsRPC(t *testing.T) {
	c, key := newAuthCluster(t, guardedCounter{})
	p := c.fleet.Start("c1", "za")
	c.apply(c.shardSpec("counts/shard-0", 0, "counts/in-0"))
	app17, err := auth.ParseCapability("APP17")
	if err != nil || app17 != appBit {
		t.Fatalf(`ParseCapability("APP17") = %v, %v; want ApplicationBit(17)`, app17, err)
	}
	for _, tc := range []struct {
		name, token string
		want        codes.Code
	}{
		{"APP17", key.Token("w", app17, "prefix=counts/", time.Hour), codes.OK},
		{"APP17 among others", key.Token("w", auth.Stat|auth.ApplicationBit(16)|app17, "prefix=counts/", time.Hour), codes.OK},
		{"APP16", key.Token("w", auth.ApplicationBit(16), "prefix=counts/", time.Hour), codes.PermissionDenied},
		{"every capability of Quire's", key.Token("w", authtest.All, "prefix=counts/", time.Hour), codes.PermissionDenied},
		{"APP17 outside the selector", key.Token("w", app17, "prefix=billing/", time.Hour), codes.PermissionDenied},
		{"no token", "", codes.Unauthenticated},
	} {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if tc.token != "" {
			opts = append(opts, auth.DialOptions(auth.StaticToken(tc.token))...)
		}
		cc, err := grpc.NewClient(p.Endpoint, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = cc.Invoke(ctx, checkMethod, &protocol.ShardStatRequest{Shard: "counts/shard-0"}, new(protocol.ShardStatResponse))
		cancel()
		cc.Close()
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: Check: %v, want %s", tc.name, err, tc.want)
		}
	}
}
