package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/authflag"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/internal/hostport"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// defaultBroker is the broker of `quire dev`, which journals commands use
// when neither --broker nor QUIRE_BROKER names one.
const defaultBroker = "127.0.0.1:7700"

// brokerFlagUsage is the help of every --broker flag.
const brokerFlagUsage = "host:port of any broker, or several, comma-separated: tried in turn while one is unreachable (env QUIRE_BROKER)"

// validateBrokers checks a --broker value: one or more host:port.
func validateBrokers(list string) error {
	if err := hostport.CheckList("--broker", list); err != nil {
		return usageError{err}
	}
	return nil
}

// defaultEtcd is the etcd of `quire dev`, which every command and server
// uses when neither --etcd nor QUIRE_ETCD names one: the same default as
// consumer processes'.
const defaultEtcd = consumer.DefaultEtcd

// applyBatch is the most changes sent in one Apply: each batch is one
// etcd transaction, which etcd bounds (--max-txn-ops, 128 by default).
const applyBatch = 100

// journalsFlags are the flags of every journals command.
type journalsFlags struct {
	broker  string
	timeout time.Duration
	tls     tlsconfig.Files
	token   authflag.Client
}

// addFlags adds the flags of every command that talks to brokers.
func (jf *journalsFlags) addFlags(pf *pflag.FlagSet, timeoutUsage string) {
	pf.StringVar(&jf.broker, "broker", env.Or("QUIRE_BROKER", defaultBroker), brokerFlagUsage)
	pf.DurationVar(&jf.timeout, "timeout", 10*time.Second, timeoutUsage)
	jf.tls.AddFlags(pf, "tls", "QUIRE_TLS", "this client")
	jf.token.AddFlags(pf, "this client")
}

func newJournalsCommand() *cobra.Command {
	jf := &journalsFlags{}
	cmd := &cobra.Command{
		Use:   "journals",
		Short: "List, create, change, delete, append to, read and prune journals; check their stores",
		Long: `Commands on the journals of a fleet of brokers, through any broker: --broker,
else $QUIRE_BROKER, else ` + defaultBroker + ` (the broker of 'quire dev').

Specs are written in spec files (YAML):

  defaults: {replication: 1}
  journals:
    - name: examples/hello
      labels: {app: hello}
      fragment: {length: 64MiB, codec: zstd, flushInterval: 1m}

'list -o yaml' prints one, 'apply -f' applies one, 'edit' edits one in
$EDITOR. Selectors (-l) match journals' labels, and the meta-labels
name=NAME and prefix=P (each prefix of the name ending in '/'):
"app=hello", "prefix=examples/", "region in (eu, us), !deprecated".

Errors are printed on standard error with a non-zero exit; bad input
(flags, selectors, spec files) exits with 2 and changes nothing.`,
	}
	jf.addFlags(cmd.PersistentFlags(), "how long to wait for a broker to answer (reads and appends: to find the journal)")
	cmd.AddCommand(
		newJournalsListCommand(jf), newJournalsApplyCommand(jf), newJournalsEditCommand(jf),
		newJournalsDeleteCommand(jf), newJournalsAppendCommand(jf), newJournalsReadCommand(jf),
		newJournalsFragmentsCommand(jf), newJournalsPruneCommand(jf), newJournalsResetHeadCommand(jf),
		newJournalsSuspendCommand(jf, false), newJournalsSuspendCommand(jf, true),
		newJournalsStoreHealthCommand(jf), newJournalsAttachUUIDsCommand(),
	)
	return cmd
}

// connect validates the flags and returns a client of the broker, with
// edits (if any) applied to its config.
func (jf *journalsFlags) connect(ctx context.Context, edits ...func(*client.Config)) (*client.Client, error) {
	if err := validateBrokers(jf.broker); err != nil {
		return nil, err
	}
	if jf.timeout <= 0 {
		return nil, usagef("--timeout %s: want a positive duration", jf.timeout)
	}
	opts, err := dialOptions(jf.tls, "tls", jf.token)
	if err != nil {
		return nil, err
	}
	cfg := client.Config{Broker: jf.broker, DialOptions: opts}
	for _, edit := range edits {
		edit(&cfg)
	}
	return client.New(ctx, cfg)
}

