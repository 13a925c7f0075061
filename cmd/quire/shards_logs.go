package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/recoverylog"
)

// ---- hints ----

// hintsEntry is one of a shard's stored hints: the primary hints, or a
// backup.
type hintsEntry struct {
	name  string // "primary", "backup 1", ...
	raw   []byte // Empty if none is stored.
	hints *recoverylog.Hints
	err   error // Why raw is not usable hints.
}

// shardHints are a shard's stored hints, the primary's first, then the
// backups, newest first.
type shardHints struct {
	shard   listedShard
	entries []hintsEntry
}

// usable returns the hints that decode and are of the shard's log,
// newest first, with the names of their entries.
func (sh *shardHints) usable() ([]*recoverylog.Hints, []string) {
	var hs []*recoverylog.Hints
	var names []string
	for _, e := range sh.entries {
		if e.hints != nil {
			hs = append(hs, e.hints)
			names = append(names, e.name)
		}
	}
	return hs, names
}

// noteInvalid prints, for each stored entry that is not usable, why.
func (sh *shardHints) noteInvalid(w io.Writer) {
	for _, e := range sh.entries {
		if e.err != nil {
			fmt.Fprintf(w, "quire: shard %s: the %s hints are not usable, so they are skipped: %v\n",
				sh.shard.spec.ID, e.name, e.err)
		}
	}
}

// hints returns shard's stored hints. It fails if the shard has no
// recovery log.
func (c *shardsClient) hints(ctx context.Context, sh listedShard) (*shardHints, error) {
	id := sh.spec.ID
	if sh.spec.RecoveryLog() == "" {
		return nil, fmt.Errorf("shard %s has no recovery log (no recoveryLogPrefix), so it has no hints", id)
	}
	ctx, cancel := context.WithTimeout(ctx, c.sf.timeout)
	defer cancel()
	what := "getting the hints of shard " + id
	resp, err := c.GetHints(ctx, &protocol.GetHintsRequest{Shard: id})
	switch {
	case err != nil:
		return nil, c.sf.consumerError(what, err)
	case resp.GetStatus() == protocol.Status_SHARD_NOT_FOUND:
		return nil, fmt.Errorf("shard %q not found ('quire shards list' lists the shards)", id)
	case resp.GetStatus() != protocol.Status_OK:
		return nil, statusError(what, resp.GetStatus())
	}
	out := &shardHints{shard: sh}
	add := func(name string, raw []byte) {
		e := hintsEntry{name: name, raw: raw}
		if len(raw) != 0 {
			e.hints, e.err = recoverylog.UnmarshalHints(raw)
			if e.err == nil && e.hints.Log != sh.spec.RecoveryLog() {
				e.hints, e.err = nil, fmt.Errorf("they are hints of log %q, not of the shard's recovery log %q",
					e.hints.Log, sh.spec.RecoveryLog())
			}
		}
		out.entries = append(out.entries, e)
	}
	add("primary", resp.GetPrimary())
	for i, raw := range resp.GetBackups() {
		add(fmt.Sprintf("backup %d", i+1), raw)
	}
	return out, nil
}

