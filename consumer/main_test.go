package consumer_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/internal/tlstest"
	"github.com/quire-dev/quire/protocol"
)

// servedCounter is the counter with a service of its own (gRPC health),
// and a name.
type servedCounter struct{ counter }

func (servedCounter) Name() string { return "counting" }

func (servedCounter) Register(gs *grpc.Server, srv *consumer.Server) {
	grpc_health_v1.RegisterHealthServer(gs, health.NewServer())
}

// runMain runs the command of Main in-process.
func runMain(ctx context.Context, app consumer.Application, args ...string) error {
	cmd := consumer.NewCommand(app)
	cmd.SetArgs(args)
	return cmd.ExecuteContext(ctx)
}

func clearEnv(t *testing.T) {
	for _, v := range []string{"QUIRE_ETCD", "QUIRE_CONSUMER_PREFIX", "QUIRE_ZONE", "QUIRE_SUFFIX",
		"QUIRE_LISTEN", "QUIRE_CONSUMER_DIR", "QUIRE_BROKER", "QUIRE_METRICS", "QUIRE_ADMIN", "QUIRE_PPROF",
		"QUIRE_TLS_CERT", "QUIRE_TLS_KEY", "QUIRE_TLS_CA", "QUIRE_ETCD_CERT", "QUIRE_ETCD_KEY", "QUIRE_ETCD_CA",
		"QUIRE_UNASSIGN_FAILED_AFTER"} {
		t.Setenv(v, "")
	}
}

func TestServeFlags(t *testing.T) {
	clearEnv(t)
	base := []string{"serve", "--prefix", "/quire/consumers/counting/"}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{args: []string{"--prefix", ""}, want: "--prefix is empty"},
		{args: []string{"--prefix", "quire/"}, want: `--prefix "quire/"`},
		{args: []string{"--prefix", "/"}, want: `--prefix "/"`},
		{args: []string{"--etcd", ""}, want: "--etcd is empty"},
		{args: []string{"--etcd", "a:1,,b:2"}, want: "an endpoint is empty"},
		{args: []string{"--etcd", "etcd"}, want: `--etcd "etcd": endpoint "etcd": want host:port`},
		{args: []string{"--etcd", "htp://etcd:2379"}, want: `want http:// or https://`},
		{args: []string{"--zone", "a#b"}, want: "--zone"},
		{args: []string{"--zone", ""}, want: "--zone is empty"},
		{args: []string{"--suffix", "a/b"}, want: "--suffix"},
		{args: []string{"--listen", "7702"}, want: `--listen "7702"`},
		{args: []string{"--listen", "127.0.0.1:99999"}, want: `--listen "127.0.0.1:99999"`},
		{args: []string{"--advertise", "host:0"}, want: `--advertise "host:0"`},
		{args: []string{"--broker", ""}, want: "--broker is empty"},
		{args: []string{"--broker", "nowhere"}, want: `--broker "nowhere"`},
		{args: []string{"--broker", "b1:7700,,b2:7700"}, want: "an address is empty"},
		{args: []string{"--broker", "b1:7700,b2"}, want: `--broker "b2"`},
		{args: []string{"--metrics", "9100"}, want: `--metrics "9100"`},
		{args: []string{"--admin", "9100"}, want: `--admin "9100"`},
		{args: []string{"--pprof"}, want: "--pprof without --admin"},
		{env: map[string]string{"QUIRE_ADMIN": "here"}, want: `--admin "here"`},
		{args: []string{"--limit", "0"}, want: "--limit 0"},
		{args: []string{"--limit", "many"}, want: `"many"`},
		{args: []string{"--lease-ttl", "100ms"}, want: "--lease-ttl 100ms"},
		{args: []string{"--log-level", "loud"}, want: `--log-level "loud"`},
		{args: []string{"extra"}, want: `unknown command "extra"`},
		{args: []string{"--tls-ca", "ca.pem"}, want: "--tls-ca without --tls-cert"},
		{args: []string{"--unassign-failed-after", "-1s"}, want: "--unassign-failed-after -1s"},
		{args: []string{"--drain-timeout", "-1s"}, want: "--drain-timeout -1s"},
		{env: map[string]string{"QUIRE_UNASSIGN_FAILED_AFTER": "soon"}, want: `QUIRE_UNASSIGN_FAILED_AFTER "soon"`},
		{args: []string{"--tls-cert", "cert.pem"}, want: "has no key file"},
		{args: []string{"--etcd-key", "key.pem"}, want: "--etcd-cert, --etcd-key, --etcd-ca"},
		{env: map[string]string{"QUIRE_TLS_KEY": "key.pem"}, want: "has no certificate file"},
		// Flags fall back to the environment.
		{env: map[string]string{"QUIRE_CONSUMER_PREFIX": "nope"}, want: `--prefix "nope"`},
		{env: map[string]string{"QUIRE_BROKER": "nowhere"}, want: `--broker "nowhere"`},
		{env: map[string]string{"QUIRE_LISTEN": "here"}, want: `--listen "here"`},
		{env: map[string]string{"QUIRE_METRICS": "here"}, want: `--metrics "here"`},
		{env: map[string]string{"QUIRE_ZONE": "a b"}, want: "--zone"},
		{env: map[string]string{"QUIRE_SUFFIX": "a#b"}, want: "--suffix"},
		{env: map[string]string{"QUIRE_ETCD": " "}, want: "--etcd is empty"},
	} {
		t.Run(strings.Join(tc.args, " ")+mapString(tc.env), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := base
			if tc.env["QUIRE_CONSUMER_PREFIX"] != "" {
				args = []string{"serve"}
			}
			err := runMain(context.Background(), counter{}, append(args, tc.args...)...)
			if !errors.As(err, new(consumer.UsageError)) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want a usage error with %q", err, tc.want)
			}
		})
	}
}

