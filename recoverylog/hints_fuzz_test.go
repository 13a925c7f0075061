package recoverylog

import (
	"bytes"
	"testing"
)

// FuzzUnmarshalHints feeds UnmarshalHints stored hints of any shape, as
// etcd may hold after a bug or a hand edit: it must refuse or decode,
// never panic, and what it decodes must describe a state a player can
// start from: segments sorted, apart and within the log, a replay and
// prune offset within them, and an encoding that decodes back the same.
func FuzzUnmarshalHints(f *testing.F) {
	good := &Hints{Log: "l", Author: "a", Offset: 100, LastSeq: 10, Nodes: []HintNode{
		{Node: 2, FirstOffset: 10, EndOffset: 20, Length: 3, Links: []string{"a"}, Inline: true, Sealed: true, Content: []byte("abc")},
		{Node: 5, FirstOffset: 30, EndOffset: 90, Length: 300, Links: []string{"b", "d/c"}},
		{Node: 7, FirstOffset: 60, EndOffset: 95, Length: 1, Links: []string{"e"}},
	}}
	js, err := MarshalHints(good)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(js)
	f.Add([]byte(`{"log":"l","offset":5,"lastSeq":1,"nodes":[{"node":1,"firstOffset":0,"endOffset":5,"length":0,"links":["../x"]}]}`))
	f.Add([]byte(`{"log":"l","offset":-1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, err := UnmarshalHints(raw)
		if err != nil {
			return
		}
		if from := h.ReplayFrom(); from < 0 || from > h.Offset {
			t.Fatalf("replay from %d, outside [0, %d]", from, h.Offset)
		}
		if prune := h.PruneBefore(); prune < 0 || prune > h.ReplayFrom() {
			t.Fatalf("prune before %d, after the replay's start %d", prune, h.ReplayFrom())
		}
		for _, gap := range []int64{0, 1 << 20} {
			segs := h.Segments(gap)
			for i, s := range segs {
				if s.Begin < 0 || s.End <= s.Begin || s.End > h.Offset || i > 0 && s.Begin <= segs[i-1].End+gap {
					t.Fatalf("segments %v (gap %d) of hints %s", segs, gap, raw)
				}
			}
			if len(segs) > 0 && segs[0].Begin != h.ReplayFrom() {
				t.Fatalf("segments %v begin after the replay's start %d", segs, h.ReplayFrom())
			}
		}
		if state := h.fsm(); len(state.nodes) != len(h.Nodes) {
			t.Fatalf("the state of hints %s has %d nodes, not %d", raw, len(state.nodes), len(h.Nodes))
		}
		again, err := MarshalHints(h)
		if err != nil {
			t.Fatal(err)
		}
		back, err := UnmarshalHints(again)
		if err != nil {
			t.Fatalf("hints %s encode as %s, which does not decode: %v", raw, again, err)
		}
		if twice, _ := MarshalHints(back); !bytes.Equal(twice, again) {
			t.Fatalf("hints encode as %s, then as %s", again, twice)
		}
	})
}
