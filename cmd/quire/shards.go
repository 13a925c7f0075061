package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/authflag"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/protocol"
)

// defaultConsumer is the consumer process of `quire dev`, which shards
// commands use when neither --consumer nor QUIRE_CONSUMER names one.
const defaultConsumer = "127.0.0.1:7702"

// statTimeout bounds each Stat of `shards list`, within --timeout: a
// primary that is still recovering answers only once it serves, and the
// list shows its lag as unknown rather than wait for it.
const statTimeout = 2 * time.Second

// shardsFlags are the flags of every shards command.
type shardsFlags struct {
	consumer string
	timeout  time.Duration
	tls      tlsconfig.Files
	token    authflag.Client
}

func newShardsCommand() *cobra.Command {
	sf := &shardsFlags{}
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "List, create, change, delete and unassign shards; recover and prune their logs",
		Long: `Commands on the shards of a consumer application, through any of its
processes: --consumer, else $QUIRE_CONSUMER, else ` + defaultConsumer + ` (the
consumer of 'quire dev'). recover and prune also read recovery logs
through a broker: --broker, else $QUIRE_BROKER, else ` + defaultBroker + `.

Specs are written in shard files (YAML):

  defaults:
    recoveryLogPrefix: recovery/wordcount
    hintPrefix: /quire/consumers/wordcount/hints/
    labels: {app: wordcount}
  shards:
    - id: wordcount/part-000
      sources: [examples/words/part-000]
      hotStandbys: 1

'list -o yaml' prints one, 'apply -f' applies one, 'edit' edits one in
$EDITOR. Selectors (-l) match shards' labels, and the meta-labels id=ID
and prefix=P (each prefix of the ID ending in '/'): "app=wordcount",
"prefix=wordcount/", "id in (a/0, a/1)".

Errors are printed on standard error with a non-zero exit; bad input
(flags, selectors, shard files) exits with 2 and changes nothing.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&sf.consumer, "consumer", env.Or("QUIRE_CONSUMER", defaultConsumer), "host:port of any process of the consumer application (env QUIRE_CONSUMER)")
	pf.DurationVar(&sf.timeout, "timeout", 10*time.Second, "how long to wait for a consumer process (or a broker) to answer")
	sf.tls.AddFlags(pf, "tls", "QUIRE_TLS", "this client (of consumer processes and brokers)")
	sf.token.AddFlags(pf, "this client (to consumer processes and brokers)")
	cmd.AddCommand(
		newShardsListCommand(sf), newShardsApplyCommand(sf), newShardsEditCommand(sf),
		newShardsDeleteCommand(sf), newShardsUnassignCommand(sf), newShardsHintsCommand(sf),
		newShardsRecoverCommand(sf), newShardsPruneCommand(sf),
	)
	return cmd
}

// shardsClient is a client of a consumer process's Shard service.
type shardsClient struct {
	protocol.ShardClient
	sf   *shardsFlags
	conn *grpc.ClientConn
}

// validate checks the flags common to every shards command.
func (sf *shardsFlags) validate() error {
	if err := validateHostPort("--consumer", sf.consumer); err != nil {
		return err
	}
	if sf.timeout <= 0 {
		return usagef("--timeout %s: want a positive duration", sf.timeout)
	}
	return nil
}

// connect validates the flags and returns a client of the consumer
// process. Its calls wait for the connection (until their deadline), as
// the journals client retries an unreachable broker.
func (sf *shardsFlags) connect() (*shardsClient, error) {
	if err := sf.validate(); err != nil {
		return nil, err
	}
	opts, err := dialOptions(sf.tls, "tls", sf.token)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(sf.consumer, append(opts, grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))...)
	if err != nil {
		return nil, usagef("--consumer %q: %w", sf.consumer, err)
	}
	return &shardsClient{ShardClient: protocol.NewShardClient(conn), sf: sf, conn: conn}, nil
}

func (c *shardsClient) Close() error { return c.conn.Close() }

// journals returns a client of the brokers, through broker, with the
// shards commands' TLS.
func (sf *shardsFlags) journals(ctx context.Context, broker string) (*client.Client, error) {
	opts, err := dialOptions(sf.tls, "tls", sf.token)
	if err != nil {
		return nil, err
	}
	return client.New(ctx, client.Config{Broker: broker, DialOptions: opts})
}

// consumerError explains a request that failed, for a person.
func (sf *shardsFlags) consumerError(what string, err error) error {
	if hint := tlsHint("consumer "+sf.consumer, err); hint != "" {
		return fmt.Errorf("%s: %s: %w", what, hint, err)
	}
	code := status.Code(err)
	if errors.Is(err, context.DeadlineExceeded) || code == codes.DeadlineExceeded {
		return fmt.Errorf("%s: no answer from consumer %s within %s (is it running? 'quire dev' hosts one; --consumer or QUIRE_CONSUMER names another): %w",
			what, sf.consumer, sf.timeout, err)
	}
	if st, ok := status.FromError(err); ok && code != codes.Unknown {
		return fmt.Errorf("%s: %s (%s)", what, st.Message(), code)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// statusError is the error of a response's non-OK status.
func statusError(what string, st protocol.Status) error {
	return fmt.Errorf("%s: the consumer answered %s", what, st)
}

// listedShard is a shard as List returned it, with its spec decoded.
type listedShard struct {
	spec *consumer.ShardSpec
	*protocol.ShardListResponse_Shard
}

// list lists the shards matching selector, within --timeout.
func (c *shardsClient) list(ctx context.Context, selector string) ([]listedShard, error) {
	ctx, cancel := context.WithTimeout(ctx, c.sf.timeout)
	defer cancel()
	resp, err := c.List(ctx, &protocol.ShardListRequest{Selector: selector})
	if err != nil {
		return nil, c.sf.consumerError("listing shards", err)
	}
	if resp.GetStatus() != protocol.Status_OK {
		return nil, statusError("listing shards", resp.GetStatus())
	}
	out := make([]listedShard, 0, len(resp.GetShards()))
	for i, sh := range resp.GetShards() {
		spec, err := consumer.UnmarshalShardSpec(sh.GetSpec())
		if err != nil {
			return nil, fmt.Errorf("listing shards: shard %d of the list: %w", i, err)
		}
		out = append(out, listedShard{spec: spec, ShardListResponse_Shard: sh})
	}
	return out, nil
}

// lookup returns shard id, or an error if it does not exist.
func (c *shardsClient) lookup(ctx context.Context, id string) (listedShard, error) {
	shards, err := c.list(ctx, consumer.LabelID+"="+id)
	if err != nil {
		return listedShard{}, err
	}
	for _, sh := range shards {
		if sh.spec.ID == id {
			return sh, nil
		}
	}
	return listedShard{}, fmt.Errorf("shard %q not found ('quire shards list' lists the shards)", id)
}

func validateShardFlag(id string) error {
	if id == "" {
		return usagef("give the shard, by ID (ID or -s ID)")
	}
	if err := consumer.ValidateShardID(id); err != nil {
		return usagef("--shard: %w", err)
	}
	return nil
}

// shardSelectorFor is the selector of -l SELECTOR or shard IDs (one of
// them is required; all allows neither, selecting every shard).
func shardSelectorFor(selector string, ids []string, all bool) (string, error) {
	switch {
	case selector != "" && len(ids) > 0:
		return "", usagef("give -l SELECTOR or shard IDs, not both")
	case all && (selector != "" || len(ids) > 0):
		return "", usagef("--all selects every shard: give no -l or IDs with it")
	case all:
		return "", nil
	case selector != "":
		return selector, parseSelectorFlag("--selector", selector)
	case len(ids) == 0:
		return "", usagef("give -l SELECTOR or shard IDs")
	}
	for _, id := range ids {
		if err := consumer.ValidateShardID(id); err != nil {
			return "", usagef("shard ID %q: %w", id, err)
		}
	}
	return fmt.Sprintf("%s in (%s)", consumer.LabelID, strings.Join(ids, ", ")), nil
}

// selectShards lists the shards of a selection, requiring that each of
// ids exists; what is the command's past participle, for the error.
func (c *shardsClient) selectShards(ctx context.Context, sel string, ids []string, what string) ([]listedShard, error) {
	shards, err := c.list(ctx, sel)
	if err != nil {
		return nil, err
	}
	found := byID(shards)
	for _, id := range ids {
		if _, ok := found[id]; !ok {
			return nil, fmt.Errorf("shard %q not found, so nothing was %s", id, what)
		}
	}
	return shards, nil
}

func byID(shards []listedShard) map[string]listedShard {
	m := make(map[string]listedShard, len(shards))
	for _, sh := range shards {
		m[sh.spec.ID] = sh
	}
	return m
}

// ---- list ----

func newShardsListCommand(sf *shardsFlags) *cobra.Command {
	var selector, output string
	cmd := &cobra.Command{
		Use:   "list [-l SELECTOR] [-o table|yaml|json]",
		Short: "List shards: their status, replicas and lag",
		Long: `List the shards whose labels match the selector (all, without -l).

  table  ID; status (the primary's, else the most advanced replica's;
         FAILED if any replica failed); primary (zone#suffix); each
         replica's status, primary first, marked when its process is dead
         before its lease expires ("za#c1 (lease expiring 3s)",
         "za#c1:PRIMARY(expiring:3s)", "(expired)", "(gone)"); and lag:
         the bytes of each source between the primary's last commit and
         the source's write head as the primary last saw it (one number
         for one source, else SOURCE=BYTES,...; '?' while the primary
         has not seen a source's write head, or its head is behind what
         it read; '-' without a serving primary)
  yaml   a shard file of the shards, which 'apply -f' reads back, with
         each shard's status, replicas and mod revision as comments
  json   the shards' specs with their etcd revisions, statuses, replicas
         (with their endpoints, errors, liveness and lease seconds left),
         read-through offsets, write heads and lag

Errors of FAILED replicas are printed on standard error with the table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsList(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, selector, output)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector, such as app=wordcount or prefix=wordcount/")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, yaml or json")
	return cmd
}

