package broker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// An append that names its writer and sequence number is idempotent: the
// journal's registers hold, for each of its latest writers, the sequence
// number and committed range of the writer's last append, as register
// protocol.WriterRegisterPrefix+WRITER = "SEQ@BEGIN-END". Registers commit with the
// append that changes them, are replicated with it, and come back with a
// recovered spool or from a peer, so every replica that may become the
// primary knows what was committed, and a retry that reaches any of them
// after its first attempt committed is answered with that attempt's range.
const (
	// MaxWriters bounds the writers whose last append a journal keeps:
	// those of its latest appends. A retry whose writer has since been
	// pushed out by as many others commits again, as without identity.
	MaxWriters = 16
)

// lastAppend is a writer's last committed append to a journal.
type lastAppend struct {
	seq        uint64
	begin, end int64
}

func (a lastAppend) value() string { return fmt.Sprintf("%d@%d-%d", a.seq, a.begin, a.end) }

func parseLastAppend(v string) (lastAppend, bool) {
	var a lastAppend
	n, err := fmt.Sscanf(v, "%d@%d-%d", &a.seq, &a.begin, &a.end)
	return a, err == nil && n == 3 && a.value() == v
}

// checkWriter answers an append whose writer committed it already with
// its committed range. Nil lets the append go on: a writer's concurrent
// appends to a journal may commit out of their sequence's order, so only
// the greatest sequence number committed is known, and a retry of an
// earlier one commits again (writers that pipeline appends to a journal
// order them by offset instead, as recorders do).
func (r *replica) checkWriter(first *protocol.AppendRequest) *protocol.AppendResponse {
	last, ok := lastAppendOf(r.registers, first.Writer)
	if !ok || first.Sequence != last.seq {
		return nil
	}
	appendsDeduplicated.Inc()
	return &protocol.AppendResponse{Status: protocol.Status_OK, AlreadyCommitted: true,
		Commit:    &protocol.Fragment{Journal: r.journal, Begin: last.begin, End: last.end},
		Registers: protocol.ProtoLabels(r.registers)}
}

// lastAppendOf is writer's committed append of the greatest sequence
// number, if registers hold it.
func lastAppendOf(registers labels.Set, writer string) (lastAppend, bool) {
	if writer == "" {
		return lastAppend{}, false
	}
	v, ok := registers.Value(protocol.WriterRegisterPrefix + writer)
	if !ok {
		return lastAppend{}, false
	}
	return parseLastAppend(v)
}

// withWriter returns registers with writer's append a, unless it holds
// one of a greater sequence number, keeping the MaxWriters writers of the
// latest appends.
func withWriter(registers labels.Set, writer string, a lastAppend) labels.Set {
	if last, ok := lastAppendOf(registers, writer); ok && last.seq > a.seq {
		return registers
	}
	name := protocol.WriterRegisterPrefix + writer
	registers = registers.Subtract(labels.Set{{Name: name}}).Union(labels.Set{{Name: name, Value: a.value()}})
	type entry struct {
		name string
		end  int64
	}
	var writers []entry
	for _, l := range registers {
		if strings.HasPrefix(l.Name, protocol.WriterRegisterPrefix) {
			w, _ := parseLastAppend(l.Value) // One that does not parse goes first.
			writers = append(writers, entry{l.Name, w.end})
		}
	}
	if len(writers) <= MaxWriters {
		return registers
	}
	slices.SortFunc(writers, func(a, b entry) int { return int(min(max(a.end-b.end, -1), 1)) })
	var drop labels.Set
	for _, w := range writers[:len(writers)-MaxWriters] {
		drop = append(drop, labels.Label{Name: w.name})
	}
	slices.SortFunc(drop, func(a, b labels.Label) int { return strings.Compare(a.Name, b.Name) })
	return registers.Subtract(drop)
}