// throughBrokers is a config edit of connect: with on, Readers read all
// content through brokers (--through-brokers).
func throughBrokers(on bool) func(*client.Config) {
	return func(cfg *client.Config) { cfg.ReadThroughBrokers = on }
}

// throughBrokersUsage is the usage of --through-brokers.
const throughBrokersUsage = "read content persisted to the fragment stores through the brokers, not from the stores directly (for a machine that cannot reach the stores)"

// dialOptions are the gRPC dial options of the TLS flags --PREFIX-* and
// of the token flags.
func dialOptions(files tlsconfig.Files, prefix string, token authflag.Client) ([]grpc.DialOption, error) {
	opts, err := files.DialOptions()
	if err != nil {
		return nil, usagef("%s: %w", tlsconfig.Flags(prefix), err)
	}
	tokenOpts, err := token.DialOptions()
	if err != nil {
		return nil, usageError{err}
	}
	return append(opts, tokenOpts...), nil
}

// tlsHint explains an error of a connection whose TLS does not match its
// server's, or says nothing.
func tlsHint(server string, err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return server + " does not serve TLS: drop --tls-cert, --tls-key and --tls-ca (and QUIRE_TLS_*)"
	case strings.Contains(msg, "tls: certificate required"):
		return server + " requires a client certificate (mutual TLS): give --tls-cert and --tls-key"
	case strings.Contains(msg, "x509:"):
		return server + "'s certificate is not trusted (or not valid for its address): give --tls-ca with the CA that signed it"
	case strings.Contains(msg, "server preface: EOF"):
		return server + " closed the connection at once: does it serve TLS? then give --tls-ca (and --tls-cert, --tls-key if it requires client certificates)"
	}
	return ""
}

