package client

import "testing"

// Names are reused once their append is done, per journal, and nothing is
// kept for a journal with no append in flight.
func TestWritersHandOutFreeNames(t *testing.T) {
	w := newWriters("w")
	a, releaseA := w.acquire("j")
	b, releaseB := w.acquire("j")
	other, releaseOther := w.acquire("k")
	if a != "w" || b != "w-1" || other != "w" {
		t.Fatalf("names %q %q (journal j), %q (journal k); want w, w-1, w", a, b, other)
	}
	releaseA()
	if c, releaseC := w.acquire("j"); c != "w" {
		t.Fatalf("after the first is done: %q, want w again", c)
	} else {
		releaseC()
	}
	releaseB()
	releaseOther()
	if len(w.busy) != 0 {
		t.Fatalf("journals kept with nothing in flight: %v", w.busy)
	}
}
