package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/protocol"
)

// maxAppendChunk is the most content one append of `journals append`
// carries: content is held in memory, so that a failed append is retried.
const maxAppendChunk = 64 << 20

// interruptible returns ctx, cancelled also by SIGINT or SIGTERM, so that a
// command stopped by Ctrl-C can say what it did.
func interruptible(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

// ---- append ----

type appendFlags struct {
	journal, framing, chunk string
	verbose                 bool
}

func newJournalsAppendCommand(jf *journalsFlags) *cobra.Command {
	var f appendFlags
	cmd := &cobra.Command{
		Use:   "append -j NAME [--framing none|lines] [-v]",
		Short: "Append standard input to a journal",
		Long: `Read standard input to its end and append it to the journal, byte for
byte. With --framing none (the default), the content is appended in
appends of up to --chunk bytes (64MiB at most), each acknowledged before
the next is sent. With --framing lines, each line (with its newline) is
its own record, appended in order, in batches. Each append, or line, is
retried as the client retries, and appended once: a retry of an append
whose answer was lost (its broker died just as it committed) is answered
with the range it committed at. A failure stops the command, and what was
acknowledged before it stays appended.

A summary goes to standard error; -v prints the range of every append, or
line, too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAppend(cmd.Context(), cmd.InOrStdin(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "", "the journal's name")
	fl.StringVar(&f.framing, "framing", "none", "none: content as is; lines: one record per line")
	fl.StringVar(&f.chunk, "chunk", "64MiB", "most bytes per append, with --framing none")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print every append's (or line's) committed range")
	return cmd
}

func (f *appendFlags) validate() (chunk int64, err error) {
	if err := validateJournalFlag(f.journal); err != nil {
		return 0, err
	}
	if f.framing != "none" && f.framing != "lines" {
		return 0, usagef("--framing %q: want none or lines", f.framing)
	}
	chunk, err = protocol.ParseSize(f.chunk)
	if err != nil {
		return 0, usagef("--chunk: %w", err)
	}
	if chunk < 1 || chunk > maxAppendChunk {
		return 0, usagef("--chunk %s: want 1 to 64MiB", f.chunk)
	}
	return chunk, nil
}

func validateJournalFlag(name string) error {
	if name == "" {
		return usagef("give the journal with -j NAME")
	}
	if err := protocol.ValidateJournalName(name); err != nil {
		return usagef("--journal: %w", err)
	}
	return nil
}

// appendStats is what an append command appended.
type appendStats struct {
	appends, bytes int64
	begin, end     int64
}

func (s *appendStats) add(commit *protocol.Fragment) {
	if s.appends == 0 {
		s.begin = commit.GetBegin()
	}
	s.appends++
	s.bytes += commit.GetEnd() - commit.GetBegin()
	s.end = commit.GetEnd()
}

func runAppend(ctx context.Context, stdin io.Reader, stderr io.Writer, jf *journalsFlags, f appendFlags) error {
	chunk, err := f.validate()
	if err != nil {
		return err
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := jf.lookup(ctx, c, f.journal); err != nil {
		return err
	}
	ctx, stop := interruptible(ctx)
	defer stop()
	var stats appendStats
	unit := "append"
	if f.framing == "lines" {
		unit = "line"
		err = appendLines(ctx, c, stdin, stderr, f, &stats)
	} else {
		err = appendChunks(ctx, c, stdin, stderr, f, chunk, &stats)
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted: %w", err)
	}
	switch {
	case stats.appends == 0 && err == nil:
		fmt.Fprintf(stderr, "standard input was empty: nothing appended to %s\n", f.journal)
	case stats.appends > 0:
		fmt.Fprintf(stderr, "appended %d bytes to %s in %d %s%s: [%d, %d)\n",
			stats.bytes, f.journal, stats.appends, unit, plural(stats.appends), stats.begin, stats.end)
	}
	return err
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// appendChunks appends stdin in appends of up to chunk bytes. Each chunk
// is held in memory, so the client can replay it for a retry.
func appendChunks(ctx context.Context, c *client.Client, stdin io.Reader, stderr io.Writer,
	f appendFlags, chunk int64, stats *appendStats) error {

	var buf bytes.Buffer
	for {
		buf.Reset()
		n, err := io.CopyN(&buf, stdin, chunk)
		if err != nil && err != io.EOF {
			return fmt.Errorf("reading standard input: %w", err)
		}
		if n == 0 {
			return nil
		}
		stop := stillWaiting(stderr, slowAppend, f.journal)
		commit, aerr := c.Append(ctx, client.AppendRequest{Journal: f.journal}, bytes.NewReader(buf.Bytes()))
		stop()
		if aerr != nil {
			return fmt.Errorf("appending %d bytes to %s after %d appended: %w", n, f.journal, stats.bytes, aerr)
		}
		stats.add(commit)
		if f.verbose {
			fmt.Fprintf(stderr, "appended [%d, %d) to %s\n", commit.GetBegin(), commit.GetEnd(), f.journal)
		}
		if err == io.EOF {
			return nil
		}
	}
}

// appendLines appends each line of stdin as a record of an Appender, which
// batches them and keeps their order. A goroutine waits for each record's
// outcome in order; the first failure stops the rest.
func appendLines(ctx context.Context, c *client.Client, stdin io.Reader, stderr io.Writer,
	f appendFlags, stats *appendStats) error {

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := c.NewAppender(ctx, client.AppenderConfig{})
	handles := make(chan *client.AppendHandle, 4096)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		for h := range handles {
			var commit *protocol.Fragment
			var err error
			select {
			case <-h.Done(): // Usually: no need to watch the clock.
				commit, err = h.Wait(ctx)
			default:
				stop := stillWaiting(stderr, slowAppend, f.journal)
				commit, err = h.Wait(ctx)
				stop()
			}
			if err != nil {
				cancel(fmt.Errorf("appending line %d to %s: %w", stats.appends+1, f.journal, err))
				continue // Drain: the rest fail with the context.
			}
			stats.add(commit)
			if f.verbose {
				fmt.Fprintf(stderr, "line %d: [%d, %d)\n", stats.appends, commit.GetBegin(), commit.GetEnd())
			}
		}
	}()
	readErr := readLines(ctx, stdin, func(line []byte) error {
		h, err := a.Append(ctx, f.journal, line)
		if err != nil {
			return err
		}
		handles <- h
		return nil
	})
	close(handles)
	a.Close()
	<-waited
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause // An append failed: that is the story.
	}
	if readErr != nil {
		return readErr
	}
	return context.Cause(ctx)
}

// readLines calls fn with each line of r, with its newline; the last line
// may have none. The line is valid only during the call (the Appender
// copies it), so that most lines are not allocated.
func readLines(ctx context.Context, r io.Reader, fn func([]byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var long []byte
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if long != nil {
			line, long = append(long, line...), nil
		}
		if len(line) > 0 {
			if ferr := fn(line); ferr != nil {
				if cerr := context.Cause(ctx); cerr != nil {
					return cerr
				}
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
	}
}

// slowAppend is how long an append takes before the command says that it
// is still waiting: the client retries, silently, while a journal lacks
// brokers (NO_PRIMARY, INSUFFICIENT_REPLICAS) or they are unreachable.
var slowAppend = 5 * time.Second

// stillWaiting prints a notice on w if the returned function is not
// called within d; the function returns once any notice is printed.
func stillWaiting(w io.Writer, d time.Duration, journal string) (stop func()) {
	printed := make(chan struct{})
	t := time.AfterFunc(d, func() {
		defer close(printed)
		fmt.Fprintf(w, "quire: still waiting for %s to accept the append after %s: is a broker serving it? (Ctrl-C gives up)\n",
			journal, d)
	})
	return func() {
		if !t.Stop() {
			<-printed
		}
	}
}

// ---- read ----

type readFlags struct {
	journal     string
	offset      int64
	block, tail bool
}

func newJournalsReadCommand(jf *journalsFlags) *cobra.Command {
	var f readFlags
	cmd := &cobra.Command{
		Use:   "read -j NAME [--offset N] [--block] [--tail]",
		Short: "Write a journal's content to standard output",
		Long: `Write the journal's content from --offset (default 0) to standard output,
byte for byte, until the write head; with --block, then wait for more
until interrupted (Ctrl-C). --tail starts at the write head and implies
--block: it writes only what is appended from now on. Content that is no
longer stored (removed by retention) is skipped, and the gap reported on
standard error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("offset") && f.tail {
				return usagef("--tail starts at the write head: give --offset or --tail, not both")
			}
			return runRead(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "", "the journal's name")
	fl.Int64Var(&f.offset, "offset", 0, "offset to read from; -1 is the write head")
	fl.BoolVar(&f.block, "block", false, "at the write head, wait for more content")
	fl.BoolVar(&f.tail, "tail", false, "read from the write head, and wait for more (--offset -1 --block)")
	return cmd
}

func runRead(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, f readFlags) error {
	if err := validateJournalFlag(f.journal); err != nil {
		return err
	}
	if f.tail {
		f.offset, f.block = -1, true
	}
	if f.offset < -1 {
		return usagef("--offset %d: want an offset, or -1 for the write head", f.offset)
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := jf.lookup(ctx, c, f.journal); err != nil {
		return err
	}
	ctx, stop := interruptible(ctx)
	defer stop()
	r := c.NewReader(ctx, client.ReadRequest{Journal: f.journal, Offset: f.offset, Block: f.block})
	defer r.Close()
	err = copyJournal(stdout, stderr, r)
	if ctx.Err() != nil {
		return nil // Interrupted: the normal end of a blocking read.
	}
	if head := r.WriteHead(); err == nil && !f.block && f.offset > head {
		// Not an error: a reader resuming at its last offset finds nothing
		// new. But an offset beyond every byte is worth a word.
		fmt.Fprintf(stderr, "quire: journal %s: --offset %d is past the write head, %d: nothing to read\n", f.journal, f.offset, head)
	}
	return err
}

// copyJournal copies r to w until io.EOF, reporting gaps on stderr.
func copyJournal(w, stderr io.Writer, r *client.Reader) error {
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("writing standard output: %w", werr)
			}
		}
		var jump *client.OffsetJumpError
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return nil
		case errors.As(err, &jump):
			fmt.Fprintf(stderr, "quire: journal %s: content [%d, %d) is no longer stored; skipped it\n",
				jump.Journal, jump.From, jump.To)
		default:
			return err
		}
	}
}

