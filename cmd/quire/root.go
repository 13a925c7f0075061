package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/internal/logflag"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newRootCommand() *cobra.Command {
	var logs logflag.Flags
	root := &cobra.Command{
		Use:   "quire",
		Short: "Durable streams and stateful stream processing",
		Long: `Quire serves journals (append-only, replicated byte streams) from a fleet
of brokers, and runs consumer applications whose shards process journals
exactly once, with state that survives any machine. etcd coordinates both.

Start here:
  quire dev              run a development cluster (etcd and a broker) in
                         this process, with its data in ./.quire

Commands available in this build:
  quire journals         list, apply, edit and delete journals' specs;
                         append to and read journals; list their fragments;
                         check their stores (store-health)
  quire shards           list and change shards; recover and prune their logs
  quire broker serve     run a broker (drains on SIGTERM)
  quire bench            measure append and read throughput of a cluster
  quire allocator plan   show what the allocator would assign, for a scenario
                         file or a live fleet in etcd
  quire allocator member join a fleet as a member holding items (drains on
                         SIGTERM)
  quire auth             make keys (keygen) and tokens (token) for
                         authorization
  quire console          serve the web console of a deployment, from its etcd
  quire health [URL]     exit 0 if a server's admin endpoint says it is
                         ready (container health checks)
  quire version          print the version`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			log, err := logs.Logger(os.Stderr)
			if err != nil {
				return usageError{err}
			}
			slog.SetDefault(log)
			return nil
		},
	}
	logs.Register(root.PersistentFlags())
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newVersionCommand(), newDevCommand(), newJournalsCommand(), newBrokerCommand(),
		newBenchCommand(), newAllocatorCommand(), newShardsCommand(), newHealthCommand(), newAuthCommand(), newConsoleCommand())
	refuseUnknown(root)
	argsAreUsage(root)
	return root
}

// argsAreUsage makes every command's check of its positional arguments
// (cobra.NoArgs, cobra.MaximumNArgs, …) refuse them as bad input, exit 2:
// cobra's own errors are plain ones, which would exit 1.
func argsAreUsage(c *cobra.Command) {
	for _, sub := range c.Commands() {
		argsAreUsage(sub)
	}
	check := c.Args
	if check == nil {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		err := check(cmd, args)
		if err != nil && !errors.As(err, new(usageError)) {
			return usageError{err}
		}
		return err
	}
}

// noArgs refuses any argument as bad input: cobra.NoArgs's error is a plain
// one, which would exit 1.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 0 {
		// Counted, not quoted: a stray argument may be a token.
		return usagef("%s takes no arguments, only flags: got %d", cmd.CommandPath(), len(args))
	}
	return nil
}

// nameArg lets a command that names one journal or shard with a flag
// (-j NAME, -s ID) take the name as its one argument instead, as the
// commands that name several do: 'quire journals read NAME' is 'quire
// journals read -j NAME'.
func nameArg(flag string, name *string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return nil
		case len(args) > 1:
			// Counted, not quoted: a stray argument may be a token.
			return usagef("%s takes one name, as --%s or as its argument: got %d arguments", cmd.CommandPath(), flag, len(args))
		case cmd.Flags().Changed(flag):
			return usagef("--%s and an argument both give the name: give it once", flag)
		}
		*name = args[0]
		return nil
	}
}

// refuseUnknown makes every command that only groups others (quire,
// quire journals, …) refuse an unknown subcommand as bad input, exit 2,
// naming it and what it may have meant; cobra would print the group's
// help and exit 0 below the root, and exit 1 at it.
func refuseUnknown(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknown(sub)
	}
	if !c.HasSubCommands() || c.Runnable() {
		return
	}
	c.SuggestionsMinimumDistance = 2
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		hint := ""
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = fmt.Sprintf("; did you mean %q?", s[0])
		}
		return usagef("unknown command %q for %q%s (see %s --help)", args[0], cmd.CommandPath(), hint, cmd.CommandPath())
	}
	c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, args []string) {
			cmd.Println("quire", version)
		},
	}
}
