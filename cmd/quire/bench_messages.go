package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/cmd/quire/internal/benchpb"
	"github.com/quire-dev/quire/message"
)

type benchMessagesFlags struct {
	journal, output, framing string
	body, rate               int
	replication              int32
	duration                 time.Duration
}

func newBenchMessagesCommand(jf *journalsFlags) *cobra.Command {
	var f benchMessagesFlags
	cmd := &cobra.Command{
		Use:   "messages [-j NAME] [--framing json|proto] [--duration D] [--rate N] [--body BYTES] [--replication R]",
		Short: "Publish messages while a reader tails them, and report throughput and latency",
		Long: `Publish small messages (committed, one publisher) for --duration, at
--rate messages/s (0: as fast as the journal takes them), while a message
reader tails the journal, decoding and sequencing them as a consumer
would. Reports messages/s published and read, the framed size, and the
latency from publishing to reading (one message in 8 is timed; the
publisher and the reader run in this process, so on one clock).

--framing json publishes JSON lines; --framing proto, protobuf messages
with vtprotobuf's generated methods, the fastest framing (see
docs/messages.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchMessages(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "bench/messages", "the journal to publish to")
	fl.StringVar(&f.framing, "framing", "json", "framing of the messages: json or proto")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to publish")
	fl.IntVar(&f.rate, "rate", 0, "messages per second to publish; 0 for as many as the journal takes")
	fl.IntVar(&f.body, "body", 16, "bytes of each message's body (the framed message is about 90 bytes more)")
	fl.Int32Var(&f.replication, "replication", 1, "replication of the journal, if it is created")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	return cmd
}

// benchMessage is what `bench messages` publishes as JSON.
type benchMessage struct {
	UUID message.UUID `json:"uuid"`
	Seq  int64        `json:"seq"`  // -1 ends the run
	Sent int64        `json:"sent"` // Unix nanoseconds when published
	Body string       `json:"body"`
}

func (m *benchMessage) GetUUID() message.UUID                     { return m.UUID }
func (m *benchMessage) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *benchMessage) NewAcknowledgement(string) message.Message { return &benchMessage{} }
func (m *benchMessage) GetSeq() int64                             { return m.Seq }
func (m *benchMessage) GetSent() int64                            { return m.Sent }

// benchPayload is a message of `bench messages`, in either framing.
type benchPayload interface {
	message.Message
	GetSeq() int64  // -1 ends the run
	GetSent() int64 // Unix nanoseconds when published
}

// benchKind is a framing of `bench messages` and its message type.
type benchKind struct {
	framing message.Framing
	make    func(seq, sent int64, body string) benchPayload
}

func (k benchKind) new() message.Message { return k.make(0, 0, "") }

var benchKinds = map[string]benchKind{
	"json": {message.JSONLines, func(seq, sent int64, body string) benchPayload {
		return &benchMessage{Seq: seq, Sent: sent, Body: body}
	}},
	"proto": {message.Protobuf, func(seq, sent int64, body string) benchPayload {
		return &benchpb.Message{Seq: seq, Sent: sent, Body: body}
	}},
}

// benchMessagesResult is what `bench messages` reports.
type benchMessagesResult struct {
	Journal         string  `json:"journal"`
	Framing         string  `json:"framing"`
	Replication     int32   `json:"replication"`
	Seconds         float64 `json:"seconds"`
	Messages        int64   `json:"messages"`
	BytesPerMessage float64 `json:"bytesPerMessage"`
	PublishedPerSec float64 `json:"publishedPerSecond"`
	ReadPerSec      float64 `json:"readPerSecond"`
	P50Ms           float64 `json:"p50Ms"`
	P99Ms           float64 `json:"p99Ms"`
	P999Ms          float64 `json:"p999Ms"`
}

func (f *benchMessagesFlags) validate() error {
	if err := validateBenchFlags(f.journal, f.output, f.duration, f.replication); err != nil {
		return err
	}
	switch {
	case benchKinds[f.framing].framing == nil:
		return usagef("--framing %q: want json or proto", f.framing)
	case f.rate < 0:
		return usagef("--rate %d: want 0 (unlimited) or more", f.rate)
	case f.body < 0 || f.body > 1<<20:
		return usagef("--body %d: want 0 to 1048576 bytes", f.body)
	}
	return nil
}

func runBenchMessages(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, f benchMessagesFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	c, replication, err := connectBench(ctx, stderr, jf, f.journal, f.replication)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, stop := interruptible(ctx)
	defer stop()
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	defer appender.Close()
	kind := benchKinds[f.framing]
	p := message.NewPublisher(appender, kind.framing, message.NewProducerID(), message.NewClock(time.Now()))
	// A first message, untimed, waits for the journal to have its brokers;
	// the reader starts after it.
	begin, err := publishBench(ctx, p, f.journal, kind.make(0, 0, ""))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait() // After the reader is closed, below.
	r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: f.journal, Framing: kind.framing,
		Block: true, Checkpoint: message.Checkpoint{Offset: begin, Read: begin}, New: kind.new})
	if err != nil {
		return err
	}
	defer r.Close()
	read := make(chan benchRead, 1)
	wg.Go(func() { read <- tailBench(r) })

	start := time.Now()
	var sent atomic.Int64
	done := startProgress(stderr, func() string {
		secs := time.Since(start).Seconds()
		return fmt.Sprintf("bench messages: %.0fs of %s; %d published, %.0f/s", secs, f.duration, sent.Load(), float64(sent.Load())/secs)
	})
	n, end, err := publishFor(ctx, p, kind, f, &sent)
	done()
	if err != nil {
		return err
	}
	published := time.Since(start)
	got := <-read
	if got.err != nil {
		return fmt.Errorf("reading %s: %w", f.journal, got.err)
	}
	if got.n != n {
		return fmt.Errorf("read %d messages of %s, published %d", got.n, f.journal, n)
	}
	res := benchMessagesResult{Journal: f.journal, Framing: f.framing, Replication: replication, Seconds: published.Seconds(), Messages: n,
		BytesPerMessage: float64(end-begin) / float64(n+1), // The end marker too.
		PublishedPerSec: float64(n) / published.Seconds(), ReadPerSec: float64(n) / got.last.Sub(start).Seconds()}
	res.P50Ms, res.P99Ms, res.P999Ms = percentileMs(got.lat, 0.5), percentileMs(got.lat, 0.99), percentileMs(got.lat, 0.999)
	if f.output == "json" {
		return writeJSON(stdout, res)
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOURNAL\tFRAMING\tR\tSECONDS\tMESSAGES\tBYTES/MSG\tPUBLISHED/S\tREAD/S\tP50\tP99\tP99.9")
	fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%d\t%.0f\t%.0f\t%.0f\t%.2fms\t%.2fms\t%.2fms\n", res.Journal, res.Framing, res.Replication,
		res.Seconds, res.Messages, res.BytesPerMessage, res.PublishedPerSec, res.ReadPerSec, res.P50Ms, res.P99Ms, res.P999Ms)
	return tw.Flush()
}

// publishBench publishes m, waits for it to be appended, and returns the
// journal offset after it.
func publishBench(ctx context.Context, p *message.Publisher, journal string, m message.Message) (int64, error) {
	h, err := p.PublishCommitted(ctx, journal, m)
	if err != nil {
		return 0, fmt.Errorf("publishing to %s: %w", journal, err)
	}
	frag, err := h.Wait(ctx)
	if err != nil {
		return 0, fmt.Errorf("publishing to %s: %w", journal, err)
	}
	return frag.End, nil
}

// publishFor publishes messages 1, 2, … for f.duration, at f.rate, then
// an end marker, and returns how many it published (the marker aside)
// and the journal offset after the marker.
func publishFor(ctx context.Context, p *message.Publisher, kind benchKind, f benchMessagesFlags, sent *atomic.Int64) (int64, int64, error) {
	body := strings.Repeat("x", f.body)
	start := time.Now()
	deadline := start.Add(f.duration)
	var n int64
	for now := start; now.Before(deadline); now = time.Now() {
		if f.rate > 0 {
			due := start.Add(time.Duration(n) * time.Second / time.Duration(f.rate))
			if wait := due.Sub(now); wait > 0 {
				time.Sleep(wait) // Pacing the publisher, not synchronizing.
				continue
			}
		}
		n++
		if _, err := p.PublishCommitted(ctx, f.journal, kind.make(n, now.UnixNano(), body)); err != nil {
			return 0, 0, fmt.Errorf("publishing to %s: %w", f.journal, err)
		}
		sent.Store(n)
	}
	end, err := publishBench(ctx, p, f.journal, kind.make(-1, 0, ""))
	return n, end, err
}

// benchRead is what the reader of `bench messages` saw.
type benchRead struct {
	n    int64           // messages read, the end marker aside
	last time.Time       // when the last of them was read
	lat  []time.Duration // sampled latencies from publishing to reading
	err  error
}

// tailBench reads messages until the end marker.
func tailBench(r *message.Reader) benchRead {
	var out benchRead
	for {
		d, err := r.Next()
		if err != nil {
			out.err = err
			return out
		}
		m, ok := d.Message.(benchPayload)
		if !ok {
			out.err = fmt.Errorf("read a %T, not a message of bench messages", d.Message)
			return out
		}
		if m.GetSeq() < 0 {
			return out
		}
		out.n++
		out.last = time.Now()
		if out.n%8 == 0 {
			out.lat = append(out.lat, out.last.Sub(time.Unix(0, m.GetSent())))
		}
	}
}
