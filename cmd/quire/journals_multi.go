package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

// The commands over several journals: read, fragments and append with -l
// SELECTOR, and prune.

// lockedWriter serializes writes to w: the readers of several journals
// report gaps on one standard error.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// journalOrSelector checks that exactly one of -j and -l is given.
func journalOrSelector(journal, selector string) error {
	switch {
	case journal != "" && selector != "":
		return usagef("give -j NAME or -l SELECTOR, not both")
	case selector != "":
		return parseSelectorFlag("--selector", selector)
	case journal == "":
		return usagef("give the journal, by name (NAME or -j NAME), or journals with -l SELECTOR")
	}
	return validateJournalFlag(journal)
}

// selectedJournals is the names, sorted, of the journals of -l selector,
// or of -j journal (checked to exist).
func (jf *journalsFlags) selectedJournals(ctx context.Context, c *client.Client, journal, selector string) ([]string, error) {
	if selector == "" {
		if _, err := jf.lookup(ctx, c, journal); err != nil {
			return nil, err
		}
		return []string{journal}, nil
	}
	js, err := jf.list(ctx, c, selector)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, j := range js {
		names = append(names, j.GetSpec().GetName())
	}
	sort.Strings(names)
	return names, nil
}

// ---- read over journals ----

// multiRead reports whether read takes the path of several journals and
// records, which also serves -j with the flags that only it knows.
func (f *readFlags) multiRead() bool {
	return f.selector != "" || f.offsets != "" || f.offsetsOut != "" || f.from != "" || f.framing == "lines"
}

func (f *readFlags) validateMulti(offsetGiven bool) (from time.Time, err error) {
	if err := journalOrSelector(f.journal, f.selector); err != nil {
		return time.Time{}, err
	}
	if f.framing != "none" && f.framing != "lines" {
		return time.Time{}, usagef("--framing %q: want none or lines", f.framing)
	}
	if offsetGiven && (f.selector != "" || f.offsets != "" || f.from != "") {
		return time.Time{}, usagef("--offset starts one journal: with -l, --offsets or --from, give starting offsets in --offsets FILE")
	}
	if f.offset < -1 {
		return time.Time{}, usagef("--offset %d: want an offset, or -1 for the write head", f.offset)
	}
	if f.from != "" {
		if f.tail {
			return time.Time{}, usagef("--tail starts at the write head: give --from or --tail, not both")
		}
		if from, err = parseTimeFlag("--from", f.from, time.Now()); err != nil {
			return time.Time{}, usageError{err}
		}
	}
	if f.offsetsOut != "" {
		// Found out now, rather than after a long read.
		if st, err := os.Stat(filepath.Dir(f.offsetsOut)); err != nil || !st.IsDir() {
			return time.Time{}, usagef("--offsets-out %s: its directory does not exist", f.offsetsOut)
		}
	}
	return from, nil
}

// piece is content of one journal read, ending at end: whole lines with
// --framing lines. Pieces are written whole, so a journal's records are
// never cut by another's.
type piece struct {
	journal string
	data    []byte
	end     int64
}

func runReadMulti(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, f readFlags, offsetGiven bool) error {
	from, err := f.validateMulti(offsetGiven)
	if err != nil {
		return err
	}
	start := map[string]int64{}
	if f.offsets != "" {
		if start, err = readOffsetsFile(f.offsets); err != nil {
			return err
		}
	}
	block := f.block || f.tail
	c, err := jf.connect(ctx, throughBrokers(f.throughBrokers))
	if err != nil {
		return err
	}
	defer c.Close()
	names, err := jf.selectedJournals(ctx, c, f.journal, f.selector)
	if err != nil {
		return err
	}
	if len(names) == 0 { // The listing is empty, in its format; say why.
		fmt.Fprintf(stderr, "quire: no journals match %q\n", f.selector)
	}
	if len(names) == 0 {
		fmt.Fprintf(stderr, "quire: no journals match %q: nothing to read\n", f.selector)
	}
	ctx, stop := interruptible(ctx)
	defer stop()

	// Offsets through which output is written: those of --offsets, so
	// that journals not selected now are carried through, then each
	// selected journal's start, advanced as its pieces are written.
	written := make(map[string]int64, len(start)+len(names))
	for n, off := range start {
		written[n] = off
	}
	for _, n := range names {
		off, err := f.startOffset(ctx, c, jf, n, start, from, offsetGiven)
		if err != nil {
			if ctx.Err() != nil {
				return nil // Interrupted before reading: nothing written.
			}
			return err
		}
		written[n] = off
	}

	err = readPieces(ctx, stdout, &lockedWriter{w: stderr}, c, names, written, block, f.framing == "lines")
	if f.offsetsOut != "" {
		if werr := writeFileAtomic(f.offsetsOut, formatOffsets(written)); werr != nil {
			err = errors.Join(err, fmt.Errorf("--offsets-out: %w", werr))
		}
	}
	return err
}