// ---- fragments ----

type fragmentsFlags struct {
	journal, output string
	signedURLs      time.Duration
}

func newJournalsFragmentsCommand(jf *journalsFlags) *cobra.Command {
	var f fragmentsFlags
	cmd := &cobra.Command{
		Use:   "fragments -j NAME [-o table|json] [--signed-urls TTL]",
		Short: "List a journal's fragments: where its content is stored",
		Long: `List the fragments of the journal, in offset order: each one's offsets,
length, codec, store and when it was persisted ('-' while it is only
spooled on brokers). --signed-urls adds URLs, valid for TTL, from which
each persisted fragment can be fetched directly.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFragments(cmd.Context(), cmd.OutOrStdout(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "", "the journal's name")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.DurationVar(&f.signedURLs, "signed-urls", 0, "include signed URLs valid this long, e.g. 15m")
	return cmd
}

func runFragments(ctx context.Context, stdout io.Writer, jf *journalsFlags, f fragmentsFlags) error {
	if err := validateJournalFlag(f.journal); err != nil {
		return err
	}
	if err := checkOutput(f.output, "table", "json"); err != nil {
		return err
	}
	if f.signedURLs < 0 {
		return usagef("--signed-urls %s is negative", f.signedURLs)
	}
	c, err := jf.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	req := &protocol.FragmentsRequest{Journal: f.journal}
	if f.signedURLs > 0 {
		req.SignatureTtl = durationpb.New(f.signedURLs)
	}
	lctx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	infos, err := c.ListFragments(lctx, req)
	if err != nil {
		return jf.brokerError("listing fragments of "+f.journal, err)
	}
	var out []byte
	if f.output == "json" {
		out, err = fragmentsJSON(infos)
	} else {
		out = fragmentsTable(infos, f.signedURLs > 0)
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// The JSON form of `journals fragments -o json`.
type (
	fragmentsListJSON struct {
		Fragments []fragmentJSON `json:"fragments"`
	}
	fragmentJSON struct {
		Journal string `json:"journal"`
		Begin   int64  `json:"begin"`
		End     int64  `json:"end"`
		Sum     string `json:"sum"` // SHA-256 of the content, hex
		Codec   string `json:"codec"`
		Store   string `json:"store,omitempty"`   // absent while only spooled
		ModTime string `json:"modTime,omitempty"` // RFC 3339, when persisted
		URL     string `json:"signedUrl,omitempty"`
	}
)

func fragmentsJSON(infos []*protocol.FragmentsResponse_Info) ([]byte, error) {
	out := fragmentsListJSON{Fragments: []fragmentJSON{}}
	for _, info := range infos {
		fr := info.GetFragment()
		j := fragmentJSON{Journal: fr.GetJournal(), Begin: fr.GetBegin(), End: fr.GetEnd(), Sum: hex.EncodeToString(fr.GetSum()),
			Codec: codecText(fr.GetCodec()), Store: fr.GetStore(), URL: info.GetSignedUrl()}
		if fr.GetModTime() != 0 {
			j.ModTime = time.Unix(fr.GetModTime(), 0).UTC().Format(time.RFC3339)
		}
		out.Fragments = append(out.Fragments, j)
	}
	return formatJSON(out)
}

func fragmentsTable(infos []*protocol.FragmentsResponse_Info, withURLs bool) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	header := "BEGIN\tEND\tLENGTH\tCODEC\tPERSISTED\tSTORE"
	if withURLs {
		header += "\tURL"
	}
	fmt.Fprintln(tw, header)
	for _, info := range infos {
		fr := info.GetFragment()
		persisted := "-"
		if fr.GetModTime() != 0 {
			persisted = time.Unix(fr.GetModTime(), 0).UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s", fr.GetBegin(), fr.GetEnd(), fr.GetEnd()-fr.GetBegin(),
			codecText(fr.GetCodec()), persisted, orDash(fr.GetStore()))
		if withURLs {
			fmt.Fprintf(tw, "\t%s", orDash(info.GetSignedUrl()))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	return b.Bytes()
}

func codecText(c protocol.Codec) string {
	if c == protocol.Codec_CODEC_UNSPECIFIED {
		return "-"
	}
	s := c.String()
	if len(s) > len("CODEC_") {
		s = s[len("CODEC_"):]
	}
	return s
}
