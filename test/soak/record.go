package soak

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Record is the content of a writer's seq-th append: one line naming
// both, padded to a length of its own, so that a torn or foreign line,
// and the same record twice, are told apart from every other.
func Record(writer, seq, pad int) []byte {
	return fmt.Appendf(nil, "w%02d-%08d %s\n", writer, seq, bytes.Repeat([]byte{'x'}, pad))
}

// parseRecord parses a line (with its newline) as a Record.
func parseRecord(line []byte) (writer, seq int, ok bool) {
	if len(line) < len("w00-00000000 \n") || line[0] != 'w' || line[3] != '-' || line[12] != ' ' || line[len(line)-1] != '\n' {
		return 0, 0, false
	}
	if !digits(line[1:3]) || !digits(line[4:12]) || len(bytes.Trim(line[13:len(line)-1], "x")) != 0 {
		return 0, 0, false
	}
	w, _ := strconv.Atoi(string(line[1:3]))
	s, _ := strconv.Atoi(string(line[4:12]))
	return w, s, true
}

// digits tells whether b is decimal digits only (Atoi takes signs too).
func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// History records the calls of the appends and reads of the soak's
// journals, and their outcomes, to be checked once the run is over.
// Times are nanoseconds since the history began. It is safe for
// concurrent use.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []call
}

// call is an operation of the history. Failed appends may have
// committed all the same (the client gave up waiting): their outcome is
// unknown until the journal's final content tells.
type call struct {
	porcupine.Operation
	failed bool
}

// NewHistory returns an empty history that begins now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time since the history began, for a call's start or end.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Append records an append by writer of data to journal, called at
// start, which answered out at end, or failed (err not nil).
func (h *History) Append(writer int, journal string, data []byte, start, end int64, out AppendOutput, err error) {
	h.add(call{porcupine.Operation{ClientId: writer, Input: AppendInput{journal, data}, Call: start, Output: out, Return: end}, err != nil})
}

// Read records a read by reader of journal from its start to its write
// head, called at start, which returned content at end. Failed reads
// tell nothing, and are not recorded.
func (h *History) Read(reader int, journal string, content []byte, start, end int64) {
	h.add(call{porcupine.Operation{ClientId: reader, Input: ReadInput{journal}, Call: start, Output: ReadOutput{stateOf(content)}, Return: end}, false})
}

func (h *History) add(c call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, c)
}

// Verdict is what a history's check found.
type Verdict struct {
	Appends      int // acknowledged appends checked
	Unknown      int // appends that failed: of these,
	UnknownFound int // those the journals hold all the same
	Reads        int
	Journals     int
	// Violations found, by kind: acknowledged appends missing or at
	// another range, records held twice, lines no append wrote.
	Lost, Duplicated, Moved, Torn int
	// Gaps the journals skip, and their bytes: offsets an append committed
	// on one replica only, which was lost with its disk before the
	// primary could copy them; the primary rolled past them. They count
	// as appends of unknown bytes that no one was told of: an
	// acknowledged append in one is lost.
	Gaps     int
	GapBytes int64
	// Problems describes the violations (the first 50), as sentences;
	// none if the history holds.
	Problems     []string
	Linearizable porcupine.CheckResult
	info         porcupine.LinearizationInfo
	ops          []porcupine.Operation
}

// OK tells whether the history holds: every acknowledged append once at
// its range, nothing torn or foreign, and a linearizable history.
func (v *Verdict) OK() bool { return len(v.Problems) == 0 && v.Linearizable == porcupine.Ok }

