// Command wordcount is the word-count example application of Quire (see
// package wordcount): `serve` runs a process of it, `publish` publishes
// words, `query` asks their counts, and `setup` creates its journals and
// shards (`quire dev` does that, and hosts a process of the application).
//
//	go run ./cmd/quire dev                               # in one terminal
//	echo "a b a" | go run ./examples/wordcount publish   # in another
//	go run ./examples/wordcount query a b                # a 2, b 1
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
	"github.com/quire-dev/quire/protocol"
)

// DefaultConsumer is where `quire dev` serves the application.
const DefaultConsumer = "127.0.0.1:7702"

func main() {
	consumer.Main(wordcount.App{}, commands()...)
}

func commands() []*cobra.Command {
	return []*cobra.Command{publishCommand(), queryCommand(), setupCommand()}
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

func publishCommand() *cobra.Command {
	var broker, selector string
	var tls tlsFlags
	cmd := &cobra.Command{
		Use:   "publish < TEXT",
		Short: "Publish the words of standard input",
		Long: `Read lines from standard input, split them into words at white space, and
publish each word as a message to the word journal its hash maps it to.
Exit once every word is acknowledged: durable in the journals.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if broker == "" {
				return usagef("--broker is empty")
			}
			dial, err := tls.dialOptions()
			if err != nil {
				return err
			}
			journals, err := client.New(cmd.Context(), client.Config{Broker: broker, DialOptions: dial})
			if err != nil {
				return err
			}
			defer journals.Close()
			n, err := wordcount.Publish(cmd.Context(), journals, selector, cmd.InOrStdin())
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("publish: no answer from broker %s: %w", broker, err)
			} else if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "published %d words\n", n)
			return nil
		},
	}
	cmd.Flags().StringVar(&broker, "broker", envOr("QUIRE_BROKER", consumer.DefaultBroker), "host:port of any broker, or several, comma-separated (env QUIRE_BROKER)")
	cmd.Flags().StringVar(&selector, "selector", wordcount.Selector, "label selector of the word journals")
	tls.add(cmd.Flags())
	return cmd
}

func queryCommand() *cobra.Command {
	var addr string
	var timeout time.Duration
	var sync bool
	var tls tlsFlags
	cmd := &cobra.Command{
		Use:   "query WORD...",
		Short: "Print the counts of words",
		Long: `Ask a process of the application for the counts of words, and print one
line per word: WORD COUNT. The process forwards each word to the primary
of its shard. Unless --sync=false, each count includes every word
published before the query.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("query: give at least one word")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if addr == "" {
				return usagef("--consumer is empty")
			}
			dial, err := tls.dialOptions()
			if err != nil {
				return err
			}
			conn, err := grpc.NewClient(addr, dial...)
			if err != nil {
				return usagef("--consumer %q: %v", addr, err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := wordcountpb.NewWordCountClient(conn).Count(ctx, &wordcountpb.CountRequest{Words: args, Sync: sync})
			if err != nil {
				return fmt.Errorf("asking %s: %w", addr, err)
			}
			for _, c := range resp.Counts {
				fmt.Fprintf(cmd.OutOrStdout(), "%s %d\n", c.Word, c.Count)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "consumer", envOr("QUIRE_CONSUMER", DefaultConsumer), "host:port of any process of the application (env QUIRE_CONSUMER)")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the answer")
	cmd.Flags().BoolVar(&sync, "sync", true, "wait until the counts include every word published before the query")
	tls.add(cmd.Flags())
	return cmd
}

func setupCommand() *cobra.Command {
	var broker, addr, prefix string
	var timeout time.Duration
	var cfg wordcount.SetupConfig
	var tls tlsFlags
	cmd := &cobra.Command{
		Use:   "setup",
		Short: "Create the application's journals and shards, those that do not exist",
		Long: `Create the application's journals, through a broker, and its shards,
through a process of the application, those that do not exist. Give up
after --timeout if they do not answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case broker == "":
				return usagef("--broker is empty")
			case addr == "":
				return usagef("--consumer is empty")
			case timeout <= 0:
				return usagef("--timeout %s: want a positive duration", timeout)
			}
			dial, err := tls.dialOptions()
			if err != nil {
				return err
			}
			journals, err := client.New(cmd.Context(), client.Config{Broker: broker, DialOptions: dial})
			if err != nil {
				return usagef("--broker %q: %v", broker, err)
			}
			defer journals.Close()
			conn, err := grpc.NewClient(addr, dial...)
			if err != nil {
				return usagef("--consumer %q: %v", addr, err)
			}
			defer conn.Close()
			cfg.Journals, cfg.Shards, cfg.Root = journals, protocol.NewShardClient(conn), prefix
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			created, err := wordcount.Setup(ctx, cfg)
			for _, c := range created {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: created\n", c)
			}
			return setupError(err, broker, addr, timeout)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&broker, "broker", envOr("QUIRE_BROKER", consumer.DefaultBroker), "host:port of any broker, or several, comma-separated (env QUIRE_BROKER)")
	fl.StringVar(&addr, "consumer", envOr("QUIRE_CONSUMER", DefaultConsumer), "host:port of any process of the application (env QUIRE_CONSUMER)")
	fl.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the broker and the process to answer")
	fl.StringVar(&prefix, "prefix", envOr("QUIRE_CONSUMER_PREFIX", "/quire/consumers/wordcount/"), "the application's key prefix in etcd, as its processes' --prefix (env QUIRE_CONSUMER_PREFIX)")
	fl.Int32Var(&cfg.Replication, "replication", 1, "replication of the journals")
	fl.IntVar(&cfg.HotStandbys, "hot-standbys", 0, "hot standbys of each shard")
	tls.add(fl)
	return cmd
}

// setupError explains a failed setup, naming what did not answer: the
// journals client retries an unreachable broker until the deadline, and
// the Shard client fails at once when the process is unreachable.
func setupError(err error, broker, consumer string, timeout time.Duration) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("setup: no answer from broker %s within %s (is it running? quire dev runs one; --broker or QUIRE_BROKER names another): %w",
			broker, timeout, err)
	case status.Code(err) == codes.Unavailable:
		return fmt.Errorf("setup: the consumer process %s is unreachable (is it running? quire dev runs one; --consumer or QUIRE_CONSUMER names another): %w",
			consumer, err)
	}
	return fmt.Errorf("setup: %w", err)
}
