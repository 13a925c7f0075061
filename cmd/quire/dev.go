package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/console"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/gateway"
	"github.com/quire-dev/quire/internal/admin"
	"github.com/quire-dev/quire/internal/authflag"
	"github.com/quire-dev/quire/internal/devetcd"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/internal/rpcmetrics"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// The dev cluster's fixed names: one broker, in etcd under the brokers'
// usual prefix, and one process of the word-count example application,
// under its usual prefix.
const (
	devPrefix         = "/quire/brokers/"
	devConsumerPrefix = "/quire/consumers/wordcount/"
	devZone           = "local"
	devSuffix         = "dev"
	// devConsumerAddr is where quire dev serves the word count by
	// default, and where its commands look for it.
	devConsumerAddr = "127.0.0.1:7702"
)

type devFlags struct {
	dir                                        string
	port, etcdPort, etcdPeerPort, consumerPort int
	admin                                      admin.Flags
	console                                    consoleFlags
	auth                                       authflag.Server
}

// devAdminAddr is where quire dev serves its admin endpoint by default.
const devAdminAddr = "127.0.0.1:7704"

func newDevCommand() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev [--dir DIR]",
		Short: "Run a development cluster: etcd, a broker and the word-count consumer, in this process",
		Long: `Run a complete Quire cluster for development in one process: an embedded
etcd, one broker, and one process of the word-count example consumer
application (examples/wordcount), listening on loopback. Everything lives
under --dir: etcd's data in DIR/etcd, the broker's spools in DIR/spools,
journals' fragments in the file store DIR/store/, and the shards' local
stores (played back from their recovery logs at each start) in
DIR/consumer. On its first start it creates the word count's journals and
shards. Run it again on the same directory and it serves everything
written before, even after a kill -9.

Once it prints "quire dev: ready", every 'quire journals' and 'quire shards' command
works with no flags, from another terminal, as do 'go run ./examples/wordcount
publish' and 'query'. Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDev(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", ".quire", "directory of the cluster's data")
	fl.IntVar(&f.port, "port", 7700, "loopback port of the broker's gRPC")
	fl.IntVar(&f.etcdPort, "etcd-port", 7701, "loopback port of etcd's clients")
	fl.IntVar(&f.etcdPeerPort, "etcd-peer-port", 0, "loopback port of etcd's peer listener (default: the first port after --etcd-port that no other flag takes, 7703)")
	fl.IntVar(&f.consumerPort, "consumer-port", 7702, "loopback port of the word-count consumer's gRPC")
	f.admin.AddFlags(fl, devAdminAddr)
	f.console.addFlags(fl, "/quire/")
	f.auth.AddFlags(fl, "quire dev (its broker and its word count)")
	return cmd
}

func (f *devFlags) validate() error {
	if err := f.admin.Validate(); err != nil {
		return usageError{err}
	}
	adminPort := -1 // None, or not on loopback's ports.
	if f.admin.Addr != "" {
		_, port, _ := net.SplitHostPort(f.admin.Addr)
		if p, _ := strconv.Atoi(port); p != 0 {
			adminPort = p
		}
	}
	if f.etcdPeerPort == 0 {
		f.etcdPeerPort = f.etcdPort + 1
		for f.etcdPeerPort == f.port || f.etcdPeerPort == f.consumerPort || f.etcdPeerPort == adminPort {
			f.etcdPeerPort++
		}
	}
	ports := []struct {
		flag string
		port int
	}{{"--port", f.port}, {"--etcd-port", f.etcdPort}, {"--etcd-peer-port", f.etcdPeerPort}, {"--consumer-port", f.consumerPort}}
	if adminPort > 0 {
		ports = append(ports, struct {
			flag string
			port int
		}{"--admin", adminPort})
	}
	for i, p := range ports {
		if p.port < 1 || p.port > 65535 {
			return usagef("%s %d: want a port from 1 to 65535", p.flag, p.port)
		}
		for _, q := range ports[:i] {
			if p.port == q.port {
				return usagef("%s %d and %s %d: want different ports", q.flag, q.port, p.flag, p.port)
			}
		}
	}
	if f.dir == "" {
		return usagef("--dir is empty")
	}
	if err := f.auth.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// devAuth is quire dev's authorization: the Authorizer of its servers, and
// their own token. Without --token, quire dev mints its own with a private
// key among --auth-keys (quire auth keygen's PREFIX.key), and signer is
// that key.
type devAuth struct {
	authz  *auth.Authorizer
	token  auth.TokenSource
	signer *auth.SigningKey
}

func (f *devFlags) authorization() (devAuth, error) {
	var a devAuth
	var err error
	if a.authz, err = f.auth.Authorizer(); err != nil {
		return a, usageError{err}
	} else if a.authz == nil {
		return a, nil
	}
	if a.token, err = f.auth.Source(); err != nil {
		return a, usageError{err}
	} else if a.token != nil {
		return a, nil
	}
	for _, file := range f.auth.Keys {
		if key, err := auth.LoadSigningKey(file); err == nil {
			a.signer = &key
			a.token = auth.Minted(key, "quire-dev", auth.All, labels.Selector{}, time.Hour)
			return a, nil
		}
	}
	return a, usagef("--auth-keys %s holds no private key for quire dev to mint its own token with: give --token (one with every capability, from 'quire auth token'), or a PREFIX.key among --auth-keys",
		strings.Join(f.auth.Keys, ","))
}

// dialOptions are those of quire dev's own clients.
func (d devCluster) dialOptions() []grpc.DialOption { return auth.DialOptions(d.auth.token) }

func runDev(ctx context.Context, stdout io.Writer, f devFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := tuneGC(); err != nil {
		return err
	}
	authorization, err := f.authorization()
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(f.dir)
	if err != nil {
		return usagef("--dir %q: %w", f.dir, err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "spools"), filepath.Join(dir, "store"), filepath.Join(dir, "consumer")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	unlock, err := lockDevDir(dir)
	if err != nil {
		return err
	}
	defer unlock()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(f.port))
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--port %d: %s is in use or cannot be bound (another quire dev?): %w", f.port, addr, err)
	}
	defer lis.Close()
	consumerAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(f.consumerPort))
	consumerLis, err := net.Listen("tcp", consumerAddr)
	if err != nil {
		return fmt.Errorf("--consumer-port %d: %s is in use or cannot be bound (another quire dev?): %w", f.consumerPort, consumerAddr, err)
	}
	defer consumerLis.Close()
	var ready devReady
	adm, err := f.admin.Serve(ready.Ready)
	if err != nil {
		return fmt.Errorf("%w (another quire dev?)", err)
	}
	defer adm.Close()
	etcd, err := devetcd.Start(devetcd.Config{Dir: filepath.Join(dir, "etcd"), ClientPort: f.etcdPort, PeerPort: f.etcdPeerPort})
	if err != nil {
		return fmt.Errorf("starting etcd (--etcd-port %d, --etcd-peer-port %d): %w", f.etcdPort, f.etcdPeerPort, err)
	}
	defer etcd.Close()
	client, err := etcd.Client()
	if err != nil {
		return err
	}
	defer client.Close()
	return runDevBroker(ctx, stdout, devCluster{dir: dir, etcd: etcd, client: client, lis: lis, consumerLis: consumerLis,
		admin: adm, ready: &ready, auth: authorization, console: f.console})
}

// devCluster is what runDevBroker runs a broker and the word count on.
type devCluster struct {
	dir         string
	etcd        *devetcd.Server
	client      *clientv3.Client
	lis         net.Listener
	consumerLis net.Listener
	admin       *admin.Server // nil if none
	ready       *devReady
	auth        devAuth
	console     consoleFlags
}

// devReady is quire dev's readiness: its broker's and its word count's,
// once each exists.
type devReady struct{ broker, consumer atomic.Pointer[func() error] }

func (r *devReady) Ready() error {
	for _, c := range []struct {
		name  string
		ready *atomic.Pointer[func() error]
	}{{"broker", &r.broker}, {"word count", &r.consumer}} {
		f := c.ready.Load()
		if f == nil {
			return fmt.Errorf("%s: starting", c.name)
		}
		if err := (*f)(); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

func (d devCluster) store() string { return "file://" + filepath.Join(d.dir, "store") + "/" }

// runDevBroker runs the dev cluster's broker until a signal (or ctx)
// stops it, and then removes its member key.
func runDevBroker(ctx context.Context, stdout io.Writer, d devCluster) error {
	memberKey := allocator.MemberKey(devPrefix, devZone, devSuffix)
	// This process holds the directory's lock, so a member key of ours in
	// etcd was left by a quire dev that died: remove it rather than wait
	// for its lease to expire.
	if removed, err := revokeMember(ctx, d.client, memberKey); err != nil {
		return err
	} else if removed {
		slog.Info("removed the broker's member key that a previous quire dev left")
	}
	srv, err := broker.New(broker.Config{
		Etcd: d.client, Root: devPrefix, Zone: devZone, Suffix: devSuffix, Endpoint: d.lis.Addr().String(),
		Dir: filepath.Join(d.dir, "spools"), DefaultStore: d.store(), Logger: slog.Default(),
		DialOptions: d.dialOptions(), Auth: d.auth.authz,
	})
	if err != nil {
		return err
	}
	d.ready.broker.Store(ptr(srv.Ready))
	sigCtx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	// The broker outlives a signal: the consumer stops first, and its
	// shards' last writes go to the broker.
	brokerCtx, cancelBroker := context.WithCancel(ctx)
	defer cancelBroker()
	runDone := make(chan error, 1)
	go func() { runDone <- serveBroker(brokerCtx, nil, srv, d.lis, d.auth.authz.ServerOptions()...) }()

	var wc *devConsumer
	err = awaitKey(sigCtx, d.client, memberKey)
	if err == nil {
		wc, err = startDevConsumer(sigCtx, d)
	}
	if err == nil && d.admin != nil {
		var closeGateway func()
		if closeGateway, err = d.mountGateway(ctx); err == nil {
			defer closeGateway()
		}
	}
	if err == nil {
		printDevBanner(stdout, d)
		select {
		case <-sigCtx.Done():
		case err = <-d.etcd.Err():
			err = fmt.Errorf("etcd failed: %w", err)
		case err = <-runDone:
			runDone <- err
		case err = <-wc.done:
			err = fmt.Errorf("the word-count consumer stopped: %w", err)
			wc.done <- err
		}
	}
	stopSignals() // A second Ctrl-C now kills the process.
	slog.Info("stopping")
	if wc != nil {
		wc.stop(ctx) // Before the broker, which its shards write to.
	}
	cancelBroker()
	if runErr := <-runDone; err == nil && runErr != nil && !errors.Is(runErr, context.Canceled) {
		err = fmt.Errorf("broker stopped: %w", runErr)
	}
	if _, rerr := revokeMember(context.WithoutCancel(ctx), d.client, memberKey); rerr != nil {
		slog.Warn("removing the broker's member key", "err", rerr)
	}
	if err != nil && sigCtx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil // Stopped by a signal before it was ready.
	}
	if err == nil {
		slog.Info("stopped; data kept", "dir", d.dir)
	}
	return err
}

// mountGateway serves the HTTP gateway and the console on the admin
// endpoint, to the
// broker's journals and the word count's shards, and returns what closes
// its connections. The gateway's connections carry no token of quire
// dev's own: each HTTP request is authorized by the token it brings.
func (d devCluster) mountGateway(ctx context.Context) (func(), error) {
	journals, err := client.New(ctx, client.Config{Broker: d.lis.Addr().String(), DialOptions: auth.CallerDialOptions(), Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(d.consumerLis.Addr().String(), append(auth.CallerDialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		journals.Close()
		return nil, err
	}
	d.admin.MountAPI(gateway.New(gateway.Config{Journals: journals, Shards: protocol.NewShardClient(conn)}))
	own, err := client.New(ctx, client.Config{Broker: d.lis.Addr().String(), DialOptions: d.dialOptions(), Logger: slog.Default()})
	if err != nil {
		conn.Close()
		journals.Close()
		return nil, err
	}
	stopConsole := serveConsole(ctx, d.admin, console.Config{Etcd: d.client, Prefix: d.console.prefix, Journals: own,
		DialOptions: d.dialOptions(), Actions: d.console.actions, Logger: slog.Default()})
	return func() { stopConsole(); own.Close(); conn.Close(); journals.Close() }, nil
}

// devConsumer is quire dev's process of the word-count application.
type devConsumer struct {
	cancel   context.CancelFunc
	done     chan error
	journals *client.Client
	client   *clientv3.Client
}

// startDevConsumer starts the word-count consumer on the dev broker, and
// creates the application's journals and shards that do not exist.
func startDevConsumer(ctx context.Context, d devCluster) (*devConsumer, error) {
	memberKey := allocator.MemberKey(devConsumerPrefix, devZone, devSuffix)
	// As for the broker: a member key of ours was left by a quire dev that
	// died. Revoking it frees its shards now.
	if removed, err := revokeMember(ctx, d.client, memberKey); err != nil {
		return nil, err
	} else if removed {
		slog.Info("removed the word-count consumer's member key that a previous quire dev left")
	}
	journals, err := client.New(ctx, client.Config{Broker: d.lis.Addr().String(), DialOptions: d.dialOptions(), Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	endpoint := d.consumerLis.Addr().String()
	srv, err := consumer.New(consumer.Config{App: wordcount.App{}, Etcd: d.client, Journals: journals,
		Root: devConsumerPrefix, Zone: devZone, Suffix: devSuffix, Endpoint: endpoint,
		Dir: filepath.Join(d.dir, "consumer"), DialOptions: d.dialOptions(), Auth: d.auth.authz, Logger: slog.Default()})
	if err != nil {
		journals.Close()
		return nil, err
	}
	d.ready.consumer.Store(ptr(srv.Ready))
	gs := grpc.NewServer(slices.Concat(rpcbuf.ServerOptions(), rpcmetrics.ServerOptions(), d.auth.authz.ServerOptions())...)
	protocol.RegisterShardServer(gs, srv)
	wordcount.App{}.Register(gs, srv)
	rpcmetrics.Register(gs)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	wc := &devConsumer{cancel: cancel, done: make(chan error, 1), journals: journals, client: d.client}
	go func() { wc.done <- consumer.Serve(runCtx, nil, srv, gs, d.consumerLis) }()

	conn, err := grpc.NewClient(endpoint, append(d.dialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		wc.stop(ctx)
		return nil, err
	}
	defer conn.Close()
	setupCtx, cancelSetup := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSetup()
	created, err := wordcount.Setup(setupCtx, wordcount.SetupConfig{Journals: journals,
		Shards: protocol.NewShardClient(conn), Root: devConsumerPrefix, Replication: 1})
	if err != nil {
		wc.stop(ctx)
		return nil, fmt.Errorf("setting up the word count: %w", err)
	}
	if len(created) > 0 {
		slog.Info("created the word count's journals and shards", "created", strings.Join(created, " "))
	}
	return wc, nil
}

// stop stops the consumer at once (its shards' commits are in their
// recovery logs) and removes its member key, freeing its shards.
func (wc *devConsumer) stop(ctx context.Context) {
	wc.cancel()
	if err := <-wc.done; err != nil && !errors.Is(err, context.Canceled) {
		slog.Warn("the word-count consumer stopped", "err", err)
	}
	wc.journals.Close()
	memberKey := allocator.MemberKey(devConsumerPrefix, devZone, devSuffix)
	if _, err := revokeMember(context.WithoutCancel(ctx), wc.client, memberKey); err != nil {
		slog.Warn("removing the word-count consumer's member key", "err", err)
	}
}

// revokeMember revokes the lease of member key, if it exists, which
// deletes it and the member's assignments.
func revokeMember(ctx context.Context, c *clientv3.Client, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, key)
	if err != nil {
		return false, fmt.Errorf("reading member key %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return false, nil
	}
	if lease := clientv3.LeaseID(resp.Kvs[0].Lease); lease != clientv3.NoLease {
		if _, err := c.Revoke(ctx, lease); err != nil {
			return false, fmt.Errorf("revoking the lease of member key %s: %w", key, err)
		}
		return true, nil
	}
	if _, err := c.Delete(ctx, key); err != nil {
		return false, fmt.Errorf("deleting member key %s: %w", key, err)
	}
	return true, nil
}

// awaitKey returns once key exists in etcd.
func awaitKey(ctx context.Context, c *clientv3.Client, key string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) > 0 {
		return nil
	}
	for wr := range c.Watch(ctx, key, clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watching %s: %w", key, err)
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.PUT {
				return nil
			}
		}
	}
	return ctx.Err()
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

func printDevBanner(w io.Writer, d devCluster) {
	addr := d.lis.Addr().String()
	brokerFlag := ""
	if addr != defaultBroker {
		brokerFlag = " --broker " + addr
	}
	caddr := d.consumerLis.Addr().String()
	consumerFlag := ""
	if caddr != devConsumerAddr {
		consumerFlag = " --consumer " + caddr
	}
	adminLine := ""
	if d.admin != nil {
		adminLine = fmt.Sprintf("  console   http://%s/   (the web console, docs/console.md; /metrics, /healthz, /readyz; journals over HTTP at /v1/journals/NAME, docs/http.md)\n", d.admin.Addr)
	}
	fmt.Fprintf(w, `  broker    %s   (clients: export QUIRE_BROKER=%s)
  etcd      %s   (brokers under %s)
  consumer  %s   (the word count, under %s; export QUIRE_CONSUMER=%s)
