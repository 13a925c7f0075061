package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/protocol"
)

func newBenchCommand() *cobra.Command {
	jf := &journalsFlags{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure append, read, message and recording throughput against a running cluster",
		Long: `Measure a running cluster (--broker, else $QUIRE_BROKER, else 'quire dev'):
'bench append' appends from concurrent writers for a while, 'bench read'
reads a journal back, 'bench messages' publishes messages while a reader
tails them, 'bench recording' measures what recording a Pebble database
into a recovery log costs. Each prints a small table, or JSON with -o json.`,
	}
	jf.addFlags(cmd.PersistentFlags(), "how long to wait for a broker to answer a request")
	cmd.AddCommand(newBenchAppendCommand(jf), newBenchReadCommand(jf), newBenchMessagesCommand(jf), newBenchRecordingCommand(jf))
	return cmd
}

type benchAppendFlags struct {
	journal, size, output string
	writers               int
	replication           int32
	duration              time.Duration
}

func newBenchAppendCommand(jf *journalsFlags) *cobra.Command {
	var f benchAppendFlags
	cmd := &cobra.Command{
		Use:   "append [-j NAME] [--writers N] [--size SIZE] [--duration D] [--replication R]",
		Short: "Append from concurrent writers, and report throughput and latency",
		Long: `Append for --duration from --writers concurrent writers, each making
synchronous appends of --size random bytes, one after another, to the
journal (created, with --replication, if it does not exist). Reports
MB/s (10^6 bytes), appends/s, and the appends' latency percentiles.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchAppend(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "bench/append", "the journal to append to")
	fl.IntVar(&f.writers, "writers", 4, "concurrent writers")
	fl.StringVar(&f.size, "size", "1KiB", "bytes per append, e.g. 100, 1KiB, 64KiB, 1MiB")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to append")
	fl.Int32Var(&f.replication, "replication", 1, "replication of the journal, if it is created")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	return cmd
}

// benchAppendResult is what `bench append` reports.
type benchAppendResult struct {
	Journal       string  `json:"journal"`
	Replication   int32   `json:"replication"`
	Writers       int     `json:"writers"`
	Size          int64   `json:"size"`
	Seconds       float64 `json:"seconds"`
	Appends       int64   `json:"appends"`
	Bytes         int64   `json:"bytes"`
	MBPerSecond   float64 `json:"mbPerSecond"`
	AppendsPerSec float64 `json:"appendsPerSecond"`
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	P999Ms        float64 `json:"p999Ms"`
}

// validateBenchFlags checks the flags that the bench commands that write
// share.
func validateBenchFlags(journal, output string, duration time.Duration, replication int32) error {
	if err := validateJournalFlag(journal); err != nil {
		return err
	}
	if err := checkOutput(output, "table", "json"); err != nil {
		return err
	}
	if duration <= 0 {
		return usagef("--duration %s: want a positive duration", duration)
	}
	if replication < protocol.MinReplication || replication > protocol.MaxReplication {
		return usagef("--replication %d: want %d to %d", replication, protocol.MinReplication, protocol.MaxReplication)
	}
	return nil
}

func (f *benchAppendFlags) validate() (size int64, err error) {
	if err := validateBenchFlags(f.journal, f.output, f.duration, f.replication); err != nil {
		return 0, err
	}
	if f.writers < 1 {
		return 0, usagef("--writers %d: want at least 1", f.writers)
	}
	if size, err = protocol.ParseSize(f.size); err != nil {
		return 0, usagef("--size: %w", err)
	}
	if size < 1 || size > maxAppendChunk {
		return 0, usagef("--size %s: want 1 byte to 64MiB", f.size)
	}
	return size, nil
}

func runBenchAppend(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, f benchAppendFlags) error {
	size, err := f.validate()
	if err != nil {
		return err
	}
	c, replication, err := connectBench(ctx, stderr, jf, f.journal, f.replication)
	if err != nil {
		return err
	}
	defer c.Close()
	payload := make([]byte, size)
	rand.Read(payload)
	// A first append, untimed, waits for the journal to have its brokers.
	if _, err := c.Append(ctx, client.AppendRequest{Journal: f.journal}, bytes.NewReader(payload)); err != nil {
		return fmt.Errorf("first append to %s: %w", f.journal, err)
	}
	ctx, stop := interruptible(ctx)
	defer stop()
	var appended atomic.Int64
	start := time.Now()
	done := startProgress(stderr, func() string {
		n, secs := appended.Load(), time.Since(start).Seconds()
		return fmt.Sprintf("bench append: %.0fs of %s; %d appends, %.1f MB/s", secs, f.duration, n, float64(n*size)/1e6/secs)
	})
	lat, elapsed, err := appendFor(ctx, c, f.journal, payload, f.writers, f.duration, &appended)
	done()
	if err != nil {
		return err
	}
	res := benchAppendResult{Journal: f.journal, Replication: replication, Writers: f.writers, Size: size,
		Seconds: elapsed.Seconds(), Appends: int64(len(lat)), Bytes: int64(len(lat)) * size}
	res.MBPerSecond = float64(res.Bytes) / 1e6 / res.Seconds
	res.AppendsPerSec = float64(res.Appends) / res.Seconds
	res.P50Ms, res.P99Ms, res.P999Ms = percentileMs(lat, 0.5), percentileMs(lat, 0.99), percentileMs(lat, 0.999)
	if f.output == "json" {
		return writeJSON(stdout, res)
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOURNAL\tR\tWRITERS\tSIZE\tSECONDS\tAPPENDS\tAPPENDS/S\tMB/S\tP50\tP99\tP99.9")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.1f\t%d\t%.0f\t%.1f\t%.2fms\t%.2fms\t%.2fms\n", res.Journal, res.Replication,
		res.Writers, protocol.FormatSize(size), res.Seconds, res.Appends, res.AppendsPerSec, res.MBPerSecond,
		res.P50Ms, res.P99Ms, res.P999Ms)
	return tw.Flush()
}

// connectBench connects to the brokers and makes sure the benchmark's
// journal exists (see ensureJournal).
func connectBench(ctx context.Context, stderr io.Writer, jf *journalsFlags, journal string, replication int32) (*client.Client, int32, error) {
	c, err := jf.connect(ctx)
	if err != nil {
		return nil, 0, err
	}
	r, err := ensureJournal(ctx, c, stderr, jf, journal, replication, protocol.Codec_CODEC_UNSPECIFIED)
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	return c, r, nil
}

// ensureJournal creates journal with replication and codec (the default
// codec if unspecified) if it does not exist, and returns its
// replication.
func ensureJournal(ctx context.Context, c *client.Client, stderr io.Writer, jf *journalsFlags, name string, replication int32, codec protocol.Codec) (int32, error) {
	js, err := jf.list(ctx, c, protocol.LabelName+"="+name)
	if err != nil {
		return 0, err
	}
	if len(js) == 1 {
		return js[0].GetSpec().GetReplication(), nil
	}
	spec := &protocol.JournalSpec{Name: name, Replication: replication, Fragment: &protocol.JournalSpec_Fragment{Codec: codec}}
	spec.ApplyDefaults()
	_, err = jf.apply(ctx, c, []change{{name: name, req: &protocol.ApplyRequest_Change{Upsert: spec}}})
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(stderr, "created journal %s, replication %d, codec %s\n", name, replication, strings.ToLower(codecText(spec.GetFragment().GetCodec())))
	return replication, nil
}

// appendFor runs writers that each append payload, one append after
// another, until d has passed, and returns every append's latency and the
// time they took. Appends in flight at the end complete and are counted;
// appended counts them as they complete.
func appendFor(ctx context.Context, c *client.Client, journal string, payload []byte, writers int, d time.Duration, appended *atomic.Int64) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	deadline := start.Add(d)
	lats := make([][]time.Duration, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				if _, err := c.Append(ctx, client.AppendRequest{Journal: journal}, bytes.NewReader(payload)); err != nil {
					cancel(fmt.Errorf("writer %d: append to %s: %w", w, journal, err))
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
				appended.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	return slices.Concat(lats...), elapsed, nil
}

// percentileMs is the p-th percentile of lat, in milliseconds, by the
// nearest-rank method. It sorts lat.
func percentileMs(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	if !slices.IsSorted(lat) {
		slices.Sort(lat)
	}
	i := int(math.Ceil(p*float64(len(lat)))) - 1
	return float64(lat[max(i, 0)]) / float64(time.Millisecond)
}

func writeJSON(w io.Writer, v any) error {
	b, err := formatJSON(v)
	if err == nil {
		_, err = w.Write(b)
	}
	return err
}

type benchReadFlags struct {
	journal, output string
	offset          int64
	throughBrokers  bool
}

func newBenchReadCommand(jf *journalsFlags) *cobra.Command {
	var f benchReadFlags
	cmd := &cobra.Command{
		Use:   "read [-j NAME] [--offset N] [--through-brokers]",
		Short: "Read a journal from an offset to its write head, and report throughput",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchRead(cmd.Context(), cmd.OutOrStdout(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "bench/append", "the journal to read")
	fl.Int64Var(&f.offset, "offset", 0, "offset to read from")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.BoolVar(&f.throughBrokers, "through-brokers", false, throughBrokersUsage)
	return cmd
}

// benchReadResult is what `bench read` reports.
type benchReadResult struct {
	Journal     string  `json:"journal"`
	Offset      int64   `json:"offset"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	MBPerSecond float64 `json:"mbPerSecond"`
}

func runBenchRead(ctx context.Context, stdout io.Writer, jf *journalsFlags, f benchReadFlags) error {
	if err := validateJournalFlag(f.journal); err != nil {
		return err
	}
	if err := checkOutput(f.output, "table", "json"); err != nil {
		return err
	}
	if f.offset < 0 {
		return usagef("--offset %d is negative", f.offset)
	}
	c, err := jf.connect(ctx, throughBrokers(f.throughBrokers))
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := jf.lookup(ctx, c, f.journal); err != nil {
		return err
	}
	ctx, stop := interruptible(ctx)
	defer stop()
	r := c.NewReader(ctx, client.ReadRequest{Journal: f.journal, Offset: f.offset, SkipGaps: true})
	defer r.Close()
	start := time.Now()
	n, err := io.Copy(io.Discard, r)
	elapsed := time.Since(start)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading %s: %w", f.journal, err)
	}
	res := benchReadResult{Journal: f.journal, Offset: f.offset, Bytes: n, Seconds: elapsed.Seconds(),
		MBPerSecond: float64(n) / 1e6 / elapsed.Seconds()}
	if f.output == "json" {
		return writeJSON(stdout, res)
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOURNAL\tOFFSET\tBYTES\tSECONDS\tMB/S")
	fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.1f\n", res.Journal, res.Offset, res.Bytes, res.Seconds, res.MBPerSecond)
	return tw.Flush()
}
