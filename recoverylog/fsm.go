package recoverylog

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// ErrOpRejected is wrapped by an *OpError: an op that does not follow from
// the state of the log before it.
var ErrOpRejected = errors.New("op does not follow from the recovery log's state")

// OpError reports an op, at a log offset, that was not applied.
type OpError struct {
	Offset int64 // Log offset of the op's frame.
	Op     string
	Reason string
}

func (e *OpError) Error() string {
	return fmt.Sprintf("recovery log op at offset %d (%s): %s", e.Offset, e.Op, e.Reason)
}

// Is makes errors.Is(err, ErrOpRejected) true.
func (e *OpError) Is(target error) bool { return target == ErrOpRejected }

// Node is one file's content, across its links (hard links and renames).
type Node struct {
	ID          uint64 // The sequence number of the op that created it.
	Length      int64
	FirstOffset int64               // Log offset of its create op.
	EndOffset   int64               // Log offset just past its last create or write op.
	Links       map[string]struct{} // Paths, relative to the directory.
}

// FSM is the state of a recovery log: its live nodes and their links,
// and the last op applied. The zero FSM is not usable; see NewFSM.
type FSM struct {
	// Offset is the log offset just past the last op applied (where the
	// next op begins).
	Offset  int64
	LastSeq uint64
	Author  string // Of the last op applied.

	nodes map[uint64]*Node
	paths map[string]uint64
	// pinned are sealed nodes that hints have carried inline: later hints
	// carry them inline too, so that pruning by earlier hints never
	// removes ops that later hints need (see Hints).
	pinned map[uint64]struct{}
}

// NewFSM returns the state of an empty log whose ops begin at offset.
func NewFSM(offset int64) *FSM {
	return &FSM{Offset: offset, nodes: map[uint64]*Node{}, paths: map[string]uint64{}, pinned: map[uint64]struct{}{}}
}

// Apply checks that op, whose frame is [offset, end) in the log, follows
// from the state, and applies it. Otherwise it returns an *OpError and
// changes nothing.
func (f *FSM) Apply(op *Op, offset, end int64) error {
	if err := f.check(op); err != nil {
		return &OpError{Offset: offset, Op: op.String(), Reason: err.Error()}
	}
	f.apply(op, offset, end)
	f.LastSeq, f.Author, f.Offset = op.Seq, op.Author, end
	return nil
}

func (f *FSM) check(op *Op) error {
	if err := op.validate(); err != nil {
		return err
	}
	if op.Seq != f.LastSeq+1 {
		return fmt.Errorf("sequence number %d, expected %d (after op %d by %q)", op.Seq, f.LastSeq+1, f.LastSeq, f.Author)
	}
	switch op.Kind {
	case KindCreate:
		if op.Node != op.Seq {
			return fmt.Errorf("creates node %d, which must be its sequence number %d", op.Node, op.Seq)
		}
		return f.free(op.Path)
	case KindLink:
		if _, err := f.node(op.Node); err != nil {
			return err
		}
		return f.free(op.Path)
	case KindUnlink:
		return f.linked(op.Path)
	case KindRename:
		if err := f.linked(op.Path); err != nil {
			return err
		}
		if to, ok := f.paths[op.NewPath]; ok && to == f.paths[op.Path] {
			return fmt.Errorf("%q and %q are links of the same node %d", op.Path, op.NewPath, to)
		}
		return nil
	case KindWrite:
		n, err := f.node(op.Node)
		if err != nil {
			return err
		}
		if op.Offset != n.Length {
			return fmt.Errorf("write at offset %d of node %d, whose length is %d", op.Offset, op.Node, n.Length)
		}
		return nil
	case KindWriteAt, KindTruncate:
		_, err := f.node(op.Node)
		return err
	}
	return fmt.Errorf("unknown op kind %d", uint8(op.Kind))
}

func (f *FSM) node(id uint64) (*Node, error) {
	n, ok := f.nodes[id]
	if !ok {
		return nil, fmt.Errorf("node %d does not exist", id)
	}
	return n, nil
}

func (f *FSM) free(p string) error {
	if id, ok := f.paths[p]; ok {
		return fmt.Errorf("path %q already links node %d", p, id)
	}
	return nil
}

func (f *FSM) linked(p string) error {
	if _, ok := f.paths[p]; !ok {
		return fmt.Errorf("path %q does not exist", p)
	}
	return nil
}

// apply applies a checked op.
func (f *FSM) apply(op *Op, offset, end int64) {
	switch op.Kind {
	case KindCreate:
		f.nodes[op.Node] = &Node{ID: op.Node, FirstOffset: offset, EndOffset: end, Links: map[string]struct{}{}}
		f.link(op.Node, op.Path)
	case KindLink:
		f.link(op.Node, op.Path)
	case KindUnlink:
		f.unlink(op.Path)
	case KindRename:
		f.rename(op.Path, op.NewPath)
	case KindWrite, KindWriteAt:
		n := f.nodes[op.Node]
		n.Length = max(n.Length, op.Offset+int64(len(op.Data)))
		n.EndOffset = end
	case KindTruncate:
		n := f.nodes[op.Node]
		n.Length = op.Offset
		n.EndOffset = end
	}
}

func (f *FSM) link(id uint64, p string) {
	f.paths[p] = id
	f.nodes[id].Links[p] = struct{}{}
}

// unlink removes link p, and its node if it was the last link.
func (f *FSM) unlink(p string) {
	id := f.paths[p]
	delete(f.paths, p)
	n := f.nodes[id]
	delete(n.Links, p)
	if len(n.Links) == 0 {
		delete(f.nodes, id)
		delete(f.pinned, id)
	}
}

// rename moves link from to to, replacing any link at to. The node of
// from keeps living, though from may have been its only link.
func (f *FSM) rename(from, to string) {
	id := f.paths[from]
	if _, ok := f.paths[to]; ok {
		f.unlink(to)
	}
	delete(f.paths, from)
	delete(f.nodes[id].Links, from)
	f.link(id, to)
}

// Lookup returns the node linked at path p (relative to the directory).
func (f *FSM) Lookup(p string) (Node, bool) {
	id, ok := f.paths[p]
	if !ok {
		return Node{}, false
	}
	return f.nodes[id].clone(), true
}

// NodeOf returns the node id, if it is live.
func (f *FSM) NodeOf(id uint64) (Node, bool) {
	n, ok := f.nodes[id]
	if !ok {
		return Node{}, false
	}
	return n.clone(), true
}

// Nodes returns the live nodes, in order of their ids.
func (f *FSM) Nodes() []Node {
	ids := slices.Sorted(maps.Keys(f.nodes))
	out := make([]Node, len(ids))
	for i, id := range ids {
		out[i] = f.nodes[id].clone()
	}
	return out
}

// Paths returns every linked path, sorted.
func (f *FSM) Paths() []string { return slices.Sorted(maps.Keys(f.paths)) }

func (n *Node) clone() Node {
	c := *n
	c.Links = maps.Clone(n.Links)
	return c
}

// pathOf returns one link of a live node.
func (f *FSM) pathOf(id uint64) string {
	for p := range f.nodes[id].Links {
		return p
	}
	return ""
}

// clone returns a deep copy of f.
func (f *FSM) clone() *FSM {
	c := *f
	c.nodes = make(map[uint64]*Node, len(f.nodes))
	for id, n := range f.nodes {
		nc := n.clone()
		c.nodes[id] = &nc
	}
	c.paths = maps.Clone(f.paths)
	c.pinned = maps.Clone(f.pinned)
	return &c
}
