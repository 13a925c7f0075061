package flow

// level evens out loads within each zone after the flow phases.
//
// The phases balance against global targets, which assume every zone gets
// load in proportion to its capacity. When zones differ in size, the even
// spread forces some zones above or below those targets, and push-relabel
// fills a zone's members in no particular proportion. Moving an item between
// two members of one zone changes neither the flow value nor any zone count,
// so leveling cannot undo a higher priority.
//
// A move from giver g (load a, limit Lg) to receiver r (load b < Lr) is made
// when (2a−1)/Lg > (2b+1)/Lr. For equal limits this is a ≥ b+2. It strictly
// decreases Σ load²/limit over the zone, so leveling terminates; at the end
// members with equal limits in a zone differ by at most one.
func (s *Solver) level() {
	for z := int32(0); z < s.nz; z++ {
		zm := s.zoneMem[s.zoneStart[z]:s.zoneStart[z+1]]
		for s.levelOnce(zm) {
			s.counters.leveled++
		}
	}
}

// levelOnce moves one item from the most to the least loaded member of zm,
// relative to their limits, and reports whether it did.
func (s *Solver) levelOnce(zm []int32) bool {
	g, r := int32(-1), int32(-1)
	for _, m := range zm {
		a, l := int64(s.fT[m]), int64(s.lim[m])
		// Giver: largest (2a−1)/l. Receiver: smallest (2a+1)/l with room.
		if a > 0 && (g < 0 || (2*a-1)*int64(s.lim[g]) > (2*int64(s.fT[g])-1)*l) {
			g = m
		}
		if a < l && (r < 0 || (2*a+1)*int64(s.lim[r]) < (2*int64(s.fT[r])+1)*l) {
			r = m
		}
	}
	if g < 0 || r < 0 || g == r {
		return false
	}
	a, b := int64(s.fT[g]), int64(s.fT[r])
	if (2*a-1)*int64(s.lim[r]) <= (2*b+1)*int64(s.lim[g]) {
		return false
	}
	return s.move(g, r)
}

// move reassigns one item from member g to member r of the same zone,
// choosing, among items r does not hold, one that returns to a current holder
// (r) if possible, else one new to g (so the move adds no churn), else any.
// It reports whether some item could move.
func (s *Solver) move(g, r int32) bool {
	best, bestScore := -1, -1
	for j, i := range s.held[g] {
		if s.holds(i, r) {
			continue
		}
		score := 0
		cur := s.p.Items[i].Current
		switch {
		case contains(cur, int(r)):
			score = 2
		case !contains(cur, int(g)):
			score = 1
		}
		if score > bestScore {
			best, bestScore = j, score
			if score == 2 {
				break
			}
		}
	}
	if best < 0 {
		return false
	}
	i := s.held[g][best]
	s.unhold(g, best)
	s.fT[g]--
	s.hold(i, r)
	s.fT[r]++
	return true
}

// contains reports whether list holds x.
func contains(list []int, x int) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}
