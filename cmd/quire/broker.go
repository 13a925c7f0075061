package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/console"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/gateway"
	"github.com/quire-dev/quire/internal/admin"
	"github.com/quire-dev/quire/internal/authflag"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/internal/etcdclient"
	"github.com/quire-dev/quire/internal/gctune"
	"github.com/quire-dev/quire/internal/grpcserve"
	"github.com/quire-dev/quire/internal/hostport"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/internal/rpcmetrics"
	"github.com/quire-dev/quire/internal/signals"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/protocol"
)

func newBrokerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker, which serves journals",
	}
	cmd.AddCommand(newBrokerServeCommand())
	return cmd
}

type brokerFlags struct {
	etcd, prefix, zone, suffix string
	listen, advertise, dir     string
	store                      string
	admin                      admin.Flags
	console                    consoleFlags
	limit                      int
	lease, isolation, drain    time.Duration
	suspendIdle                time.Duration
	tls, etcdTLS               tlsconfig.Files
	etcdUser                   etcdclient.User
	auth                       authflag.Server
}

func newBrokerServeCommand() *cobra.Command {
	var f brokerFlags
	hostname, _ := os.Hostname()
	cmd := &cobra.Command{
		Use:   "serve --etcd ENDPOINTS --dir SPOOLS --store STORE_URL",
		Short: "Serve journals as a member of the brokers' fleet",
		Long: `Join the brokers' fleet under --prefix in etcd as broker ZONE#SUFFIX and
serve the journals the allocator assigns to it, over gRPC on --listen.
Spools (the journals' current fragments) live under --dir; fragments are
persisted to each journal's stores, or to --store for journals that name
none. Every flag but --advertise falls back to the environment variable
named in its help. --admin serves /metrics, /healthz and /readyz (ready
once the broker is announced in etcd and serving; not ready from the
moment it starts draining).

SIGTERM (or Ctrl-C) drains: the broker's journals move to other brokers
(with as many brokers as their replication, the others keep theirs and
run one replica short until it is back), its spools are persisted, and
it exits. Journals that no other broker can hold at all (a broker alone)
fail over at once after --drain-timeout. A second signal exits at once; its journals then
fail over when its lease expires.

Unless GOGC is set, the broker runs its garbage collector at GOGC=400
within a soft memory limit of 80% of its cgroup's memory (or the
machine's), unless GOMEMLIMIT is set (AUTOMEMLIMIT sets another share,
or off): collecting less often keeps appends' latency tail short.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBrokerServe(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.etcd, "etcd", env.Or("QUIRE_ETCD", defaultEtcd), etcdFlagUsage)
	fl.StringVar(&f.prefix, "prefix", env.Or("QUIRE_BROKER_PREFIX", "/quire/brokers/"), "the brokers' key prefix in etcd (env QUIRE_BROKER_PREFIX)")
	fl.StringVar(&f.zone, "zone", env.Or("QUIRE_ZONE", "local"), "the broker's zone, e.g. its availability zone (env QUIRE_ZONE)")
	fl.StringVar(&f.suffix, "suffix", env.Or("QUIRE_SUFFIX", hostname), "the broker's name, unique in its zone (env QUIRE_SUFFIX; default the hostname)")
	fl.StringVar(&f.listen, "listen", env.Or("QUIRE_LISTEN", "127.0.0.1:7700"), "host:port to serve gRPC on (env QUIRE_LISTEN)")
	fl.StringVar(&f.advertise, "advertise", "", "host:port that other brokers and clients reach this broker at (default: --listen, or HOSTNAME:PORT if it listens on all interfaces)")
	fl.StringVar(&f.dir, "dir", os.Getenv("QUIRE_DIR"), "directory of the broker's spools (env QUIRE_DIR)")
	fl.StringVar(&f.store, "store", os.Getenv("QUIRE_STORE"), "fragment store of journals that name none: file:///DIR/, s3://BUCKET/PREFIX/?endpoint=HOST:PORT, gs://BUCKET/PREFIX/ or azure://ACCOUNT/CONTAINER/PREFIX/ (env QUIRE_STORE)")
	fl.IntVar(&f.limit, "limit", 1024, "most journals the broker serves")
	fl.DurationVar(&f.lease, "lease", 10*time.Second, "how long the broker's keys outlive it if it dies")
	fl.DurationVar(&f.drain, "drain-timeout", 20*time.Second, "how long a drain waits for other brokers to take the broker's journals; then those left fail over at once (0: wait as long as it takes)")
	fl.DurationVar(&f.isolation, "isolation-timeout", 0, "how long the broker may reach etcd but none of its peers (two or more) before it gives its journals up and exits; also how long a peer goes unreached before the broker reports it cut, and the reports choose which broker of a cut resigns (default 3 × --lease; negative: never)")
	fl.DurationVar(&f.suspendIdle, "suspend-idle", 0, "suspend journals that no one appended to for this long: persist their content and release their replicas (see quire journals suspend; 0: never)")
	f.admin.AddFlags(fl, "")
	f.console.addFlags(fl, "")
	f.tls.AddFlags(fl, "tls", "QUIRE_TLS", "the broker (to its clients, and to other brokers as their client)")
	f.etcdTLS.AddFlags(fl, "etcd", "QUIRE_ETCD", "the broker's etcd client")
	f.etcdUser.AddFlags(fl)
	f.auth.AddFlags(fl, "the broker")
	return cmd
}

func (f *brokerFlags) validate() error {
	if err := validateEndpoints("--etcd", f.etcd); err != nil {
		return err
	}
	if !strings.HasPrefix(f.prefix, "/") || !strings.HasSuffix(f.prefix, "/") {
		return usagef("--prefix %q: want a key prefix that starts and ends with '/'", f.prefix)
	}
	if err := allocator.ValidateToken("--zone", f.zone, false); err != nil {
		return usageError{err}
	}
	if err := allocator.ValidateToken("--suffix", f.suffix, false); err != nil {
		return usageError{err}
	}
	if err := validateHostPort("--listen", f.listen); err != nil {
		return err
	}
	if f.advertise == "" {
		f.advertise = advertiseFor(f.listen)
	}
	if err := validateHostPort("--advertise", f.advertise); err != nil {
		return err
	}
	if f.dir == "" {
		return usagef("--dir is empty: give the directory of the broker's spools (or set QUIRE_DIR)")
	}
	if f.store == "" {
		return usagef("--store is empty: give the default fragment store, e.g. file:///var/lib/quire/store/ (or set QUIRE_STORE)")
	}
	if err := fragment.ValidateURL(f.store); err != nil {
		return usagef("--store %q: %w", f.store, err)
	}
	if f.limit < 1 {
		return usagef("--limit %d: want at least 1", f.limit)
	}
	if f.lease < time.Second {
		return usagef("--lease %s: want at least 1s", f.lease)
	}
	if f.drain < 0 {
		return usagef("--drain-timeout %s: want 0 (wait as long as it takes) or a positive duration", f.drain)
	}
	if f.suspendIdle < 0 {
		return usagef("--suspend-idle %s: want 0 (never) or a positive duration", f.suspendIdle)
	}
	if f.isolation > 0 && f.isolation <= f.lease {
		return usagef("--isolation-timeout %s: want more than --lease %s (peers that die must leave etcd before their absence counts), or a negative value to never resign", f.isolation, f.lease)
	}
	if err := f.admin.Validate(); err != nil {
		return usageError{err}
	}
	if f.tls.Cert == "" && f.tls.CA != "" {
		return usagef("--tls-ca without --tls-cert: a broker serves TLS with a certificate of its own")
	}
	if err := f.tls.Validate(); err != nil {
		return usagef("%s: %w", tlsconfig.Flags("tls"), err)
	}
	if err := f.etcdTLS.Validate(); err != nil {
		return usagef("%s: %w", tlsconfig.Flags("etcd"), err)
	}
	if err := f.etcdUser.Validate(); err != nil {
		return usagef("%w", err)
	}
	if err := f.auth.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// etcdFlagUsage is the help of every --etcd flag.
const etcdFlagUsage = "comma-separated etcd endpoints, host:port or http(s)://host:port (env QUIRE_ETCD)"

func validateEndpoints(flag, endpoints string) error {
	if strings.TrimSpace(endpoints) == "" {
		return usagef("%s is empty: give etcd endpoints such as %s (or set QUIRE_ETCD)", flag, defaultEtcd)
	}
	if err := hostport.CheckEtcd(flag, endpoints); err != nil {
		return usageError{err}
	}
	return nil
}

func validateHostPort(flag, addr string) error {
	if err := hostport.Check(flag, addr, 0); err != nil {
		return usageError{err}
	}
	return nil
}

// advertiseFor is the address to advertise for a listen address: itself,
// unless it listens on every interface, in which case the hostname.
func advertiseFor(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen // validate reports it.
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil {
			return net.JoinHostPort(name, port)
		}
	}
	return listen
}

// tuneGC sets the garbage collector as a broker's process wants it
// (gctune), and logs what it set; a bad AUTOMEMLIMIT is a usage error.
func tuneGC() error {
	s, err := gctune.Tune(slog.Default())
	if err != nil {
		return usageError{err}
	}
	limit := slog.String("memoryLimit", "none")
	if s.MemoryLimit != math.MaxInt64 {
		limit = slog.Int64("memoryLimitBytes", s.MemoryLimit)
	}
	slog.Info("garbage collector", slog.Int("gogc", s.Percent), limit)
	return nil
}

func runBrokerServe(ctx context.Context, f brokerFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	if err := tuneGC(); err != nil {
		return err
	}
	if err := checkStore(ctx, f.store); err != nil {
		return err
	}
	serverOpts, dialOpts, err := f.tls.Options()
	if err != nil {
		return err
	}
	authz, authOpts, tokenOpts, err := f.auth.Options()
	if err != nil {
		return usageError{err}
	}
	serverOpts, dialOpts = append(serverOpts, authOpts...), append(dialOpts, tokenOpts...)
	etcd, err := etcdclient.Dial(ctx, f.etcd, f.etcdTLS, f.etcdUser, f.prefix, 10*time.Second)
	if err != nil {
		return fmt.Errorf("--etcd: %w", err)
	}
	defer etcd.Close()
	srv, err := broker.New(broker.Config{
		Etcd: etcd, Root: f.prefix, Zone: f.zone, Suffix: f.suffix, Endpoint: f.advertise,
		Dir: f.dir, DefaultStore: f.store, Limit: f.limit, LeaseTTL: f.lease, DialOptions: dialOpts,
		DrainTimeout: f.drain, IsolationTimeout: f.isolation, SuspendIdle: f.suspendIdle, Auth: authz, Logger: slog.Default(),
	})
	if err != nil {
		return usageError{err}
	}
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	adm, err := f.admin.Serve(srv.Ready)
	if err != nil {
		lis.Close()
		return err
	}
	defer adm.Close()
	if adm != nil {
		// The HTTP gateway, through this broker. Its connections carry
		// TLS but not the broker's own token: each HTTP request is
		// authorized by the token it brings, never by the broker's.
		tlsOpts, err := f.tls.DialOptions()
		if err != nil {
			return err
		}
		journals, err := client.New(ctx, client.Config{Broker: f.advertise, DialOptions: append(tlsOpts, auth.CallerDialOptions()...), Logger: slog.Default()})
		if err != nil {
			return err
		}
		defer journals.Close()
		adm.MountAPI(gateway.New(gateway.Config{Journals: journals}))
		// The console, whose own reads (write heads, shard offsets) carry
		// the broker's token.
		own, err := client.New(ctx, client.Config{Broker: f.advertise, DialOptions: dialOpts, Logger: slog.Default()})
		if err != nil {
			return err
		}
		defer own.Close()
		prefix := f.console.prefix
		if prefix == "" {
			prefix = parentPrefix(f.prefix)
		}
		defer serveConsole(ctx, adm, console.Config{Etcd: etcd, Prefix: prefix, Journals: own,
			DialOptions: dialOpts, Actions: f.console.actions, Logger: slog.Default()})()
	}
	ctx, drain, stop := signals.Drain(ctx, "draining")
	defer stop()
	slog.Info("broker serving", "broker", f.zone+"#"+f.suffix, "listen", lis.Addr().String(),
		"advertise", f.advertise, "etcd", f.etcd, "prefix", f.prefix, "dir", f.dir, "store", f.store,
		"tls", !f.tls.IsZero(), "mutualTLS", f.tls.CA != "", "auth", authz != nil, "authRollout", f.auth.Rollout)
	err = serveBroker(ctx, drain, srv, lis, serverOpts...)
	switch {
	case err == nil:
		slog.Info("broker drained and stopped")
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		err = errors.New("stopped at once, without draining: its journals fail over when its lease expires")
	case errors.Is(err, broker.ErrIsolated):
		err = fmt.Errorf("it gave its journals up to other brokers (check the network between brokers); start it again on the same --dir: it serves again once it reaches its peers: %w", err)
	case errors.Is(err, allocator.ErrMemberGone):
		err = fmt.Errorf("its member key left etcd, and its journals moved to other brokers; start it again on the same --dir (its spools are recovered): %w", err)
	}
	return err
}

// checkStore fails unless the default store answers a listing: a bucket
// that does not exist, credentials it refuses, or an endpoint that does not
// answer are found at start, rather than at the first fragment persisted.
func checkStore(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	store, err := fragment.Open(ctx, url)
	if err == nil {
		err = store.List(ctx, "quire-store-check", func(fragment.Fragment) error { return nil })
	}
	if err != nil {
		return fmt.Errorf("--store %s: the store does not answer a listing: %w", url, err)
	}
	return nil
}

// serveBroker serves srv's gRPC on lis while srv runs, and stops serving
// once Run returns: at once if ctx is done, after draining if drain is
// closed. A failure to serve stops the broker. opts are added to the
// gRPC server's (its TLS credentials, say).
func serveBroker(ctx context.Context, drain <-chan struct{}, srv *broker.Server, lis net.Listener, opts ...grpc.ServerOption) error {
	gs := grpc.NewServer(slices.Concat(rpcbuf.ServerOptions(), rpcmetrics.ServerOptions(), opts)...)
	protocol.RegisterJournalServer(gs, srv)
	rpcmetrics.Register(gs)
	return grpcserve.Run(ctx, drain, gs, lis, srv.Run)
}
