package soak

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// A journal's content, as the model of an append-only log sees it: its
// length and a hash of its bytes. Keeping a hash rather than the bytes
// makes each step cheap however long the journal grows; a read's output
// is hashed the same way when it is recorded.
type logState struct {
	Len  int64
	Hash uint64
}

// FNV-1a, continued byte by byte from any state: the hash of a log is
// the hash of its prefix continued over the rest.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func (s logState) extend(data []byte) logState {
	h := s.Hash
	for _, b := range data {
		h ^= uint64(b)
		h *= fnvPrime
	}
	return logState{s.Len + int64(len(data)), h}
}

// stateOf is the state of a log holding content.
func stateOf(content []byte) logState { return logState{Hash: fnvOffset}.extend(content) }

// AppendInput is an append of Data to Journal.
type AppendInput struct {
	Journal string
	Data    []byte
}

// AppendOutput is the committed range of an append.
type AppendOutput struct{ Begin, End int64 }

// GapInput is a gap in Journal: offsets it skips (see Verdict.Gaps). Its
// output is the gap's range, as an append's is.
type GapInput struct{ Journal string }

// ReadInput is a read of Journal, from its first byte to its write head.
type ReadInput struct{ Journal string }

// ReadOutput is what a read returned: the length and hash of the bytes
// (stateOf).
type ReadOutput struct{ State logState }

// journalOf is the journal of an operation's input.
func journalOf(input any) string {
	switch in := input.(type) {
	case AppendInput:
		return in.Journal
	case ReadInput:
		return in.Journal
	case GapInput:
		return in.Journal
	}
	return ""
}

// Log is the model of journals as append-only logs, each on its own: an
// append commits its data at the write head, the range it answers; a
// read returns the log's whole content at one instant between its call
// and return. An append whose outcome is unknown is left out of the
// history, or, if the final content holds its record, given the range
// it is found at and no return (it may have taken effect any time after
// its call): see History.Operations.
var Log = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byJournal := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			j := journalOf(op.Input)
			if _, ok := byJournal[j]; !ok {
				order = append(order, j)
			}
			byJournal[j] = append(byJournal[j], op)
		}
		out := make([][]porcupine.Operation, len(order))
		for i, j := range order {
			out[i] = byJournal[j]
		}
		return out
	},
	Init: func() any { return logState{Hash: fnvOffset} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(logState)
		switch in := input.(type) {
		case AppendInput:
			out := output.(AppendOutput)
			if out.Begin != s.Len || out.End != s.Len+int64(len(in.Data)) {
				return false, s
			}
			return true, s.extend(in.Data)
		case GapInput:
			// A reader reads a gap as NUL bytes (see readWhole).
			out := output.(AppendOutput)
			if out.Begin != s.Len {
				return false, s
			}
			return true, s.extend(make([]byte, out.End-out.Begin))
		case ReadInput:
			return output.(ReadOutput).State == s, s
		}
		return false, s
	},
	Hash: func(state any) uint64 { return state.(logState).Hash },
	DescribeOperation: func(input, output any) string {
		switch in := input.(type) {
		case AppendInput:
			out := output.(AppendOutput)
			return fmt.Sprintf("append %q -> [%d, %d)", in.Data, out.Begin, out.End)
		case GapInput:
			out := output.(AppendOutput)
			return fmt.Sprintf("gap [%d, %d)", out.Begin, out.End)
		case ReadInput:
			return fmt.Sprintf("read -> %d bytes", output.(ReadOutput).State.Len)
		}
		return "?"
	},
	DescribeState: func(state any) string {
		s := state.(logState)
		return fmt.Sprintf("%d bytes, %016x", s.Len, s.Hash)
	},
}