// Check checks the history against final, the journals' content once
// the run was over, read whole from their first byte (at finalRead).
// timeout bounds porcupine's search; a search that runs out is reported
// as an Unknown result, not as a pass.
func (h *History) Check(final map[string][]byte, finalRead int64, timeout time.Duration) *Verdict {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	v := &Verdict{Journals: len(final)}
	found := map[string]map[string]AppendOutput{} // journal, record: range
	var gaps []porcupine.Operation
	for journal, content := range final {
		var at []AppendOutput
		found[journal], at = v.records(journal, content)
		for _, g := range at {
			// It took effect at some time no one saw.
			gaps = append(gaps, porcupine.Operation{ClientId: -2, Input: GapInput{journal}, Call: 0, Output: g, Return: math.MaxInt64})
		}
	}
	for _, op := range ops {
		in, ok := op.Input.(AppendInput)
		if !ok {
			v.Reads++
			v.ops = append(v.ops, op.Operation)
			continue
		}
		at, present := found[in.Journal][string(in.Data)]
		switch {
		case op.failed && present:
			v.Unknown++
			v.UnknownFound++
			op.Output, op.Return = at, math.MaxInt64 // It took effect some time after its call.
		case op.failed:
			v.Unknown++
			continue // It never took effect: the log holds no trace of it.
		case !present:
			v.Appends++
			v.Lost++
			v.problem("lost: %s's append of %q, acknowledged at [%d, %d), is not in it", in.Journal, in.Data, op.Output.(AppendOutput).Begin, op.Output.(AppendOutput).End)
		case at != op.Output.(AppendOutput):
			v.Appends++
			v.Moved++
			v.problem("moved: %s's append of %q was acknowledged at %v, and is at %v", in.Journal, in.Data, op.Output, at)
		default:
			v.Appends++
		}
		v.ops = append(v.ops, op.Operation)
	}
	v.ops = append(v.ops, gaps...)
	for journal, content := range final {
		v.ops = append(v.ops, porcupine.Operation{ClientId: -1, Input: ReadInput{journal}, Call: finalRead, Output: ReadOutput{stateOf(content)}, Return: math.MaxInt64})
	}
	v.Linearizable, v.info = porcupine.CheckOperationsVerbose(Log, v.ops, timeout)
	if v.Linearizable == porcupine.Illegal {
		v.problem("the history of appends and reads is not linearizable as an append-only log (see the visualization)")
	}
	return v
}

// records parses content, a journal's whole, into its records and the
// ranges they are at, noting torn or foreign lines and duplicates, and
// returns the gaps between them (NUL bytes: see readWhole).
func (v *Verdict) records(journal string, content []byte) (map[string]AppendOutput, []AppendOutput) {
	out, gaps := map[string]AppendOutput{}, []AppendOutput(nil)
	for offset := int64(0); offset < int64(len(content)); {
		if content[offset] == 0 {
			end := offset + 1
			for end < int64(len(content)) && content[end] == 0 {
				end++
			}
			gaps = append(gaps, AppendOutput{offset, end})
			v.Gaps++
			v.GapBytes += end - offset
			offset = end
			continue
		}
		line := content[offset:]
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i+1]
		}
		at := AppendOutput{offset, offset + int64(len(line))}
		offset = at.End
		if _, _, ok := parseRecord(line); !ok {
			v.Torn++
			v.problem("torn or foreign: %s holds %q at [%d, %d)", journal, line, at.Begin, at.End)
			continue
		}
		if first, dup := out[string(line)]; dup {
			v.Duplicated++
			v.problem("duplicated: %s holds %q at %v and again at %v", journal, line, first, at)
			continue
		}
		out[string(line)] = at
	}
	return out, gaps
}

func (v *Verdict) problem(format string, args ...any) {
	const most = 50 // Enough to see what went wrong; the rest are counted.
	if len(v.Problems) < most {
		v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
	}
}

// Visualize writes porcupine's visualization of the checked history, an
// HTML page, to path.
func (v *Verdict) Visualize(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := porcupine.Visualize(Log, v.info, f); err != nil {
		f.Close()
		return fmt.Errorf("visualizing the history: %w", err)
	}
	return f.Close()
}

// WriteTo writes the history's operations, one per line, for a failed
// run's record.
func (v *Verdict) WriteTo(w io.Writer) (int64, error) {
	return writeOps(w, v.ops, nil)
}

// WriteTo writes the operations recorded so far, unchecked, one per
// line, failed appends marked: the record of a run that stopped before
// its check (a cluster that did not recover).
func (h *History) WriteTo(w io.Writer) (int64, error) {
	h.mu.Lock()
	calls := slices.Clone(h.ops)
	h.mu.Unlock()
	ops := make([]porcupine.Operation, len(calls))
	failed := make([]bool, len(calls))
	for i, c := range calls {
		ops[i], failed[i] = c.Operation, c.failed
	}
	return writeOps(w, ops, failed)
}

func writeOps(w io.Writer, ops []porcupine.Operation, failed []bool) (int64, error) {
	var n int64
	for i, op := range ops {
		mark := ""
		if failed != nil && failed[i] {
			mark = " (failed)"
		}
		m, err := fmt.Fprintf(w, "client %d [%d, %d] %s%s\n", op.ClientId, op.Call, op.Return, Log.DescribeOperation(op.Input, op.Output), mark)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// acks returns, per journal, the times its acknowledged appends
// returned, sorted.
func (h *History) acks() map[string][]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]int64{}
	for _, op := range h.ops {
		if in, ok := op.Input.(AppendInput); ok && !op.failed {
			out[in.Journal] = append(out[in.Journal], op.Return)
		}
	}
	for _, at := range out {
		slices.Sort(at)
	}
	return out
}