func runShardsList(ctx context.Context, stdout, stderr io.Writer, sf *shardsFlags, selector, output string) error {
	if err := checkOutput(output, "table", "yaml", "json"); err != nil {
		return err
	}
	if err := parseSelectorFlag("--selector", selector); err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	shards, err := c.list(ctx, selector)
	if err != nil {
		return err
	}
	var out []byte
	switch output {
	case "yaml":
		out, err = shardsYAML(shards)
	case "json":
		out, err = shardsJSON(shards, c.stats(ctx, shards))
	default:
		out = shardsTable(shards, c.stats(ctx, shards))
		defer printFailures(stderr, shards)
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// shardStat is what Stat said of a shard's primary; ok is false without
// an answer.
type shardStat struct {
	ok                      bool
	readThrough, writeHeads map[string]int64
}

// stats asks each shard with a serving primary for its read-through
// offsets and write heads, concurrently.
func (c *shardsClient) stats(ctx context.Context, shards []listedShard) []shardStat {
	out := make([]shardStat, len(shards))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, sh := range shards {
		if !hasServingPrimary(sh) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(ctx, min(c.sf.timeout, statTimeout))
			defer cancel()
			resp, err := c.Stat(ctx, &protocol.ShardStatRequest{Shard: sh.spec.ID})
			if err == nil && resp.GetStatus() == protocol.Status_OK {
				out[i] = shardStat{ok: true, readThrough: resp.GetReadThrough(), writeHeads: resp.GetWriteHeads()}
			}
		}()
	}
	wg.Wait()
	return out
}

// hasServingPrimary tells whether the shard's primary serves: a primary
// whose process is dead is not asked (it would not answer in time).
func hasServingPrimary(sh listedShard) bool {
	rs := sh.GetReplicas()
	return len(rs) > 0 && rs[0].GetSlot() == 0 && rs[0].GetStatus().GetCode() == protocol.ReplicaCode_PRIMARY &&
		!dead(rs[0])
}

// dead tells whether a replica's process is known to be gone or dying:
// its status is stale, and its replicas fail over once its lease expires.
func dead(r *protocol.ShardListResponse_Replica) bool {
	l := r.GetLiveness()
	return l == protocol.ProcessLiveness_LEASE_EXPIRING || l == protocol.ProcessLiveness_MEMBER_GONE
}

// deathOf says how a dead replica's process is dead, in a word: "gone" (it
// has no member key), "expired" or "expiring" (its lease), with the
// seconds left ("3s") if known; "" for a process not known to be dead.
func deathOf(r *protocol.ShardListResponse_Replica) (word, left string) {
	switch {
	case r.GetLiveness() == protocol.ProcessLiveness_MEMBER_GONE:
		return "gone", ""
	case !dead(r):
		return "", ""
	case r.LeaseRemainingSeconds == nil:
		return "expiring", ""
	case r.GetLeaseRemainingSeconds() < 0:
		return "expired", ""
	}
	return "expiring", fmt.Sprintf("%ds", r.GetLeaseRemainingSeconds())
}

// processText is a process as zone#suffix, as in its member key.
func processText(p *protocol.ProcessID) string {
	return p.GetZone() + "#" + p.GetSuffix()
}

// primaryText is the process assigned the shard's primary, with how it
// is dead if it is ("za#c1 (lease expiring 3s)"), or "-".
func primaryText(sh listedShard) string {
	rs := sh.GetReplicas()
	if len(rs) == 0 || rs[0].GetSlot() != 0 {
		return "-"
	}
	text := processText(rs[0].GetProcessId())
	switch word, left := deathOf(rs[0]); word {
	case "":
		return text
	case "gone":
		return text + " (member gone)"
	default:
		return text + " (" + strings.TrimSpace("lease "+word+" "+left) + ")"
	}
}

// replicasText is each replica's process and status, in slot order, with
// how its process is dead if it is, in one word that keeps the column's
// entries apart: "zb#c2:STANDBY(expiring:3s)", "(expired)", "(gone)".
func replicasText(sh listedShard) string {
	var parts []string
	for _, r := range sh.GetReplicas() {
		part := processText(r.GetProcessId()) + ":" + r.GetStatus().GetCode().String()
		if word, left := deathOf(r); word != "" && left != "" {
			part += "(" + word + ":" + left + ")"
		} else if word != "" {
			part += "(" + word + ")"
		}
		parts = append(parts, part)
	}
	return orDash(strings.Join(parts, " "))
}

// lags returns each source's lag, and the sources whose write head the
// primary has not seen, or not since it read past it (a head behind the
// read-through offset is stale: the lag is unknown, not zero).
func lags(spec *consumer.ShardSpec, st shardStat) (map[string]int64, []string) {
	out := map[string]int64{}
	var unknown []string
	for _, src := range spec.Sources {
		head, ok := st.writeHeads[src.Journal]
		if rt := st.readThrough[src.Journal]; !ok || head < rt {
			unknown = append(unknown, src.Journal)
		} else {
			out[src.Journal] = head - rt
		}
	}
	return out, unknown
}

func lagText(spec *consumer.ShardSpec, st shardStat) string {
	if !st.ok {
		return "-"
	}
	known, _ := lags(spec, st)
	one := func(j string) string {
		if n, ok := known[j]; ok {
			return fmt.Sprint(n)
		}
		return "?"
	}
	if len(spec.Sources) == 1 {
		return one(spec.Sources[0].Journal)
	}
	var parts []string
	for _, src := range spec.Sources {
		parts = append(parts, src.Journal+"="+one(src.Journal))
	}
	return strings.Join(parts, ",")
}

func shardsTable(shards []listedShard, stats []shardStat) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tPRIMARY\tREPLICAS\tLAG")
	for i, sh := range shards {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sh.spec.ID, statusText(sh), primaryText(sh), replicasText(sh),
			lagText(sh.spec, stats[i]))
	}
	tw.Flush()
	return b.Bytes()
}

