package recoverylog

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/quire-dev/quire/client"
)

// hintedNode is a live node of the hints whose ops the player reads.
type hintedNode struct {
	HintNode
	played  int64 // Its length as of the ops played so far.
	created bool
	// inPlace: a write-at or truncate op was played. The node may then
	// outgrow the hints' length before a later truncate, so only its
	// final length is checked.
	inPlace bool
}

// playHints makes the state of the hints in the directory: it writes the
// inline nodes, reads the log segments of the other nodes and applies
// their create and write ops (skipping every other op: those of nodes
// that are gone, and links, renames and unlinks, since the hints give
// the final links), checks each node's length, and then takes the hints'
// state as the player's, from which every later op is checked strictly.
func (p *Player) playHints(ctx context.Context) error {
	h := p.cfg.Hints
	read := map[uint64]*hintedNode{}
	for _, n := range h.Nodes {
		if !n.Inline {
			read[n.Node] = &hintedNode{HintNode: n}
			continue
		}
		if err := p.writeInline(n); err != nil {
			return fmt.Errorf("recoverylog: log %q: installing hinted node %d: %w", p.cfg.Journal, n.Node, err)
		}
	}
	read0 := p.bytesRead.Load()
	err := p.withWriter(func() error {
		segs := h.Segments(p.cfg.SegmentGap)
		if len(segs) == 0 {
			return nil
		}
		sr := &segmentReader{p: p, ctx: ctx, end: segs[len(segs)-1].End}
		defer sr.close()
		var lastSeq uint64
		for _, seg := range segs {
			var err error
			if lastSeq, err = p.playSegment(sr, seg, read, lastSeq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	skipped := max(0, h.Offset-(p.bytesRead.Load()-read0))
	for _, n := range read {
		if !n.created || n.played != n.Length {
			return fmt.Errorf("recoverylog: log %q: %w: node %d has %d bytes in hints, the log's ops give it %d (created: %v)",
				p.cfg.Journal, ErrBadHints, n.Node, n.Length, n.played, n.created)
		}
		for _, l := range n.Links[1:] {
			if err := p.mkdirFor(l); err != nil {
				return err
			}
			if err := os.Link(p.path(n.Links[0]), p.path(l)); err != nil {
				return fmt.Errorf("recoverylog: log %q: linking hinted node %d: %w", p.cfg.Journal, n.Node, err)
			}
		}
	}
	p.fsm = h.fsm()
	p.offset.Store(h.Offset)
	p.bytesSkipped.Store(skipped)
	skippedBytes.Add(float64(skipped))
	return nil
}

// writeInline creates an inline node's links with its content.
func (p *Player) writeInline(n HintNode) error {
	if err := p.mkdirFor(n.Links[0]); err != nil {
		return err
	}
	f, err := os.OpenFile(p.path(n.Links[0]), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	p.files[n.Node] = f
	if _, err := f.Write(n.Content); err != nil {
		return err
	}
	for _, l := range n.Links[1:] {
		if err := p.mkdirFor(l); err != nil {
			return err
		}
		if err := os.Link(p.path(n.Links[0]), p.path(l)); err != nil {
			return err
		}
	}
	return nil
}

// playSegment reads the ops of seg and applies those that create or
// write the nodes of read. The ops of a segment follow one another:
// their sequence numbers too, after lastSeq. It returns the last one's.
func (p *Player) playSegment(sr *segmentReader, seg Segment, read map[uint64]*hintedNode, lastSeq uint64) (uint64, error) {
	j := p.cfg.Journal
	sr.seek(seg.Begin)
	rd, ops := sr.rd, sr.ops
	first := true
	for ops.offset < seg.End {
		begin := ops.offset
		op, err := ops.next()
		p.writeHead.Store(rd.WriteHead())
		if to, ok := gapAt(err, begin); ok {
			// The next op must still follow lastSeq, checked below.
			p.crossGap(err, begin, to)
			ops.offset = to
			continue
		}
		if err == io.EOF {
			return 0, fmt.Errorf("recoverylog: log %q: %w: hints need the log up to offset %d, it ends at %d (write head %d)",
				j, ErrBadHints, seg.End, begin, rd.WriteHead())
		} else if err != nil {
			return 0, p.readError(err, begin, rd.WriteHead())
		}
		reject := func(format string, args ...any) error {
			return fmt.Errorf("recoverylog: log %q: %w", j,
				&OpError{Offset: begin, Op: op.String(), Reason: fmt.Sprintf(format, args...)})
		}
		switch {
		case first && op.Seq <= lastSeq:
			return 0, reject("sequence number %d, not after %d of an earlier segment", op.Seq, lastSeq)
		case !first && op.Seq != lastSeq+1:
			return 0, reject("sequence number %d, expected %d", op.Seq, lastSeq+1)
		case op.Seq > p.cfg.Hints.LastSeq:
			return 0, reject("sequence number %d, after the hints' last %d", op.Seq, p.cfg.Hints.LastSeq)
		}
		first, lastSeq = false, op.Seq
		if n := read[op.Node]; n != nil && (op.Kind == KindCreate || op.Kind.changesContent()) {
			if err := p.applyHinted(n, &op, begin, ops); err != nil {
				return 0, reject("%v", err)
			}
			p.ops.Add(1)
		}
		p.offset.Store(ops.offset)
	}
	return lastSeq, nil
}

// applyHinted applies an op that creates or writes a hinted node, which
// ops just read.
func (p *Player) applyHinted(n *hintedNode, op *Op, begin int64, ops *opReader) error {
	if op.Kind == KindCreate {
		if n.created || begin != n.FirstOffset {
			return fmt.Errorf("node %d is created again, or not at its first offset %d", n.Node, n.FirstOffset)
		}
		if err := p.mkdirFor(n.Links[0]); err != nil {
			return err
		}
		f, err := os.OpenFile(p.path(n.Links[0]), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		p.files[n.Node] = f
		n.created = true
		return nil
	}
	if !n.created {
		return fmt.Errorf("node %d is written before its create op", n.Node)
	}
	f := p.files[n.Node]
	switch op.Kind {
	case KindTruncate:
		n.inPlace = true
		n.played = op.Offset
		return p.w.truncate(f, n.Node, op.Offset)
	case KindWriteAt:
		n.inPlace = true
	case KindWrite:
		switch {
		case op.Offset != n.played:
			return fmt.Errorf("write at offset %d of node %d, whose length is %d", op.Offset, n.Node, n.played)
		case !n.inPlace && n.played+int64(len(op.Data)) > n.Length:
			return fmt.Errorf("write past node %d's length %d in the hints", n.Node, n.Length)
		}
	}
	n.played = max(n.played, op.Offset+int64(len(op.Data)))
	// A node written only by appends is complete at its hinted length:
	// its writeback can start while playback goes on.
	complete := !n.inPlace && n.played == n.Length
	var err error
	ops.body, err = p.w.writeAt(f, n.Node, ops.body, op.Data, op.Offset, complete)
	return err
}

// segmentReader reads the segments of hints, in order, through one
// journal read where it can.
//
// A read that begins within a persisted fragment reads the fragment from
// its beginning (compressed content cannot be entered anywhere else) and
// skips to the offset. A read per segment would so read a fragment of
// many segments again and again. A segment that begins in the fragment
// being read is reached by reading on instead.
type segmentReader struct {
	p   *Player
	ctx context.Context
	end int64 // The end of the last segment.
	rd  *client.Reader
	buf *bufio.Reader
	ops *opReader
}

// seek places the op reader at offset, which is not before any offset
// seek was given.
func (s *segmentReader) seek(offset int64) {
	if s.rd != nil && s.ops.offset <= offset {
		f, _ := s.rd.Fragment()
		inFragment := f != nil && f.Store != "" && offset < f.End
		if s.ops.offset == offset || inFragment && s.discard(offset-s.ops.offset) {
			return
		}
	}
	s.close()
	s.rd = s.p.cfg.Client.NewReader(s.ctx, client.ReadRequest{Journal: s.p.cfg.Journal, Offset: offset, EndOffset: s.end})
	s.buf = bufio.NewReaderSize(s.rd, 1<<20)
	s.ops = &opReader{r: &countingReader{s.buf, &s.p.bytesRead}, offset: offset}
}

// discard reads on n bytes. If it fails (a gap in the log, say), seek
// opens a new read, which meets the failure where it matters.
func (s *segmentReader) discard(n int64) bool {
	for n > 0 {
		d, err := s.buf.Discard(int(min(n, 1<<30)))
		n -= int64(d)
		s.ops.offset += int64(d)
		s.p.bytesRead.Add(int64(d))
		playedBytes.Add(float64(d))
		if err != nil {
			return false
		}
	}
	return true
}

func (s *segmentReader) close() {
	if s.rd != nil {
		s.rd.Close()
	}
}
