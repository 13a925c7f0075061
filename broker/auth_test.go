package broker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/authtest"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/logtest"
	"github.com/quire-dev/quire/protocol"
)

// authFleet is three brokers that check tokens, with a journal of app
// orders and one of app billing, each at replication 3.
type authFleet struct {
	c     *brokertest.Cluster
	key   *authtest.Key
	admin string
	// entry is a broker that is not orders/a's primary: appends through it
	// are proxied.
	entry *brokertest.Broker
}

func newAuthFleet(t *testing.T) *authFleet {
	key := authtest.NewKey(t)
	c := brokertest.New(t)
	c.Auth = key.Authorizer()
	c.Token = auth.StaticToken(key.Token("brokers", authtest.Broker, "", time.Hour))
	for _, n := range []string{"a", "b", "c"} {
		c.Start(n)
	}
	f := &authFleet{c: c, key: key, admin: key.Token("admin", authtest.All, "", time.Hour)}
	admin := c.ClientWith(c.Brokers["a"], auth.StaticToken(f.admin))
	c.Apply(admin,
		&protocol.JournalSpec{Name: "orders/a", Replication: 3, Labels: []*protocol.Label{{Name: "app", Value: "orders"}}},
		&protocol.JournalSpec{Name: "billing/b", Replication: 3, Labels: []*protocol.Label{{Name: "app", Value: "billing"}}})
	resp, err := admin.List(context.Background(), &protocol.ListRequest{Selector: "name=orders/a"})
	if err != nil || len(resp.Journals) != 1 {
		t.Fatalf("List: %v %v", resp, err)
	}
	primary := resp.Journals[0].Route.Members[0].Suffix
	for n, b := range c.Brokers {
		if n != primary {
			f.entry = b
		}
	}
	// Raw appends to the entry do not retry: wait until its view holds the
	// route that the List above read.
	rev := resp.Header.GetRevision()
	if _, err := c.ClientWith(f.entry, auth.StaticToken(f.admin)).List(context.Background(),
		&protocol.ListRequest{Selector: "name=orders/a", WaitForRevision: rev}); err != nil {
		t.Fatalf("List at the entry, waiting for revision %d: %v", rev, err)
	}
	return f
}

// conn dials b, sending token with every request ("" for none).
func conn(t *testing.T, b *brokertest.Broker, token string) protocol.JournalClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, auth.DialOptions(auth.StaticToken(token))...)
	}
	cc, err := grpc.NewClient(b.Endpoint, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return protocol.NewJournalClient(cc)
}

// rpcs calls each of the Journal service's RPCs on orders/a, and returns
// its error: nil, or a gRPC status. An allowed call may still fail
// otherwise (a Replicate from no real primary, say); only
// Unauthenticated and PermissionDenied mean it was refused.
type journalRPC struct {
	name string
	want auth.Capability
	call func(ctx context.Context, jc protocol.JournalClient) error
}

