package broker

import (
	"slices"
	"strconv"
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

func (a lastAppend) value() string {
	b := make([]byte, 0, 3*20+2)
	b = strconv.AppendUint(b, a.seq, 10)
	b = append(b, '@')
	b = strconv.AppendInt(b, a.begin, 10)
	b = append(b, '-')
	return string(strconv.AppendInt(b, a.end, 10))
}

// parseLastAppend parses v, a register's value, as value() writes it, and
// nothing else: every commit of an identified append parses registers, so
// this is written out rather than left to fmt.Sscanf, which cost a fifth
// of a broker's CPU under 16 writers.
func parseLastAppend(v string) (lastAppend, bool) {
	seq, rest, ok1 := strings.Cut(v, "@")
	begin, end, ok2 := strings.Cut(rest, "-")
	n, ok3 := decimal(seq, 64)
	b, ok4 := decimal(begin, 63)
	e, ok5 := decimal(end, 63)
	return lastAppend{seq: n, begin: int64(b), end: int64(e)}, ok1 && ok2 && ok3 && ok4 && ok5
}

// decimal parses s, a canonical unsigned decimal (digits only, no leading
// zero), of at most bits bits.
func decimal(s string, bits int) (uint64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, bits)
	return n, err == nil
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
	return committedAlready(r.journal, last, r.registers)
}

// committedAlready answers a retry of append last, which committed.
func committedAlready(journal string, last lastAppend, registers labels.Set) *protocol.AppendResponse {
	appendsDeduplicated.Inc()
	return &protocol.AppendResponse{Status: protocol.Status_OK, AlreadyCommitted: true,
		Commit:    &protocol.Fragment{Journal: journal, Begin: last.begin, End: last.end},
		Registers: answered(registers)}
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
	registers = registers.With(name, a.value())
	type entry struct {
		name string
		end  int64
	}
	named := registers.Prefixed(protocol.WriterRegisterPrefix)
	if len(named) <= MaxWriters {
		return registers
	}
	writers := make([]entry, 0, len(named))
	for _, l := range named {
		w, _ := parseLastAppend(l.Value) // One that does not parse goes first.
		writers = append(writers, entry{l.Name, w.end})
	}
	slices.SortFunc(writers, func(a, b entry) int { return int(min(max(a.end-b.end, -1), 1)) })
	var drop labels.Set
	for _, w := range writers[:len(writers)-MaxWriters] {
		drop = append(drop, labels.Label{Name: w.name})
	}
	slices.SortFunc(drop, func(a, b labels.Label) int { return strings.Compare(a.Name, b.Name) })
	return registers.Subtract(drop)
}

// commitRegisters are the registers of a commit of several appends in
// the making. They start as the journal's, which commits and answers in
// flight share and which never change; the first append that changes
// them copies them, and the commit's later appends update the copy in
// place, rather than copying the registers of 16 writers once an append.
type commitRegisters struct {
	set   labels.Set
	owned bool // set is this commit's copy
}

// withWriter records writer's append a, as withWriter does.
func (c *commitRegisters) withWriter(writer string, a lastAppend) {
	name := protocol.WriterRegisterPrefix + writer
	i, found := slices.BinarySearchFunc(c.set, name, func(l labels.Label, name string) int {
		return strings.Compare(l.Name, name)
	})
	if found {
		if last, ok := parseLastAppend(c.set[i].Value); ok && last.seq > a.seq {
			return
		}
		if c.owned && (i+1 == len(c.set) || c.set[i+1].Name != name) {
			c.set[i].Value = a.value()
			return
		}
	}
	c.set, c.owned = withWriter(c.set, writer, a), true
}

// answered is what an append's answer carries of registers: all but the
// writers', which are the brokers' own record. A writer knows its own, and
// the others' made an answer to a 100-byte append of a journal with 16
// writers about 900 bytes, which the client decoded (a tenth of its CPU).
func answered(registers labels.Set) []*protocol.Label {
	named := registers.Prefixed(protocol.WriterRegisterPrefix)
	if len(named) == 0 {
		return protocol.ProtoLabels(registers)
	}
	if len(named) == len(registers) {
		return nil
	}
	out := make([]*protocol.Label, 0, len(registers)-len(named))
	for _, l := range registers {
		if !strings.HasPrefix(l.Name, protocol.WriterRegisterPrefix) {
			out = append(out, &protocol.Label{Name: l.Name, Value: l.Value})
		}
	}
	return out
}
