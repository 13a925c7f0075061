package main

import (
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{0.4}, 0.4},
		{[]float64{0.5, 0.1, 0.3}, 0.3},
		{[]float64{0.5, 0.1, 0.3, 0.2}, 0.25},
	} {
		in := append([]float64(nil), c.xs...)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
		for k := range in {
			if in[k] != c.xs[k] {
				t.Errorf("median(%v) reordered its argument", in)
			}
		}
	}
}

// A stall is counted when it begins and timed when it ends; an end
// without a beginning adds nothing.
func TestStallClock(t *testing.T) {
	at := time.Unix(1000, 0)
	c := stallClock{now: func() time.Time { return at }}
	var l pebble.EventListener
	c.listen(&l)
	l.WriteStallEnd()
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
	at = at.Add(30 * time.Millisecond)
	if n, d := c.totals(); n != 1 || d != 0 {
		t.Errorf("during the first stall: %d stalls, %v; want 1, 0s", n, d)
	}
	l.WriteStallEnd()
	l.WriteStallEnd()
	l.WriteStallBegin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
	at = at.Add(5 * time.Millisecond)
	l.WriteStallEnd()
	if n, d := c.totals(); n != 2 || d != 35*time.Millisecond {
		t.Errorf("after two stalls: %d stalls, %v; want 2, 35ms", n, d)
	}
}