var rpcs = []journalRPC{
	{"List", auth.List, func(ctx context.Context, jc protocol.JournalClient) error {
		resp, err := jc.List(ctx, &protocol.ListRequest{Selector: "name=orders/a"})
		if err == nil && len(resp.Journals) == 0 {
			// A List is never refused for its selector: it answers
			// only what the token may list. Not seeing orders/a is
			// its refusal.
			err = status.Error(codes.PermissionDenied, "orders/a is not listed")
		}
		return err
	}},
	{"Apply", auth.Apply, func(ctx context.Context, jc protocol.JournalClient) error {
		_, err := jc.Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{{ExpectModRevision: 0,
			Upsert: &protocol.JournalSpec{Name: "orders/a", Replication: 3, Labels: []*protocol.Label{{Name: "app", Value: "orders"}}}}}})
		return err
	}},
	{"Read", auth.Read, func(ctx context.Context, jc protocol.JournalClient) error {
		s, err := jc.Read(ctx, &protocol.ReadRequest{Journal: "orders/a"})
		if err == nil {
			_, err = s.Recv()
		}
		return err
	}},
	{"Append", auth.Append, func(ctx context.Context, jc protocol.JournalClient) error {
		s, err := jc.Append(ctx)
		if err == nil {
			s.Send(&protocol.AppendRequest{Journal: "orders/a"})
			s.Send(&protocol.AppendRequest{Content: []byte("order\n")})
			s.Send(&protocol.AppendRequest{})
			_, err = s.CloseAndRecv()
		}
		return err
	}},
	{"Appends", auth.Append, func(ctx context.Context, jc protocol.JournalClient) error {
		_, err := appendOnStream(ctx, jc, 1)
		return err
	}},
	{"ListFragments", auth.Read, func(ctx context.Context, jc protocol.JournalClient) error {
		_, err := jc.ListFragments(ctx, &protocol.FragmentsRequest{Journal: "orders/a"})
		return err
	}},
	{"StoreHealth", auth.List, func(ctx context.Context, jc protocol.JournalClient) error {
		resp, err := jc.StoreHealth(ctx, &protocol.StoreHealthRequest{Selector: "name=orders/a"})
		if err != nil {
			return err
		}
		// Like a List, a StoreHealth is never refused for its selector:
		// it checks the stores of the journals the token may list (and
		// the brokers' default stores). Every broker, asked as the
		// caller, must have counted orders/a.
		for _, b := range resp.Brokers {
			counted := false
			for _, st := range b.Stores {
				counted = counted || st.Journals == 1
			}
			if !counted {
				return status.Errorf(codes.PermissionDenied, "broker %v did not count orders/a: %v", b.ProcessId, b)
			}
		}
		return nil
	}},
	{"Suspend", auth.Apply, func(ctx context.Context, jc protocol.JournalClient) error {
		_, err := jc.Suspend(ctx, &protocol.SuspendRequest{Journal: "orders/a", Resume: true})
		return err
	}},
	{"Replicate", auth.Replicate, func(ctx context.Context, jc protocol.JournalClient) error {
		s, err := jc.Replicate(ctx)
		if err == nil {
			route := &protocol.Route{Members: []*protocol.ProcessID{{Zone: "zx", Suffix: "x"}, {Zone: "zy", Suffix: "y"}},
				Endpoints: []string{"127.0.0.1:1", "127.0.0.1:2"}}
			s.Send(&protocol.ReplicateRequest{Header: &protocol.Header{Route: route}, Journal: "orders/a",
				Proposal: &protocol.Fragment{Journal: "orders/a"}})
			_, err = s.Recv()
			s.CloseSend()
		}
		return err
	}},
}

// The table the issue asks for: every RPC, with the capability and a
// matching selector, and without each part of a valid token.
func TestEveryRPCChecksItsCapability(t *testing.T) {
	f := newAuthFleet(t)
	other := authtest.NewKey(t)
	pub, err := os.ReadFile(f.key.Public)
	if err != nil {
		t.Fatal(err)
	}
	for _, rpc := range rpcs {
		granted := f.key.Token("w", rpc.want, "app=orders", time.Hour)
		parts := strings.Split(granted, ".")
		wider := strings.Split(other.Token("w", authtest.All, "", time.Hour), ".")
		cases := []struct {
			name, token string
			want        codes.Code // codes.OK for allowed.
		}{
			{"granted", granted, codes.OK},
			{"by name prefix", f.key.Token("w", rpc.want, "prefix=orders/", time.Hour), codes.OK},
			{"lacking the capability", f.key.Token("w", authtest.All&^rpc.want, "app=orders", time.Hour), codes.PermissionDenied},
			{"outside the selector", f.key.Token("w", rpc.want, "app=billing", time.Hour), codes.PermissionDenied},
			{"expired", f.key.Token("w", rpc.want, "app=orders", -time.Hour), codes.Unauthenticated},
			{"not yet valid", f.key.NotYetValid("w", rpc.want, "app=orders"), codes.Unauthenticated},
			{"unknown key", other.Token("w", rpc.want, "app=orders", time.Hour), codes.Unauthenticated},
			{"tampered", parts[0] + "." + wider[1] + "." + parts[2], codes.Unauthenticated},
			{"alg none", authtest.Forged(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType), codes.Unauthenticated},
			{"HMAC where only Ed25519 is trusted", authtest.Forged(t, jwt.SigningMethodHS256, authtest.HMACSecret(t)), codes.Unauthenticated},
			{"HMAC keyed by the public key", authtest.Forged(t, jwt.SigningMethodHS256, pub), codes.Unauthenticated},
			{"no token", "", codes.Unauthenticated},
		}
		for _, tc := range cases {
			t.Run(rpc.name+"/"+tc.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := rpc.call(ctx, conn(t, f.entry, tc.token))
				got := status.Code(err)
				refused := got == codes.Unauthenticated || got == codes.PermissionDenied
				switch {
				case tc.want == codes.OK && refused:
					t.Fatalf("refused: %v", err)
				case tc.want != codes.OK && got != tc.want:
					t.Fatalf("error %v, want %s", err, tc.want)
				case refused && strings.Contains(status.Convert(err).Message(), tc.token) && tc.token != "":
					t.Fatalf("the error %q quotes the token", err)
				}
			})
		}
	}
}

