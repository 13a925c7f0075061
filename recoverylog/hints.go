package recoverylog

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Defaults of the content that hints carry inline.
const (
	// DefaultHintInlineMax is the largest node whose content hints carry.
	DefaultHintInlineMax = 32 << 10
	// DefaultHintInlineTotal bounds the content that hints carry in all;
	// as base64 in JSON it stays well within etcd's default request limit
	// (1.5 MiB).
	DefaultHintInlineTotal = 256 << 10
)

// Hints describe where the live content of a recovery log lies, so that a
// player reads only the log content of files that are still live, and so
// that the log can be pruned. They are compact JSON, for a consumer to
// keep in etcd.
//
// For each live node, hints give the log offsets of its create op and
// just past its last write (its ops all lie in between), its length and
// its links, and, for a small node, its content inline (Inline): a player
// need not read the ops of an inline node at all. A node is "sealed" once
// no file handle is open for writing it (Pebble never writes a file again
// after closing it): it never grows.
//
// Which small nodes are inline: first every node that earlier hints of
// the log carried inline while sealed ("pinned": it cannot change, and
// its ops may have been pruned by those earlier hints), then other sealed
// nodes of at most InlineMax bytes in order of their ids, then unsealed
// ones, while the total content stays within InlineTotal.
type Hints struct {
	Log    string `json:"log"`
	Author string `json:"author"` // The recorder that produced the hints.
	// LastAuthor is the author of the last op up to Offset.
	LastAuthor string     `json:"lastAuthor,omitempty"`
	Offset     int64      `json:"offset"`  // The state is that of the log up to here.
	LastSeq    uint64     `json:"lastSeq"` // Sequence number of the last op up to Offset.
	Nodes      []HintNode `json:"nodes"`
}

// HintNode is one live node of Hints.
type HintNode struct {
	Node        uint64   `json:"node"`
	FirstOffset int64    `json:"firstOffset"` // Of its create op.
	EndOffset   int64    `json:"endOffset"`   // Just past its last create or write op.
	Length      int64    `json:"length"`
	Links       []string `json:"links"`
	Sealed      bool     `json:"sealed,omitempty"`
	Inline      bool     `json:"inline,omitempty"`
	Content     []byte   `json:"content,omitempty"` // If Inline: all of it.
}

// Segment is a range [Begin, End) of log offsets.
type Segment struct{ Begin, End int64 }

// Hints appends the pending ops and returns the hints of the recorder's
// state. They describe only ops that were appended: Offset is at most
// the log's write head once Hints returns.
func (r *Recorder) Hints() (*Hints, error) {
	r.mu.Lock()
	if r.err != nil {
		defer r.mu.Unlock()
		return nil, r.err
	}
	f := r.fsm
	h := &Hints{Log: r.cfg.Journal, Author: r.cfg.Author, LastAuthor: f.Author, Offset: f.Offset,
		LastSeq: f.LastSeq, Nodes: []HintNode{}}
	ids := slices.Sorted(maps.Keys(f.nodes))
	inline := map[uint64]bool{}
	var total int64
	take := func(id uint64, budget bool) bool {
		n := f.nodes[id]
		c, ok := r.small[id]
		if !ok || int64(len(c)) != n.Length || budget && total+n.Length > int64(r.cfg.HintInlineTotal) {
			return false
		}
		total += n.Length
		inline[id] = true
		return true
	}
	for _, id := range ids { // Pinned nodes first, whatever the budget.
		if _, ok := f.pinned[id]; ok {
			take(id, false)
		}
	}
	for _, sealed := range []bool{true, false} {
		for _, id := range ids {
			isSealed := r.writers[id] == 0
			if inline[id] || isSealed != sealed || f.nodes[id].Length > int64(r.cfg.HintInlineMax) {
				continue
			}
			if take(id, true) && sealed {
				f.pinned[id] = struct{}{}
			}
		}
	}
	for _, id := range ids {
		n := f.nodes[id]
		hn := HintNode{Node: n.ID, FirstOffset: n.FirstOffset, EndOffset: n.EndOffset, Length: n.Length,
			Links: slices.Sorted(maps.Keys(n.Links)), Sealed: r.writers[id] == 0, Inline: inline[id]}
		if hn.Inline {
			hn.Content = slices.Clone(r.small[id])
		}
		h.Nodes = append(h.Nodes, hn)
	}
	r.mu.Unlock()
	// The ops described are pending or appended: append them.
	if err := r.flush(); err != nil {
		return nil, err
	}
	return h, nil
}