%s  data      %s   (fragments in %s)
%s
Try it, from another terminal:
  printf 'journals:\n  - name: examples/hello\n    replication: 1\n' > hello.yaml
  quire journals apply -f hello.yaml%s
  echo 'hello, world' | quire journals append -j examples/hello%s
  quire journals read -j examples/hello%s
  quire journals list%s

Try the word count:
  echo "a b a" | go run ./examples/wordcount publish%s
  go run ./examples/wordcount query%s a b
  quire shards list%s

quire dev: ready (Ctrl-C stops it; the data stays in %s)
`, addr, addr, d.etcd.Endpoint(), devPrefix, caddr, devConsumerPrefix, caddr, adminLine, d.dir, d.store(), d.auth.banner(),
		brokerFlag, brokerFlag, brokerFlag, brokerFlag, brokerFlag, consumerFlag, consumerFlag, d.dir)
}

// banner tells how to reach an authorizing quire dev: with an operator's
// token, minted here if quire dev holds the signing key.
func (a devAuth) banner() string {
	if a.authz == nil {
		return ""
	}
	if a.signer == nil {
		return "  auth      on: clients need a token with every capability they use (--token, QUIRE_TOKEN)\n"
	}
	now := time.Now()
	token, err := a.signer.Mint(auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: "dev-operator", IssuedAt: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(24 * time.Hour))},
		Capability: auth.All})
	if err != nil {
		return fmt.Sprintf("  auth      on (minting an operator's token failed: %v)\n", err)
	}
	return fmt.Sprintf(`  auth      on: clients need a token; one with every capability, for 24h:
            export QUIRE_TOKEN=%s
            (more: quire auth token --key KEY --cap READ -l prefix=examples/ --subject me)
`, token)
}

// lockDevDir takes an exclusive lock on dir, so that two quire dev never
// share it; the returned function releases it. The lock file holds the
// holder's process ID, for the error another quire dev reports.
func lockDevDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "lock")
	f, err := fileutil.TryLockFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fileutil.ErrLocked) {
		holder := "another process"
		if pid, _ := os.ReadFile(path); len(bytes.TrimSpace(pid)) > 0 {
			holder = "process " + string(bytes.TrimSpace(pid))
		}
		return nil, fmt.Errorf("%s is in use by another quire dev (%s); stop it, or give another --dir", dir, holder)
	} else if err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		f.Truncate(0)
		f.Close() // Releases the lock.
	}, nil
}
