package recoverylog

import (
	"encoding/json"
	"maps"
	"slices"
)

// Hints describe where the live content of a recovery log lies: for each
// live node, the log offset of its create op, its length and its links.
// They are compact JSON, for a consumer to keep in etcd.
//
// Playback from hints (skipping ops of nodes that are gone) and pruning
// are not implemented yet; see the package's report.
type Hints struct {
	Log     string     `json:"log"`
	Author  string     `json:"author"`
	Offset  int64      `json:"offset"`  // The state is that of the log up to here.
	LastSeq uint64     `json:"lastSeq"` // Sequence number of the last op up to Offset.
	Nodes   []HintNode `json:"nodes"`
}

// HintNode is one live node of Hints.
type HintNode struct {
	Node        uint64   `json:"node"`
	FirstOffset int64    `json:"firstOffset"`
	Length      int64    `json:"length"`
	Links       []string `json:"links"`
}

// Hints appends the pending ops and returns the hints of the recorder's
// state. Ops recorded concurrently may be described yet still pending;
// Offset says where the described ops end.
func (r *Recorder) Hints() (*Hints, error) {
	if err := r.flush(); err != nil {
		return nil, err
	}
	f := r.FSM()
	h := &Hints{Log: r.cfg.Journal, Author: r.cfg.Author, Offset: f.Offset, LastSeq: f.LastSeq, Nodes: []HintNode{}}
	for _, n := range f.Nodes() {
		h.Nodes = append(h.Nodes, HintNode{Node: n.ID, FirstOffset: n.FirstOffset, Length: n.Length,
			Links: slices.Sorted(maps.Keys(n.Links))})
	}
	return h, nil
}

// MarshalHints encodes h as JSON.
func MarshalHints(h *Hints) ([]byte, error) { return json.Marshal(h) }

// ReplayFrom returns the lowest log offset a player needs to read to
// rebuild the live nodes of h: the earliest create op of a live node, or
// h.Offset if there is none. Log content before it belongs only to files
// that are gone.
func (h *Hints) ReplayFrom() int64 {
	from := h.Offset
	for _, n := range h.Nodes {
		from = min(from, n.FirstOffset)
	}
	return from
}
