// Command streamsum is the stream-sum example application of Quire (see
// package streamsum), which checks exactly-once processing end to end:
// `serve` runs a process of it, `setup` creates its journals and shards,
// and `publish` publishes streams in transactions and checks their sums.
//
//	go run ./cmd/quire dev                          # in one terminal
//	go run ./examples/streamsum serve --listen 127.0.0.1:7712  # in another
//	go run ./examples/streamsum setup
//	go run ./examples/streamsum publish --streams 200
//
// The client commands speak plaintext gRPC; the word-count example shows
// client TLS flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/examples/streamsum/streamsum"
	"github.com/quire-dev/quire/protocol"
)

// DefaultConsumer is where the client commands reach a process of the
// application: the address of the example's serve command above (quire
// dev's word count has 7702).
const DefaultConsumer = "127.0.0.1:7712"

func main() {
	consumer.Main(streamsum.App{}, setupCommand(), publishCommand())
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func usagef(format string, args ...any) error {
	return consumer.UsageError{Err: fmt.Errorf(format, args...)}
}

var plaintext = grpc.WithTransportCredentials(insecure.NewCredentials())

func setupCommand() *cobra.Command {
	var broker, addr string
	var timeout time.Duration
	var cfg streamsum.SetupConfig
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create the application's journals and shards, those that do not exist",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if broker == "" || addr == "" {
				return usagef("--broker %q, --consumer %q: want both", broker, addr)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			journals, err := client.New(ctx, client.Config{Broker: broker, DialOptions: []grpc.DialOption{plaintext}})
			if err != nil {
				return usagef("--broker %q: %v", broker, err)
			}
			defer journals.Close()
			conn, err := grpc.NewClient(addr, plaintext)
			if err != nil {
				return usagef("--consumer %q: %v", addr, err)
			}
			defer conn.Close()
			cfg.Journals, cfg.Shards = journals, protocol.NewShardClient(conn)
			created, err := streamsum.Setup(ctx, cfg)
			for _, c := range created {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: created\n", c)
			}
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("setup: no answer from broker %s and process %s within %s: %w", broker, addr, timeout, err)
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&broker, "broker", envOr("QUIRE_BROKER", consumer.DefaultBroker), "host:port of any broker, or several, comma-separated (env QUIRE_BROKER)")
	fl.StringVar(&addr, "consumer", envOr("QUIRE_CONSUMER", DefaultConsumer), "host:port of any process of the application (env QUIRE_CONSUMER)")
	fl.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the broker and the process to answer")
	fl.StringVar(&cfg.Root, "prefix", envOr("QUIRE_CONSUMER_PREFIX", "/quire/consumers/streamsum/"), "the application's key prefix in etcd, as its processes' --prefix (env QUIRE_CONSUMER_PREFIX)")
	fl.Int32Var(&cfg.Replication, "replication", 1, "replication of the journals")
	fl.IntVar(&cfg.HotStandbys, "hot-standbys", 0, "hot standbys of each shard")
	return cmd
}

func publishCommand() *cobra.Command {
	var broker string
	var streams, open, perTxn int
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Publish streams of chunks in transactions, then check their sums",
		Long: `Publish the chunks of --streams streams (a stream has 2 to 21 chunks),
--per-txn chunks to a transaction, --open streams taking chunks at a time.
Then read the sums that the shards published and check that every stream
has its right sum, exactly once; exit 1 if not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if streams <= 0 || open <= 0 || perTxn <= 0 {
				return usagef("--streams %d, --open %d, --per-txn %d: want positive numbers", streams, open, perTxn)
			}
			journals, err := client.New(cmd.Context(), client.Config{Broker: broker, DialOptions: []grpc.DialOption{plaintext}})
			if err != nil {
				return usagef("--broker %q: %v", broker, err)
			}
			defer journals.Close()
			return publish(cmd, journals, streams, open, perTxn, wait)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&broker, "broker", envOr("QUIRE_BROKER", consumer.DefaultBroker), "host:port of any broker, or several, comma-separated (env QUIRE_BROKER)")
	fl.IntVar(&streams, "streams", 100, "streams to publish, about")
	fl.IntVar(&open, "open", 16, "streams taking chunks at a time")
	fl.IntVar(&perTxn, "per-txn", 8, "chunks in each transaction")
	fl.DurationVar(&wait, "wait", time.Minute, "how long to wait for the sums")
	return cmd
}

func publish(cmd *cobra.Command, journals *client.Client, streams, open, perTxn int, wait time.Duration) error {
	ctx := cmd.Context()
	prod, err := streamsum.NewProducer(ctx, journals)
	if err != nil {
		return err
	}
	defer prod.Close()
	ss := streamsum.NewStreams(uint64(time.Now().UnixNano()), fmt.Sprintf("%x-", time.Now().Unix()), open)
	txns := 0
	for ss.Count() < streams {
		chunks := ss.Next(perTxn)
		err := prod.Publish(ctx, chunks)
		ss.Published(chunks, err)
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "publish: %v\n", err)
		}
		txns++
	}
	last := ss.Finish()
	ss.Published(last, prod.Publish(ctx, last))
	fmt.Fprintf(cmd.ErrOrStderr(), "published %d transactions\n", txns+1)
	report, err := ss.Await(ctx, journals, wait)
	for _, p := range report.Problems {
		fmt.Fprintln(cmd.ErrOrStderr(), p)
	}
	fmt.Fprintln(cmd.OutOrStdout(), report)
	if err != nil {
		return err
	}
	if !report.OK() {
		return errors.New("publish: sums are wrong")
	}
	return nil
}