// A List answers only what the token may list, and says nothing of the
// rest.
func TestListAnswersOnlyTheSelector(t *testing.T) {
	f := newAuthFleet(t)
	jc := conn(t, f.entry, f.key.Token("w", auth.List, "app=orders", time.Hour))
	resp, err := jc.List(context.Background(), &protocol.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range resp.Journals {
		names = append(names, j.Spec.Name)
	}
	if strings.Join(names, " ") != "orders/a" {
		t.Fatalf("List answered %q, want only orders/a", names)
	}
}

// A StoreHealth that names stores writes where its caller says, as a
// journal's spec can: it takes APPLY as well as LIST.
func TestStoreHealthOfNamedStoresTakesApply(t *testing.T) {
	f := newAuthFleet(t)
	req := &protocol.StoreHealthRequest{Stores: []string{"file://" + t.TempDir() + "/"}}
	_, err := conn(t, f.entry, f.key.Token("w", auth.List, "", time.Hour)).StoreHealth(context.Background(), req)
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "APPLY") {
		t.Errorf("StoreHealth naming a store with LIST alone: %v, want PermissionDenied for lack of APPLY", err)
	}
	resp, err := conn(t, f.entry, f.key.Token("w", auth.List|auth.Apply, "", time.Hour)).StoreHealth(context.Background(), req)
	if err != nil || len(resp.Brokers) != 3 {
		t.Fatalf("StoreHealth naming a store with LIST,APPLY: %v %v", resp, err)
	}
	for _, b := range resp.Brokers {
		if b.Error != "" || len(b.Stores) != 2 {
			t.Errorf("broker %v: %v, want its default store and the one named", b.ProcessId, b)
		}
	}
}

// Apply checks both the journal as it is and its new spec: a token for
// app orders can neither take over billing's journal by relabelling it,
// nor move its own journal out of its selector.
func TestApplyChecksOldAndNewLabels(t *testing.T) {
	f := newAuthFleet(t)
	jc := conn(t, f.entry, f.key.Token("w", auth.Apply, "app=orders", time.Hour))
	for _, spec := range []*protocol.JournalSpec{
		{Name: "billing/b", Replication: 3, Labels: []*protocol.Label{{Name: "app", Value: "orders"}}},
		{Name: "orders/a", Replication: 3, Labels: []*protocol.Label{{Name: "app", Value: "billing"}}},
	} {
		_, err := jc.Apply(context.Background(), &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
			{ExpectModRevision: 0, Upsert: spec}}})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("Apply of %s labelled %v: %v, want PermissionDenied", spec.Name, spec.Labels, err)
		}
	}
	_, err := jc.Apply(context.Background(), &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{{Delete: "billing/b", ExpectModRevision: 1}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("Apply deleting billing/b: %v, want PermissionDenied", err)
	}
}

