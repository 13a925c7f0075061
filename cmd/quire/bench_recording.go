package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/recoverylog"
	"github.com/quire-dev/quire/store"
)

type benchRecordingFlags struct {
	journal, dir, output, codec string
	rounds                      int
	replication                 int32
	duration                    time.Duration
	separateValues, pipelined   bool

	// logCodec is codec, parsed by validate.
	logCodec protocol.Codec
}

func newBenchRecordingCommand(jf *journalsFlags) *cobra.Command {
	var f benchRecordingFlags
	cmd := &cobra.Command{
		Use:   "recording [-j PREFIX] [--duration D] [--rounds N] [--dir DIR] [--replication R] [--codec C] [--separate-values] [--pipelined]",
		Short: "Measure what recording a Pebble database into a recovery log costs",
		Long: `Write to a Pebble database for --duration, first plain and then recorded
into a recovery log through the brokers (each recorded run into a new
journal PREFIX/TIME-N, removed afterwards with its fragments: it is
suspended, so that everything is in its store, then deleted, then its
fragments are removed with this command's store credentials), --rounds
times. The workload is
write-heavy: batches of 100 keys with 1 KiB random values, each committed
with a sync, one after another; with --pipelined, each batch's sync is
awaited only once the next batch is built, as a consumer's transactions
commit a Pebble store. Reports MB/s of values
written each way, the p50 and p99 of a batch's commit (its sync
included), Pebble's write stalls (their time and count: commits held
while memtables wait to be flushed or level 0 to be compacted, when the
database's background work falls behind), and the cost of recording:
1 - recorded / plain, over all runs, and the median of each round's
cost (a round's plain and recorded runs go back to back, so the median
of rounds resists a machine whose speed drifts between rounds).

--codec sets the codec of the recovery logs it creates (zstd by default,
as for any journal); --separate-values has both runs keep values apart
from keys in blob files (recoverylog.SeparateValues).

Run it on a consumer machine against brokers on others, as in production:
with the brokers on the same cores, recording competes with them for the
CPU as well.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchRecording(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "bench/recording", "prefix of the recovery-log journals to create")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long each run writes")
	fl.IntVar(&f.rounds, "rounds", 1, "pairs of runs (plain, then recorded)")
	fl.StringVar(&f.dir, "dir", "", "directory for the databases, on the file system the stores will use (default: a temporary directory)")
	fl.Int32Var(&f.replication, "replication", 1, "replication of the recovery logs")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.StringVar(&f.codec, "codec", "zstd", "codec of the recovery logs: none, gzip, zstd or snappy")
	fl.BoolVar(&f.separateValues, "separate-values", false, "keep values of 256 bytes or more in blob files (both runs)")
	fl.BoolVar(&f.pipelined, "pipelined", false, "await each batch's sync only after the next batch is built, as a consumer's transactions commit (both runs)")
	return cmd
}

// benchRecordingRun is one run of `bench recording`.
type benchRecordingRun struct {
	Recorded    bool    `json:"recorded"`
	Seconds     float64 `json:"seconds"`
	Batches     int     `json:"batches"`
	MBPerSecond float64 `json:"mbPerSecond"`
	// CommitP50Ms and CommitP99Ms are percentiles of how long a batch's
	// commit took, its sync included.
	CommitP50Ms float64 `json:"commitP50Ms"`
	CommitP99Ms float64 `json:"commitP99Ms"`
	// LogBytes is what the recovery log took (zero for plain runs).
	LogBytes int64 `json:"logBytes"`
	// Stalls and StalledSeconds count Pebble's write stalls and their
	// time: commits held because memtables wait to be flushed or level 0
	// to be compacted, which is when background work falls behind.
	Stalls         int     `json:"stalls"`
	StalledSeconds float64 `json:"stalledSeconds"`
}

// stallClock times a database's write stalls from its events.
type stallClock struct {
	now func() time.Time // time.Now if nil

	mu      sync.Mutex
	began   time.Time // zero outside a stall
	stalls  int
	stalled time.Duration
}

func (c *stallClock) clock() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

// listen has l report write stalls to c.
func (c *stallClock) listen(l *pebble.EventListener) {
	l.WriteStallBegin = func(pebble.WriteStallBeginInfo) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.began = c.clock()
		c.stalls++
	}
	l.WriteStallEnd = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.began.IsZero() {
			c.stalled += c.clock().Sub(c.began)
			c.began = time.Time{}
		}
	}
}

// totals returns the stalls so far and their time.
func (c *stallClock) totals() (int, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stalls, c.stalled
}

// benchRecordingResult is what `bench recording` reports.
type benchRecordingResult struct {
	Replication int32 `json:"replication"`
	// Codec is the recovery logs' codec; SeparateValues says whether
	// values were kept in blob files.
	Codec          string `json:"codec"`
	SeparateValues bool   `json:"separateValues"`
	// Pipelined says whether each batch's sync was awaited only after
	// the next batch was built.
	Pipelined bool                `json:"pipelined"`
	Runs      []benchRecordingRun `json:"runs"`
	// Cost is 1 - (recorded MB/s) / (plain MB/s), over all runs.
	Cost float64 `json:"cost"`
	// RoundCosts is each round's cost, and MedianCost their median.
	RoundCosts []float64 `json:"roundCosts"`
	MedianCost float64   `json:"medianCost"`
}

func (f *benchRecordingFlags) validate() error {
	if err := validateBenchFlags(f.journal, f.output, f.duration, f.replication); err != nil {
		return err
	}
	if f.rounds < 1 {
		return usagef("--rounds %d: want at least 1", f.rounds)
	}
	c, ok := protocol.CodecNamed(f.codec)
	if !ok {
		return usagef("--codec %q: want none, gzip, zstd or snappy", f.codec)
	}
	f.logCodec = c
	return nil
}

func runBenchRecording(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, f benchRecordingFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	dir := f.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "quire-bench-recording-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	ctx, stop := interruptible(ctx)
	defer stop()
	res := benchRecordingResult{Replication: f.replication, Codec: strings.ToLower(codecText(f.logCodec)),
		SeparateValues: f.separateValues, Pipelined: f.pipelined}
	var plain, recorded benchRecordingRun
	for round := range f.rounds {
		for _, rec := range []bool{false, true} {
			run, err := benchRecordingOnce(ctx, stderr, c, jf, f, filepath.Join(dir, fmt.Sprintf("%d-%v", round, rec)), rec, round)
			if err != nil {
				return err
			}
			res.Runs = append(res.Runs, run)
			total := &plain
			if rec {
				total = &recorded
			}
			total.Seconds += run.Seconds
			total.MBPerSecond += run.MBPerSecond * run.Seconds
		}
	}
	res.Cost = 1 - (recorded.MBPerSecond/recorded.Seconds)/(plain.MBPerSecond/plain.Seconds)
	for k := 0; k+1 < len(res.Runs); k += 2 {
		res.RoundCosts = append(res.RoundCosts, 1-res.Runs[k+1].MBPerSecond/res.Runs[k].MBPerSecond)
	}
	res.MedianCost = median(res.RoundCosts)
	if f.output == "json" {
		return writeJSON(stdout, res)
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSECONDS\tBATCHES\tMB/S\tP50\tP99\tSTALLED\tLOG MB")
	for _, r := range res.Runs {
		name := "plain"
		if r.Recorded {
			name = "recorded"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%d\t%.1f\t%.2fms\t%.2fms\t%.2fs (%d)\t%.1f\n", name, r.Seconds, r.Batches, r.MBPerSecond,
			r.CommitP50Ms, r.CommitP99Ms, r.StalledSeconds, r.Stalls, float64(r.LogBytes)/1e6)
	}
	fmt.Fprintf(tw, "cost of recording: %.0f%% over all runs", 100*res.Cost)
	if len(res.RoundCosts) > 1 {
		fmt.Fprintf(tw, "; median of rounds %.0f%% (", 100*res.MedianCost)
		for k, c := range res.RoundCosts {
			if k > 0 {
				fmt.Fprint(tw, ", ")
			}
			fmt.Fprintf(tw, "%.0f%%", 100*c)
		}
		fmt.Fprint(tw, ")")
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "recovery logs stored with %s", res.Codec)
	if res.SeparateValues {
		fmt.Fprintf(tw, "; values of %d bytes or more kept in blob files", recoverylog.DefaultSeparateMinSize)
	}
	if res.Pipelined {
		fmt.Fprint(tw, "; commits pipelined")
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

// benchRecordingOnce writes to a new database in dir for f.duration,
// recorded into a new journal if rec.
func benchRecordingOnce(ctx context.Context, stderr io.Writer, c *client.Client, jf *journalsFlags,
	f benchRecordingFlags, dir string, rec bool, round int) (benchRecordingRun, error) {
	defer os.RemoveAll(dir)
	var stalls stallClock
	listener := &pebble.EventListener{}
	stalls.listen(listener)
	opts := &pebble.Options{FS: vfs.Default, Logger: store.PebbleLogger(slog.New(slog.DiscardHandler)),
		EventListener: listener}
	recoverylog.PebbleOptions(opts)
	if f.separateValues {
		recoverylog.SeparateValues(opts, 0)
	}
	var recorder *recoverylog.Recorder
	if rec {
		journal := fmt.Sprintf("%s/%d-%d", f.journal, time.Now().UnixNano(), round)
		if _, err := ensureJournal(ctx, c, stderr, jf, journal, f.replication, f.logCodec); err != nil {
			return benchRecordingRun{}, err
		}
		defer removeJournal(context.WithoutCancel(ctx), stderr, c, jf, journal)
		var err error
		recorder, err = recoverylog.NewRecorder(ctx, recoverylog.RecorderConfig{Client: c, Journal: journal,
			Author: fmt.Sprintf("bench-%d", os.Getpid()), Dir: dir})
		if err != nil {
			return benchRecordingRun{}, err
		}
		opts.FS = recorder
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return benchRecordingRun{}, fmt.Errorf("opening pebble in %s: %w", dir, err)
	}
	start := time.Now()
	var written atomic.Int64
	what := "plain"
	if rec {
		what = "recorded"
	}
	done := startProgress(stderr, func() string {
		secs := time.Since(start).Seconds()
		return fmt.Sprintf("bench recording: round %d, %s: %.0fs of %s; %d batches, %.1f MB/s", round+1, what, secs, f.duration,
			written.Load(), float64(written.Load())*100*1024/1e6/secs)
	})
	commits, err := writeBatches(ctx, db, f.duration, f.pipelined, &written)
	done()
	elapsed := time.Since(start)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return benchRecordingRun{}, fmt.Errorf("writing to pebble in %s: %w", dir, err)
	}
	run := benchRecordingRun{Recorded: rec, Seconds: elapsed.Seconds(), Batches: len(commits),
		MBPerSecond: float64(len(commits)) * 100 * 1024 / 1e6 / elapsed.Seconds(),
		CommitP50Ms: percentileMs(commits, 0.5), CommitP99Ms: percentileMs(commits, 0.99)}
	n, stalled := stalls.totals()
	run.Stalls, run.StalledSeconds = n, stalled.Seconds()
	if recorder != nil {
		run.LogBytes = recorder.FSM().Offset
	}
	return run, nil
}

// writeBatches commits batches of 100 keys with 1 KiB random values, each
// with a sync, until d has passed (at least one), and returns how long
// each commit took; written counts them as they commit. If pipelined, a
// batch is applied without waiting for its sync, which is awaited once
// the next batch is built, as a consumer's transactions commit
// (store.Pipeliner); a commit's time is then from its apply to the end
// of that wait.
func writeBatches(ctx context.Context, db *pebble.DB, d time.Duration, pipelined bool, written *atomic.Int64) ([]time.Duration, error) {
	value := make([]byte, 1024)
	rng := rand.NewChaCha8([32]byte{})
	deadline := time.Now().Add(d)
	var commits []time.Duration
	var pending *pebble.Batch // applied, its sync not yet awaited
	var pendingStart time.Time
	await := func() error {
		if pending == nil {
			return nil
		}
		err := pending.SyncWait()
		commits = append(commits, time.Since(pendingStart))
		pending.Close()
		pending = nil
		written.Add(1)
		return err
	}
	// At least one batch, so that a run has a rate to compare.
	for n := 0; (n == 0 || time.Now().Before(deadline)) && ctx.Err() == nil; n++ {
		b := db.NewBatch()
		for j := range 100 {
			rng.Read(value)
			if err := b.Set(fmt.Appendf(nil, "key-%08d", (n*100+j)%200000), value, nil); err != nil {
				return commits, err
			}
		}
		if err := await(); err != nil {
			return commits, err
		}
		start := time.Now()
		if pipelined {
			if err := db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
				return commits, err
			}
			pending, pendingStart = b, start
			continue
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return commits, err
		}
		commits = append(commits, time.Since(start))
		b.Close()
		written.Add(1)
	}
	if err := await(); err != nil {
		return commits, err
	}
	return commits, ctx.Err()
}

// removeJournal removes a journal that the command created, and its
// fragments, best effort, saying on stderr what it could not remove. It
// suspends the journal first: its primary persists everything it holds,
// so that no broker persists a spool of it after it is deleted, and the
// fragments its stores hold then are all it left.
func removeJournal(ctx context.Context, stderr io.Writer, c *client.Client, jf *journalsFlags, name string) {
	warn := func(err error) { fmt.Fprintf(stderr, "quire: removing %s: %v\n", name, err) }
	sctx, cancel := context.WithTimeout(ctx, jf.timeout)
	_, err := c.Suspend(sctx, name, false)
	cancel()
	if err != nil {
		warn(err)
		return
	}
	js, err := jf.list(ctx, c, protocol.LabelName+"="+name)
	if err != nil || len(js) != 1 {
		warn(fmt.Errorf("listing it: %v", err))
		return
	}
	urls, err := jf.storesOfJournal(ctx, c, js[0].GetSpec())
	if err != nil {
		warn(err)
		return
	}
	if _, err := jf.apply(ctx, c, []change{{name: name, req: &protocol.ApplyRequest_Change{Delete: name, ExpectModRevision: js[0].ModRevision}}}); err != nil {
		warn(err)
		return
	}
	for _, url := range urls {
		if err := removeFragments(ctx, url, name); err != nil {
			warn(err)
		}
	}
}

// removeFragments removes every fragment of journal from the store at url.
func removeFragments(ctx context.Context, url, journal string) error {
	store, err := fragment.Open(ctx, url)
	if err != nil {
		return fmt.Errorf("opening store %s: %w", url, err)
	}
	var all []fragment.Fragment
	if err := store.List(ctx, journal, func(f fragment.Fragment) error {
		all = append(all, f)
		return nil
	}); err != nil {
		return fmt.Errorf("listing store %s: %w", url, err)
	}
	for _, f := range all {
		if err := store.Remove(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// median returns the median of xs (the mean of the middle two of an even
// count), or 0 for none. It sorts a copy.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
