package broker

import (
	"testing"

	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

func frag(begin, end int64, store string) fragment.Fragment {
	return fragment.Fragment{Journal: "a/j", Begin: begin, End: end, Sum: [32]byte{byte(begin), byte(end)}, Store: store}
}

// covered reports whether the index can serve every offset of [begin, end).
func covered(ix *index, begin, end int64) bool {
	for off := begin; off < end; {
		e, ok, _, _ := ix.query(off)
		if !ok {
			return false
		}
		off = e.frag.End
	}
	return true
}

// A listing taken before a fragment's upload, applied after it, must not
// drop the fragment: its content is then neither local nor listed, and
// reads jumped past it (a gap in a recovery log's playback, seen in CI).
func TestIndexListingOlderThanPersist(t *testing.T) {
	const store = "file:///s/"
	ix := newIndex()
	ix.replaceStored([]fragment.Fragment{frag(0, 10, store)}, ix.listingMark())
	ix.addLocal(entry{frag: frag(10, 20, ""), rec: &spool.Recovered{}}) // awaiting persistence

	mark := ix.listingMark() // the refresh begins listing
	ix.persisted(frag(10, 20, store))
	ix.replaceStored([]fragment.Fragment{frag(0, 10, store)}, mark) // listed before the upload
	if !covered(ix, 0, 20) {
		t.Fatalf("after a stale listing, the index lacks the fragment persisted during it: %+v", ix.list(0))
	}

	// A later listing that includes it replaces it, without duplicates.
	ix.replaceStored([]fragment.Fragment{frag(0, 10, store), frag(10, 20, store)}, ix.listingMark())
	if got := ix.list(0); len(got) != 2 || !covered(ix, 0, 20) {
		t.Fatalf("after a fresh listing: %+v", got)
	}

	// A later listing without it (removed from the store behind the
	// brokers' back) drops it.
	ix.replaceStored([]fragment.Fragment{frag(0, 10, store)}, ix.listingMark())
	if covered(ix, 10, 20) {
		t.Fatalf("a fragment no fresh listing holds is still indexed: %+v", ix.list(0))
	}
}

// A recovered spool that persists while its replica loads ends indexed
// as stored, never as a local spool whose files are gone, whichever
// comes first.
func TestRecoveredSpoolPersistedAsItsReplicaLoads(t *testing.T) {
	const journal = "a/j"
	for _, persistFirst := range []bool{false, true} {
		srv := &Server{locals: map[string][]entry{}, recovered: map[string]*spool.Recovered{}, log: testLogger}
		srv.resolver = newResolver(srv)
		r := &replica{srv: srv, journal: journal, index: newIndex()}
		srv.resolver.journals[journal] = resolved{spec: &protocol.JournalSpec{Name: journal}}
		srv.resolver.replicas[journal] = r
		srv.locals[journal] = []entry{{frag: frag(0, 10, ""), rec: &spool.Recovered{}}} // As adopt does.

		stored := frag(0, 10, "file:///s/")
		if persistFirst {
			srv.persisted(journal, stored)
			srv.indexLocals(journal, r.index)
		} else {
			srv.indexLocals(journal, r.index)
			srv.persisted(journal, stored)
		}
		e, ok, _, _ := r.index.query(0)
		if !ok || e.local() || e.frag.Store != stored.Store {
			t.Errorf("persisted first %v: offset 0 is served by %+v (found %v), want the stored fragment", persistFirst, e, ok)
		}
	}
}
