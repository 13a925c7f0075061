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
	"sort"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

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
	journal, framing, chunk     string
	selector, mapping, keyField string
	mappingGiven                bool
	verbose                     bool
}

func newJournalsAppendCommand(jf *journalsFlags) *cobra.Command {
	var f appendFlags
	cmd := &cobra.Command{
		Use:   "append (NAME | -l SELECTOR --framing lines [--mapping hash|field] [--key-field F]) [--framing none|lines] [-v]",
		Short: "Append standard input to a journal, or its lines to several",
		Long: `Read standard input to its end and append it to the journal, byte for
byte. With --framing none (the default), the content is appended in
appends of up to --chunk bytes (64MiB at most), each acknowledged before
the next is sent. With --framing lines, each line (with its newline) is
its own record, appended in order, in batches. Each append, or line, is
retried as the client retries, and appended once: a retry of an append
whose answer was lost (its broker died just as it committed) is answered
with the range it committed at. A failure stops the command, and what was
acknowledged before it stays appended.

With -l SELECTOR (and --framing lines), each line goes to one of the
selected journals, chosen by --mapping:

  hash   (the default) FNV-1a, 32 bits, of the record's key, modulo the
         number of selected journals, which are sorted by name: the
         journal at that index. The key is the value of the top-level
         JSON field --key-field (a string's text; any other value's JSON
         as written), or without --key-field the whole line without its
         newline. Records of one key go to one journal, in order, as long
         as the selected journals stay the same.
  field  the journal named by the string field --key-field of each
         record, which must be one of the selected journals.

A line that maps to no journal (not JSON, lacking the field, naming a
journal not selected) stops the command with exit 1: the lines before it
are appended, none from it on. Each journal's lines keep their order.

A summary goes to standard error (a line per journal); -v prints the
range of every append, or line, too.`,
		Args: nameArg("journal", &f.journal),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.mappingGiven = cmd.Flags().Changed("mapping") || cmd.Flags().Changed("key-field")
			return runAppend(cmd.Context(), cmd.InOrStdin(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "", "the journal's name (or give it as the argument)")
	fl.StringVarP(&f.selector, "selector", "l", "", "append each line to one of the journals of this label selector (see --mapping)")
	fl.StringVar(&f.framing, "framing", "none", "none: content as is; lines: one record per line")
	fl.StringVar(&f.chunk, "chunk", "64MiB", "most bytes per append, with --framing none")
	fl.StringVar(&f.mapping, "mapping", "hash", "with -l: hash (of --key-field, or the line) or field (--key-field names the journal)")
	fl.StringVar(&f.keyField, "key-field", "", "with -l: the top-level JSON field of each record that --mapping uses")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "print every append's (or line's) committed range")
	return cmd
}

func (f *appendFlags) validate() (chunk int64, err error) {
	if err := journalOrSelector(f.journal, f.selector); err != nil {
		return 0, err
	}
	if f.framing != "none" && f.framing != "lines" {
		return 0, usagef("--framing %q: want none or lines", f.framing)
	}
	switch {
	case f.selector == "" && f.mappingGiven:
		return 0, usagef("--mapping and --key-field choose among the journals of -l SELECTOR: give -l")
	case f.selector != "" && f.framing != "lines":
		return 0, usagef("-l appends records, one a line, to several journals: give --framing lines")
	case f.selector != "" && f.mapping != "hash" && f.mapping != "field":
		return 0, usagef("--mapping %q: want hash or field", f.mapping)
	case f.mapping == "field" && f.keyField == "":
		return 0, usagef("--mapping field: give --key-field NAME, the JSON field that names each record's journal")
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

// appendStats is what an append command appended to a journal.
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
	names, err := jf.selectedJournals(ctx, c, f.journal, f.selector)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("no journals match %q, so nothing was appended", f.selector)
	}
	pick := func([]byte) (string, error) { return f.journal, nil }
	if f.selector != "" {
		pick = newRecordMapper(f.mapping, f.keyField, names).journalOf
	}
	ctx, stop := interruptible(ctx)
	defer stop()
	var tally appendTally
	unit := "append"
	if f.framing == "lines" {
		unit = "line"
		err = appendLines(ctx, c, stdin, stderr, f.verbose, f.selector != "", pick, &tally)
	} else {
		err = appendChunks(ctx, c, stdin, stderr, f, chunk, tally.of(f.journal))
	}
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("interrupted: %w", err)
	}
	var appended []string
	for j, s := range tally.byJournal {
		if s.appends > 0 {
			appended = append(appended, j)
		}
	}
	sort.Strings(appended)
	if len(appended) == 0 && err == nil {
		what := f.journal
		if f.selector != "" {
			what = fmt.Sprintf("the journals of %q", f.selector)
		}
		fmt.Fprintf(stderr, "standard input was empty: nothing appended to %s\n", what)
	}
	for _, j := range appended {
		s := tally.byJournal[j]
		fmt.Fprintf(stderr, "appended %d bytes to %s in %d %s%s: [%d, %d)\n",
			s.bytes, j, s.appends, unit, plural(s.appends), s.begin, s.end)
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

// lineHandle is a line given to the Appender, awaiting its outcome.
type lineHandle struct {
	h       *client.AppendHandle
	journal string
	line    int64
}

// appendLines appends each line of stdin as a record of an Appender, to
// the journal pick chooses; the Appender batches each journal's records
// and keeps their order, and appends them idempotently (the client's
// writer name and sequence numbers). A goroutine, waited for here, waits
// for each record's outcome in order; the first failure stops the rest.
func appendLines(ctx context.Context, c *client.Client, stdin io.Reader, stderr io.Writer,
	verbose, multi bool, pick func([]byte) (string, error), tally *appendTally) error {

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := c.NewAppender(ctx, client.AppenderConfig{})
	handles := make(chan lineHandle, 4096)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		for lh := range handles {
			var commit *protocol.Fragment
			var err error
			select {
			case <-lh.h.Done(): // Usually: no need to watch the clock.
				commit, err = lh.h.Wait(ctx)
			default:
				stop := stillWaiting(stderr, slowAppend, lh.journal)
				commit, err = lh.h.Wait(ctx)
				stop()
			}
			if err != nil {
				cancel(fmt.Errorf("appending line %d to %s: %w", lh.line, lh.journal, err))
				continue // Drain: the rest fail with the context.
			}
			tally.of(lh.journal).add(commit)
			switch {
			case verbose && multi:
				fmt.Fprintf(stderr, "line %d: %s [%d, %d)\n", lh.line, lh.journal, commit.GetBegin(), commit.GetEnd())
			case verbose:
				fmt.Fprintf(stderr, "line %d: [%d, %d)\n", lh.line, commit.GetBegin(), commit.GetEnd())
			}
		}
	}()
	var line int64
	readErr := readLines(ctx, stdin, func(rec []byte) error {
		line++
		journal, err := pick(rec)
		if err != nil {
			return fmt.Errorf("line %d: %w (the lines before it are appended, none from it on)", line, err)
		}
		h, err := a.Append(ctx, journal, rec)
		if err != nil {
			return err
		}
		handles <- lineHandle{h: h, journal: journal, line: line}
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
	journal        string
	offset         int64
	block, tail    bool
	throughBrokers bool

	selector, framing, offsets, offsetsOut, from string
}

func newJournalsReadCommand(jf *journalsFlags) *cobra.Command {
	var f readFlags
	cmd := &cobra.Command{
		Use:   "read (NAME | -l SELECTOR) [--offset N] [--block] [--tail] [--framing none|lines] [--offsets FILE] [--offsets-out FILE] [--from TIME] [--through-brokers]",
		Short: "Write journals' content to standard output",
		Long: `Write the journal's content from --offset (default 0) to standard output,
byte for byte, until the write head; with --block, then wait for more
until interrupted (Ctrl-C). --tail starts at the write head and implies
--block: it writes only what is appended from now on. Content that is no
longer stored (removed by retention) is skipped, and the gap reported on
standard error.

-l SELECTOR reads every journal it selects when the command starts
(journals created later are not read, even with --tail: run the command
again), all at once. Each journal's content is written in pieces of one
journal each, in the journal's order: with --framing lines, pieces of
whole lines, so that no line of one journal is cut by another's; with
--framing none (the default), pieces as read, which may cut records.
With --framing lines, a last line with no newline yet at the end of a
non-blocking read is not written (said so on standard error).

--offsets FILE starts each journal it names at its offset there: a JSON
object, {"a/b": 120, "a/c": 0}. Other journals start at --from, or at the
write head with --tail, else at 0. --offsets-out FILE writes, when the
read ends (at the write heads, without --block; on Ctrl-C; or on an
error), the offset through which each journal's output was written, in
the same form (atomically: a temporary file renamed), with the journals
of --offsets that were not read carried through. Rerunning with
--offsets of that file resumes each journal exactly: no byte (or line)
written twice, none skipped.

--from TIME (RFC 3339, 2025-05-01T12:00:00Z, or a duration before now,
90m) starts each journal at its first fragment, in offset order,
persisted at or after TIME, to the second, or not yet persisted (so
after every persisted one). It is fragment-granular: the output may begin with
content written somewhat before TIME (a fragment holds what was appended
over up to its flush interval or length).

Content persisted to the fragment stores is read from the stores directly
(the brokers say where: a signed URL of an object store, the path of a
file store), and content not yet persisted through the brokers; a
fragment that cannot be fetched (its store out of reach, a file store
not mounted here) is read through the brokers instead.
--through-brokers reads everything through the brokers.`,
		Args: nameArg("journal", &f.journal),
		RunE: func(cmd *cobra.Command, args []string) error {
			offsetGiven := cmd.Flags().Changed("offset")
			if offsetGiven && f.tail {
				return usagef("--tail starts at the write head: give --offset or --tail, not both")
			}
			if f.multiRead() {
				return runReadMulti(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, f, offsetGiven)
			}
			return runRead(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "", "the journal's name (or give it as the argument)")
	fl.StringVarP(&f.selector, "selector", "l", "", "read every journal of this label selector")
	fl.Int64Var(&f.offset, "offset", 0, "offset to read from; -1 is the write head")
	fl.BoolVar(&f.block, "block", false, "at the write head, wait for more content")
	fl.BoolVar(&f.tail, "tail", false, "read from the write head, and wait for more (--offset -1 --block)")
	fl.StringVar(&f.framing, "framing", "none", "none: content as read; lines: whole lines only")
	fl.StringVar(&f.offsets, "offsets", "", `JSON file of offsets to start journals at, {"JOURNAL": OFFSET}`)
	fl.StringVar(&f.offsetsOut, "offsets-out", "", "write the offsets through which output was written to this file at the end")
	fl.StringVar(&f.from, "from", "", "start at the first fragment persisted at or after this time (RFC 3339, or a duration ago: 1h)")
	fl.BoolVar(&f.throughBrokers, "through-brokers", false, throughBrokersUsage)
	return cmd
}

func runRead(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, f readFlags) error {
	if err := journalOrSelector(f.journal, f.selector); err != nil {
		return err
	}
	if f.tail {
		f.offset, f.block = -1, true
	}
	if f.offset < -1 {
		return usagef("--offset %d: want an offset, or -1 for the write head", f.offset)
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
	journal, selector, output string
	from, to                  string
	signedURLs                time.Duration
}

func newJournalsFragmentsCommand(jf *journalsFlags) *cobra.Command {
	var f fragmentsFlags
	cmd := &cobra.Command{
		Use:   "fragments (NAME | -l SELECTOR) [--from TIME] [--to TIME] [-o table|json] [--signed-urls TTL]",
		Short: "List journals' fragments: where their content is stored",
		Long: `List the fragments of the journal, or of each journal of -l SELECTOR (by
name), in offset order: each one's offsets, length, codec, store and when
it was persisted ('-' while it is only spooled on brokers; the last is
the spool being written, through the write head). With -l, the
table begins with a JOURNAL column (-o json names the journal of every
fragment anyway). --from and --to (RFC 3339, or a duration before now:
2h) list only fragments persisted at or after --from and before --to, to
the second; spooled fragments are then not listed. --signed-urls adds
URLs, valid for TTL, from which each persisted fragment can be fetched
directly.`,
		Args: nameArg("journal", &f.journal),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFragmentsMulti(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.journal, "journal", "j", "", "the journal's name (or give it as the argument)")
	fl.StringVarP(&f.selector, "selector", "l", "", "list the fragments of every journal of this label selector")
	fl.StringVar(&f.from, "from", "", "only fragments persisted at or after this time (RFC 3339, or a duration ago: 1h)")
	fl.StringVar(&f.to, "to", "", "only fragments persisted before this time (RFC 3339, or a duration ago)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.DurationVar(&f.signedURLs, "signed-urls", 0, "include signed URLs valid this long, e.g. 15m")
	return cmd
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

// fragmentsTable is the table of fragments, with a JOURNAL column first
// if withJournal.
func fragmentsTable(infos []*protocol.FragmentsResponse_Info, withURLs, withJournal bool) []byte {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	header := "BEGIN\tEND\tLENGTH\tCODEC\tPERSISTED\tSTORE"
	if withJournal {
		header = "JOURNAL\t" + header
	}
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
		if withJournal {
			fmt.Fprintf(tw, "%s\t", fr.GetJournal())
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
