package broker

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"

	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/fragment"
)

// entry is a fragment of a journal and where its content can be read: a
// rolled spool awaiting persistence, a spool recovered at start, or a
// store.
type entry struct {
	frag  fragment.Fragment
	spool *spool.Spool
	rec   *spool.Recovered
	// stored is the index's persist count when this broker persisted
	// the fragment, or zero for fragments from a listing.
	stored uint64
}

func (e entry) local() bool { return e.spool != nil || e.rec != nil }

// open returns a reader of the entry's content from offset to its end.
func (e entry) open(ctx context.Context, store fragment.Store, offset int64) (io.ReadCloser, error) {
	n := e.frag.End - offset
	switch {
	case e.spool != nil:
		return io.NopCloser(io.NewSectionReader(spoolReaderAt{e.spool}, offset, n)), nil
	case e.rec != nil:
		rc, err := e.rec.Reader()
		if err != nil {
			return nil, err
		}
		if _, err := io.CopyN(io.Discard, rc, offset-e.frag.Begin); err != nil {
			rc.Close()
			return nil, fmt.Errorf("seeking recovered spool %s: %w", e.rec.Path(), err)
		}
		return rc, nil
	}
	if store == nil {
		return nil, fmt.Errorf("fragment %s: store %q is not available", e.frag.Name(), e.frag.Store)
	}
	rc, err := store.Open(ctx, e.frag)
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, rc, offset-e.frag.Begin); err != nil {
		rc.Close()
		return nil, fmt.Errorf("seeking fragment %s to %d: %w", e.frag.Name(), offset, err)
	}
	return rc, nil
}

// spoolReaderAt reads a spool with offsets relative to its begin.
type spoolReaderAt struct{ s *spool.Spool }

func (r spoolReaderAt) ReadAt(p []byte, off int64) (int, error) { return r.s.ReadAt(p, off) }

// index is a journal's fragments other than the current spool: local ones
// awaiting persistence, and those listed from its stores.
type index struct {
	mu       sync.Mutex
	entries  []entry // sorted by begin, then end
	persists uint64  // fragments this broker persisted, ever
	loaded   chan struct{}
	once     sync.Once
	changed  chan struct{}
}

func newIndex() *index {
	return &index{loaded: make(chan struct{}), changed: make(chan struct{})}
}

// markLoaded records that the stores have been listed once.
func (ix *index) markLoaded() { ix.once.Do(func() { close(ix.loaded) }) }

// addLocal indexes a local fragment, unless it is indexed already.
func (ix *index) addLocal(e entry) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if slices.ContainsFunc(ix.entries, func(x entry) bool {
		return x.local() && x.spool == e.spool && x.rec == e.rec && sameContent(x.frag, e.frag)
	}) {
		return
	}
	ix.entries = append(ix.entries, e)
	ix.sortAndNotify()
}

// persisted replaces the local entry of f by its stored form.
func (ix *index) persisted(f fragment.Fragment) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := ix.entries[:0]
	for _, e := range ix.entries {
		if !(e.local() && sameContent(e.frag, f)) {
			out = append(out, e)
		}
	}
	ix.persists++
	ix.entries = append(out, entry{frag: f, stored: ix.persists})
	ix.sortAndNotify()
}

// listingMark is taken before listing the stores, and passed to
// replaceStored with the listing.
func (ix *index) listingMark() uint64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.persists
}

// replaceStored replaces the stored entries by a listing that began at
// mark, keeping local ones.
//
// Invariant: a fragment persisted after mark stays indexed. The listing
// may have been taken before its upload; without it, the content would
// be indexed neither as local nor as stored, and reads would jump past
// it until the next listing.
func (ix *index) replaceStored(listed []fragment.Fragment, mark uint64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := ix.entries[:0]
	for _, e := range ix.entries {
		if e.local() || (e.stored > mark && !containsContent(listed, e.frag)) {
			out = append(out, e)
		}
	}
	for _, f := range listed {
		out = append(out, entry{frag: f})
	}
	ix.entries = out
	ix.sortAndNotify()
}

// sameContent reports whether a and b are the same journal content.
func sameContent(a, b fragment.Fragment) bool {
	return a.Begin == b.Begin && a.End == b.End && a.Sum == b.Sum
}

func containsContent(fs []fragment.Fragment, f fragment.Fragment) bool {
	for _, g := range fs {
		if sameContent(g, f) && g.Store == f.Store {
			return true
		}
	}
	return false
}

// drop removes a stored fragment found missing from its store (pruned or
// removed behind the brokers' back) before the next listing would: reads
// then jump past its range, as they do past removed content, rather than
// fail.
func (ix *index) drop(f fragment.Fragment) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := ix.entries[:0]
	for _, e := range ix.entries {
		if e.local() || e.frag != f {
			out = append(out, e)
		}
	}
	ix.entries = out
	ix.sortAndNotify()
}

func (ix *index) sortAndNotify() {
	sort.SliceStable(ix.entries, func(i, j int) bool {
		a, b := ix.entries[i].frag, ix.entries[j].frag
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	close(ix.changed)
	ix.changed = make(chan struct{})
}

// end is the greatest end offset indexed.
func (ix *index) end() int64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var end int64
	for _, e := range ix.entries {
		end = max(end, e.frag.End)
	}
	return end
}

// query finds the entry to read offset from: of those covering it, the one
// reaching furthest, local first. Otherwise it returns the begin of the
// first entry after offset (a gap to jump), or -1, and a channel closed
// when the index changes.
func (ix *index) query(offset int64) (e entry, ok bool, next int64, changed <-chan struct{}) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	next = -1
	for _, c := range ix.entries {
		switch {
		case c.frag.Begin <= offset && offset < c.frag.End:
			if !ok || c.frag.End > e.frag.End || (c.frag.End == e.frag.End && c.local() && !e.local()) {
				e, ok = c, true
			}
		case c.frag.Begin > offset && (next < 0 || c.frag.Begin < next):
			next = c.frag.Begin
		}
	}
	return e, ok, next, ix.changed
}

// local tells whether any local fragment is indexed (one still to be
// persisted), with a channel closed when the index changes.
func (ix *index) local() (bool, <-chan struct{}) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return slices.ContainsFunc(ix.entries, entry.local), ix.changed
}

// list returns the indexed fragments beginning at or after from, in order.
func (ix *index) list(from int64) []fragment.Fragment {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var out []fragment.Fragment
	for _, e := range ix.entries {
		if e.frag.Begin >= from {
			out = append(out, e.frag)
		}
	}
	return out
}