// startOffset is where journal's read starts: its offset in --offsets,
// else the first fragment persisted at or after --from, else the write
// head with --tail, else --offset (of -j), else 0. A start at the write
// head is resolved now, so that --offsets-out always holds an offset.
func (f *readFlags) startOffset(ctx context.Context, c *client.Client, jf *journalsFlags, journal string,
	start map[string]int64, from time.Time, offsetGiven bool) (int64, error) {

	if off, ok := start[journal]; ok {
		return off, nil
	}
	lctx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	switch {
	case !from.IsZero():
		return fromOffset(lctx, c, jf, journal, from)
	case f.tail || (offsetGiven && f.offset == -1):
		head, err := c.WriteHead(lctx, journal)
		if err != nil {
			return 0, jf.brokerError("finding the write head of "+journal, err)
		}
		return head, nil
	case offsetGiven:
		return f.offset, nil
	}
	return 0, nil
}

// fromOffset is the begin of journal's first fragment, in offset order,
// persisted at or after from (to the second, as fragments' times are
// listed), or spooled and not yet persisted (so persisted later still);
// else the end of its last fragment, where content not yet persisted,
// and so persisted after every listed fragment, begins.
func fromOffset(ctx context.Context, c *client.Client, jf *journalsFlags, journal string, from time.Time) (int64, error) {
	infos, err := c.ListFragments(ctx, &protocol.FragmentsRequest{Journal: journal})
	if err != nil {
		return 0, jf.brokerError("listing fragments of "+journal+" for --from", err)
	}
	var end int64
	for _, info := range infos {
		fr := info.GetFragment()
		if fr.GetModTime() == 0 || fr.GetModTime() >= from.Unix() {
			return fr.GetBegin(), nil
		}
		end = max(end, fr.GetEnd())
	}
	return end, nil
}

// readPieces reads each journal from written[journal] (a reader each) and
// writes their pieces to stdout from this goroutine alone, advancing
// written[journal] as each is written. It returns at the end of every
// journal (without block), at the first error, or once ctx is done; an
// interrupt writes no piece more, so written stays exact.
func readPieces(ctx context.Context, stdout, stderr io.Writer, c *client.Client, names []string,
	written map[string]int64, block, lines bool) error {

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pieces := make(chan piece, 16)
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		readErr error
	)
	for _, name := range names {
		// Taken here: once a piece arrives, this goroutine alone uses written.
		start := written[name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := readJournal(rctx, stderr, c, name, start, block, lines, pieces)
			if err != nil {
				errMu.Lock()
				readErr = firstErr(readErr, err)
				errMu.Unlock()
				cancel() // One journal failing ends the read, as it would of one.
			}
		}()
	}
	// This goroutine closes pieces once every reader is done; the loop
	// below ends only then, so nothing outlives this call.
	go func() {
		wg.Wait()
		close(pieces)
	}()
	var writeErr error
	for p := range pieces {
		if writeErr != nil || rctx.Err() != nil {
			continue // Drain: the readers are stopping.
		}
		if _, err := stdout.Write(p.data); err != nil {
			writeErr = fmt.Errorf("writing standard output: %w", err)
			cancel()
			continue
		}
		written[p.journal] = p.end
	}
	return firstErr(writeErr, readErr)
}