// statusText is a shard's combined status; "-" without replicas.
func statusText(sh listedShard) string {
	if len(sh.GetReplicas()) == 0 {
		return "-"
	}
	return sh.GetStatus().GetCode().String()
}

// printFailures prints the error of each FAILED replica.
func printFailures(w io.Writer, shards []listedShard) {
	for _, sh := range shards {
		for _, r := range sh.GetReplicas() {
			if r.GetStatus().GetCode() == protocol.ReplicaCode_FAILED {
				fmt.Fprintf(w, "quire: shard %s: replica %s FAILED: %s\n", sh.spec.ID, processText(r.GetProcessId()),
					orDash(r.GetStatus().GetError()))
			}
		}
	}
}

func specsOfShards(shards []listedShard) []*consumer.ShardSpec {
	out := make([]*consumer.ShardSpec, len(shards))
	for i, sh := range shards {
		out[i] = sh.spec
	}
	return out
}

// shardsYAML is the shard file of the shards, each with a comment of its
// status, replicas and mod revision.
func shardsYAML(shards []listedShard) ([]byte, error) {
	data, err := consumer.FormatShardFile(specsOfShards(shards))
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("encoding shard file: %w", err)
	}
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value != "shards" || m.Content[i+1].Kind != yaml.SequenceNode {
				continue
			}
			for j, entry := range m.Content[i+1].Content {
				if j < len(shards) {
					sh := shards[j]
					entry.HeadComment = fmt.Sprintf("status: %s; replicas: %s; modRevision: %d",
						statusText(sh), replicasText(sh), sh.GetModRevision())
				}
			}
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encoding shard file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding shard file: %w", err)
	}
	return buf.Bytes(), nil
}

