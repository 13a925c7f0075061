package flow

import "math/bits"

// targets sets each member's balance targets floor[m] ≤ share ≤ ceil[m] ≤
// lim[m] (and round[m], the nearest integer to share), where share is the member's part of its zone's expected load, in
// proportion to its limit.
//
// A zone's expected load is not simply its share of all limits: the even
// spread fixes much of it. With Z_eff zones, an item of replication R puts
// ⌊R/Z_eff⌋ replicas in every zone, plus one more in R mod Z_eff of them.
// So zone z carries between lo_z = Σ⌊R/Z_eff⌋ and hi_z = lo_z + #{R mod
// Z_eff > 0} (both capped at its total limit L_z). Zone loads are taken in
// proportion to L_z, clamped to [lo_z, hi_z], scaled to sum to D = Σ R: the
// water level λ with Σ clamp(λ·L_z, lo_z, hi_z) = D. Targets consistent with
// the spread can all be met, so a balanced solution keeps every seed and a
// re-solve moves nothing; targets that ignored zones would make members of a
// small zone shed seeds that no other member may take.
func (s *Solver) targets() {
	var desired, total int64
	for _, r := range s.rep {
		desired += int64(r)
	}
	for _, l := range s.lim {
		total += int64(l)
	}
	if desired >= total || s.nz == 0 {
		// Every member is needed up to its limit.
		copy(s.floor, s.lim)
		copy(s.round, s.lim)
		copy(s.ceil, s.lim)
		return
	}
	zl, lo, hi := s.zoneBounds(desired)
	s.zfree = resize(s.zfree, len(zl))
	w := waterLevel(zl, lo, hi, desired, s.zfree)
	s.memberShares(zl, lo, hi, w)
}

// zoneBounds returns, per zone, its total limit and the bounds of its load
// under the even spread (or only its limit, if the even spread cannot hold
// all desired replicas).
func (s *Solver) zoneBounds(desired int64) (zl, lo, hi []int64) {
	nz := int(s.nz)
	s.zl, s.zlo, s.zhi = resize(s.zl, nz), resize(s.zlo, nz), resize(s.zhi, nz)
	zl, lo, hi = s.zl, s.zlo, s.zhi
	for m, l := range s.lim {
		if z := s.zoneOf[m]; z >= 0 {
			zl[z] += int64(l)
		}
	}
	var base, flex int64
	for _, r := range s.rep {
		base += int64(r / s.nz)
		if r%s.nz != 0 {
			flex++
		}
	}
	var sumHi int64
	for z := range nz {
		lo[z] = min(base, zl[z])
		hi[z] = min(base+flex, zl[z])
		sumHi += hi[z]
	}
	if sumHi < desired {
		copy(hi, zl)
	}
	return zl, lo, hi
}

// water is the result of waterLevel: the level b, the zones strictly inside
// their bounds (free), and their share num/den of their limit, where num is
// what the clamped zones leave of the desired replicas and den is the free
// zones' total limit.
type water struct {
	b        float64
	free     []bool
	num, den int64
}

// waterLevel finds by bisection the level at which zones' loads, each its
// limit times the level clamped to its bounds, sum to desired; then the
// exact share of the free zones.
func waterLevel(zl, lo, hi []int64, desired int64, free []bool) water {
	level := func(x float64) (sum float64) {
		for z := range zl {
			sum += min(max(x*float64(zl[z]), float64(lo[z])), float64(hi[z]))
		}
		return sum
	}
	a, b := 0.0, 1.0
	for range 64 {
		mid := (a + b) / 2
		if level(mid) < float64(desired) {
			a = mid
		} else {
			b = mid
		}
	}
	w := water{b: b, free: free, num: desired}
	for z := range zl {
		x := b * float64(zl[z])
		switch {
		case x <= float64(lo[z]):
			w.num -= lo[z]
		case x >= float64(hi[z]):
			w.num -= hi[z]
		default:
			w.free[z] = true
			w.den += zl[z]
		}
	}
	w.num = max(w.num, 0)
	return w
}

// memberShares sets each member's floor, nearest and ceiling targets: its
// zone's share of its limit.
func (s *Solver) memberShares(zl, lo, hi []int64, w water) {
	for m, l := range s.lim {
		z := s.zoneOf[m]
		if z < 0 {
			continue
		}
		// share = tn·l/td, with tn ≤ td so that it is at most l.
		tn, td := w.num, w.den
		if !w.free[z] {
			tn, td = lo[z], zl[z]
			if w.b*float64(zl[z]) >= float64(hi[z]) {
				tn = hi[z]
			}
		}
		if tn >= td {
			s.floor[m], s.round[m], s.ceil[m] = l, l, l
			continue
		}
		// Both factors are below 2^62 and tn < td: no overflow.
		h, lw := bits.Mul64(uint64(tn), uint64(l))
		q, rem := bits.Div64(h, lw, uint64(td))
		f, n, c := int32(q), int32(q), int32(q)
		if rem > 0 {
			c++
		}
		if rem >= uint64(td)-rem { // fraction ≥ ½
			n++
		}
		s.floor[m], s.round[m], s.ceil[m] = min(f, l), min(n, l), min(c, l)
	}
}
