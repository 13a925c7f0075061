package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/recoverylog"
)

// shardsCluster is a broker and a fleet of two counting processes.
type shardsCluster struct {
	t        *testing.T
	broker   string
	consumer string // the Shard service of process c1
	journals *client.Client
	fleet    *consumertest.Fleet
	root     string
	store    string // the brokers' fragment store
	pub      *message.Publisher
	ends     map[string]int64
}

func startShardsCluster(t *testing.T) *shardsCluster {
	bc := brokertest.New(t)
	b := bc.Start("b1")
	cl := bc.Client(b)
	root := strings.TrimSuffix(bc.Root, "/") + "-consumers/"
	fleet := consumertest.New(t, bc.Etcd, cl, root, consumertest.Counter{})
	fleet.Configure = func(cfg *consumer.Config) { cfg.HintInterval = 100 * time.Millisecond }
	p := fleet.Start("c1", "za")
	fleet.Start("c2", "zb")
	a := cl.NewAppender(context.Background(), client.AppenderConfig{})
	t.Cleanup(func() { a.Close() })
	return &shardsCluster{t: t, broker: b.Endpoint, consumer: p.Endpoint, journals: cl, fleet: fleet, root: root, store: bc.Store,
		pub:  message.NewPublisher(a, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now())),
		ends: map[string]int64{}}
}

// run runs a shards command against the cluster's consumer.
func (c *shardsCluster) run(stdin io.Reader, args ...string) result {
	return quire(context.Background(), stdin, append(append([]string{"shards"}, args...), "--consumer", c.consumer)...)
}