// The JSON form of `shards list -o json`.
type (
	shardsListJSON struct {
		Shards []shardListJSON `json:"shards"`
	}
	shardListJSON struct {
		Spec           json.RawMessage  `json:"spec"`
		CreateRevision int64            `json:"createRevision"`
		ModRevision    int64            `json:"modRevision"`
		Status         replicaStatusOut `json:"status"`
		Replicas       []replicaOut     `json:"replicas"`
		ReadThrough    map[string]int64 `json:"readThrough,omitempty"`
		WriteHeads     map[string]int64 `json:"writeHeads,omitempty"`
		Lag            map[string]int64 `json:"lag,omitempty"`
	}
	replicaOut struct {
		Zone     string           `json:"zone"`
		Suffix   string           `json:"suffix"`
		Endpoint string           `json:"endpoint"`
		Slot     int32            `json:"slot"`
		Status   replicaStatusOut `json:"status"`
		// Liveness is LIVE, LEASE_EXPIRING or MEMBER_GONE; omitted if
		// unknown. LeaseRemainingSeconds is -1 once the lease expired.
		Liveness              string `json:"liveness,omitempty"`
		LeaseRemainingSeconds *int64 `json:"leaseRemainingSeconds,omitempty"`
	}
	replicaStatusOut struct {
		Code  string `json:"code"`
		Error string `json:"error,omitempty"`
	}
)

