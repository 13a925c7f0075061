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
	nz := int(s.nz)
	var desired, total int64
	for _, r := range s.rep {
		desired += int64(r)
	}
	for _, l := range s.lim {
		total += int64(l)
	}
	if desired >= total || nz == 0 {
		// Every member is needed up to its limit.
		copy(s.floor, s.lim)
		copy(s.round, s.lim)
		copy(s.ceil, s.lim)
		return
	}

	// Per zone: total limit, and load bounds under the even spread.
	zl := make([]int64, nz)
	lo := make([]int64, nz)
	hi := make([]int64, nz)
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
		// The even spread cannot hold everything: zones are bounded
		// by their limits only.
		copy(hi, zl)
	}

	// Water level by bisection, then exact: zones strictly inside their
	// bounds share num/den of their limit, where num is what the clamped
	// zones leave of D and den is the free zones' total limit.
	level := func(x float64) (sum float64) {
		for z := range nz {
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
	free := make([]bool, nz)
	num, den := desired, int64(0)
	for z := range nz {
		x := b * float64(zl[z])
		switch {
		case x <= float64(lo[z]):
			num -= lo[z]
		case x >= float64(hi[z]):
			num -= hi[z]
		default:
			free[z] = true
			den += zl[z]
		}
	}
	num = max(num, 0)

	for m, l := range s.lim {
		z := s.zoneOf[m]
		if z < 0 {
			continue
		}
		// share = tn·l/td, with tn ≤ td so that it is at most l.
		tn, td := num, den
		if !free[z] {
			tn, td = lo[z], zl[z]
			if b*float64(zl[z]) >= float64(hi[z]) {
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
