package main

import "testing"

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