func statusOut(s *protocol.ReplicaStatus) replicaStatusOut {
	return replicaStatusOut{Code: s.GetCode().String(), Error: s.GetError()}
}

func livenessOut(l protocol.ProcessLiveness) string {
	if l == protocol.ProcessLiveness_LIVENESS_UNKNOWN {
		return ""
	}
	return l.String()
}

func shardsJSON(shards []listedShard, stats []shardStat) ([]byte, error) {
	out := shardsListJSON{Shards: []shardListJSON{}}
	for i, sh := range shards {
		raw, err := consumer.MarshalShardSpec(sh.spec)
		if err != nil {
			return nil, fmt.Errorf("encoding shard %s: %w", sh.spec.ID, err)
		}
		s := shardListJSON{Spec: raw, CreateRevision: sh.GetCreateRevision(), ModRevision: sh.GetModRevision(),
			Status: statusOut(sh.GetStatus()), Replicas: []replicaOut{}}
		for _, r := range sh.GetReplicas() {
			s.Replicas = append(s.Replicas, replicaOut{Zone: r.GetProcessId().GetZone(), Suffix: r.GetProcessId().GetSuffix(),
				Endpoint: r.GetEndpoint(), Slot: r.GetSlot(), Status: statusOut(r.GetStatus()),
				Liveness: livenessOut(r.GetLiveness()), LeaseRemainingSeconds: r.LeaseRemainingSeconds})
		}
		if st := stats[i]; st.ok {
			s.ReadThrough, s.WriteHeads = st.readThrough, st.writeHeads
			s.Lag, _ = lags(sh.spec, st)
		}
		out.Shards = append(out.Shards, s)
	}
	return formatJSON(out)
}

// ---- apply ----