func newShardsHintsCommand(sf *shardsFlags) *cobra.Command {
	var shard, output string
	cmd := &cobra.Command{
		Use:   "hints ID [-o table|json]",
		Short: "Show a shard's recovery-log hints: the primary hints and the backups",
		Long: `Show the recovery-log hints stored for the shard: the latest ("primary"),
which a new replica plays back from, and the backups, newest first, which
it falls back to.

  table  per hints: the log offset they describe the log up to, their
         live files (nodes), how many of those ride inline, the files'
         bytes, the lowest offset playback reads (REPLAY-FROM), the
         offset before which the log is not needed (PRUNE-BEFORE), and
         the recorder that wrote them; '-' where none are stored
  json   {"shard", "log", "primary", "backups"}: the hints as stored
         (inline content in base64), indented; null where none are
         stored`,
		Args: nameArg("shard", &shard),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsHints(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, shard, output)
		},
	}
	cmd.Flags().StringVarP(&shard, "shard", "s", "", "the shard's ID (or give it as the argument)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

func runShardsHints(ctx context.Context, stdout, stderr io.Writer, sf *shardsFlags, shard, output string) error {
	if err := validateShardFlag(shard); err != nil {
		return err
	}
	if err := checkOutput(output, "table", "json"); err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	sh, err := c.lookup(ctx, shard)
	if err != nil {
		return err
	}
	hs, err := c.hints(ctx, sh)
	if err != nil {
		return err
	}
	var out []byte
	if output == "json" {
		out, err = hintsJSON(hs)
	} else {
		hs.noteInvalid(stderr)
		out = hintsTable(hs)
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

func hintsTable(hs *shardHints) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "HINTS\tOFFSET\tNODES\tINLINE\tBYTES\tREPLAY-FROM\tPRUNE-BEFORE\tAUTHOR")
	for _, e := range hs.entries {
		h := e.hints
		switch {
		case len(e.raw) == 0:
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\n", e.name)
			continue
		case h == nil:
			fmt.Fprintf(tw, "%s\tinvalid\t-\t-\t-\t-\t-\t-\n", e.name)
			continue
		}
		var inline int
		var size int64
		for _, n := range h.Nodes {
			size += n.Length
			if n.Inline {
				inline++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", e.name, h.Offset, len(h.Nodes), inline, size,
			h.ReplayFrom(), h.PruneBefore(), orDash(h.Author))
	}
	tw.Flush()
	return b.Bytes()
}

type hintsOut struct {
	Shard   string            `json:"shard"`
	Log     string            `json:"log"`
	Primary json.RawMessage   `json:"primary"`
	Backups []json.RawMessage `json:"backups"`
}

func hintsJSON(hs *shardHints) ([]byte, error) {
	out := hintsOut{Shard: hs.shard.spec.ID, Log: hs.shard.spec.RecoveryLog(), Backups: []json.RawMessage{}}
	for i, e := range hs.entries {
		raw := json.RawMessage("null")
		switch {
		case len(e.raw) == 0:
		case json.Valid(e.raw):
			raw = e.raw
		default: // Not JSON: shown as a string.
			raw, _ = json.Marshal(string(e.raw))
		}
		if i == 0 {
			out.Primary = raw
		} else {
			out.Backups = append(out.Backups, raw)
		}
	}
	return formatJSON(out)
}

// ---- recover ----

type recoverFlags struct {
	shard, dir, broker string
}

func newShardsRecoverCommand(sf *shardsFlags) *cobra.Command {
	var f recoverFlags
	cmd := &cobra.Command{
		Use:   "recover ID --dir DIR [--broker HOST:PORT]",
		Short: "Rebuild a shard's store in a local directory from its recovery log",
		Long: `Play the shard's recovery log back into DIR, as a new replica would: from
the newest stored hints that play (falling back to older ones if the log
content they need is gone), or from the log's start if the shard has no
hints. It plays to the log's write head as the command reached it; DIR then
holds the shard's store (a Pebble database, for a Pebble store) as of
then, which the shard's processes are not using: inspect it, or copy it.

DIR must not exist, or be empty. If playback fails, or is interrupted
(Ctrl-C), what was written in DIR is removed. Progress goes to standard
error (updated in place on a terminal); a summary to standard output.`,
		Args: nameArg("shard", &f.shard),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsRecover(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.shard, "shard", "s", "", "the shard's ID (or give it as the argument)")
	fl.StringVar(&f.dir, "dir", "", "directory to recover the store into: new, or empty")
	fl.StringVar(&f.broker, "broker", env.Or("QUIRE_BROKER", defaultBroker), brokerFlagUsage)
	return cmd
}

// checkRecoverDir returns whether dir exists; it must be an empty
// directory if it does.
func checkRecoverDir(dir string) (existed bool, err error) {
	if dir == "" {
		return false, usagef("give the directory to recover into with --dir DIR")
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, usagef("--dir %s: %w", dir, err)
	case !fi.IsDir():
		return false, usagef("--dir %s is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, usagef("--dir %s: %w", dir, err)
	}
	if len(ents) != 0 {
		return false, usagef("--dir %s is not empty (it holds %q): give a new or empty directory", dir, ents[0].Name())
	}
	return true, nil
}

// emptyDir removes what is in dir.
func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func runShardsRecover(ctx context.Context, stdout, stderr io.Writer, sf *shardsFlags, f recoverFlags) (err error) {
	if err := validateShardFlag(f.shard); err != nil {
		return err
	}
	if err := validateBrokers(f.broker); err != nil {
		return err
	}
	if err := sf.validate(); err != nil {
		return err
	}
	existed, err := checkRecoverDir(f.dir)
	if err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	sh, err := c.lookup(ctx, f.shard)
	if err != nil {
		return err
	}
	hs, err := c.hints(ctx, sh)
	if err != nil {
		if sh.spec.RecoveryLog() == "" {
			return fmt.Errorf("shard %s has no recovery log (no recoveryLogPrefix): its store keeps its state elsewhere", f.shard)
		}
		return err
	}
	hs.noteInvalid(stderr)
	candidates, names := hs.usable()
	if len(candidates) == 0 {
		// No usable hints: play the whole log. (With hints stored, the
		// log may have been pruned; playback then fails, naming the
		// content that is missing.)
		candidates, names = []*recoverylog.Hints{nil}, []string{"the log's start"}
	}
	jc, err := sf.journals(ctx, f.broker)
	if err != nil {
		return err
	}
	defer jc.Close()

	ctx, stop := interruptible(ctx)
	defer stop()
	defer func() {
		if err == nil {
			return
		}
		if existed {
			emptyDir(f.dir)
		} else {
			os.RemoveAll(f.dir)
		}
	}()
	log := sh.spec.RecoveryLog()
	var errs []error
	start := time.Now()
	for i, h := range candidates {
		from := names[i]
		if h != nil {
			from = fmt.Sprintf("the %s hints (offset %d)", names[i], h.Offset)
		}
		if err := emptyDir(f.dir); err != nil {
			return fmt.Errorf("emptying %s for playback: %w", f.dir, err)
		}
		p, err := recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: jc, Journal: log, Dir: f.dir, Hints: h})
		if err != nil {
			return fmt.Errorf("playing %s: %w", log, err)
		}
		fmt.Fprintf(stderr, "quire: playing %s from %s into %s\n", log, from, f.dir)
		done := reportProgress(stderr, p, log)
		err = p.Play(ctx)
		done()
		if err == nil {
			printRecovered(stdout, f, log, from, p, time.Since(start))
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted while playing %s, so %s is left as it was: %w", log, f.dir, err)
		}
		errs = append(errs, fmt.Errorf("from %s: %w", from, err))
		if i+1 < len(candidates) {
			fmt.Fprintf(stderr, "quire: playback from %s failed; trying older hints: %v\n", from, err)
		}
	}
	if len(candidates) == 1 && candidates[0] == nil {
		return fmt.Errorf("playing %s from its start failed, so %s is left as it was: %w", log, f.dir, errors.Unwrap(errs[0]))
	}
	return fmt.Errorf("no hints of shard %s played, so %s is left as it was: %w", f.shard, f.dir, errors.Join(errs...))
}

func printRecovered(w io.Writer, f recoverFlags, log, from string, p *recoverylog.Player, took time.Duration) {
	pr := p.Progress()
	var size int64
	nodes := p.FSM().Nodes()
	for _, n := range nodes {
		size += n.Length
	}
	fmt.Fprintf(w, "recovered shard %s into %s: %d files, %s\n", f.shard, f.dir, len(p.FSM().Paths()), protocol.HumanSize(size))
	fmt.Fprintf(w, "played %s from %s to offset %d (write head %d): read %s, skipped %s, %d ops, in %s\n",
		log, from, pr.Offset, pr.WriteHead, protocol.HumanSize(pr.BytesRead), protocol.HumanSize(pr.BytesSkipped), pr.Ops,
		took.Round(time.Millisecond))
}

// reportProgress reports p's progress on w until the returned function is
// called (see startProgress).
func reportProgress(w io.Writer, p *recoverylog.Player, log string) (done func()) {
	return startProgress(w, func() string {
		pr := p.Progress()
		head := "?"
		if pr.WriteHead > 0 {
			head = fmt.Sprint(pr.WriteHead)
			if pr.WriteHead >= pr.Offset {
				head += fmt.Sprintf(" (%d%%)", pr.Offset*100/pr.WriteHead)
			}
		}
		return fmt.Sprintf("%s: offset %d of write head %s; read %s, skipped %s; %d ops",
			log, pr.Offset, head, protocol.HumanSize(pr.BytesRead), protocol.HumanSize(pr.BytesSkipped), pr.Ops)
	})
}

// ---- prune ----

type pruneFlags struct {
	selector, broker string
	all, dryRun      bool
}

func newShardsPruneCommand(sf *shardsFlags) *cobra.Command {
	var f pruneFlags
	cmd := &cobra.Command{
		Use:   "prune (-l SELECTOR | ID... | --all) [--dry-run] [--broker HOST:PORT]",
		Short: "Remove the fragments of shards' recovery logs that no stored hints need",
		Long: `For each selected shard with a recovery log, remove from the fragment
stores the fragments of the log that end before the content any of its
stored hints needs: it prunes with the oldest of its hints (the primary
hints and the backups, whichever needs the most), so that a replica can
still play back from every one of them. A shard with no hints is skipped:
its log is needed from its start. Fragments not yet persisted are never
removed. --dry-run lists the fragments that would be removed, and removes
nothing.

The fragments are removed from their stores by this command, so it needs
the stores' credentials (for S3, the AWS_* environment or shared
credentials), as the brokers have them. Playback from the log's start, or
from hints older than those stored, fails once the log is pruned.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShardsPrune(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sf, f, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.selector, "selector", "l", "", "label selector of the shards whose logs to prune")
	fl.BoolVar(&f.all, "all", false, "prune every shard's recovery log")
	fl.BoolVar(&f.dryRun, "dry-run", false, "list the fragments that would be removed, and remove nothing")
	fl.StringVar(&f.broker, "broker", env.Or("QUIRE_BROKER", defaultBroker), brokerFlagUsage)
	return cmd
}

func runShardsPrune(ctx context.Context, stdout, stderr io.Writer, sf *shardsFlags, f pruneFlags, ids []string) error {
	sel, err := shardSelectorFor(f.selector, ids, f.all)
	if err != nil {
		return err
	}
	if err := validateBrokers(f.broker); err != nil {
		return err
	}
	c, err := sf.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	shards, err := c.selectShards(ctx, sel, ids, "pruned")
	if err != nil {
		return err
	}
	if len(shards) == 0 {
		fmt.Fprintf(stderr, "no shards match %q\n", sel)
		return nil
	}
	jc, err := sf.journals(ctx, f.broker)
	if err != nil {
		return err
	}
	defer jc.Close()
	ctx, stop := interruptible(ctx)
	defer stop()
	var errs []error
	for _, sh := range shards {
		if err := c.pruneShard(ctx, stdout, stderr, jc, f, sh); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted: %w", err)
			}
			errs = append(errs, err)
			fmt.Fprintf(stderr, "quire: %v\n", err)
		}
	}
	if f.dryRun {
		fmt.Fprintln(stdout, "dry run: nothing was removed")
	}
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("pruning failed for %d of %d shards (see above)", len(errs), len(shards))
}

// oldestHints returns the stored hints that need the most of the log: the
// least PruneBefore, and of those the least offset.
func oldestHints(hs *shardHints) (*recoverylog.Hints, string) {
	var best *recoverylog.Hints
	var name string
	for _, e := range hs.entries {
		if e.hints == nil {
			continue
		}
		if best == nil || e.hints.PruneBefore() < best.PruneBefore() ||
			e.hints.PruneBefore() == best.PruneBefore() && e.hints.Offset < best.Offset {
			best, name = e.hints, e.name
		}
	}
	return best, name
}

// pruneShard prunes one shard's recovery log, reporting on stdout.
func (c *shardsClient) pruneShard(ctx context.Context, stdout, stderr io.Writer, jc *client.Client, f pruneFlags, sh listedShard) error {
	id, log := sh.spec.ID, sh.spec.RecoveryLog()
	if log == "" {
		fmt.Fprintf(stdout, "%s: no recovery log, nothing to prune\n", id)
		return nil
	}
	hs, err := c.hints(ctx, sh)
	if err != nil {
		return err
	}
	hs.noteInvalid(stderr)
	h, name := oldestHints(hs)
	if h == nil {
		fmt.Fprintf(stdout, "%s: no hints stored, so %s is needed from its start: nothing pruned\n", id, log)
		return nil
	}
	// List the fragments first within --timeout: it checks the brokers
	// answer before Prune, which is not bounded, and lists for a dry run.
	lctx, cancel := context.WithTimeout(ctx, c.sf.timeout)
	infos, err := jc.ListFragments(lctx, &protocol.FragmentsRequest{Journal: log})
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("shard %s: listing fragments of %s: no answer from broker within %s (--broker or QUIRE_BROKER names one): %w",
				id, log, c.sf.timeout, err)
		}
		return fmt.Errorf("shard %s: listing fragments of %s: %w", id, log, err)
	}
	before := h.PruneBefore()
	var removed []*protocol.Fragment
	var removedBytes, end int64
	kept := 0
	for _, info := range infos {
		fr := info.GetFragment()
		end = max(end, fr.GetEnd())
		// As recoverylog.Prune chooses.
		if fr.GetStore() == "" || fr.GetEnd() > before || fr.GetEnd() <= fr.GetBegin() {
			kept++
			continue
		}
		removed = append(removed, fr)
		removedBytes += fr.GetEnd() - fr.GetBegin()
	}
	if len(removed) == 0 {
		printPruned(stdout, id, log, name, h, nil, 0, kept, f.dryRun)
		return nil
	}
	if end < h.Offset {
		// recoverylog.Prune refuses hints beyond the log's fragments. The
		// brokers list a journal's current spool only once it rolls: if
		// the log reaches the hints' offset, that is all.
		head, err := writeHead(ctx, jc, log, c.sf.timeout)
		if err != nil {
			return fmt.Errorf("shard %s: reading the write head of %s: %w", id, log, err)
		}
		if head < h.Offset {
			return fmt.Errorf("shard %s: the %s hints describe %s up to offset %d, beyond its write head %d: they are not hints of this log, so it is not pruned",
				id, name, log, h.Offset, head)
		}
		fmt.Fprintf(stdout, "%s: %s is not pruned yet: the %s hints describe it up to offset %d, its fragments end at %d, and the rest is in the brokers' current spool, which is listed once it rolls (a fragment.flushInterval on the log rolls it in time)\n",
			id, log, name, h.Offset, end)
		return nil
	}
	if !f.dryRun {
		res, err := recoverylog.Prune(ctx, jc, log, h)
		removed = removed[:0]
		for _, fr := range res.Removed {
			removed = append(removed, &protocol.Fragment{Begin: fr.Begin, End: fr.End, Store: fr.Store})
		}
		removedBytes, kept = res.RemovedBytes, res.Kept
		if err != nil {
			printPruned(stdout, id, log, name, h, removed, removedBytes, -1, false)
			return fmt.Errorf("shard %s: %w", id, err)
		}
	}
	printPruned(stdout, id, log, name, h, removed, removedBytes, kept, f.dryRun)
	return nil
}

// writeHead returns the write head of journal, within timeout.
func writeHead(ctx context.Context, jc *client.Client, journal string, timeout time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return jc.WriteHead(ctx, journal)
}

func printPruned(w io.Writer, id, log, name string, h *recoverylog.Hints, removed []*protocol.Fragment,
	removedBytes int64, kept int, dryRun bool) {

	verb := "removed"
	if dryRun {
		verb = "would be removed"
	}
	keptText := ""
	if kept >= 0 {
		keptText = fmt.Sprintf(", %d kept", kept)
	}
	fmt.Fprintf(w, "%s: %s before offset %d (the oldest hints: %s, of offset %d): %d fragments %s (%s)%s\n",
		id, log, h.PruneBefore(), name, h.Offset, len(removed), verb, protocol.HumanSize(removedBytes), keptText)
	for _, fr := range removed {
		fmt.Fprintf(w, "  [%d, %d) %s\n", fr.GetBegin(), fr.GetEnd(), fr.GetStore())
	}
}
