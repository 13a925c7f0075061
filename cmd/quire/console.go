package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/console"
	"github.com/quire-dev/quire/gateway"
	"github.com/quire-dev/quire/internal/admin"
	"github.com/quire-dev/quire/internal/authflag"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/internal/etcdclient"
	"github.com/quire-dev/quire/internal/fleet"
	"github.com/quire-dev/quire/internal/hostport"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/keyspace"
)

// consoleFlags are the web console's flags, on every server that serves
// it on its admin endpoint.
type consoleFlags struct {
	prefix  string
	actions bool
}

// addFlags adds --console-prefix (default def) and --console-actions.
func (f *consoleFlags) addFlags(fl *pflag.FlagSet, def string) {
	if v := os.Getenv("QUIRE_CONSOLE_PREFIX"); v != "" {
		def = v
	}
	actions, _ := strconv.ParseBool(os.Getenv("QUIRE_CONSOLE_ACTIONS"))
	fl.StringVar(&f.prefix, "console-prefix", def, "the web console shows the fleets whose etcd roots are under this prefix (env QUIRE_CONSOLE_PREFIX)")
	fl.BoolVar(&f.actions, "console-actions", actions, "enable the console's actions (unassign a FAILED shard, apply an edited spec), each carried out with the operator's token (env QUIRE_CONSOLE_ACTIONS)")
}

// parentPrefix is the prefix a server's console looks under by default:
// the parent of its own root, where its peers' fleets live
// (/quire/brokers/ → /quire/).
func parentPrefix(root string) string {
	p := path.Dir(strings.TrimSuffix(root, "/"))
	if p == "/" || p == "." {
		return "/"
	}
	return p + "/"
}

// serveConsole serves a console of cfg at / of adm, and returns what
// stops it. A nil adm serves none.
func serveConsole(ctx context.Context, adm *admin.Server, cfg console.Config) (stop func()) {
	if adm == nil {
		return func() {}
	}
	c := console.New(cfg)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.Run(ctx)
	}()
	adm.MountConsole(c)
	return func() { cancel(); wg.Wait() }
}

type consoleCmdFlags struct {
	etcd, listen, broker string
	console              consoleFlags
	timeout              time.Duration
	etcdTLS, tls         tlsconfig.Files
	etcdUser             etcdclient.User
	token                authflag.Client
}

func newConsoleCommand() *cobra.Command {
	var f consoleCmdFlags
	cmd := &cobra.Command{
		Use:   "console [--etcd ENDPOINTS]",
		Short: "Serve the web console of a deployment, from its etcd",
		Long: `Serve the web console, and the HTTP gateway under /v1/, on --listen, for a
deployment whose servers' admin endpoints the operator cannot reach: it
reads etcd, and asks the brokers (--broker, else those etcd lists) and the
consumer processes for write heads and shard offsets, with --token.

Every broker serves the same console at / of its --admin address, and
quire dev at http://127.0.0.1:7704/. See docs/console.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConsole(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.etcd, "etcd", env.Or("QUIRE_ETCD", defaultEtcd), etcdFlagUsage)
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7705", "host:port to serve the console on")
	fl.StringVar(&f.broker, "broker", os.Getenv("QUIRE_BROKER"), "brokers to read journals through, host:port[,…]; default: those etcd lists")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "etcd timeout at start")
	f.console.addFlags(fl, "/quire/")
	f.etcdTLS.AddFlags(fl, "etcd", "QUIRE_ETCD", "this etcd client")
	f.etcdUser.AddFlags(fl)
	f.tls.AddFlags(fl, "tls", "QUIRE_TLS", "the console's connections to brokers and consumer processes")
	f.token.AddFlags(fl, "the console (for write heads and shard offsets)")
	return cmd
}

func runConsole(ctx context.Context, f consoleCmdFlags) error {
	if f.etcd == "" {
		return usagef("--etcd is empty: give etcd endpoints such as %s (or set QUIRE_ETCD)", defaultEtcd)
	}
	if err := hostport.Check("--listen", f.listen, 0); err != nil {
		return usageError{err}
	}
	if f.broker != "" {
		if err := validateBrokers(f.broker); err != nil {
			return err
		}
	}
	opts, err := dialOptions(f.tls, "tls", f.token)
	if err != nil {
		return err
	}
	etcd, err := etcdclient.Dial(ctx, f.etcd, f.etcdTLS, f.etcdUser, f.console.prefix, f.timeout)
	if err != nil {
		return fmt.Errorf("--etcd: %w", err)
	}
	defer etcd.Close()
	brokers := f.broker
	if brokers == "" {
		if brokers, err = brokerEndpoints(ctx, etcd, f.console.prefix); err != nil {
			return err
		}
	}
	journals, err := client.New(ctx, client.Config{Broker: brokers, DialOptions: opts, Logger: slog.Default()})
	if err != nil {
		return err
	}
	defer journals.Close()
	// The gateway's client carries the caller's token, never the console's.
	callers, err := client.New(ctx, client.Config{Broker: brokers, DialOptions: callerOptions(f.tls), Logger: slog.Default()})
	if err != nil {
		return err
	}
	defer callers.Close()
	adm, err := admin.Serve("--listen", f.listen, admin.Options{})
	if err != nil {
		return err
	}
	defer adm.Close()
	adm.MountAPI(gateway.New(gateway.Config{Journals: callers}))
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	stop := serveConsole(ctx, adm, console.Config{Etcd: etcd, Prefix: f.console.prefix, Journals: journals,
		DialOptions: opts, Actions: f.console.actions, Logger: slog.Default()})
	defer stop()
	slog.Info("console serving", "url", "http://"+adm.Addr+"/", "etcd", f.etcd, "prefix", f.console.prefix, "brokers", brokers)
	<-ctx.Done()
	return nil
}

// callerOptions dial with TLS and the token of each call's context.
func callerOptions(files tlsconfig.Files) []grpc.DialOption {
	opts, _ := files.DialOptions() // Checked by dialOptions first.
	return append(opts, auth.CallerDialOptions()...)
}

// brokerEndpoints are the endpoints of the brokers under prefix, as
// their member specs give them.
func brokerEndpoints(ctx context.Context, etcd *clientv3.Client, prefix string) (string, error) {
	found, err := fleet.Discover(ctx, etcd, prefix)
	if err != nil {
		return "", err
	}
	var eps []string
	for _, fl := range found {
		if fl.Kind != fleet.Brokers {
			continue
		}
		ks := keyspace.New(fl.Root, allocator.NewDecoder(fl.Root, fl.Kind.Decoders()))
		ks.SetLogger(slog.New(slog.DiscardHandler))
		if err := ks.Load(ctx, etcd, 0); err != nil {
			return "", fmt.Errorf("reading brokers under %s: %w", fl.Root, err)
		}
		kvs, rev := ks.Snapshot()
		for _, m := range allocator.NewState(fl.Root, kvs, rev).Members {
			if ep := console.Endpoint(m.Value); ep != "" {
				eps = append(eps, ep)
			}
		}
	}
	if len(eps) == 0 {
		return "", usageError{errors.New("no broker under --console-prefix " + prefix + " in etcd: give --broker")}
	}
	return strings.Join(eps, ","), nil
}