func newShardsApplyCommand(sf *shardsFlags) *cobra.Command {
	var file string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply -f SHARDS.yaml [--dry-run]",
		Short: "Create and update shards from a shard file",
		Long: `Create the shards of a shard file that do not exist, and update those whose
spec differs, each conditioned on the revision listed just before: if a
shard changed meanwhile, nothing (of that batch of 100) is applied. Shards
missing from the file are left alone. --dry-run prints what would change
and changes nothing. '-f -' reads standard input.

The journals the shards read and their recovery logs are not created:
'quire journals apply' creates them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsApply(cmd.Context(), cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, file, dryRun)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "shard file; - reads standard input")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would change, and change nothing")
	return cmd
}

func runShardsApply(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, sf *shardsFlags, file string, dryRun bool) error {
	specs, err := readShardFile(stdin, file)
	if err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	current, err := c.list(ctx, "")
	if err != nil {
		return err
	}
	changes, err := planShardUpserts(specs, byID(current))
	if err != nil {
		return err
	}
	return c.applyAndReport(ctx, stdout, stderr, changes, dryRun)
}

func readShardFile(stdin io.Reader, file string) ([]*consumer.ShardSpec, error) {
	var data []byte
	var err error
	switch file {
	case "":
		return nil, usagef("give a shard file with -f (- reads standard input)")
	case "-":
		data, err = io.ReadAll(stdin)
	default:
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, usagef("reading shard file: %w", err)
	}
	specs, err := consumer.ParseShardFile(data)
	if err != nil {
		return nil, usagef("shard file %s: %w", file, err)
	}
	if len(specs) == 0 {
		return nil, usagef("shard file %s lists no shards", file)
	}
	return specs, nil
}

// shardChange is what applying a spec (or deleting a shard) does.
type shardChange struct {
	id     string
	action string   // created, updated, unchanged or deleted
	diff   []string // for updated: "field: old → new"
	req    *protocol.ShardApplyRequest_Change
}

// planShardUpserts compares specs with the current shards.
func planShardUpserts(specs []*consumer.ShardSpec, current map[string]listedShard) ([]shardChange, error) {
	var out []shardChange
	for _, s := range specs {
		raw, err := consumer.MarshalShardSpec(s)
		if err != nil {
			return nil, usagef("shard %s: %w", s.ID, err)
		}
		cur, ok := current[s.ID]
		if !ok {
			out = append(out, shardChange{id: s.ID, action: "created",
				req: &protocol.ShardApplyRequest_Change{Upsert: raw}})
			continue
		}
		curRaw, err := consumer.MarshalShardSpec(cur.spec)
		if err != nil {
			return nil, fmt.Errorf("shard %s as listed: %w", s.ID, err)
		}
		if bytes.Equal(raw, curRaw) {
			out = append(out, shardChange{id: s.ID, action: "unchanged"})
			continue
		}
		out = append(out, shardChange{id: s.ID, action: "updated", diff: shardSpecDiff(cur.spec, s),
			req: &protocol.ShardApplyRequest_Change{Upsert: raw, ExpectModRevision: cur.GetModRevision()}})
	}
	return out, nil
}

// applyAndReport applies the changes in batches, and prints each change,
// in order, once its batch is applied; with dryRun, it applies nothing.
// applyAndReport applies the changes, printing each on stdout and the
// consumer process's warnings about them on stderr.
func (c *shardsClient) applyAndReport(ctx context.Context, stdout, stderr io.Writer, changes []shardChange, dryRun bool) error {
	return applyInBatches(stdout, changes, dryRun, func(ch shardChange) bool { return ch.req != nil },
		func(batch []shardChange) error {
			warnings, err := c.apply(ctx, batch)
			for _, w := range warnings {
				fmt.Fprintf(stderr, "warning: %s\n", w)
			}
			return err
		},
		func(ch shardChange) { printShardChange(stdout, ch, dryRun) })
}

// apply applies one batch of changes atomically, and returns the
// consumer process's warnings about them.
func (c *shardsClient) apply(ctx context.Context, batch []shardChange) ([]string, error) {
	req := &protocol.ShardApplyRequest{}
	var ids []string
	for _, ch := range batch {
		req.Changes = append(req.Changes, ch.req)
		ids = append(ids, ch.id)
	}
	ctx, cancel := context.WithTimeout(ctx, c.sf.timeout)
	defer cancel()
	what := "applying changes to shards " + strings.Join(ids, ", ")
	resp, err := c.Apply(ctx, req)
	switch {
	case err != nil:
		return nil, c.sf.consumerError(what, err)
	case resp.GetStatus() == protocol.Status_REVISION_MISMATCH:
		return nil, fmt.Errorf("shards %s changed since they were listed, so none of them was changed: run the command again",
			strings.Join(ids, ", "))
	case resp.GetStatus() != protocol.Status_OK:
		return nil, statusError(what, resp.GetStatus())
	}
	return resp.GetWarnings(), nil
}

func printShardChange(w io.Writer, ch shardChange, dryRun bool) {
	printChangeOf(w, ch.id, ch.action, ch.diff, dryRun)
}

// shardSpecDiff describes the fields that differ between two specs, as
// their shard-file paths: "hotStandbys: 0 → 1".
func shardSpecDiff(old, new *consumer.ShardSpec) []string {
	return fieldsDiff(shardSpecFields(old), shardSpecFields(new))
}

// shardSpecFields flattens a spec's shard-file form into field paths and
// values; sources are one field, [journal, journal@minOffset, ...].
func shardSpecFields(s *consumer.ShardSpec) map[string]string {
	out := make(map[string]string)
	data, err := consumer.FormatShardFile([]*consumer.ShardSpec{s})
	if err != nil {
		out["(spec)"] = err.Error()
		return out
	}
	var doc struct {
		Shards []map[string]any `yaml:"shards"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Shards) != 1 {
		out["(spec)"] = string(data)
		return out
	}
	entry := doc.Shards[0]
	var sources []string
	for _, src := range s.Sources {
		if src.MinOffset != 0 {
			sources = append(sources, fmt.Sprintf("%s@%d", src.Journal, src.MinOffset))
		} else {
			sources = append(sources, src.Journal)
		}
	}
	delete(entry, "sources")
	flatten("", entry, out)
	out["sources"] = "[" + strings.Join(sources, ", ") + "]"
	return out
}