// A token whose selector matches by label creates journals with those
// labels: a journal that does not exist yet has no labels to check but
// those of its new spec. It may not create one outside its selector, nor
// delete one that does not exist outside it (checked by name alone).
func TestApplyCreatesUnderALabelSelector(t *testing.T) {
	f := newAuthFleet(t)
	jc := conn(t, f.entry, f.key.Token("w", auth.Apply, "app=orders", time.Hour))
	apply := func(c *protocol.ApplyRequest_Change) error {
		_, err := jc.Apply(context.Background(), &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{c}})
		return err
	}
	orders := []*protocol.Label{{Name: "app", Value: "orders"}}
	if err := apply(&protocol.ApplyRequest_Change{Upsert: &protocol.JournalSpec{Name: "orders/new", Replication: 3, Labels: orders}}); err != nil {
		t.Fatalf("create orders/new labelled app=orders: %v, want it created", err)
	}
	if err := apply(&protocol.ApplyRequest_Change{Upsert: &protocol.JournalSpec{Name: "orders/other", Replication: 3,
		Labels: []*protocol.Label{{Name: "app", Value: "billing"}}}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("create orders/other labelled app=billing: %v, want PermissionDenied", err)
	}
	if err := apply(&protocol.ApplyRequest_Change{Delete: "orders/missing", ExpectModRevision: 1}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("delete the missing orders/missing: %v, want PermissionDenied (its name alone is not app=orders)", err)
	}
}

// With authorization on, a journal at replication 3 takes appends through
// a broker that proxies them to its primary (as the caller), replicates
// them (with the brokers' own token), and reads them back.
func TestProxiedAppendAndReplicationWithTokens(t *testing.T) {
	f := newAuthFleet(t)
	writer := f.c.ClientWith(f.entry, auth.StaticToken(f.key.Token("orders-writer", auth.Append|auth.Read|auth.List, "app=orders", time.Hour)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jc := conn(t, f.entry, f.key.Token("orders-writer", auth.Append, "app=orders", time.Hour))
	for i := range 3 {
		s, err := jc.Append(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&protocol.AppendRequest{Journal: "orders/a"})
		s.Send(&protocol.AppendRequest{Content: []byte("order\n")})
		s.Send(&protocol.AppendRequest{})
		resp, err := s.CloseAndRecv()
		if err != nil || resp.Status != protocol.Status_OK {
			t.Fatalf("proxied append %d: %v %v", i, resp, err)
		}
	}
	r := writer.NewReader(ctx, client.ReadRequest{Journal: "orders/a", EndOffset: 18, Block: true})
	got, err := io.ReadAll(r)
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if string(got) != "order\norder\norder\n" {
		t.Fatalf("read %q", got)
	}
}

// startWith starts one broker checking tokens with authz, and a journal
// orders/a on it, created with an admin token of key.
func startWith(t *testing.T, authz *auth.Authorizer, key *authtest.Key) *brokertest.Broker {
	c := brokertest.New(t)
	c.Auth = authz
	c.Token = auth.StaticToken(key.Token("brokers", authtest.Broker, "", time.Hour))
	b := c.Start("a")
	admin := c.ClientWith(b, auth.StaticToken(key.Token("admin", authtest.All, "", time.Hour)))
	c.Journals(admin, 1, "orders/a")
	return b
}

// Rollout mode accepts requests without a token, and still refuses
// invalid tokens and tokens that lack what a request needs.
func TestRolloutAcceptsOnlyMissingTokens(t *testing.T) {
	key := authtest.NewKey(t)
	authz, err := auth.New(auth.Config{Keys: []string{key.Public}, Rollout: true})
	if err != nil {
		t.Fatal(err)
	}
	b := startWith(t, authz, key)
	read := rpcNamed(t, "Read")
	for _, tc := range []struct {
		name, token string
		want        codes.Code
	}{
		{"no token", "", codes.OK},
		{"granted", key.Token("w", auth.Read, "", time.Hour), codes.OK},
		{"expired", key.Token("w", auth.Read, "", -time.Hour), codes.Unauthenticated},
		{"unknown key", authtest.NewKey(t).Token("w", auth.Read, "", time.Hour), codes.Unauthenticated},
		{"lacking", key.Token("w", auth.Append, "", time.Hour), codes.PermissionDenied},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := read.call(ctx, conn(t, b, tc.token))
		cancel()
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s: Read: %v, want %s", tc.name, err, tc.want)
		}
	}
}

// Keys rotate without a restart: while the trusted file holds both keys,
// tokens of either work; once the old key is removed, its tokens are
// refused (within the second in which the file is read again).
func TestKeyRotationWithoutRestart(t *testing.T) {
	oldKey, newKey := authtest.NewKey(t), authtest.NewKey(t)
	oldPub, _ := os.ReadFile(oldKey.Public)
	newPub, _ := os.ReadFile(newKey.Public)
	trusted := t.TempDir() + "/trusted.pub"
	if err := os.WriteFile(trusted, oldPub, 0o644); err != nil {
		t.Fatal(err)
	}
	authz, err := auth.New(auth.Config{Keys: []string{trusted}})
	if err != nil {
		t.Fatal(err)
	}
	b := startWith(t, authz, oldKey)
	byOld, byNew := oldKey.Token("w", auth.Read, "", time.Hour), newKey.Token("w", auth.Read, "", time.Hour)
	read := rpcNamed(t, "Read")
	// awaitCode reads with token until the broker answers want: keys are
	// read again at most once a second.
	awaitCode := func(token string, want codes.Code) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := read.call(ctx, conn(t, b, token))
			cancel()
			if status.Code(err) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Read: %v, want %s", err, want)
			}
			time.Sleep(50 * time.Millisecond) // Until the broker reads the key file again.
		}
	}
	awaitCode(byOld, codes.OK)
	awaitCode(byNew, codes.Unauthenticated)
	if err := os.WriteFile(trusted, append(oldPub, newPub...), 0o644); err != nil {
		t.Fatal(err)
	}
	awaitCode(byNew, codes.OK)
	awaitCode(byOld, codes.OK)
	if err := os.WriteFile(trusted, newPub, 0o644); err != nil {
		t.Fatal(err)
	}
	awaitCode(byOld, codes.Unauthenticated)
	awaitCode(byNew, codes.OK)
}