// MarshalHints encodes h as JSON.
func MarshalHints(h *Hints) ([]byte, error) { return json.Marshal(h) }

// UnmarshalHints decodes and validates JSON hints.
func UnmarshalHints(b []byte) (*Hints, error) {
	var h Hints
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("recoverylog: decoding hints: %w", err)
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &h, nil
}

// ErrBadHints is wrapped by errors of hints that are not consistent.
var ErrBadHints = errors.New("recoverylog: invalid hints")

// Validate checks that the hints are consistent on their own: offsets
// within the log up to Offset, node ids up to LastSeq, lengths, inline
// content, and links that are valid paths, each of one node.
func (h *Hints) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w of log %q: %s", ErrBadHints, h.Log, fmt.Sprintf(format, args...))
	}
	if h.Offset < 0 {
		return bad("offset %d is negative", h.Offset)
	}
	paths := map[string]uint64{}
	var prev uint64
	for _, n := range h.Nodes {
		switch {
		case n.Node <= prev:
			return bad("node %d is not after node %d: nodes must be sorted and distinct", n.Node, prev)
		case n.Node > h.LastSeq:
			return bad("node %d is after the last op %d", n.Node, h.LastSeq)
		case n.FirstOffset < 0 || n.EndOffset <= n.FirstOffset || n.EndOffset > h.Offset:
			return bad("node %d: ops at [%d, %d) are not within [0, %d)", n.Node, n.FirstOffset, n.EndOffset, h.Offset)
		case n.Length < 0:
			return bad("node %d: length %d", n.Node, n.Length)
		case n.Inline && int64(len(n.Content)) != n.Length:
			return bad("node %d: %d bytes of inline content, length %d", n.Node, len(n.Content), n.Length)
		case !n.Inline && len(n.Content) != 0:
			return bad("node %d: content, but not inline", n.Node)
		case len(n.Links) == 0:
			return bad("node %d has no links", n.Node)
		}
		prev = n.Node
		for _, l := range n.Links {
			if err := validPath(l); err != nil {
				return bad("node %d: %v", n.Node, err)
			}
			if other, ok := paths[l]; ok {
				return bad("path %q links nodes %d and %d", l, other, n.Node)
			}
			paths[l] = n.Node
		}
	}
	return nil
}

// ReplayFrom returns the lowest log offset a player of h reads: the
// earliest create op of a live node that is not inline, or h.Offset if
// there is none.
func (h *Hints) ReplayFrom() int64 {
	from := h.Offset
	for _, n := range h.Nodes {
		if !n.Inline {
			from = min(from, n.FirstOffset)
		}
	}
	return from
}

// PruneBefore returns the log offset before which no content is needed,
// by a player of h nor by one of any later hints of the log: the earliest
// create op of a live node that is not both inline and sealed (a node
// inline but still open may grow past the inline limit, and later hints
// would then need its ops), or h.Offset if there is none.
func (h *Hints) PruneBefore() int64 {
	from := h.Offset
	for _, n := range h.Nodes {
		if !n.Inline || !n.Sealed {
			from = min(from, n.FirstOffset)
		}
	}
	return from
}

// Segments returns the ranges of the log that a player of h reads: the
// union of [FirstOffset, EndOffset) of the nodes that are not inline,
// sorted, joining ranges less than gap bytes apart.
func (h *Hints) Segments(gap int64) []Segment {
	var segs []Segment
	for _, n := range h.Nodes {
		if !n.Inline {
			segs = append(segs, Segment{n.FirstOffset, n.EndOffset})
		}
	}
	slices.SortFunc(segs, func(a, b Segment) int { return int(min(max(a.Begin-b.Begin, -1), 1)) })
	var out []Segment
	for _, s := range segs {
		if k := len(out) - 1; k >= 0 && s.Begin <= out[k].End+gap {
			out[k].End = max(out[k].End, s.End)
			continue
		}
		out = append(out, s)
	}
	return out
}

// fsm returns the state that h describes.
func (h *Hints) fsm() *FSM {
	f := NewFSM(h.Offset)
	f.LastSeq, f.Author = h.LastSeq, h.LastAuthor
	for _, hn := range h.Nodes {
		n := &Node{ID: hn.Node, Length: hn.Length, FirstOffset: hn.FirstOffset, EndOffset: hn.EndOffset,
			Links: map[string]struct{}{}}
		for _, l := range hn.Links {
			n.Links[l] = struct{}{}
			f.paths[l] = hn.Node
		}
		f.nodes[hn.Node] = n
		if hn.Inline && hn.Sealed {
			f.pinned[hn.Node] = struct{}{}
		}
	}
	return f
}