// ---- edit ----

func newShardsEditCommand(sf *shardsFlags) *cobra.Command {
	var selector string
	cmd := &cobra.Command{
		Use:   "edit (-l SELECTOR | ID...)",
		Short: "Edit shards' specs in $EDITOR, and apply the changes",
		Long: `Write the selected shards' specs to a temporary shard file, open it in
$EDITOR (else vi), and when the editor exits, apply what changed,
conditioned on the revisions read: if a shard changed meanwhile, nothing
is applied. Shards added to the file are created; shards removed from it
are left alone ('quire shards delete' deletes). If the edited file is not
a valid shard file, nothing is applied and the file is kept.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsEdit(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, selector, args)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the shards to edit")
	return cmd
}

func runShardsEdit(ctx context.Context, stdout, stderr io.Writer, sf *shardsFlags, selector string, ids []string) error {
	sel, err := shardSelectorFor(selector, ids, false)
	if err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	shards, err := c.list(ctx, sel)
	if err != nil {
		return err
	}
	if len(shards) == 0 {
		return fmt.Errorf("no shards match %q", sel)
	}
	path, err := writeShardsEditFile(shards)
	if err != nil {
		return err
	}
	if err := runEditor(ctx, path); err != nil {
		return fmt.Errorf("%w (the specs are in %s)", err, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the edited shard file: %w", err)
	}
	specs, err := consumer.ParseShardFile(data)
	if err != nil {
		return usagef("the edited shard file is not valid, so nothing was changed: %w\nyour edits are kept in %s", err, path)
	}
	changes, err := planShardUpserts(specs, byID(shards))
	if err != nil {
		return fmt.Errorf("%w\nyour edits are kept in %s", err, path)
	}
	var edited []shardChange
	for _, ch := range changes {
		if ch.req != nil {
			edited = append(edited, ch)
		}
	}
	if len(edited) == 0 {
		os.Remove(path)
		fmt.Fprintln(stdout, "no changes")
		return nil
	}
	if err := c.applyAndReport(ctx, stdout, stderr, edited, false); err != nil {
		return fmt.Errorf("%w\nyour edits are kept in %s", err, path)
	}
	os.Remove(path)
	return nil
}

const shardsEditHeader = `# Edit the shards below, then save and quit to apply the changes.
# Shards added here are created; shards removed from here are kept
# (quire shards delete deletes them). An invalid file changes nothing.
`

func writeShardsEditFile(shards []listedShard) (string, error) {
	data, err := consumer.FormatShardFile(specsOfShards(shards))
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "quire-shards-edit-*.yaml")
	if err != nil {
		return "", fmt.Errorf("creating the file to edit: %w", err)
	}
	_, err = f.Write(append([]byte(shardsEditHeader), data...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// ---- delete ----

func newShardsDeleteCommand(sf *shardsFlags) *cobra.Command {
	var selector string
	var all, dryRun bool
	cmd := &cobra.Command{
		Use:   "delete (-l SELECTOR | ID... | --all) [--dry-run]",
		Short: "Delete shards",
		Long: `Delete the shards matching -l SELECTOR, or named, each conditioned on the
revision listed just before: if a shard changed meanwhile, nothing (of
that batch of 100) is deleted. Their replicas stop; their recovery logs
and hints are left ('quire journals delete' deletes the logs). An empty
selector is refused: --all deletes every shard.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsDelete(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, selector, args, all, dryRun)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the shards to delete")
	cmd.Flags().BoolVar(&all, "all", false, "delete every shard")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be deleted, and delete nothing")
	return cmd
}

func runShardsDelete(ctx context.Context, stdout, stderr io.Writer, sf *shardsFlags, selector string, ids []string, all, dryRun bool) error {
	sel, err := shardSelectorFor(selector, ids, all)
	if err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	shards, err := c.selectShards(ctx, sel, ids, "deleted")
	if err != nil {
		return err
	}
	if len(shards) == 0 {
		fmt.Fprintf(stderr, "no shards match %q\n", sel)
		return nil
	}
	var changes []shardChange
	for _, sh := range shards {
		changes = append(changes, shardChange{id: sh.spec.ID, action: "deleted",
			req: &protocol.ShardApplyRequest_Change{Delete: sh.spec.ID, ExpectModRevision: sh.GetModRevision()}})
	}
	return c.applyAndReport(ctx, stdout, stderr, changes, dryRun)
}

// ---- unassign ----

func newShardsUnassignCommand(sf *shardsFlags) *cobra.Command {
	var selector string
	var all, failed, dryRun bool
	cmd := &cobra.Command{
		Use:   "unassign (-l SELECTOR | ID... | --all) [--failed] [--dry-run]",
		Short: "Remove shards' assignments, so that they are assigned afresh",
		Long: `Remove the assignments of the selected shards' replicas: their replicas
stop, and the allocator assigns the shards again, soon, to processes of
its choosing; a new primary recovers from the recovery log. With --failed,
only FAILED replicas are removed (the way to restart a shard that failed,
once its cause is fixed); --failed alone selects every shard. --dry-run
prints the shards that would be unassigned and changes nothing.

The assignments removed are those the consumer process saw, conditioned on
their revisions: if any changed meanwhile, none is removed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsUnassign(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, selector, args,
				all, failed, dryRun)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the shards to unassign")
	cmd.Flags().BoolVar(&all, "all", false, "unassign every shard")
	cmd.Flags().BoolVar(&failed, "failed", false, "unassign only FAILED replicas")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be unassigned, and change nothing")
	return cmd
}

func runShardsUnassign(ctx context.Context, stdout, stderr io.Writer, sf *shardsFlags, selector string, ids []string,
	all, failed, dryRun bool) error {

	if failed && selector == "" && len(ids) == 0 {
		all = true // --failed alone: every shard's failed replicas.
	}
	sel, err := shardSelectorFor(selector, ids, all)
	if err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	req := &protocol.UnassignRequest{OnlyFailed: failed, DryRun: dryRun}
	if !all {
		// An empty list would unassign every shard: send the IDs selected.
		shards, err := c.selectShards(ctx, sel, ids, "unassigned")
		if err != nil {
			return err
		}
		if len(shards) == 0 {
			fmt.Fprintf(stderr, "no shards match %q\n", sel)
			return nil
		}
		for _, sh := range shards {
			req.Shards = append(req.Shards, sh.spec.ID)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, sf.timeout)
	defer cancel()
	resp, err := c.Unassign(ctx, req)
	switch {
	case err != nil:
		return sf.consumerError("unassigning shards", err)
	case resp.GetStatus() == protocol.Status_REVISION_MISMATCH:
		return errors.New("assignments changed while they were being removed, so none was: run the command again")
	case resp.GetStatus() != protocol.Status_OK:
		return statusError("unassigning shards", resp.GetStatus())
	}
	if len(resp.GetShards()) == 0 {
		if failed {
			fmt.Fprintln(stderr, "no selected shard has a FAILED replica: nothing to unassign")
		} else {
			fmt.Fprintln(stderr, "no selected shard is assigned: nothing to unassign")
		}
		return nil
	}
	verb := "unassigned"
	if dryRun {
		verb = "would be unassigned"
	}
	if failed {
		verb = "FAILED replicas " + verb
	}
	for _, id := range slices.Sorted(slices.Values(resp.GetShards())) {
		fmt.Fprintf(stdout, "%s: %s\n", id, verb)
	}
	if dryRun {
		fmt.Fprintln(stdout, "dry run: nothing was changed")
	}
	return nil
}