func mapString(m map[string]string) string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	return strings.Join(s, ",")
}

func TestServeDefaults(t *testing.T) {
	clearEnv(t)
	cmd := consumer.NewCommand(servedCounter{})
	if cmd.Name() != "counting" {
		t.Errorf("command named %q, want the application's name", cmd.Name())
	}
	serve, _, err := cmd.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{
		"prefix": "/quire/consumers/counting/", "etcd": "http://127.0.0.1:7701", "broker": "127.0.0.1:7700",
		"zone": "local", "listen": "127.0.0.1:0", "lease-ttl": "8s", "drain-timeout": "20s",
	} {
		if got := serve.Flags().Lookup(flag).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", flag, got, want)
		}
	}
	// Without a name, there is no default prefix.
	if err := runMain(context.Background(), counter{}, "serve"); err == nil || !strings.Contains(err.Error(), "--prefix is empty") {
		t.Errorf("serve without a prefix: %v", err)
	}
}

// serve runs a consumer process of the counter (with its own service) as
// Main's serve command does, answers the Shard service and the
// application's, and drains on SIGTERM.
func TestServe(t *testing.T) {
	clearEnv(t)
	bc := brokertest.New(t)
	b := bc.Start("b1")
	journals := bc.Client(b)
	root := strings.TrimSuffix(bc.Root, "/") + "-served/"
	port := freeport.Port(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	dir := t.TempDir()
	t.Setenv("QUIRE_BROKER", b.Endpoint) // Flags fall back to the environment.
	t.Setenv("QUIRE_METRICS", metricsAddr)
	done := make(chan error, 1)
	go func() {
		done <- runMain(context.Background(), servedCounter{}, "serve", "--etcd", etcdtest.Shared(t).Endpoint(),
			"--prefix", root, "--zone", "z1", "--listen", addr, "--dir", dir, "--lease-ttl", "3s", "--log-level", "warn")
	}()
	hostname, _ := os.Hostname()
	memberKey := allocator.MemberKey(root, "z1", hostname+"-"+strconv.Itoa(port)) // The default suffix.
	awaitMember(t, bc.Etcd, memberKey, true, done)

	// Another process on the same directory is refused.
	err := runMain(context.Background(), servedCounter{}, "serve", "--etcd", etcdtest.Shared(t).Endpoint(),
		"--prefix", root, "--listen", "127.0.0.1:0", "--dir", dir)
	if !errors.As(err, new(consumer.UsageError)) || !strings.Contains(err.Error(), "in use by another consumer process") {
		t.Errorf("a second process on %s: %v", dir, err)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc, err := grpc_health_v1.NewHealthClient(conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	if err != nil || hc.Status != grpc_health_v1.HealthCheckResponse_SERVING {
		t.Errorf("the application's own service: %v %v", hc, err)
	}

	// A shard, served by the process.
	shards := protocol.NewShardClient(conn)
	spec := servedShard(ctx, t, bc, journals, shards, "served", root)
	if r := awaitPrimary(ctx, t, shards).Replicas; len(r) != 1 || r[0].Endpoint != addr {
		t.Errorf("replicas %v, want one at %s", r, addr)
	}

	// Its metrics are served, the recorder's among them: the shard's store
	// was recorded as it opened.
	metrics := scrape(t, "http://"+metricsAddr+"/metrics")
	for _, name := range []string{"quire_consumer_txns_total", "quire_recoverylog_appends_total",
		"quire_recoverylog_sync_seconds_count", "quire_recoverylog_appended_bytes_total"} {
		if v, ok := metrics[name]; !ok || (name != "quire_consumer_txns_total" && v <= 0) {
			t.Errorf("metric %s: %v (present %v), want a positive value", name, v, ok)
		}
	}

	if code, body := httpGet(t, "http://"+metricsAddr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz while serving: %d %q", code, body)
	}
	// Alone, the process cannot hand its shard to another: its drain
	// waits, and it says it is not ready meanwhile. Deleting the shard
	// lets the drain complete.
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for {
		code, body := httpGet(t, "http://"+metricsAddr+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("/readyz after SIGTERM: %d %q, want 503 draining", code, body)
		}
		time.Sleep(20 * time.Millisecond) // Polling the process's readiness.
	}
	if resp, err := shards.Apply(ctx, &protocol.ShardApplyRequest{
		Changes: []*protocol.ShardApplyRequest_Change{{Delete: spec.ID, ExpectModRevision: 0}}}); err != nil || resp.Status != protocol.Status_REVISION_MISMATCH {
		t.Fatalf("delete expecting no shard: %v %v", resp, err)
	}
	list, err := shards.List(ctx, &protocol.ShardListRequest{})
	if err != nil || len(list.Shards) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	if resp, err := shards.Apply(ctx, &protocol.ShardApplyRequest{Changes: []*protocol.ShardApplyRequest_Change{
		{Delete: spec.ID, ExpectModRevision: list.Shards[0].ModRevision}}}); err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("delete: %v %v", resp, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after draining, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit after SIGTERM")
	}
	awaitMember(t, bc.Etcd, memberKey, false, nil)
}

// awaitMember waits until member key exists (or not).
func awaitMember(t *testing.T, etcd *clientv3.Client, key string, exists bool, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := etcd.Get(context.Background(), key)
		if err == nil && (len(resp.Kvs) == 1) == exists {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("member key %s: exists %v, want %v (%v)", key, !exists, exists, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scrape returns the unlabelled samples of the Prometheus text at url.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping %s: %s %v", url, resp.Status, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// A consumer process serving mutual TLS, with brokers that serve it too:
// its shard plays and records its recovery log and reads its source over
// TLS, and it answers clients that present a certificate of the CA, and
// no others.
func TestServeTLS(t *testing.T) {
	clearEnv(t)
	pki := tlstest.New(t)
	files := tlsconfig.Files{Cert: pki.ServerCert, Key: pki.ServerKey, CA: pki.CA}
	serverOpts, err := files.ServerOptions()
	if err != nil {
		t.Fatal(err)
	}
	clientFiles := tlsconfig.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA}
	dialOpts, err := clientFiles.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	bc := brokertest.New(t)
	bc.ServerOptions, bc.DialOptions = serverOpts, dialOpts
	b := bc.Start("b1")
	journals := bc.Client(b)
	root := strings.TrimSuffix(bc.Root, "/") + "-tls/"
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- runMain(serveCtx, servedCounter{}, "serve", "--etcd", etcdtest.Shared(t).Endpoint(),
			"--prefix", root, "--zone", "z1", "--suffix", "tls", "--listen", addr, "--broker", b.Endpoint,
			"--lease-ttl", "3s", "--log-level", "warn",
			"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-ca", pki.CA)
	}()
	defer func() { stop(); <-done }()
	awaitMember(t, bc.Etcd, allocator.MemberKey(root, "z1", "tls"), true, done)

	conn, err := grpc.NewClient(addr, dialOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	shards := protocol.NewShardClient(conn)
	servedShard(ctx, t, bc, journals, shards, "tls", root)
	awaitPrimary(ctx, t, shards)

	for name, opts := range map[string][]grpc.DialOption{
		"plaintext":             {grpc.WithTransportCredentials(insecure.NewCredentials())},
		"no client certificate": mustDialOptions(t, tlsconfig.Files{CA: pki.CA}),
	} {
		c, err := grpc.NewClient(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
		if _, err := protocol.NewShardClient(c).List(short, &protocol.ShardListRequest{}); err == nil {
			t.Errorf("%s: a client was answered by a process that requires mutual TLS", name)
		}
		cancelShort()
		c.Close()
	}
}

// servedShard applies a shard NAME/shard-0 of a source NAME/in-0, with a
// recovery log, through shards.
func servedShard(ctx context.Context, t *testing.T, bc *brokertest.Cluster, journals *client.Client,
	shards protocol.ShardClient, name, root string) *consumer.ShardSpec {
	t.Helper()
	spec := &consumer.ShardSpec{ID: name + "/shard-0", Sources: []consumer.Source{{Journal: name + "/in-0"}},
		RecoveryLogPrefix: "recovery", HintPrefix: root + "hints/"}
	bc.Journals(journals, 1, name+"/in-0", spec.RecoveryLog())
	raw, err := consumer.MarshalShardSpec(spec.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := shards.Apply(ctx, &protocol.ShardApplyRequest{
		Changes: []*protocol.ShardApplyRequest_Change{{Upsert: raw}}}); err != nil || resp.Status != protocol.Status_OK {
		t.Fatalf("apply: %v %v", resp, err)
	}
	return spec
}

// awaitPrimary polls until the only shard is PRIMARY, and returns it.
func awaitPrimary(ctx context.Context, t *testing.T, shards protocol.ShardClient) *protocol.ShardListResponse_Shard {
	t.Helper()
	for {
		list, err := shards.List(ctx, &protocol.ShardListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Shards) == 1 && list.Shards[0].Status.GetCode() == protocol.ReplicaCode_PRIMARY {
			return list.Shards[0]
		}
		if ctx.Err() != nil {
			t.Fatalf("shard not PRIMARY: %v", list)
		}
		time.Sleep(20 * time.Millisecond) // Polling the shard's status.
	}
}

func mustDialOptions(t *testing.T, f tlsconfig.Files) []grpc.DialOption {
	t.Helper()
	opts, err := f.DialOptions()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

// httpGet returns the status code and body of a GET of url.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