func rpcNamed(t *testing.T, name string) journalRPC {
	for _, r := range rpcs {
		if r.name == name {
			return r
		}
	}
	t.Fatalf("no RPC %s", name)
	return rpcs[0]
}

// captureLog makes the default logger, which auth's audit trail writes
// to, write into a log the test reads, until the test ends.
func captureLog(t *testing.T) *logtest.Log {
	log := new(logtest.Log)
	prev := slog.Default()
	slog.SetDefault(log.Logger(slog.LevelInfo))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return log
}

// counter reads the counter name{labels} of the default registry, 0 if it
// has no such series yet.
func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Every refused request is logged with what the audit needs (who, what
// capability, on what) and counted by capability and reason, once, and
// neither the log nor the metric carries the token.
func TestDeniedRequestsAreAuditedAndCounted(t *testing.T) {
	f := newAuthFleet(t)
	log := captureLog(t)
	appendRPC := rpcNamed(t, "Append")
	outside := f.key.Token("billing-writer", auth.Append, "app=billing", time.Hour)
	lacking := f.key.Token("orders-reader", auth.Read, "app=orders", time.Hour)
	expired := f.key.Token("orders-writer", auth.Append, "app=orders", -time.Hour)
	for _, tc := range []struct {
		name, token string
		code        codes.Code
		counted     map[string]string // the labels of quire_auth_denied_total it counts in.
		logged      logtest.Record    // what its record holds.
	}{
		{"outside the selector", outside, codes.PermissionDenied, map[string]string{"capability": "APPEND", "reason": "selector"},
			logtest.Record{"msg": "auth: request denied", "subject": "billing-writer", "capability": "APPEND", "kind": "journal", "name": "orders/a", "reason": "selector"}},
		{"lacking the capability", lacking, codes.PermissionDenied, map[string]string{"capability": "APPEND", "reason": "capability"},
			logtest.Record{"msg": "auth: request denied", "subject": "orders-reader", "capability": "APPEND", "kind": "journal", "name": "orders/a", "reason": "capability"}},
		{"expired", expired, codes.Unauthenticated, map[string]string{"capability": "", "reason": "invalid"},
			logtest.Record{"msg": "auth: request refused", "method": protocol.Journal_Append_FullMethodName, "reason": "invalid"}},
		{"no token", "", codes.Unauthenticated, map[string]string{"capability": "", "reason": "missing"},
			logtest.Record{"msg": "auth: request refused", "method": protocol.Journal_Append_FullMethodName, "reason": "missing"}},
	} {
		before := counter(t, "quire_auth_denied_total", tc.counted)
		logged := len(log.Records(t, tc.logged))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := appendRPC.call(ctx, conn(t, f.entry, tc.token))
		cancel()
		if status.Code(err) != tc.code {
			t.Errorf("%s: Append: %v, want %s", tc.name, err, tc.code)
		}
		if d := counter(t, "quire_auth_denied_total", tc.counted) - before; d != 1 {
			t.Errorf("%s: quire_auth_denied_total%v rose by %v, want 1", tc.name, tc.counted, d)
		}
		if n := len(log.Records(t, tc.logged)) - logged; n != 1 {
			t.Errorf("%s: %d records %v logged, want 1; the log:\n%s", tc.name, n, tc.logged, log)
		}
	}
	for _, tok := range []string{outside, lacking, expired} {
		if strings.Contains(log.String(), tok) || strings.Contains(log.String(), strings.Split(tok, ".")[2]) {
			t.Fatalf("the log quotes a token:\n%s", log)
		}
	}
}

// Rollout mode counts each request it accepts without a token by method,
// and logs the method, so that operators find the clients still to be
// given tokens.
func TestRolloutCountsAndLogsOpenRequests(t *testing.T) {
	key := authtest.NewKey(t)
	authz, err := auth.New(auth.Config{Keys: []string{key.Public}, Rollout: true})
	if err != nil {
		t.Fatal(err)
	}
	b := startWith(t, authz, key)
	log := captureLog(t)
	method := map[string]string{"method": protocol.Journal_Read_FullMethodName}
	before := counter(t, "quire_auth_rollout_accepted_total", method)
	read := rpcNamed(t, "Read")
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := read.call(ctx, conn(t, b, ""))
		cancel()
		if err != nil {
			t.Fatalf("Read without a token in rollout mode: %v", err)
		}
	}
	if d := counter(t, "quire_auth_rollout_accepted_total", method) - before; d != 3 {
		t.Errorf("quire_auth_rollout_accepted_total%v rose by %v, want 3", method, d)
	}
	// Logged once a minute per method at most: once here.
	if n := len(log.Records(t, logtest.Record{"msg": "auth: rollout mode accepted a request without a token",
		"method": protocol.Journal_Read_FullMethodName})); n != 1 {
		t.Errorf("%d records of the accepted reads, want 1; the log:\n%s", n, log)
	}
}

