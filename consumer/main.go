package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/admin"
	"github.com/quire-dev/quire/internal/authflag"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/internal/etcdclient"
	"github.com/quire-dev/quire/internal/grpcserve"
	"github.com/quire-dev/quire/internal/hostport"
	"github.com/quire-dev/quire/internal/logflag"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/internal/rpcmetrics"
	"github.com/quire-dev/quire/internal/signals"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/protocol"
)

// More optional interfaces of an Application, which Main uses.
type (
	// Registerer serves gRPC services of the application's own in every
	// consumer process, beside the Shard service: Main's serve calls
	// Register before it serves. A handler finds the primary of the shard
	// a request is about with srv.Resolve, answers it from the store if
	// that is this process, and otherwise forwards it over srv.Dial.
	Registerer interface {
		Register(gs *grpc.Server, srv *Server)
	}
	// Namer names the application: Main's command is named after it, and
	// serve's --prefix defaults to /quire/consumers/NAME/.
	Namer interface {
		Name() string
	}
)

// Defaults of Main's serve flags: those of `quire dev`. Every Quire
// command and server reaches etcd at DefaultEtcd unless told otherwise.
const (
	DefaultEtcd   = "http://127.0.0.1:7701"
	DefaultBroker = "127.0.0.1:7700"
)

// UsageError marks an error in what the user gave (arguments, flags,
// input): Main exits with code 2 rather than 1. An application's own
// commands may return one.
type UsageError struct{ Err error }

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

func usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// Main turns app into a complete binary, and runs it: a command with a
// `serve` subcommand (see ServeCommand), the application's own commands
// cmds, and the --log-level and --log-format flags. It returns when the command succeeded, and
// otherwise prints the error and exits with code 2 on a UsageError (bad
// flags and arguments among them), 1 on any other.
//
//	func main() { consumer.Main(myApp{}, publishCommand(), queryCommand()) }
func Main(app Application, cmds ...*cobra.Command) {
	root := NewCommand(app, cmds...)
	err := root.Execute()
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", root.Name(), err)
	if errors.As(err, new(UsageError)) {
		os.Exit(2)
	}
	os.Exit(1)
}

// NewCommand returns the command that Main executes: named after the
// application (Namer) or the binary, with serve, cmds and the persistent
// flags --log-level (debug, info, warn or error; default info) and
// --log-format (text or json; default text), which set slog's default
// logger on standard error. Errors of flags and of
// commands' argument checks (cobra.Command.Args) are UsageErrors.
func NewCommand(app Application, cmds ...*cobra.Command) *cobra.Command {
	name := filepath.Base(os.Args[0])
	if n, ok := app.(Namer); ok && n.Name() != "" {
		name = n.Name()
	}
	var logs logflag.Flags
	root := &cobra.Command{
		Use:           name,
		Short:         "The " + name + " consumer application",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			log, err := logs.Logger(os.Stderr)
			if err != nil {
				return UsageError{err}
			}
			slog.SetDefault(log)
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	logs.Register(root.PersistentFlags())
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return UsageError{err} })
	root.AddCommand(ServeCommand(app))
	root.AddCommand(cmds...)
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) != 0 {
			return fmt.Errorf("unknown command %q for %q", args[0], cmd.Name())
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	usageArgs(root)
	return root
}

// usageArgs makes the errors of c's and its subcommands' argument checks
// usage errors.
func usageArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			if err != nil && !errors.As(err, new(UsageError)) {
				err = UsageError{err}
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		usageArgs(sub)
	}
}

// serveFlags are serve's flags.
type serveFlags struct {
	etcd, prefix, zone, suffix string
	listen, advertise, dir     string
	broker                     string
	throughBrokers             bool
	admin                      admin.Flags
	limit                      int
	leaseTTL, unassignFailed   time.Duration
	pruneHorizon               time.Duration
	drainTimeout               time.Duration
	tls, etcdTLS               tlsconfig.Files
	etcdUser                   etcdclient.User
	auth                       authflag.Server
}