// must runs a shards command, failing the test if it fails.
func (c *shardsCluster) must(stdin io.Reader, args ...string) result {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.err != nil {
		c.t.Fatalf("quire shards %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.err, r.stdout, r.stderr)
	}
	return r
}

func (c *shardsCluster) publish(journal string, msgs ...*consumertest.CountMsg) {
	c.t.Helper()
	var last *client.AppendHandle
	for _, m := range msgs {
		h, err := c.pub.PublishCommitted(context.Background(), journal, m)
		if err != nil {
			c.t.Fatal(err)
		}
		last = h
	}
	f, err := last.Wait(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	c.ends[journal] = max(c.ends[journal], f.End)
}

// readThrough waits until shard's primary committed what was published
// to journal.
func (c *shardsCluster) readThrough(shard, journal string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sc := c.fleet.Client(c.fleet.Procs["c1"])
	for {
		resp, err := sc.Stat(ctx, &protocol.ShardStatRequest{Shard: shard, ReadThrough: map[string]int64{journal: c.ends[journal]}})
		if err == nil && resp.Status == protocol.Status_OK {
			return
		}
		if ctx.Err() != nil {
			c.t.Fatalf("stat of %s: %v %v", shard, resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// list returns `shards list -o json`, decoded.
func (c *shardsCluster) list() map[string]shardListJSON {
	c.t.Helper()
	var out shardsListJSON
	if err := json.Unmarshal([]byte(c.must(nil, "list", "-o", "json").stdout), &out); err != nil {
		c.t.Fatal(err)
	}
	m := map[string]shardListJSON{}
	for _, s := range out.Shards {
		var spec struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(s.Spec, &spec); err != nil {
			c.t.Fatal(err)
		}
		m[spec.ID] = s
	}
	return m
}

// hints returns `shards hints -o json`, decoded.
func (c *shardsCluster) hints(shard string) (primary *recoverylog.Hints, backups []*recoverylog.Hints) {
	c.t.Helper()
	var out hintsOut
	if err := json.Unmarshal([]byte(c.must(nil, "hints", "-s", shard, "-o", "json").stdout), &out); err != nil {
		c.t.Fatal(err)
	}
	decode := func(raw json.RawMessage) *recoverylog.Hints {
		if string(raw) == "null" {
			return nil
		}
		h, err := recoverylog.UnmarshalHints(raw)
		if err != nil {
			c.t.Fatalf("hints of %s: %v", shard, err)
		}
		return h
	}
	for _, b := range out.Backups {
		backups = append(backups, decode(b))
	}
	return decode(out.Primary), backups
}

// waitUntil polls cond until it holds, for up to a minute.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, detail)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func replicaCodes(s shardListJSON) string {
	var codes []string
	for _, r := range s.Replicas {
		codes = append(codes, r.Status.Code)
	}
	return strings.Join(codes, " ")
}

// recoveredCount opens a recovered store and reads the count of key.
func recoveredCount(t *testing.T, dir, key string) uint64 {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: consumertest.QuietPebble{}})
	if err != nil {
		t.Fatalf("opening the recovered store in %s: %v", dir, err)
	}
	defer db.Close()
	n, err := consumertest.ReadCount(db, []byte("count/"+key))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

const shardsTestJournals = `journals:
  - {name: counts/in-0, replication: 1}
  - {name: counts/in-1, replication: 1}
  - {name: recovery/counts/shard-0, replication: 1, fragment: {length: 1KiB, flushInterval: 1s}}
  - {name: recovery/counts/shard-1, replication: 1, fragment: {length: 1KiB, flushInterval: 1s}}
`

func shardsTestFile(root string, standbys1 int) string {
	return fmt.Sprintf(`defaults:
  recoveryLogPrefix: recovery
  hintPrefix: %shints/
  maxTxnDuration: 50ms
  labels: {app: counts}
shards:
  - id: counts/shard-0
    sources: [counts/in-0]
    hotStandbys: 1
  - id: counts/shard-1
    sources: [counts/in-1]
    hotStandbys: %d
`, root, standbys1)
}

// The shards commands against a broker and two consumer processes: a
// shard is created, counts, fails, is unassigned, edited, deleted; its
// store is recovered from its log, before and after the log is pruned.
func TestShardsCommands(t *testing.T) {
	c := startShardsCluster(t)
	must(t, c.broker, strings.NewReader(shardsTestJournals), "journals", "apply", "-f", "-")
	dir := t.TempDir()
	file := filepath.Join(dir, "shards.yaml")
	if err := os.WriteFile(file, []byte(shardsTestFile(c.root, 0)), 0o644); err != nil {
		t.Fatal(err)
	}

	// A bad shard file changes nothing.
	r := c.run(strings.NewReader("shards:\n  - {id: counts/shard-0, sources: [counts/in-0], hotStandbys: 9}\n"), "apply", "-f", "-")
	if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), "hotStandbys: 9 is above 8") || r.stdout != "" {
		t.Errorf("apply of a bad file: %v, %q", r.err, r.stdout)
	}
	if got := c.must(nil, "list").stdout; got != "ID  STATUS  PRIMARY  REPLICAS  LAG\n" {
		t.Errorf("list of no shards: %q", got)
	}

	// apply -f: a dry run, then for real.
	out := c.must(nil, "apply", "-f", file, "--dry-run").stdout
	if out != "counts/shard-0: would be created\ncounts/shard-1: would be created\ndry run: nothing was changed\n" {
		t.Errorf("apply --dry-run printed %q", out)
	}
	if r := c.must(nil, "apply", "-f", file); r.stdout != "counts/shard-0: created\ncounts/shard-1: created\n" || r.stderr != "" {
		t.Errorf("apply printed %q, and %q on stderr", r.stdout, r.stderr)
	}
	if out := c.must(nil, "apply", "-f", file).stdout; out != "counts/shard-0: unchanged\ncounts/shard-1: unchanged\n" {
		t.Errorf("apply again printed %q", out)
	}
	// A shard whose journals do not exist: applied, with warnings.
	r = c.must(strings.NewReader("shards:\n  - {id: orphan, sources: [counts/nowhere], recoveryLogPrefix: recovery, hintPrefix: /h/}\n"), "apply", "-f", "-")
	if want := "warning: journal counts/nowhere does not exist: it is shard orphan's source\n" +
		"warning: journal recovery/orphan does not exist: it is shard orphan's recovery log\n"; r.stderr != want || r.stdout != "orphan: created\n" {
		t.Errorf("apply of a shard without journals printed %q, and %q on stderr; want the warnings %q", r.stdout, r.stderr, want)
	}
	c.must(nil, "delete", "orphan")

	// Counting; list shows the primary, the standby and no lag.
	for i := range 100 {
		c.publish("counts/in-0", &consumertest.CountMsg{Key: fmt.Sprintf("k%d", i%5)})
	}
	c.publish("counts/in-1", &consumertest.CountMsg{Key: "x"})
	c.readThrough("counts/shard-0", "counts/in-0")
	c.readThrough("counts/shard-1", "counts/in-1")
	waitUntil(t, "shard-0's standby", func() (bool, string) {
		s := c.list()["counts/shard-0"]
		return replicaCodes(s) == "PRIMARY STANDBY", replicaCodes(s)
	})
	// The lag is 0, or '?' while the primary's write head is stale:
	// consumer Stat's write heads are the source readers' WriteHead, which
	// a broker's streamed content does not update (a server-side bug).
	table := c.must(nil, "list").stdout
	if !regexp.MustCompile(`(?m)^ID +STATUS +PRIMARY +REPLICAS +LAG\n` +
		`counts/shard-0 +PRIMARY +(z[ab]#c[12]) +(z[ab]#c[12]):PRIMARY z[ab]#c[12]:STANDBY +(0|\?)\n` +
		`counts/shard-1 +PRIMARY +z[ab]#c[12] +z[ab]#c[12]:PRIMARY +(0|\?)\n$`).MatchString(table) {
		t.Errorf("list:\n%s", table)
	}
	shards := c.list()
	s0 := shards["counts/shard-0"]
	if s0.Status.Code != "PRIMARY" || s0.ModRevision == 0 || s0.CreateRevision == 0 || len(s0.Replicas) != 2 ||
		s0.Replicas[0].Endpoint == "" || s0.Replicas[0].Slot != 0 || s0.Lag["counts/in-0"] != 0 ||
		s0.ReadThrough["counts/in-0"] != c.ends["counts/in-0"] || s0.WriteHeads == nil {
		t.Errorf("list -o json: shard-0 %+v", s0)
	}
	spec, err := consumer.UnmarshalShardSpec(s0.Spec)
	if err != nil || spec.RecoveryLog() != "recovery/counts/shard-0" || spec.HotStandbys != 1 {
		t.Errorf("list -o json: spec %+v, %v", spec, err)
	}
	// -l selects; -o yaml is a shard file, which applies back unchanged.
	yamlOut := c.must(nil, "list", "-l", "id=counts/shard-1", "-o", "yaml").stdout
	if !strings.Contains(yamlOut, "# status: PRIMARY; replicas: z") {
		t.Errorf("list -o yaml lacks the status comment:\n%s", yamlOut)
	}
	if specs, err := consumer.ParseShardFile([]byte(yamlOut)); err != nil || len(specs) != 1 || specs[0].ID != "counts/shard-1" {
		t.Errorf("list -o yaml: %v, %v\n%s", specs, err, yamlOut)
	}
	if out := c.must(strings.NewReader(yamlOut), "apply", "-f", "-").stdout; out != "counts/shard-1: unchanged\n" {
		t.Errorf("apply of list -o yaml printed %q", out)
	}

	// An update shows its diff; one against a revision since changed
	// changes nothing.
	if err := os.WriteFile(file, []byte(shardsTestFile(c.root, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out = c.must(nil, "apply", "-f", file, "--dry-run").stdout
	if !strings.Contains(out, "counts/shard-0: unchanged\ncounts/shard-1: would be updated\n  hotStandbys: (unset) → 1\n") {
		t.Errorf("apply --dry-run of an update printed %q", out)
	}
	sf := &shardsFlags{consumer: c.consumer, timeout: 10 * time.Second}
	sc, err := sf.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	listed, err := sc.list(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	edited := byID(listed)["counts/shard-1"].spec.Clone()
	edited.MinTxnDuration = time.Millisecond
	c.must(nil, "apply", "-f", file) // Changes shard-1 after it was listed.
	changes, err := planShardUpserts([]*consumer.ShardSpec{edited}, byID(listed))
	if err != nil {
		t.Fatal(err)
	}
	err = sc.applyAndReport(context.Background(), io.Discard, io.Discard, changes, false)
	if err == nil || !strings.Contains(err.Error(), "counts/shard-1 changed since they were listed, so none of them was changed") {
		t.Errorf("apply against a stale revision: %v", err)
	}
	if got, err := consumer.UnmarshalShardSpec(c.list()["counts/shard-1"].Spec); err != nil || got.HotStandbys != 1 || got.MinTxnDuration != 0 {
		t.Errorf("after the stale apply: %+v, %v", got, err)
	}

	// Hints: the primary's and two backups.
	waitUntil(t, "shard-0's backup hints", func() (bool, string) {
		p, b := c.hints("counts/shard-0")
		return p != nil && len(b) == 2 && b[0] != nil && b[1] != nil, fmt.Sprintf("%v %v", p, b)
	})
	hintsTableOut := c.must(nil, "hints", "counts/shard-0").stdout
	if !regexp.MustCompile(`(?m)^HINTS +OFFSET +NODES +INLINE +BYTES +REPLAY-FROM +PRUNE-BEFORE +AUTHOR\n` +
		`primary +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +z[ab]\.c[12]\.\d+\.\d+\nbackup 1 +\d+ .*\nbackup 2 +\d+ .*\n$`).MatchString(hintsTableOut) {
		t.Errorf("hints:\n%s", hintsTableOut)
	}
	if r := c.run(nil, "hints", "-s", "counts/none"); r.err == nil || !strings.Contains(r.err.Error(), `shard "counts/none" not found`) {
		t.Errorf("hints of a missing shard: %v", r.err)
	}

	// Recover: into a fresh directory, which then holds the counts.
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Millisecond
	rdir := filepath.Join(dir, "recovered")
	r = c.must(nil, "recover", "counts/shard-0", "--dir", rdir, "--broker", c.broker)
	if !regexp.MustCompile(`^recovered shard counts/shard-0 into \S+: \d+ files, .*\n` +
		`played recovery/counts/shard-0 from the primary hints \(offset \d+\) to offset (\d+) \(write head (\d+)\): read .*, skipped .*, \d+ ops, in .*\n$`).MatchString(r.stdout) {
		t.Errorf("recover printed %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "quire: playing recovery/counts/shard-0 from the primary hints") {
		t.Errorf("recover reported %q", r.stderr)
	}
	for _, k := range []string{"k0", "k4"} {
		if n := recoveredCount(t, rdir, k); n != 20 {
			t.Errorf("recovered count of %s: %d, want 20", k, n)
		}
	}
	// A directory that is not empty is refused, and left alone.
	r = c.run(nil, "recover", "-s", "counts/shard-0", "--dir", rdir, "--broker", c.broker)
	if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), "is not empty") {
		t.Errorf("recover into a used directory: %v", r.err)
	}
	if n := recoveredCount(t, rdir, "k0"); n != 20 {
		t.Errorf("a refused recover changed the directory: count %d", n)
	}

	// A failed shard: listed with its error; unassign --failed.
	c.publish("counts/in-1", &consumertest.CountMsg{Fail: true})
	waitUntil(t, "shard-1 to fail", func() (bool, string) {
		s := c.list()["counts/shard-1"]
		return s.Status.Code == "FAILED", s.Status.Code
	})
	r = c.must(nil, "list")
	if !regexp.MustCompile(`(?m)^counts/shard-1 +FAILED +`).MatchString(r.stdout) ||
		!strings.Contains(r.stderr, "quire: shard counts/shard-1: replica z") || !strings.Contains(r.stderr, "asks to fail") {
		t.Errorf("list of a failed shard: %q, stderr %q", r.stdout, r.stderr)
	}
	before := c.list()["counts/shard-1"]
	if out := c.must(nil, "unassign", "--failed", "--dry-run").stdout; out != "counts/shard-1: FAILED replicas would be unassigned\ndry run: nothing was changed\n" {
		t.Errorf("unassign --failed --dry-run printed %q", out)
	}
	if out := c.must(nil, "unassign", "counts/shard-1", "--dry-run").stdout; out != "counts/shard-1: would be unassigned\ndry run: nothing was changed\n" {
		t.Errorf("unassign --dry-run printed %q", out)
	}
	if after := c.list()["counts/shard-1"]; after.Status.Code != "FAILED" || len(after.Replicas) != len(before.Replicas) {
		t.Errorf("a dry run changed the assignments: %+v", after)
	}
	if out := c.must(nil, "unassign", "--failed", "-l", "app=counts").stdout; out != "counts/shard-1: FAILED replicas unassigned\n" {
		t.Errorf("unassign --failed printed %q", out)
	}

	// Edit, then delete, shard-1.
	editor := filepath.Join(dir, "editor.sh")
	script := "#!/bin/sh\nsed 's/app: counts/app: edited/' \"$1\" > \"$1.tmp\" && mv \"$1.tmp\" \"$1\"\n"
	if err := os.WriteFile(editor, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDITOR", editor)
	if out := c.must(nil, "edit", "counts/shard-1").stdout; out != "counts/shard-1: updated\n  labels.app: counts → edited\n" {
		t.Errorf("edit printed %q", out)
	}
	if got := c.must(nil, "list", "-l", "app=edited").stdout; !strings.Contains(got, "counts/shard-1") || strings.Contains(got, "shard-0") {
		t.Errorf("list after edit: %q", got)
	}
	if r := c.run(nil, "delete", "counts/zzz"); r.err == nil || !strings.Contains(r.err.Error(), `shard "counts/zzz" not found, so nothing was deleted`) {
		t.Errorf("delete of a missing shard: %v", r.err)
	}
	if out := c.must(nil, "delete", "-l", "app=edited", "--dry-run").stdout; out != "counts/shard-1: would be deleted\ndry run: nothing was changed\n" {
		t.Errorf("delete --dry-run printed %q", out)
	}
	if out := c.must(nil, "delete", "counts/shard-1").stdout; out != "counts/shard-1: deleted\n" {
		t.Errorf("delete printed %q", out)
	}
	if got := c.list(); len(got) != 1 {
		t.Errorf("shards after delete: %v", got)
	}

	// Unassigning shard-0 moves it to a new primary, whose hints replace
	// the old ones.
	old, _ := c.hints("counts/shard-0")
	if out := c.must(nil, "unassign", "counts/shard-0").stdout; out != "counts/shard-0: unassigned\n" {
		t.Errorf("unassign printed %q", out)
	}
	waitUntil(t, "shard-0's new primary's hints", func() (bool, string) {
		p, b := c.hints("counts/shard-0")
		if p == nil || len(b) != 2 || b[1] == nil {
			return false, "no hints"
		}
		return p.Author != old.Author && b[0].Author == p.Author && b[1].Author == p.Author,
			fmt.Sprintf("authors %s, %s, %s; old %s", p.Author, b[0].Author, b[1].Author, old.Author)
	})

	// Prune: a dry run lists the fragments it would remove, and removes
	// none; then they are removed; and the store still recovers.
	fragments := func() string { // In the store: brokers list it again only each refreshInterval.
		st, err := fragment.Open(context.Background(), c.store)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		if err := st.List(context.Background(), "recovery/counts/shard-0", func(f fragment.Fragment) error {
			out = append(out, fmt.Sprintf("[%d, %d) %s\n", f.Begin, f.End, f.Store))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return strings.Join(out, "")
	}
	// The log is listed up to the hints' offset once its spool rolls, by
	// its flushInterval.
	waitUntil(t, "the log to be prunable", func() (bool, string) {
		out = c.must(nil, "prune", "counts/shard-0", "--dry-run", "--broker", c.broker).stdout
		return !strings.Contains(out, "is not pruned yet"), out
	})
	beforePrune := fragments()
	m := regexp.MustCompile(`^counts/shard-0: recovery/counts/shard-0 before offset (\d+) \(the oldest hints: (primary|backup \d), of offset \d+\): (\d+) fragments would be removed \(.*\), \d+ kept\n((?:  \[\d+, \d+\) file://\S+\n)*)dry run: nothing was removed\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("prune --dry-run printed %q", out)
	}
	if n, _ := strconv.Atoi(m[3]); n == 0 || strings.Count(m[4], "\n") != n {
		t.Errorf("prune --dry-run would remove %s fragments: %q", m[3], out)
	}
	// Fragments persisted meanwhile (the shard goes on recording) may
	// join the listing; none may leave it.
	if after := fragments(); !containsLines(after, beforePrune) {
		t.Errorf("prune --dry-run removed fragments: before %q, after %q", beforePrune, after)
	}
	out = c.must(nil, "prune", "-l", "app=counts", "--broker", c.broker).stdout
	m = regexp.MustCompile(`^counts/shard-0: recovery/counts/shard-0 before offset \d+ \(.*\): [1-9]\d* fragments removed \(.*\), \d+ kept\n((?:  \[\d+, \d+\) file://\S+\n)+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("prune printed %q", out)
	}
	afterPrune := fragments()
	for _, line := range strings.SplitAfter(m[1], "\n") {
		if line = strings.TrimPrefix(line, "  "); line == "" {
			continue
		}
		if !strings.Contains(beforePrune, line) || strings.Contains(afterPrune, line) {
			t.Errorf("prune reported removing %q: before %q, after %q", line, beforePrune, afterPrune)
		}
	}
	r = c.must(nil, "recover", "-s", "counts/shard-0", "--dir", filepath.Join(dir, "pruned"), "--broker", c.broker)
	if n := recoveredCount(t, filepath.Join(dir, "pruned"), "k3"); n != 20 {
		t.Errorf("count of k3 recovered after pruning: %d, want 20 (%s)", n, r.stdout)
	}

	// Hints that do not play are skipped for older ones. With shard-0
	// disabled (so that no replica stores hints), its primary hints are
	// replaced by its old primary's, altered to contradict the log after
	// them.
	disabled := strings.SplitAfter(shardsTestFile(c.root, 1), "    hotStandbys: 1\n")[0] + "    disable: true\n"
	if out := c.must(strings.NewReader(disabled), "apply", "-f", "-").stdout; out != "counts/shard-0: updated\n  disable: (unset) → true\n" {
		t.Errorf("apply of disable printed %q", out)
	}
	waitUntil(t, "shard-0 to have no replicas", func() (bool, string) {
		s := c.list()["counts/shard-0"]
		return len(s.Replicas) == 0, replicaCodes(s)
	})
	last := c.must(nil, "hints", "-s", "counts/shard-0", "-o", "json").stdout
	waitUntil(t, "shard-0's hints to settle", func() (bool, string) { // A stopping primary stores them once more.
		time.Sleep(300 * time.Millisecond)
		now := c.must(nil, "hints", "-s", "counts/shard-0", "-o", "json").stdout
		settled := now == last
		last = now
		return settled, "changing"
	})
	bad := *old
	bad.LastSeq += 5
	raw, err := recoverylog.MarshalHints(&bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.fleet.Etcd.Put(context.Background(), c.root+"hints/counts/shard-0", string(raw)); err != nil {
		t.Fatal(err)
	}
	fallback := filepath.Join(dir, "fallback")
	r = c.must(nil, "recover", "-s", "counts/shard-0", "--dir", fallback, "--broker", c.broker)
	if !strings.Contains(r.stderr, fmt.Sprintf("quire: playback from the primary hints (offset %d) failed; trying older hints: ", bad.Offset)) ||
		!strings.Contains(r.stdout, "from the backup 1 hints") {
		t.Errorf("recover with bad primary hints: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if n := recoveredCount(t, fallback, "k1"); n != 20 {
		t.Errorf("count of k1 recovered from backup hints: %d, want 20", n)
	}

	// QUIRE_CONSUMER names the consumer; one that is not there is reported.
	t.Setenv("QUIRE_CONSUMER", c.consumer)
	if r := quire(context.Background(), nil, "shards", "list"); r.err != nil || !strings.Contains(r.stdout, "counts/shard-0") {
		t.Errorf("list with QUIRE_CONSUMER: %q, %v", r.stdout, r.err)
	}
	r = quire(context.Background(), nil, "shards", "list", "--consumer", "127.0.0.1:"+strconv.Itoa(freeport.Port(t)), "--timeout", "300ms")
	if r.err == nil || !strings.Contains(r.err.Error(), "no answer from consumer") {
		t.Errorf("list of a consumer that is not there: %v", r.err)
	}
}

func TestShardsBadInput(t *testing.T) {
	dir := t.TempDir()
	used := filepath.Join(dir, "used")
	if err := os.MkdirAll(used, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown field", "shards:\n  - {id: a, sources: [j], hotStandby: 1}\n", `shards[0] (a): unknown field "hotStandby"`},
		{"standbys", "shards:\n  - {id: a, sources: [j], hotStandbys: 9}\n", "shards[0] (a): hotStandbys: 9 is above 8"},
		{"no sources", "shards:\n  - {id: a}\n", "shards[0] (a): sources: missing"},
		{"bad id", "shards:\n  - {id: 'a//b', sources: [j]}\n", "shards[0]"},
		{"repeated", "shards:\n  - {id: a, sources: [j]}\n  - {id: a, sources: [j]}\n", "id is repeated"},
		{"not yaml", "shards: [\n", "shard file"},
		{"empty", "", "lists no shards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			r := quire(context.Background(), nil, "shards", "apply", "-f", path, "--consumer", "127.0.0.1:1")
			if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), tc.want) {
				t.Errorf("err %v; want a usage error naming %q", r.err, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("printed %q", r.stdout)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"list", "-o", "xml"}, `--output "xml": want table, yaml, json`},
		{[]string{"list", "-l", "app in ("}, "--selector"},
		{[]string{"list", "--consumer", "nohost"}, `--consumer "nohost": want host:port`},
		{[]string{"list", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"list", "--bogus"}, "unknown flag"},
		{[]string{"apply"}, "give a shard file with -f"},
		{[]string{"apply", "-f", filepath.Join(dir, "missing.yaml")}, "reading shard file"},
		{[]string{"edit"}, "give -l SELECTOR or shard IDs"},
		{[]string{"edit", "-l", "app=x", "a/b"}, "not both"},
		{[]string{"edit", "a//b"}, `shard ID "a//b"`},
		{[]string{"delete"}, "give -l SELECTOR or shard IDs"},
		{[]string{"delete", "-l", "app=x", "--all"}, "--all selects every shard"},
		{[]string{"unassign"}, "give -l SELECTOR or shard IDs"},
		{[]string{"unassign", "--all", "a"}, "--all selects every shard"},
		{[]string{"unassign", "--failed", "-l", "a in ("}, "--selector"},
		{[]string{"hints"}, "give the shard, by ID"},
		{[]string{"hints", "-s", "a//b"}, "--shard"},
		{[]string{"hints", "a//b"}, "--shard"},
		{[]string{"hints", "a", "b"}, "takes one name, as --shard or as its argument: got 2 arguments"},
		{[]string{"hints", "-s", "a", "a"}, "--shard and an argument both give the name"},
		{[]string{"hints", "-s", "a", "-o", "yaml"}, `--output "yaml"`},
		{[]string{"recover", "--dir", dir}, "give the shard, by ID"},
		{[]string{"recover", "a", "--dir", used}, "is not empty"},
		{[]string{"recover", "-s", "a"}, "give the directory to recover into with --dir DIR"},
		{[]string{"recover", "-s", "a", "--dir", used}, "is not empty"},
		{[]string{"recover", "-s", "a", "--dir", filepath.Join(used, "keep")}, "is not a directory"},
		{[]string{"recover", "-s", "a", "--dir", filepath.Join(dir, "new"), "--broker", "nohost"}, "--broker"},
		{[]string{"prune"}, "give -l SELECTOR or shard IDs"},
		{[]string{"prune", "--all", "--broker", "nohost"}, "--broker"},
	} {
		args := append([]string{"shards"}, tc.args...)
		if !slices.Contains(tc.args, "--consumer") {
			args = append(args, "--consumer", "127.0.0.1:1")
		}
		r := quire(context.Background(), nil, args...)
		if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), tc.want) {
			t.Errorf("%v: err %v, want a usage error naming %q", tc.args, r.err, tc.want)
		}
		if r.stdout != "" {
			t.Errorf("%v printed %q", tc.args, r.stdout)
		}
	}
	if ents, err := os.ReadDir(used); err != nil || len(ents) != 1 {
		t.Errorf("refused commands changed %s: %v, %v", used, ents, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused recover created its directory: %v", err)
	}

	// As a process: usage errors exit with 2, others with 1.
	stdout, stderr, code := runBinary(t, "shards", "list", "-o", "xml")
	if code != 2 || stdout != "" || !strings.Contains(stderr, `--output "xml"`) {
		t.Errorf("list -o xml: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	_, stderr, code = runBinary(t, "shards", "list", "--consumer", "127.0.0.1:"+strconv.Itoa(freeport.Port(t)), "--timeout", "200ms")
	if code != 1 || !strings.Contains(stderr, "no answer from consumer") {
		t.Errorf("list of no consumer: exit %d, stderr %q", code, stderr)
	}
}

func testShard(t *testing.T, yamlEntry string, replicas ...*protocol.ShardListResponse_Replica) listedShard {
	t.Helper()
	specs, err := consumer.ParseShardFile([]byte("shards:\n  - " + yamlEntry + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	sh := &protocol.ShardListResponse_Shard{Replicas: replicas, ModRevision: 7, CreateRevision: 5,
		Status: &protocol.ReplicaStatus{}}
	for i, r := range replicas {
		if r.GetStatus().GetCode() == protocol.ReplicaCode_FAILED || i == 0 {
			sh.Status = r.GetStatus()
		}
	}
	return listedShard{spec: specs[0], ShardListResponse_Shard: sh}
}

func testReplica(zone, suffix string, slot int32, code protocol.ReplicaCode, errText string) *protocol.ShardListResponse_Replica {
	return &protocol.ShardListResponse_Replica{ProcessId: &protocol.ProcessID{Zone: zone, Suffix: suffix},
		Endpoint: suffix + ":1", Slot: slot, Status: &protocol.ReplicaStatus{Code: code, Error: errText}}
}

func TestShardsTable(t *testing.T) {
	shards := []listedShard{
		testShard(t, "{id: a/one, sources: [in/a]}",
			testReplica("za", "c1", 0, protocol.ReplicaCode_PRIMARY, ""),
			testReplica("zb", "c2", 1, protocol.ReplicaCode_STANDBY, "")),
		testShard(t, "{id: a/two, sources: [in/a, in/b, in/c]}",
			testReplica("za", "c1", 0, protocol.ReplicaCode_PRIMARY, "")),
		testShard(t, "{id: a/three, sources: [in/a]}",
			testReplica("zb", "c2", 1, protocol.ReplicaCode_BACKFILL, "")),
		testShard(t, "{id: a/four, sources: [in/a]}"),
		testShard(t, "{id: a/five, sources: [in/a]}",
			testReplica("za", "c1", 0, protocol.ReplicaCode_FAILED, "boom")),
	}
	stats := []shardStat{
		{ok: true, readThrough: map[string]int64{"in/a": 100}, writeHeads: map[string]int64{"in/a": 150}},
		{ok: true, readThrough: map[string]int64{"in/a": 10, "in/b": 5, "in/c": 9}, writeHeads: map[string]int64{"in/a": 10, "in/b": 7, "in/c": 3}},
		{}, {}, {},
	}
	want := `ID       STATUS    PRIMARY  REPLICAS                     LAG
a/one    PRIMARY   za#c1    za#c1:PRIMARY zb#c2:STANDBY  50
a/two    PRIMARY   za#c1    za#c1:PRIMARY                in/a=0,in/b=2,in/c=?
a/three  BACKFILL  -        zb#c2:BACKFILL               -
a/four   -         -        -                            -
a/five   FAILED    za#c1    za#c1:FAILED                 -
`
	if got := string(shardsTable(shards, stats)); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	var failures strings.Builder
	printFailures(&failures, shards)
	if got := failures.String(); got != "quire: shard a/five: replica za#c1 FAILED: boom\n" {
		t.Errorf("failures: %q", got)
	}

	out, err := shardsJSON(shards[:2], stats[:2])
	if err != nil {
		t.Fatal(err)
	}
	var decoded shardsListJSON
	if err := json.Unmarshal(out, &decoded); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(decoded.Shards) != 2 || decoded.Shards[0].Lag["in/a"] != 50 || decoded.Shards[0].Replicas[1].Status.Code != "STANDBY" ||
		decoded.Shards[0].ModRevision != 7 || len(decoded.Shards[1].Lag) != 2 || decoded.Shards[1].Lag["in/b"] != 2 {
		t.Errorf("json:\n%s", out)
	}
	if !strings.Contains(string(out), `"id": "a/one"`) {
		t.Errorf("json lacks the spec:\n%s", out)
	}

	y, err := shardsYAML(shards[:1])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "  # status: PRIMARY; replicas: za#c1:PRIMARY zb#c2:STANDBY; modRevision: 7\n  - id: a/one\n") {
		t.Errorf("yaml:\n%s", y)
	}
	if specs, err := consumer.ParseShardFile(y); err != nil || len(specs) != 1 {
		t.Errorf("yaml does not parse back: %v", err)
	}
}

func TestShardSpecDiff(t *testing.T) {
	a := testShard(t, "{id: a, sources: [in/a], labels: {app: x, tier: [1, 2]}}").spec
	b := testShard(t, "{id: a, sources: [in/a, {journal: in/b, minOffset: 5}], hotStandbys: 2, labels: {app: y}, maxTxnDuration: 2s}").spec
	got := strings.Join(shardSpecDiff(a, b), "\n")
	want := "hotStandbys: (unset) → 2\nlabels.app: x → y\nlabels.tier: [1, 2] → (unset)\nmaxTxnDuration: 1s → 2s\nsources: [in/a] → [in/a, in/b@5]"
	if got != want {
		t.Errorf("diff:\n%s\nwant:\n%s", got, want)
	}
}

func TestHintsTable(t *testing.T) {
	h := &recoverylog.Hints{Log: "rec/a", Author: "za.c1.9", Offset: 500, LastSeq: 9, Nodes: []recoverylog.HintNode{
		{Node: 2, FirstOffset: 100, EndOffset: 300, Length: 120, Links: []string{"000002.sst"}, Sealed: true},
		{Node: 5, FirstOffset: 310, EndOffset: 320, Length: 3, Links: []string{"OPTIONS"}, Sealed: true, Inline: true, Content: []byte("abc")},
	}}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, err := recoverylog.MarshalHints(h)
	if err != nil {
		t.Fatal(err)
	}
	hs := &shardHints{shard: testShard(t, "{id: a, sources: [in/a], recoveryLogPrefix: rec, hintPrefix: /h/}"), entries: []hintsEntry{
		{name: "primary", raw: raw, hints: h},
		{name: "backup 1", raw: []byte("{bad"), err: errors.New("bad")},
		{name: "backup 2"},
	}}
	want := `HINTS     OFFSET   NODES  INLINE  BYTES  REPLAY-FROM  PRUNE-BEFORE  AUTHOR
primary   500      2      1       123    100          100           za.c1.9
backup 1  invalid  -      -       -      -            -             -
backup 2  -        -      -       -      -            -             -
`
	if got := string(hintsTable(hs)); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	out, err := hintsJSON(hs)
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Shard, Log string
		Primary    *recoverylog.Hints
		Backups    []json.RawMessage
	}
	if err := json.Unmarshal(out, &decoded); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if decoded.Shard != "a" || decoded.Log != "rec/a" || decoded.Primary.Offset != 500 || len(decoded.Backups) != 2 ||
		string(decoded.Backups[0]) != `"{bad"` || string(decoded.Backups[1]) != "null" {
		t.Errorf("json:\n%s", out)
	}
	if oldest, name := oldestHints(hs); oldest != h || name != "primary" {
		t.Errorf("oldest hints: %s", name)
	}
}

func TestShardSelectorFor(t *testing.T) {
	for _, tc := range []struct {
		selector string
		ids      []string
		all      bool
		want     string
		usage    bool
	}{
		{selector: "app=x", want: "app=x"},
		{ids: []string{"a/0", "a/1"}, want: "id in (a/0, a/1)"},
		{all: true, want: ""},
		{usage: true},
		{selector: "app=x", ids: []string{"a"}, usage: true},
		{selector: "app=x", all: true, usage: true},
		{ids: []string{"/a"}, usage: true},
		{selector: "app in (", usage: true},
	} {
		got, err := shardSelectorFor(tc.selector, tc.ids, tc.all)
		if tc.usage != errors.As(err, new(usageError)) || (!tc.usage && got != tc.want) {
			t.Errorf("shardSelectorFor(%q, %q, %v) = %q, %v", tc.selector, tc.ids, tc.all, got, err)
		}
	}
}

// containsLines tells whether every line of sub is a line of s.
func containsLines(s, sub string) bool {
	have := map[string]bool{}
	for _, l := range strings.Split(s, "\n") {
		have[l] = true
	}
	for _, l := range strings.Split(sub, "\n") {
		if !have[l] {
			return false
		}
	}
	return true
}