// firstErr is the first error that is not nil.
func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// readJournal reads journal from offset, sending its content as pieces:
// each Read's bytes, or with lines, the whole lines read so far. A last
// line without its newline at the end of a non-blocking read is not sent
// (nor counted as written), and said so on stderr.
func readJournal(ctx context.Context, stderr io.Writer, c *client.Client, journal string, offset int64,
	block, lines bool, out chan<- piece) error {

	r := c.NewReader(ctx, client.ReadRequest{Journal: journal, Offset: offset, Block: block})
	defer r.Close()
	buf := make([]byte, 256<<10)
	var partial []byte // After the last newline read, with lines.
	send := func(data []byte, end int64) bool {
		select {
		case out <- piece{journal: journal, data: data, end: end}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		n, err := r.Read(buf)
		if n > 0 {
			data := buf[:n]
			if !lines {
				if !send(bytes.Clone(data), r.Offset()) {
					return nil
				}
			} else if i := bytes.LastIndexByte(data, '\n'); i < 0 {
				partial = append(partial, data...)
			} else {
				whole := append(append(make([]byte, 0, len(partial)+i+1), partial...), data[:i+1]...)
				partial = append(partial[:0], data[i+1:]...)
				if !send(whole, r.Offset()-int64(len(partial))) {
					return nil
				}
			}
		}
		var jump *client.OffsetJumpError
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			if len(partial) > 0 {
				fmt.Fprintf(stderr, "quire: journal %s: %d bytes at offset %d end with no newline: not written (an incomplete line; --offsets-out resumes before them)\n",
					journal, len(partial), r.Offset()-int64(len(partial)))
			}
			if head := r.WriteHead(); offset > head {
				fmt.Fprintf(stderr, "quire: journal %s: offset %d is past the write head, %d: nothing to read\n", journal, offset, head)
			}
			return nil
		case errors.As(err, &jump):
			if len(partial) > 0 {
				fmt.Fprintf(stderr, "quire: journal %s: the line begun at offset %d was cut by the gap below; dropped its %d bytes\n",
					journal, jump.From-int64(len(partial)), len(partial))
				partial = partial[:0]
			}
			fmt.Fprintf(stderr, "quire: journal %s: content [%d, %d) is no longer stored; skipped it\n",
				jump.Journal, jump.From, jump.To)
		case ctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("reading journal %s at offset %d: %w", journal, r.Offset(), err)
		}
	}
}

// ---- fragments over journals ----