// ServeCommand returns the `serve` command, which runs a consumer process
// of app: a member of the application's fleet under --prefix in etcd,
// serving the shard replicas the allocator assigns to it, the Shard gRPC
// service and the application's own services (Registerer) on --listen.
// Every flag but --advertise, --limit and --lease-ttl falls back to an
// environment variable, named in its help. SIGTERM (or Ctrl-C) drains the
// process: its shards move to other processes, then it exits; a second
// signal exits at once, and its shards fail over when its lease expires.
func ServeCommand(app Application) *cobra.Command {
	var f serveFlags
	defPrefix := ""
	if n, ok := app.(Namer); ok && n.Name() != "" {
		defPrefix = "/quire/consumers/" + n.Name() + "/"
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a consumer process of the application",
		Long: `Join the application's fleet under --prefix in etcd as process ZONE#SUFFIX,
and serve the shard replicas the allocator assigns to it: a primary reads
its shard's journals and processes them in transactions; a standby tails
its recovery log, ready to take over. The Shard service (and the
application's own) is served over gRPC on --listen; --admin serves
/metrics, /healthz and /readyz (ready once the process is announced in
etcd and serving; not ready from the moment it starts draining). Shards' local stores
live under --dir, which is emptied at start: they are played back from
their recovery logs. The defaults reach 'quire dev'.

SIGTERM (or Ctrl-C) drains: the process's shards move to other processes,
then it exits. Replicas that no other process can take (a process alone in
its fleet, or a standby whose shard every other process holds) fail over at
once after --drain-timeout. A second signal exits at once: its shards then
fail over when its lease expires.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runServe(cmd.Context(), app, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.etcd, "etcd", env.Or("QUIRE_ETCD", DefaultEtcd), "comma-separated etcd endpoints, host:port or http(s)://host:port (env QUIRE_ETCD)")
	fl.StringVar(&f.prefix, "prefix", env.Or("QUIRE_CONSUMER_PREFIX", defPrefix), "the application's key prefix in etcd, such as /quire/consumers/NAME/ (env QUIRE_CONSUMER_PREFIX)")
	fl.StringVar(&f.zone, "zone", env.Or("QUIRE_ZONE", "local"), "the process's zone, e.g. its availability zone (env QUIRE_ZONE)")
	fl.StringVar(&f.suffix, "suffix", os.Getenv("QUIRE_SUFFIX"), "the process's name, unique in its zone (env QUIRE_SUFFIX; default HOSTNAME-PORT, the port of --listen)")
	fl.StringVar(&f.listen, "listen", env.Or("QUIRE_LISTEN", "127.0.0.1:0"), "host:port to serve gRPC on; port 0 picks a free one (env QUIRE_LISTEN)")
	fl.StringVar(&f.advertise, "advertise", "", "host:port that other processes reach this one at (default: the address --listen bound, or HOSTNAME:PORT if it listens on all interfaces)")
	fl.StringVar(&f.dir, "dir", os.Getenv("QUIRE_CONSUMER_DIR"), "directory of the shards' local stores, emptied at start (env QUIRE_CONSUMER_DIR; default a temporary directory, removed at exit)")
	fl.StringVar(&f.broker, "broker", env.Or("QUIRE_BROKER", DefaultBroker), "host:port of any broker, or several, comma-separated: tried in turn while one is unreachable (env QUIRE_BROKER)")
	fl.BoolVar(&f.throughBrokers, "through-brokers", false,
		"read journals' content persisted to the fragment stores (sources and recovery logs) through the brokers, not from the stores directly: for a process that cannot reach the stores")
	f.admin.AddFlags(fl, "")
	fl.IntVar(&f.limit, "limit", DefaultLimit, "most shard replicas the process holds")
	fl.DurationVar(&f.leaseTTL, "lease-ttl", DefaultLeaseTTL, "how long the process's keys outlive it if it dies: the time before its shards fail over")
	fl.DurationVar(&f.unassignFailed, "unassign-failed-after", env.Duration("QUIRE_UNASSIGN_FAILED_AFTER"),
		"how long a FAILED shard replica keeps its assignment before the process removes it, for the shard to restart (env QUIRE_UNASSIGN_FAILED_AFTER; default 0: never, FAILED replicas wait for 'quire shards unassign --failed')")
	fl.DurationVar(&f.pruneHorizon, "producer-prune-horizon", env.Duration("QUIRE_PRODUCER_PRUNE_HORIZON"),
		"how long, by message clocks, a source's idle producer is remembered after its last commit: a message of its that comes again later is delivered again (env QUIRE_PRODUCER_PRUNE_HORIZON; default 24h; negative: forever)")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", DefaultDrainTimeout,
		"how long a drain waits for other processes to take the process's shard replicas; then those left fail over at once (0: wait as long as it takes)")
	f.tls.AddFlags(fl, "tls", "QUIRE_TLS", "the process (to its clients, and to brokers and other processes as their client)")
	f.etcdTLS.AddFlags(fl, "etcd", "QUIRE_ETCD", "the process's etcd client")
	f.etcdUser.AddFlags(fl)
	f.auth.AddFlags(fl, "the process")
	return cmd
}

// validate checks the flags, before anything is started.
func (f *serveFlags) validate() error {
	if strings.TrimSpace(f.etcd) == "" {
		return usagef("--etcd is empty: give etcd endpoints such as %s (or set QUIRE_ETCD)", DefaultEtcd)
	}
	if err := hostport.CheckEtcd("--etcd", f.etcd); err != nil {
		return UsageError{err}
	}
	switch {
	case f.prefix == "":
		return usagef("--prefix is empty: give the application's key prefix, such as /quire/consumers/NAME/ (or set QUIRE_CONSUMER_PREFIX)")
	case !strings.HasPrefix(f.prefix, "/") || !strings.HasSuffix(f.prefix, "/") || len(f.prefix) < 2:
		return usagef("--prefix %q: want a key prefix that starts and ends with '/', such as /quire/consumers/NAME/", f.prefix)
	}
	if err := allocator.ValidateToken("--zone", f.zone, false); err != nil {
		return UsageError{err}
	}
	if f.suffix != "" {
		if err := allocator.ValidateToken("--suffix", f.suffix, false); err != nil {
			return UsageError{err}
		}
	}
	if err := validateHostPort("--listen", f.listen, true); err != nil {
		return err
	}
	if f.advertise != "" {
		if err := validateHostPort("--advertise", f.advertise, false); err != nil {
			return err
		}
	}
	if strings.TrimSpace(f.broker) == "" {
		return usagef("--broker is empty: give host:port of a broker, such as %s, or several, comma-separated (or set QUIRE_BROKER)", DefaultBroker)
	}
	if err := hostport.CheckList("--broker", f.broker); err != nil {
		return UsageError{err}
	}
	if err := f.admin.Validate(); err != nil {
		return UsageError{err}
	}
	if f.limit < 1 {
		return usagef("--limit %d: want at least 1", f.limit)
	}
	if f.leaseTTL < time.Second {
		return usagef("--lease-ttl %s: want at least 1s", f.leaseTTL)
	}
	if f.unassignFailed < 0 {
		if v := os.Getenv("QUIRE_UNASSIGN_FAILED_AFTER"); v != "" {
			if _, err := time.ParseDuration(v); err != nil {
				return usagef("QUIRE_UNASSIGN_FAILED_AFTER %q: %w", v, err)
			}
		}
		return usagef("--unassign-failed-after %s: want 0 (never) or a positive duration", f.unassignFailed)
	}
	if f.drainTimeout < 0 {
		return usagef("--drain-timeout %s: want 0 (wait as long as it takes) or a positive duration", f.drainTimeout)
	}
	if f.tls.Cert == "" && f.tls.CA != "" {
		return usagef("--tls-ca without --tls-cert: a consumer process serves TLS with a certificate of its own")
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
		return UsageError{err}
	}
	return nil
}

func validateHostPort(flag, addr string, zeroPort bool) error {
	lo := 1
	if zeroPort {
		lo = 0
	}
	if err := hostport.Check(flag, addr, lo); err != nil {
		return UsageError{err}
	}
	return nil
}

// resolveAddrs sets the default suffix and advertised endpoint from the
// address that the listener bound.
func (f *serveFlags) resolveAddrs(bound net.Addr) {
	host, port, _ := net.SplitHostPort(bound.String())
	hostname, err := os.Hostname()
	if err != nil || hostname == "" {
		hostname = "localhost"
	}
	if f.suffix == "" {
		f.suffix = hostname + "-" + port
	}
	if f.advertise == "" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = hostname
		}
		f.advertise = net.JoinHostPort(host, port)
	}
}

func runServe(ctx context.Context, app Application, f serveFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", f.listen, err)
	}
	defer lis.Close()
	f.resolveAddrs(lis.Addr())
	if err := allocator.ValidateToken("--suffix", f.suffix, false); err != nil {
		return UsageError{fmt.Errorf("%w (the default is HOSTNAME-PORT: give --suffix)", err)}
	}

	if f.dir == "" {
		if f.dir, err = os.MkdirTemp("", "quire-consumer-"); err != nil {
			return err
		}
		defer os.RemoveAll(f.dir)
	} else if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return fmt.Errorf("--dir: %w", err)
	}
	unlock, err := lockDir(f.dir)
	if err != nil {
		return err
	}
	defer unlock()

	serverOpts, dialOpts, err := f.tls.Options()
	if err != nil {
		return err
	}
	authz, authOpts, tokenOpts, err := f.auth.Options()
	if err != nil {
		return UsageError{err}
	}
	serverOpts, dialOpts = append(serverOpts, authOpts...), append(dialOpts, tokenOpts...)
	etcd, err := etcdclient.Dial(ctx, f.etcd, f.etcdTLS, f.etcdUser, f.prefix, 10*time.Second)
	if err != nil {
		return fmt.Errorf("--etcd: %w (is quire dev running?)", err)
	}
	defer etcd.Close()
	journals, err := client.New(ctx, client.Config{Broker: f.broker, Zone: f.zone, DialOptions: dialOpts, Logger: slog.Default(),
		ReadThroughBrokers: f.throughBrokers})
	if err != nil {
		return err
	}
	defer journals.Close()
	srv, err := New(Config{App: app, Etcd: etcd, Journals: journals, Root: f.prefix,
		Zone: f.zone, Suffix: f.suffix, Endpoint: f.advertise, Dir: f.dir, Limit: f.limit,
		LeaseTTL: f.leaseTTL, UnassignFailedAfter: f.unassignFailed, ProducerPruneHorizon: f.pruneHorizon, DrainTimeout: f.drainTimeout, DialOptions: dialOpts, Auth: authz, Logger: slog.Default()})
	if err != nil {
		return UsageError{err}
	}
	gs := grpc.NewServer(slices.Concat(rpcbuf.ServerOptions(), rpcmetrics.ServerOptions(), serverOpts)...)
	protocol.RegisterShardServer(gs, srv)
	if r, ok := app.(Registerer); ok {
		r.Register(gs, srv)
	}
	rpcmetrics.Register(gs)
	adm, err := f.admin.Serve(srv.Ready)
	if err != nil {
		return err
	}
	defer adm.Close()

	ctx, drain, stop := signals.Drain(ctx, "draining, handing shards to other processes")
	defer stop()
	slog.Info("consumer serving", "process", f.zone+"#"+f.suffix, "listen", lis.Addr().String(),
		"advertise", f.advertise, "etcd", f.etcd, "prefix", f.prefix, "broker", f.broker, "dir", f.dir,
		"tls", !f.tls.IsZero(), "mutualTLS", f.tls.CA != "", "auth", authz != nil, "authRollout", f.auth.Rollout)
	err = Serve(ctx, drain, srv, gs, lis)
	switch {
	case err == nil:
		slog.Info("consumer drained and stopped")
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		err = errors.New("stopped at once, without draining: its shards fail over when its lease expires")
	case errors.Is(err, allocator.ErrMemberGone):
		err = fmt.Errorf("its member key left etcd, and its shards moved to other processes; start it again: %w", err)
	}
	return err
}

// Serve serves gs on lis while srv runs (see Server.Run: until ctx is
// done, or drain is closed and the process has handed its shards to
// others), then stops gs: gracefully, or at once after a few seconds. A
// failure to serve gs stops srv and is returned. Unless the application
// registered its own, gs gets the standard gRPC health service, SERVING
// until the process starts draining.
func Serve(ctx context.Context, drain <-chan struct{}, srv *Server, gs *grpc.Server, lis net.Listener) error {
	return grpcserve.Run(ctx, drain, gs, lis, srv.Run)
}

// lockDir takes an exclusive lock on dir: two processes sharing it would
// remove each other's stores.
func lockDir(dir string) (unlock func(), err error) {
	path := filepath.Join(dir, "lock")
	f, err := fileutil.TryLockFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, UsageError{fmt.Errorf("--dir %s is in use by another consumer process; give each its own", dir)}
	} else if err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