// appendOnStream opens an Appends stream and makes n appends to orders/a
// on it, one at a time, until one fails: it returns how many were
// answered without an error, and that error.
func appendOnStream(ctx context.Context, jc protocol.JournalClient, n int) (int, error) {
	s, err := jc.Appends(ctx)
	if err != nil {
		return 0, err
	}
	defer s.CloseSend()
	for i := range n {
		if err := s.Send(&protocol.AppendRequest{Journal: "orders/a", Content: []byte("order\n"), Commit: true, Tag: uint64(i + 1)}); err != nil {
			return i, err
		}
		resp, err := s.Recv()
		if err != nil {
			return i, err
		}
		if resp.ErrorCode != 0 {
			return i, status.Error(codes.Code(resp.ErrorCode), resp.ErrorMessage)
		}
	}
	return n, nil
}

// An Appends stream outlives the token it began with; each append checks
// the token's expiry again, and once it is past, is refused.
func TestAppendsStreamRefusesAnExpiredToken(t *testing.T) {
	f := newAuthFleet(t)
	// Expired, but within the leeway for 3 s more.
	token := f.key.Token("w", auth.Append, "app=orders", -(auth.Leeway - 3*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := appendOnStream(ctx, conn(t, f.entry, token), 1<<20)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("after %d appends: %v, want Unauthenticated: the token expired", n, err)
	}
	if n == 0 {
		t.Errorf("the first append was refused; want it taken while the token was valid")
	}
}