func runFragmentsMulti(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, f fragmentsFlags) error {
	if err := journalOrSelector(f.journal, f.selector); err != nil {
		return err
	}
	if err := checkOutput(f.output, "table", "json"); err != nil {
		return err
	}
	if f.signedURLs < 0 {
		return usagef("--signed-urls %s is negative", f.signedURLs)
	}
	now := time.Now()
	var begin, end int64
	if f.from != "" {
		t, err := parseTimeFlag("--from", f.from, now)
		if err != nil {
			return usageError{err}
		}
		begin = max(t.Unix(), 0) // Zero: unbounded, as is any time before 1970.
	}
	if f.to != "" {
		t, err := parseTimeFlag("--to", f.to, now)
		if err != nil {
			return usageError{err}
		}
		if end = t.Unix(); end <= 0 {
			return usagef("--to %q: want a time after 1970-01-01", f.to)
		}
		if begin != 0 && end <= begin {
			return usagef("--to %q is not after --from %q", f.to, f.from)
		}
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
	if len(names) == 0 { // The listing is empty, in its format; say why.
		fmt.Fprintf(stderr, "quire: no journals match %q\n", f.selector)
	}
	var infos []*protocol.FragmentsResponse_Info
	for _, name := range names {
		req := &protocol.FragmentsRequest{Journal: name, BeginModTime: begin, EndModTime: end}
		if f.signedURLs > 0 {
			req.SignatureTtl = durationpb.New(f.signedURLs)
		}
		lctx, cancel := context.WithTimeout(ctx, jf.timeout)
		got, err := c.ListFragments(lctx, req)
		cancel()
		if err != nil {
			return jf.brokerError("listing fragments of "+name, err)
		}
		infos = append(infos, got...)
	}
	var out []byte
	if f.output == "json" {
		out, err = fragmentsJSON(infos)
	} else {
		out = fragmentsTable(infos, f.signedURLs > 0, f.selector != "")
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// ---- append over journals ----

// appendTally is what an append command appended, per journal.
type appendTally struct {
	lines     int64
	byJournal map[string]*appendStats
}

func (t *appendTally) of(journal string) *appendStats {
	if t.byJournal == nil {
		t.byJournal = make(map[string]*appendStats)
	}
	s := t.byJournal[journal]
	if s == nil {
		s = &appendStats{}
		t.byJournal[journal] = s
	}
	return s
}

// ---- prune ----

func newJournalsPruneCommand(jf *journalsFlags) *cobra.Command {
	var selector string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune [-l SELECTOR] [--dry-run]",
		Short: "Remove fragments older than their journal's retention, now",
		Long: `Remove from the stores the fragments of the selected journals (all,
without -l) persisted longer ago than their journal's fragment.retention,
as brokers do at each refresh (fragment.refreshInterval), but now. It
prints each fragment removed (or, with --dry-run, that would be, and
removes nothing). A journal without retention is skipped, with a note on
standard error: its fragments are never removed.

The stores are those in which brokers list the journal's fragments, and
those of its spec; they are opened with this command's own credentials
(for S3: AWS_ACCESS_KEY_ID and the rest, as brokers'), and the age of each
fragment is its store's modification time, which brokers' listings copy
at their last refresh. A file:// store is pruned where this command runs:
run it where the brokers' store directory is. Brokers forget a removed
fragment at their next refresh; reads of it meanwhile jump over it, as
over any removed content.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPrune(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), jf, selector, dryRun)
		},
	}
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the journals to prune (all, without it)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be removed, and remove nothing")
	return cmd
}

func runPrune(ctx context.Context, stdout, stderr io.Writer, jf *journalsFlags, selector string, dryRun bool) error {
	if selector != "" {
		if err := parseSelectorFlag("--selector", selector); err != nil {
			return err
		}
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
	ctx, stop := interruptible(ctx)
	defer stop()
	stores := make(map[string]fragment.Store)
	openStore := func(url string) (fragment.Store, error) {
		if s, ok := stores[url]; ok {
			return s, nil
		}
		s, err := fragment.Open(ctx, url)
		if err != nil {
			return nil, fmt.Errorf("opening store %s: %w", url, err)
		}
		stores[url] = s
		return s, nil
	}
	now := time.Now()
	var failed int
	fail := func(err error) {
		failed++
		fmt.Fprintf(stderr, "quire: %v\n", err)
	}
	for _, j := range js {
		spec := j.GetSpec()
		name := spec.GetName()
		retention := spec.GetFragment().GetRetention().AsDuration()
		if retention <= 0 {
			fmt.Fprintf(stderr, "%s: no fragment.retention: skipped\n", name)
			continue
		}
		cutoff := now.Add(-retention)
		urls, err := jf.storesOfJournal(ctx, c, spec)
		if err != nil {
			fail(err)
			continue
		}
		for _, url := range urls {
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted: %w", ctx.Err())
			}
			store, err := openStore(url)
			if err != nil {
				fail(fmt.Errorf("journal %s: %w", name, err))
				continue
			}
			var old []fragment.Fragment
			err = store.List(ctx, name, func(fr fragment.Fragment) error {
				// As brokers judge: persisted no later than the cutoff.
				if !fr.ModTime.IsZero() && !fr.ModTime.After(cutoff) {
					old = append(old, fr)
				}
				return nil
			})
			if err != nil {
				fail(fmt.Errorf("journal %s: listing store %s: %w", name, url, err))
				continue
			}
			slices.SortFunc(old, func(a, b fragment.Fragment) int { return cmp.Compare(a.Begin, b.Begin) })
			for _, fr := range old {
				verb := "would be removed"
				if !dryRun {
					if err := store.Remove(ctx, fr); err != nil {
						fail(fmt.Errorf("journal %s: %w", name, err))
						continue
					}
					verb = "removed"
				}
				fmt.Fprintf(stdout, "%s [%d, %d) persisted %s in %s: %s\n", name, fr.Begin, fr.End,
					fr.ModTime.UTC().Format(time.RFC3339), url, verb)
			}
		}
	}
	if dryRun {
		fmt.Fprintln(stdout, "dry run: nothing was removed")
	}
	if failed > 0 {
		return fmt.Errorf("prune: %d failures (above); the fragments listed were removed", failed)
	}
	return nil
}

// storesOfJournal is the stores that hold the journal's fragments: those
// in which its brokers list them (the brokers' default store, which
// only they know, among them) and those of its spec.
func (jf *journalsFlags) storesOfJournal(ctx context.Context, c *client.Client, spec *protocol.JournalSpec) ([]string, error) {
	urls := append([]string(nil), spec.GetFragment().GetStores()...)
	lctx, cancel := context.WithTimeout(ctx, jf.timeout)
	defer cancel()
	infos, err := c.ListFragments(lctx, &protocol.FragmentsRequest{Journal: spec.GetName()})
	if err != nil {
		return nil, jf.brokerError("listing fragments of "+spec.GetName(), err)
	}
	for _, info := range infos {
		if s := info.GetFragment().GetStore(); s != "" && !slices.Contains(urls, s) {
			urls = append(urls, s)
		}
	}
	return urls, nil
}
