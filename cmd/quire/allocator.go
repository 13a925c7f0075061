package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.yaml.in/yaml/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/internal/etcdclient"
	"github.com/quire-dev/quire/internal/fleet"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/keyspace"
)

func newAllocatorCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "allocator",
		Short: "Inspect and plan the allocation of items to members",
	}
	cmd.AddCommand(newPlanCommand(), newMemberCommand())
	return cmd
}

type planFlags struct {
	file, output, etcd, prefix, fleet string
	drain, add, replication           []string
	etcdGiven                         bool // --etcd was on the command line
	timeout                           time.Duration
	etcdTLS                           tlsconfig.Files
	etcdUser                          etcdclient.User
}

func newPlanCommand() *cobra.Command {
	var f planFlags
	cmd := &cobra.Command{
		Use:   "plan (-f SCENARIO.yaml | --prefix PREFIX [--etcd ENDPOINTS])",
		Short: "Show what the allocator would assign",
		Long: `Solve an allocation problem and print the assignments the allocator would
converge to, with statistics. The problem is a scenario file:

  members:     [{zone: z1, suffix: m1, itemLimit: 100}]
  items:       [{id: a, replication: 3}]
  assignments: [{item: a, zone: z1, suffix: m1, slot: 0}]   # current; optional

or a live fleet read from etcd (--etcd, else $QUIRE_ETCD, else quire dev's)
under --prefix (for example /quire/brokers/, or a consumer application's
/quire/consumers/NAME/, such as quire dev's /quire/consumers/wordcount/): brokers and their
journals, consumer processes and their shards (replication 1 +
hotStandbys), or the members of quire allocator member, as --fleet says or,
by default, as the fleet's values show.

Ask what if: --drain ZONE#SUFFIX drains a member, --add ZONE#SUFFIX:LIMIT
adds one, --replication ITEM=N changes an item's replication (each may be
repeated). The plan lists the moves: assignments added and removed.
Bad input — a prefix that holds no fleet, a value that does not decode, an
unknown member or item — is reported on standard error with exit code 2.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.etcdGiven = cmd.Flags().Changed("etcd")
			return runPlan(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	cmd.Flags().StringVarP(&f.file, "file", "f", "", "scenario file (YAML or JSON); - reads standard input")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", "output format: json, yaml or table")
	cmd.Flags().StringVar(&f.etcd, "etcd", env.Or("QUIRE_ETCD", defaultEtcd), "the live fleet's etcd: "+etcdFlagUsage)
	cmd.Flags().StringVar(&f.prefix, "prefix", "", "the live fleet's key prefix, e.g. /quire/brokers/")
	cmd.Flags().StringVar(&f.fleet, "fleet", "auto", "the live fleet's kind: brokers, consumers, plain (quire allocator member), or auto (by its values)")
	cmd.Flags().StringArrayVar(&f.drain, "drain", nil, "what if member ZONE#SUFFIX drained (repeatable)")
	cmd.Flags().StringArrayVar(&f.add, "add", nil, "what if member ZONE#SUFFIX:LIMIT joined (repeatable)")
	cmd.Flags().StringArrayVar(&f.replication, "replication", nil, "what if item ITEM had replication N, as ITEM=N (repeatable)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Second, "etcd timeout")
	f.etcdTLS.AddFlags(cmd.Flags(), "etcd", "QUIRE_ETCD", "this etcd client")
	f.etcdUser.AddFlags(cmd.Flags())
	return cmd
}

func runPlan(ctx context.Context, stdout io.Writer, f planFlags) error {
	if f.output != "json" && f.output != "yaml" && f.output != "table" {
		return usagef("--output %q: want json, yaml or table", f.output)
	}
	switch f.fleet {
	case "auto", "brokers", "consumers", "plain":
	default:
		return usagef("--fleet %q: want brokers, consumers, plain or auto", f.fleet)
	}
	var sc *allocator.Scenario
	var err error
	switch {
	case f.file != "" && (f.prefix != "" || f.etcdGiven):
		return usagef("give either -f or a live fleet's --prefix (and --etcd), not both")
	case f.file != "":
		sc, err = readScenario(f.file)
	case f.prefix != "":
		sc, err = liveScenario(ctx, f)
	default:
		return usagef("give a scenario file with -f, or a live fleet's --prefix, such as /quire/brokers/ or /quire/consumers/NAME/")
	}
	if err != nil {
		return err
	}
	if err := sc.Validate(); err != nil {
		return usageError{fmt.Errorf("scenario: %w", err)}
	}
	w, err := f.whatIf()
	if err != nil {
		return err
	}
	if err := sc.Apply(w); err != nil {
		return usageError{err}
	}
	if err := sc.Validate(); err != nil {
		return usageError{fmt.Errorf("what if: %w", err)}
	}
	var out bytes.Buffer
	if err := writePlan(&out, allocator.PlanScenario(sc), f.output); err != nil {
		return err
	}
	_, err = stdout.Write(out.Bytes())
	return err
}

// whatIf is the change the flags ask about.
func (f planFlags) whatIf() (allocator.WhatIf, error) {
	w := allocator.WhatIf{Drain: f.drain, Replication: map[string]int{}}
	for _, name := range f.drain {
		if _, _, err := allocator.ParseMemberName(name); err != nil {
			return w, usagef("--drain: %w", err)
		}
	}
	for _, s := range f.add {
		m, err := allocator.ParseAddedMember(s)
		if err != nil {
			return w, usagef("--add: %w", err)
		}
		w.Add = append(w.Add, m)
	}
	for _, s := range f.replication {
		id, n, err := allocator.ParseReplication(s)
		if err != nil {
			return w, usagef("--replication: %w", err)
		}
		w.Replication[id] = n
	}
	return w, nil
}

func readScenario(path string) (*allocator.Scenario, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usagef("reading scenario: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var sc allocator.Scenario
	if err := dec.Decode(&sc); err != nil && !errors.Is(err, io.EOF) {
		return nil, usagef("scenario %s: %w", path, err)
	}
	return &sc, nil
}

func liveScenario(ctx context.Context, f planFlags) (*allocator.Scenario, error) {
	if f.prefix == "" || !strings.HasSuffix(f.prefix, "/") {
		return nil, usagef("--prefix %q: want a key prefix ending in '/'", f.prefix)
	}
	client, err := etcdclient.Dial(ctx, f.etcd, f.etcdTLS, f.etcdUser, f.prefix, f.timeout)
	if err != nil {
		return nil, fmt.Errorf("--etcd: %w", err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	decoders, kind, err := fleetDecoders(ctx, client, f.prefix, f.fleet)
	if err != nil {
		return nil, err
	}
	var bad []error
	decode := allocator.NewDecoder(f.prefix, decoders)
	ks := keyspace.New(f.prefix, func(kv *mvccpb.KeyValue) (any, error) {
		v, err := decode(kv)
		if err != nil && !errors.Is(err, keyspace.ErrSkip) {
			bad = append(bad, fmt.Errorf("key %s: %w", kv.Key, err))
		}
		return v, err
	})
	ks.SetLogger(slog.New(slog.DiscardHandler)) // bad values are this command's error
	if err := ks.Load(ctx, client, 0); err != nil {
		return nil, fmt.Errorf("reading fleet %s from etcd %s: %w", f.prefix, f.etcd, err)
	}
	if len(bad) > 0 {
		return nil, usagef("fleet %s (as %s): %d values do not decode; the first: %w", f.prefix, kind, len(bad), bad[0])
	}
	kvs, rev := ks.Snapshot()
	sc := allocator.ScenarioOf(allocator.NewState(f.prefix, kvs, rev))
	if len(sc.Members) == 0 && len(sc.Items) == 0 {
		return nil, usagef("--prefix %s: etcd %s holds no fleet there (no members, no items)", f.prefix, f.etcd)
	}
	return sc, nil
}

// fleetDecoders are the decoders of the fleet under prefix, as kind
// says, or for "auto", as its values show (see fleet.KindOf).
func fleetDecoders(ctx context.Context, client *clientv3.Client, prefix, kind string) (allocator.Decoders, string, error) {
	k := fleet.Kind(kind)
	if kind == "auto" {
		var err error
		if k, err = fleet.KindOf(ctx, client, prefix); err != nil {
			return allocator.Decoders{}, "", err
		}
	}
	return k.Decoders(), string(k), nil
}

func writePlan(w io.Writer, p *allocator.Plan, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	case "yaml":
		enc := yaml.NewEncoder(w)
		defer enc.Close()
		return enc.Encode(p)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ITEM\tSLOT\tMEMBER")
	for _, a := range p.Assignments {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", a.Item, a.Slot, allocator.MemberName(a.Zone, a.Suffix))
	}
	if len(p.Added)+len(p.Removed) > 0 {
		fmt.Fprintln(tw, "\nMOVE\tITEM\tSLOT\tMEMBER")
		for _, a := range p.Removed {
			fmt.Fprintf(tw, "remove\t%s\t%d\t%s\n", a.Item, a.Slot, allocator.MemberName(a.Zone, a.Suffix))
		}
		for _, a := range p.Added {
			fmt.Fprintf(tw, "add\t%s\t%d\t%s\n", a.Item, a.Slot, allocator.MemberName(a.Zone, a.Suffix))
		}
	}
	tw.Flush()
	s := p.Stats
	_, err := fmt.Fprintf(w, "\ndesired %d, assigned %d (kept %d, added %d, removed %d), solved in %.3fs\n",
		s.DesiredSlots, s.AssignedSlots, s.Kept, s.Added, s.Removed, s.SolveSeconds)
	return err
}