// brokerError explains a request that failed, for a person.
func (jf *journalsFlags) brokerError(what string, err error) error {
	if hint := tlsHint("broker "+jf.broker, err); hint != "" {
		return fmt.Errorf("%s: %s: %w", what, hint, err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: no answer from broker %s within %s (is it running? 'quire dev' starts one; --broker or QUIRE_BROKER names another): %w",
			what, jf.broker, jf.timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// list lists the journals matching selector, within --timeout.
func (jf *journalsFlags) list(ctx context.Context, c *client.Client, selector string) ([]*protocol.ListResponse_Journal, error) {
	ctx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	js, err := c.ListAll(ctx, selector)
	if err != nil {
		return nil, jf.brokerError("listing journals", err)
	}
	return js, nil
}

// lookup returns journal name, or an error if it does not exist. With a
// token that may not list journals (READ,APPEND alone, say), it returns
// nil and no error: the read or append that follows finds out.
func (jf *journalsFlags) lookup(ctx context.Context, c *client.Client, name string) (*protocol.ListResponse_Journal, error) {
	js, err := jf.list(ctx, c, protocol.LabelName+"="+name)
	if status.Code(err) == codes.PermissionDenied {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	for _, j := range js {
		if j.GetSpec().GetName() == name {
			return j, nil
		}
	}
	hint := ""
	if jf.token != (authflag.Client{}) {
		hint = ", or outside what the token may list"
	}
	return nil, fmt.Errorf("journal %q not found ('quire journals list' lists the journals%s)", name, hint)
}

func parseSelectorFlag(flag, sel string) error {
	if _, err := labels.ParseSelector(sel); err != nil {
		return usagef("%s: %w", flag, err)
	}
	return nil
}

func checkOutput(output string, allowed ...string) error {
	if !slices.Contains(allowed, output) {
		return usagef("--output %q: want %s", output, strings.Join(allowed, ", "))
	}
	return nil
}

// ---- list ----

func newJournalsListCommand(jf *journalsFlags) *cobra.Command {
	var selector, output string
	var watch bool
	cmd := &cobra.Command{
		Use:   "list [-l SELECTOR] [-o table|yaml|json] [--watch]",
		Short: "List journals: their replication, route and labels",
		Long: `List the journals whose labels match the selector (all, without -l).

  table  name, replication, route (brokers as zone#suffix, the primary first), labels
  yaml   a spec file of the journals, which 'apply -f' reads back
  json   the journals' specs with their etcd revisions and routes

--watch prints the list, then prints it again each time the selected
journals, their specs or their routes change, until interrupted (Ctrl-C,
exit 0). Each list is a block: table, a line "# TIME revision REV" then
the table and an empty line; yaml, a document ("---", the same comment
line, the spec file); json, one object a line, {"time", "revision",
"journals"}. The broker answers each request once its view of etcd has
passed the last one's revision (a long poll), so nothing is polled; a
broker that predates this is asked once a second. --timeout bounds the
first list only.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				ctx, stop := interruptible(cmd.Context())
				defer stop()
				return runListWatch(ctx, cmd.OutOrStdout(), jf, selector, output)
			}
			return runList(cmd.Context(), cmd.OutOrStdout(), jf, selector, output)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector, such as app=hello or prefix=examples/")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml or json")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print the list again each time it changes, until interrupted")
	return cmd
}

func runList(ctx context.Context, stdout io.Writer, jf *journalsFlags, selector, output string) error {
	if err := checkOutput(output, "table", "yaml", "json"); err != nil {
		return err
	}
	if err := parseSelectorFlag("--selector", selector); err != nil {
		return err
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	js, err := jf.list(ctx, c, selector)
	if err != nil {
		return err
	}
	var out []byte
	switch output {
	case "yaml":
		out, err = protocol.FormatSpecFile(specsOf(js))
	case "json":
		out, err = journalsJSON(js)
	default:
		out = journalsTable(js)
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// watchPollInterval is how often --watch asks a broker that answers at
// once, ignoring ListRequest.wait_for_revision (one that predates it).
const watchPollInterval = time.Second

// runListWatch prints the list, then again each time it changes, until
// ctx ends (which is no error).
func runListWatch(ctx context.Context, stdout io.Writer, jf *journalsFlags, selector, output string) error {
	if err := checkOutput(output, "table", "yaml", "json"); err != nil {
		return err
	}
	if err := parseSelectorFlag("--selector", selector); err != nil {
		return err
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var last []byte // What the last list printed held, as watchKey has it.
	var wait int64  // The revision the next list waits for.
	for first := true; ; first = false {
		lctx, cancel := ctx, context.CancelFunc(func() {})
		if first {
			lctx, cancel = context.WithTimeout(ctx, jf.timeout)
		}
		resp, err := c.List(lctx, &protocol.ListRequest{Selector: selector, WaitForRevision: wait})
		cancel()
		if ctx.Err() != nil {
			return nil // Interrupted.
		} else if err != nil {
			return jf.brokerError("listing journals", err)
		}
		rev := resp.GetHeader().GetRevision()
		if key := watchKey(resp.GetJournals()); first || !bytes.Equal(key, last) {
			last = key
			if err := printWatched(stdout, resp.GetJournals(), rev, output); err != nil {
				return err
			}
		}
		if !first && rev < wait {
			// The broker answered without waiting: poll it.
			t := time.NewTimer(watchPollInterval)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil
			}
		}
		wait = max(wait, rev+1)
	}
}

// watchKey is what --watch compares between lists: the journals' specs,
// revisions and routes, less the routes' revisions, which move with
// every change of the fleet.
func watchKey(js []*protocol.ListResponse_Journal) []byte {
	var out []byte
	for _, j := range js {
		j = proto.CloneOf(j)
		if j.Route != nil {
			j.Route.Revision = 0
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(j)
		if err != nil {
			b = []byte(err.Error()) // Never: the broker's message marshals.
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

// printWatched prints one list of --watch, as its help says.
func printWatched(w io.Writer, js []*protocol.ListResponse_Journal, rev int64, output string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	var out []byte
	switch output {
	case "json":
		list, err := journalsListOf(js)
		if err != nil {
			return err
		}
		b, err := json.Marshal(struct {
			Time     string            `json:"time"`
			Revision int64             `json:"revision"`
			Journals []journalListJSON `json:"journals"`
		}{now, rev, list.Journals})
		if err != nil {
			return fmt.Errorf("encoding JSON: %w", err)
		}
		out = append(b, '\n')
	case "yaml":
		file, err := protocol.FormatSpecFile(specsOf(js))
		if err != nil {
			return err
		}
		out = append(fmt.Appendf(nil, "---\n# %s revision %d\n", now, rev), file...)
	default:
		out = append(fmt.Appendf(nil, "# %s revision %d\n", now, rev), journalsTable(js)...)
		out = append(out, '\n')
	}
	_, err := w.Write(out)
	return err
}

func specsOf(js []*protocol.ListResponse_Journal) []*protocol.JournalSpec {
	out := make([]*protocol.JournalSpec, len(js))
	for i, j := range js {
		out[i] = j.GetSpec()
	}
	return out
}

// formatJSON is the -o json of every command: v indented, one field a
// line, with a final newline.
func formatJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding JSON: %w", err)
	}
	return append(b, '\n'), nil
}

func journalsTable(js []*protocol.ListResponse_Journal) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tREPLICATION\tROUTE\tLABELS")
	for _, j := range js {
		s := j.GetSpec()
		route := routeText(j.GetRoute())
		if s.Suspended() {
			route = fmt.Sprintf("suspended at %d", s.GetSuspension().GetOffset())
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.GetName(), s.GetReplication(), route,
			orDash(protocol.LabelsOf(s.GetLabels()).String()))
	}
	tw.Flush()
	return b.Bytes()
}

// routeText is a route's brokers, zone#suffix, primary first.
func routeText(rt *protocol.Route) string {
	return orDash(strings.Join(routeMembers(rt), ","))
}

func routeMembers(rt *protocol.Route) []string {
	names := []string{}
	for _, m := range rt.GetMembers() {
		names = append(names, allocator.MemberName(m.GetZone(), m.GetSuffix()))
	}
	return names
}

// The JSON form of `journals list -o json`.
type (
	journalsListJSON struct {
		Journals []journalListJSON `json:"journals"`
	}
	journalListJSON struct {
		Spec           json.RawMessage `json:"spec"`
		CreateRevision int64           `json:"createRevision"`
		ModRevision    int64           `json:"modRevision"`
		Route          routeJSON       `json:"route"`
	}
	routeJSON struct {
		Members   []string `json:"members"` // zone#suffix, the primary first
		Endpoints []string `json:"endpoints"`
		Revision  int64    `json:"revision"`
	}
)

func journalsJSON(js []*protocol.ListResponse_Journal) ([]byte, error) {
	out, err := journalsListOf(js)
	if err != nil {
		return nil, err
	}
	return formatJSON(out)
}

func journalsListOf(js []*protocol.ListResponse_Journal) (journalsListJSON, error) {
	out := journalsListJSON{Journals: []journalListJSON{}}
	for _, j := range js {
		spec, err := protocol.SpecJSON(j.GetSpec())
		if err != nil {
			return out, fmt.Errorf("journal %s: %w", j.GetSpec().GetName(), err)
		}
		rt := j.GetRoute()
		out.Journals = append(out.Journals, journalListJSON{Spec: spec, CreateRevision: j.GetCreateRevision(),
			ModRevision: j.GetModRevision(), Route: routeJSON{Members: routeMembers(rt),
				Endpoints: append([]string{}, rt.GetEndpoints()...), Revision: rt.GetRevision()}})
	}
	return out, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ---- apply ----

func newJournalsApplyCommand(jf *journalsFlags) *cobra.Command {
	var file string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply -f SPECS.yaml [--dry-run]",
		Short: "Create and update journals from a spec file",
		Long: `Create the journals of a spec file that do not exist, and update those whose
spec differs, each conditioned on the revision listed just before: if a
journal changed meanwhile, nothing (of that batch of 100) is applied.
Journals missing from the file are left alone. --dry-run prints what would
change and changes nothing. '-f -' reads standard input.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runApply(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, file, dryRun)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "spec file; - reads standard input")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, and change nothing")
	return cmd
}

func runApply(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, jf *journalsFlags, file string, dryRun bool) error {
	specs, err := readSpecFile(stdin, file)
	if err != nil {
		return err
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	current, err := jf.list(ctx, c, "")
	if err != nil {
		return err
	}
	changes := planUpserts(specs, byName(current))
	return applyAndReport(ctx, c, stdout, stderr, jf, changes, dryRun)
}

func readSpecFile(stdin io.Reader, file string) ([]*protocol.JournalSpec, error) {
	var data []byte
	var err error
	switch file {
	case "":
		return nil, usagef("give a spec file with -f (- reads standard input)")
	case "-":
		data, err = io.ReadAll(stdin)
	default:
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usagef("reading spec file: %w", err)
	}
	specs, err := protocol.ParseSpecFile(data)
	if err != nil {
		return nil, usagef("spec file %s: %w", file, err)
	}
	if len(specs) == 0 {
		return nil, usagef("spec file %s lists no journals", file)
	}
	return specs, nil
}

func byName(js []*protocol.ListResponse_Journal) map[string]*protocol.ListResponse_Journal {
	m := make(map[string]*protocol.ListResponse_Journal, len(js))
	for _, j := range js {
		m[j.GetSpec().GetName()] = j
	}
	return m
}

// change is what applying a spec (or deleting a journal) does.
type change struct {
	name   string
	action string   // created, updated, unchanged or deleted
	diff   []string // for updated: "field: old → new"
	req    *protocol.ApplyRequest_Change
}

// planUpserts compares specs with the current journals.
func planUpserts(specs []*protocol.JournalSpec, current map[string]*protocol.ListResponse_Journal) []change {
	var out []change
	for _, s := range specs {
		cur, ok := current[s.GetName()]
		if ok && s.Suspension == nil {
			s.Suspension = cur.GetSpec().GetSuspension() // The brokers' to set: see journals suspend.
		}
		switch {
		case !ok:
			out = append(out, change{name: s.Name, action: "created",
				req: &protocol.ApplyRequest_Change{Upsert: s}})
		case proto.Equal(cur.GetSpec(), s):
			out = append(out, change{name: s.Name, action: "unchanged"})
		default:
			out = append(out, change{name: s.Name, action: "updated", diff: specDiff(cur.GetSpec(), s),
				req: &protocol.ApplyRequest_Change{Upsert: s, ExpectModRevision: cur.GetModRevision()}})
		}
	}
	return out
}

// applyAndReport applies the changes in batches, and prints each change,
// in order, once its batch is applied; with dryRun, it applies nothing.
// applyAndReport applies the changes, printing each on stdout and the
// brokers' warnings about them on stderr.
func applyAndReport(ctx context.Context, c *client.Client, stdout, stderr io.Writer, jf *journalsFlags, changes []change, dryRun bool) error {
	return applyInBatches(stdout, changes, dryRun, func(ch change) bool { return ch.req != nil },
		func(batch []change) error {
			warnings, err := jf.apply(ctx, c, batch)
			for _, w := range warnings {
				fmt.Fprintf(stderr, "warning: %s\n", w)
			}
			return err
		},
		func(ch change) { printChange(stdout, ch, dryRun) })
}

// applyInBatches applies the changes that need it (needs) in batches of
// applyBatch, and prints every change, in order, once the batch among
// which it falls is applied; with dryRun, it applies nothing. It serves
// journals and shards alike.
func applyInBatches[C any](stdout io.Writer, changes []C, dryRun bool, needs func(C) bool, apply func([]C) error, print func(C)) error {
	var pending, batch []C
	flush := func() error {
		if len(batch) > 0 && !dryRun {
			if err := apply(batch); err != nil {
				return err
			}
		}
		for _, ch := range pending {
			print(ch)
		}
		pending, batch = pending[:0], batch[:0]
		return nil
	}
	for _, ch := range changes {
		pending = append(pending, ch)
		if !needs(ch) {
			continue
		}
		batch = append(batch, ch)
		if len(batch) == applyBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintln(stdout, "dry run: nothing was changed")
	}
	return nil
}

// apply applies one batch of changes atomically, and returns the
// brokers' warnings about them.
func (jf *journalsFlags) apply(ctx context.Context, c *client.Client, batch []change) ([]string, error) {
	req := &protocol.ApplyRequest{}
	var names []string
	for _, ch := range batch {
		req.Changes = append(req.Changes, ch.req)
		names = append(names, ch.name)
	}
	ctx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	resp, err := c.Apply(ctx, req)
	if errors.Is(err, client.ErrRevisionMismatch) {
		return nil, fmt.Errorf("journals %s changed since they were listed, so none of them was changed: run the command again",
			strings.Join(names, ", "))
	} else if err != nil {
		return nil, jf.brokerError("applying changes to "+strings.Join(names, ", "), err)
	}
	return resp.Warnings, nil
}

func printChange(w io.Writer, ch change, dryRun bool) {
	printChangeOf(w, ch.name, ch.action, ch.diff, dryRun)
}

// printChangeOf prints what an apply does (or would do) to one spec.
func printChangeOf(w io.Writer, name, action string, diff []string, dryRun bool) {
	verb := action
	if dryRun && action != "unchanged" {
		verb = "would be " + action
	}
	fmt.Fprintf(w, "%s: %s\n", name, verb)
	for _, d := range diff {
		fmt.Fprintf(w, "  %s\n", d)
	}
}

// specDiff describes the fields that differ between two specs, as their
// spec-file paths: "fragment.length: 128MiB → 64MiB".
func specDiff(old, new *protocol.JournalSpec) []string {
	return fieldsDiff(specFields(old), specFields(new))
}

// fieldsDiff describes the fields of two flattened specs (path → value)
// that differ, sorted: "path: old → new".
func fieldsDiff(a, b map[string]string) []string {
	keys := make(map[string]bool)
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if a[k] != b[k] {
			out = append(out, fmt.Sprintf("%s: %s → %s", k, orUnset(a[k]), orUnset(b[k])))
		}
	}
	sort.Strings(out)
	return out
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// specFields flattens a spec's spec-file form into field paths and values.
func specFields(s *protocol.JournalSpec) map[string]string {
	out := make(map[string]string)
	data, err := protocol.FormatSpecFile([]*protocol.JournalSpec{s})
	if err != nil {
		out["(spec)"] = err.Error()
		return out
	}
	var doc struct {
		Journals []map[string]any `yaml:"journals"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Journals) != 1 {
		out["(spec)"] = string(data)
		return out
	}
	flatten("", doc.Journals[0], out)
	return out
}

func flatten(path string, v any, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, e, out)
		}
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = fmt.Sprint(e)
		}
		out[path] = "[" + strings.Join(parts, ", ") + "]"
	default:
		out[path] = fmt.Sprint(t)
	}
}

// ---- edit ----

func newJournalsEditCommand(jf *journalsFlags) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "edit (-l SELECTOR | NAME...)",
		Short: "Edit journals' specs in $EDITOR, and apply the changes",
		Long: `Write the selected journals' specs to a temporary spec file, open it in
$EDITOR (else vi), and when the editor exits, apply what changed,
conditioned on the revisions read: if a journal changed meanwhile, nothing
is applied. Journals added to the file are created; journals removed from
it are left alone ('quire journals delete' deletes). If the edited file is
not a valid spec file, nothing is applied and the file is kept.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEdit(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, selector, args)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the journals to edit")
	return cmd
}

func runEdit(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, selector string, names []string) error {
	sel, err := selectorFor(selector, names, false)
	if err != nil {
		return err
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	js, err := jf.list(ctx, c, sel)
	if err != nil {
		return err
	}
	if len(js) == 0 {
		return fmt.Errorf("no journals match %q", sel)
	}
	path, err := writeEditFile(js)
	if err != nil {
		return err
	}
	if err := runEditor(ctx, path); err != nil {
		return fmt.Errorf("%w (the specs are in %s)", err, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the edited spec file: %w", err)
	}
	specs, err := protocol.ParseSpecFile(data)
	if err != nil {
		return usagef("the edited spec file is not valid, so nothing was changed: %w\nyour edits are kept in %s", err, path)
	}
	changes := planUpserts(specs, byName(js))
	if !slices.ContainsFunc(changes, func(ch change) bool { return ch.req != nil }) {
		os.Remove(path)
		fmt.Fprintln(stdout, "no changes")
		return nil
	}
	var edited []change
	for _, ch := range changes {
		if ch.req != nil {
			edited = append(edited, ch)
		}
	}
	if err := applyAndReport(ctx, c, stdout, stderr, jf, edited, false); err != nil {
		return fmt.Errorf("%w\nyour edits are kept in %s", err, path)
	}
	os.Remove(path)
	return nil
}

const editHeader = `# Edit the journals below, then save and quit to apply the changes.
# Journals added here are created; journals removed from here are kept
# (quire journals delete deletes them). An invalid file changes nothing.
`

func writeEditFile(js []*protocol.ListResponse_Journal) (string, error) {
	data, err := protocol.FormatSpecFile(specsOf(js))
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "quire-edit-*.yaml")
	if err != nil {
		return "", fmt.Errorf("creating the file to edit: %w", err)
	}
	_, err = f.Write(append([]byte(editHeader), data...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// runEditor runs $EDITOR (else vi) on path, on the terminal.
func runEditor(ctx context.Context, path string) error {
	editor := strings.Fields(os.Getenv("EDITOR"))
	if len(editor) == 0 {
		editor = []string{"vi"}
	}
	cmd := exec.CommandContext(ctx, editor[0], append(editor[1:], path)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("editor %q failed, so nothing was changed: %w", strings.Join(editor, " "), err)
	}
	return nil
}

// selectorFor is the selector of -l SELECTOR or journal names (one of
// them is required; all allows neither, selecting every journal).
func selectorFor(selector string, names []string, all bool) (string, error) {
	switch {
	case selector != "" && len(names) > 0:
		return "", usagef("give -l SELECTOR or journal names, not both")
	case all && (selector != "" || len(names) > 0):
		return "", usagef("--all selects every journal: give no -l or names with it")
	case all:
		return "", nil
	case selector != "":
		return selector, parseSelectorFlag("--selector", selector)
	case len(names) == 0:
		return "", usagef("give -l SELECTOR or journal names")
	}
	for _, n := range names {
		if err := protocol.ValidateJournalName(n); err != nil {
			return "", usagef("journal name %q: %w", n, err)
		}
	}
	return fmt.Sprintf("%s in (%s)", protocol.LabelName, strings.Join(names, ", ")), nil
}

// ---- delete ----

func newJournalsDeleteCommand(jf *journalsFlags) *cobra.Command {
	var selector string
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:   "delete (-l SELECTOR | NAME... | --all) [--dry-run]",
		Short: "Delete journals",
		Long: `Delete the journals matching -l SELECTOR, or named, each conditioned on the
revision listed just before. Their fragments stay in the stores. An empty
selector is refused: --all deletes every journal.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDelete(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, selector, args, all, dryRun)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the journals to delete")
	cmd.Flags().BoolVar(&all, "all", false, "delete every journal")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be deleted, and delete nothing")
	return cmd
}

// selected connects to the brokers and lists the journals that selector,
// names or all select (see selectorFor). A named journal that does not
// exist is an error, which says that undone was not done. The caller
// closes the client.
func (jf *journalsFlags) selected(ctx context.Context, selector string, names []string, all bool, undone string) (*client.Client, []*protocol.ListResponse_Journal, error) {
	sel, err := selectorFor(selector, names, all)
	if err != nil {
		return nil, nil, err
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	js, err := jf.list(ctx, c, sel)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	found := byName(js)
	for _, n := range names {
		if found[n] == nil {
			c.Close()
			return nil, nil, fmt.Errorf("journal %q not found, so %s", n, undone)
		}
	}
	return c, js, nil
}

func runDelete(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, selector string, names []string, all, dryRun bool) error {
	c, js, err := jf.selected(ctx, selector, names, all, "nothing was deleted")
	if err != nil {
		return err
	}
	defer c.Close()
	sel, _ := selectorFor(selector, names, all)
	if len(js) == 0 {
		fmt.Fprintf(stderr, "no journals match %q\n", sel)
		return nil
	}
	var changes []change
	for _, j := range js {
		name := j.GetSpec().GetName()
		changes = append(changes, change{name: name, action: "deleted",
			req: &protocol.ApplyRequest_Change{Delete: name, ExpectModRevision: j.GetModRevision()}})
	}
	return applyAndReport(ctx, c, stdout, stderr, jf, changes, dryRun)
}
