package flow

// Push-relabel over the network described in doc.go.
//
// Invariants, maintained by every operation below:
//   - Capacities: 0 ≤ fS[i] ≤ rep[i]; 0 ≤ fZ[zi] ≤ capZ[zi]; each (item,
//     member) pair carries at most one unit (an item holds a member once);
//     0 ≤ fT[m] ≤ capT[m] except transiently between phases, where capacities
//     only grow.
//   - Excess: ex[v] = inflow(v) − outflow(v) ≥ 0 for every node v.
//   - Valid labeling: h[u] ≤ h[w]+1 for every residual arc u→w, with the
//     source at height n and the sink at 0. Hence a node at height ≥ n cannot
//     reach the sink, and when no node is active there is no augmenting path:
//     the flow is maximum.
//   - Current arc: every arc of v before position cur[v] was inadmissible
//     when passed and has stayed so, because an arc u→w only becomes
//     admissible when u is relabeled (which resets cur[u]) and a new residual
//     arc u→w only appears by a push w→u, which needs h[w] = h[u]+1.

// discharge pushes the excess of active node v, relabeling as needed, until
// v has no excess.
func (s *Solver) discharge(v int32) {
	switch {
	case v < s.ziBase:
		s.dischargeItem(v)
	case v < s.memBase:
		s.dischargeZoneItem(v)
	default:
		s.dischargeMember(v)
	}
}

// dischargeItem discharges item i. Its arcs, in current-arc order, are its
// zone-items (forward, while under capacity) and the source (backward, while
// it has flow from the source).
func (s *Solver) dischargeItem(i int32) {
	base := s.ziBase + i*s.nz
	for s.ex[i] > 0 {
		s.work++
		c := s.cur[i]
		switch {
		case c < s.nz:
			zi := i*s.nz + c
			if r := s.capZ[zi] - s.fZ[zi]; r > 0 && s.h[i] == s.h[base+c]+1 {
				d := min(r, s.ex[i])
				s.fZ[zi] += d
				s.ex[i] -= d
				s.ex[base+c] += d
				s.activate(base + c)
				s.counters.pushes++
				continue
			}
			s.cur[i]++
		case c == s.nz:
			if s.fS[i] > 0 && s.h[i] == s.n+1 {
				d := min(s.fS[i], s.ex[i])
				s.fS[i] -= d
				s.ex[i] -= d
				s.counters.pushes++
				continue
			}
			s.cur[i]++
		default:
			s.relabelItem(i)
		}
	}
}

// relabelItem lifts item i to one above its lowest residual neighbour.
func (s *Solver) relabelItem(i int32) {
	lo := int32(2 * s.n)
	if s.fS[i] > 0 {
		lo = s.n
	}
	for z := int32(0); z < s.nz; z++ {
		zi := i*s.nz + z
		if s.fZ[zi] < s.capZ[zi] {
			lo = min(lo, s.h[s.ziBase+zi])
		}
	}
	s.work += int64(s.nz)
	s.h[i] = lo + 1
	s.cur[i] = 0
	s.counters.relabels++
}

// dischargeZoneItem discharges zone-item node v = (i, z). Its arcs, in
// current-arc order, are: the item's current members (preferred, so a
// re-solve returns a dropped seed to its holder), every member of zone z
// starting at an offset hashed from i (so that items spread over the zone
// rather than piling onto its first members), then the item (backward).
// Members are adjacent only while the item does not hold them; all these
// arcs are implicit.
func (s *Solver) dischargeZoneItem(v int32) {
	zi := v - s.ziBase
	i := zi / s.nz
	z := zi - i*s.nz
	zm := s.zoneMem[s.zoneStart[z]:s.zoneStart[z+1]]
	k := int32(len(zm))
	pref := s.p.Items[i].Current
	np := int32(len(pref))
	off := int32(mix(uint64(i)<<8|uint64(z)) % uint64(k))
	held := s.markHolders(i) // mark[m] == held: arc to m is saturated
	for s.ex[v] > 0 {
		s.work++
		c := s.cur[v]
		switch {
		case c < np+k:
			var m int32
			if c < np {
				m = int32(pref[c])
				if s.zoneOf[m] != z {
					s.cur[v]++
					continue
				}
			} else {
				j := off + c - np
				if j >= k {
					j -= k
				}
				m = zm[j]
			}
			if s.mark[m] != held && s.h[v] == s.h[s.memBase+m]+1 {
				s.hold(i, m)
				s.mark[m] = held
				s.ex[v]--
				s.ex[s.memBase+m]++
				s.activate(s.memBase + m)
				s.counters.pushes++
			}
			s.cur[v]++ // the arc is now saturated or was inadmissible
		case c == np+k:
			if s.fZ[zi] > 0 && s.h[v] == s.h[i]+1 {
				d := min(s.fZ[zi], s.ex[v])
				s.fZ[zi] -= d
				s.ex[v] -= d
				s.ex[i] += d
				s.activate(i)
				s.counters.pushes++
				continue
			}
			s.cur[v]++
		default:
			s.relabelZoneItem(v, i, zm, held)
		}
	}
}

// relabelZoneItem lifts zone-item node v of item i, whose zone's members are
// zm, to one above its lowest residual neighbour. Members marked held are
// not residual neighbours.
func (s *Solver) relabelZoneItem(v, i int32, zm []int32, held uint32) {
	// Every residual neighbour is at least as high as v (none was
	// admissible), so a neighbour at h[v] ends the search early.
	hv := s.h[v]
	lo := int32(2 * s.n)
	if s.fZ[v-s.ziBase] > 0 {
		lo = s.h[i]
	}
	for _, m := range zm {
		if lo == hv {
			break
		}
		s.work++
		if s.mark[m] != held {
			lo = min(lo, s.h[s.memBase+m])
		}
	}
	s.h[v] = lo + 1
	s.cur[v] = 0
	s.counters.relabels++
}

// dischargeMember discharges member node v. Its arcs, in current-arc order,
// are the sink (forward, while under capacity), then the zone-items sending
// it flow (backward), newest first: the unit that just arrived is the one to
// bounce, rather than a replica the member has long held.
//
// cur[v] encodes the position: 0 is the sink arc; k > 0 means the entries
// held[m][:k-1] are still to be examined, from the end. Entries appended
// meanwhile lie beyond and are skipped, which is sound because an arc m → w
// appears by a push w → m, so it is inadmissible until m is relabeled.
func (s *Solver) dischargeMember(v int32) {
	m := v - s.memBase
	zb := s.ziBase + s.zoneOf[m]
	for s.ex[v] > 0 {
		s.work++
		c := s.cur[v]
		switch {
		case c == 0:
			if r := s.capT[m] - s.fT[m]; r > 0 && s.h[v] == 1 {
				d := min(r, s.ex[v])
				s.fT[m] += d
				s.ex[v] -= d
				s.counters.pushes++
				continue
			}
			s.cur[v] = int32(len(s.held[m])) + 1
		case c > 1:
			j := int(c - 2)
			i := s.held[m][j]
			w := zb + i*s.nz
			if s.h[v] == s.h[w]+1 && s.returnable(i, m) {
				// unhold moves the last entry, examined or new, to j.
				s.unhold(m, j)
				s.ex[v]--
				s.ex[w]++
				s.activate(w)
				s.counters.pushes++
			}
			s.cur[v]--
		default:
			s.relabelMember(v, m, zb)
		}
	}
}

// relabelMember lifts member node v = m to one above its lowest residual
// neighbour: the sink, or a zone-item sending it flow.
func (s *Solver) relabelMember(v, m, zb int32) {
	hv := s.h[v]
	lo := int32(2 * s.n)
	if s.fT[m] < s.capT[m] {
		lo = 0
	}
	for _, i := range s.held[m] {
		if lo == hv {
			break
		}
		s.work++
		if w := zb + i*s.nz; s.h[w] < lo && s.returnable(i, m) {
			lo = s.h[w]
		}
	}
	s.h[v] = lo + 1
	s.cur[v] = 0
	s.counters.relabels++
}

// globalRelabel sets every height to the exact residual distance to the
// sink, or, for nodes that cannot reach the sink, n plus the distance to the
// source (so their excess returns there directly). Nodes reaching neither
// get 2n: they have no excess and never receive any, as active nodes stay
// below 2n. It also resets the current arcs.
//
// The search runs backwards over residual arcs. Zone-item → member arcs are
// implicit, so a member at distance d labels every unlabeled zone-item of its
// zone that does not hold it. Each zone keeps a list of its unlabeled
// zone-items; a member's visit drops the ones it labels and keeps the ones
// holding it. A zone-item is kept at most once per member it holds, so the
// search costs O(nodes + flow) instead of O(items × members).
func (s *Solver) globalRelabel() {
	s.counters.globals++
	for v := range s.h {
		s.h[v] = -1
	}
	clear(s.cur)

	// Every zone starts with all its zone-items of items wanting replicas.
	s.zoneLen = resize(s.zoneLen, int(s.nz))
	if s.nz > 0 {
		list := s.zoneList[:0]
		for i := int32(0); i < s.nItems; i++ {
			if s.rep[i] > 0 {
				list = append(list, i)
			}
		}
		for z := int32(0); z < s.nz; z++ {
			copy(s.zoneList[z*s.nItems:], list)
			s.zoneLen[z] = int32(len(list))
		}
	}

	// From the sink: members with room.
	s.bfs = s.bfs[:0]
	for m := int32(0); m < s.nMembers; m++ {
		if s.zoneOf[m] >= 0 && s.fT[m] < s.capT[m] {
			s.h[s.memBase+m] = 1
			s.bfs = append(s.bfs, s.memBase+m)
		}
	}
	s.search(0)

	// From the source: items with flow from it.
	from := len(s.bfs)
	for i := int32(0); i < s.nItems; i++ {
		if s.fS[i] > 0 && s.h[i] < 0 {
			s.h[i] = s.n + 1
			s.bfs = append(s.bfs, i)
		}
	}
	s.search(from)

	for v, hv := range s.h {
		if hv < 0 {
			s.h[v] = 2 * s.n
		}
	}
	var flow int64
	for _, f := range s.fS {
		flow += int64(f)
	}
	s.work = 0
	s.workLimit = int64(s.n) + flow
}

// search continues the backward breadth-first search over s.bfs from
// position from, labeling each newly reached node one above its discoverer.
func (s *Solver) search(from int) {
	for k := from; k < len(s.bfs); k++ {
		v := s.bfs[k]
		d := s.h[v] + 1
		switch {
		case v < s.ziBase:
			// Residual arcs into item v: from its zone-items carrying
			// flow (backward).
			for z := int32(0); z < s.nz; z++ {
				if s.fZ[v*s.nz+z] > 0 {
					s.reach(s.ziBase+v*s.nz+z, d)
				}
			}
		case v < s.memBase:
			// Residual arcs into zone-item (i, z): from the item while
			// under capacity, and from members it sends flow to.
			zi := v - s.ziBase
			i := zi / s.nz
			z := zi - i*s.nz
			if s.fZ[zi] < s.capZ[zi] {
				s.reach(i, d)
			}
			for k := s.hOff[i]; k < s.hOff[i]+s.nh[i]; k++ {
				if m := s.holdM[k]; s.zoneOf[m] == z && (s.holdNew[k] || !s.frozen) {
					s.reach(s.memBase+m, d)
				}
			}
		default:
			// Residual arcs into member m: from every zone-item of its
			// zone not holding it (implicit).
			m := v - s.memBase
			z := s.zoneOf[m]
			list := s.zoneList[z*s.nItems : z*s.nItems+s.zoneLen[z]]
			keep := list[:0]
			for _, i := range list {
				w := s.ziBase + i*s.nz + z
				switch {
				case s.h[w] >= 0: // labeled through its item: drop
				case s.holds(i, m):
					keep = append(keep, i)
				default:
					s.h[w] = d
					s.bfs = append(s.bfs, w)
				}
			}
			s.zoneLen[z] = int32(len(keep))
		}
	}
}

// reach labels node w at height d and queues it, unless already labeled.
func (s *Solver) reach(w, d int32) {
	if s.h[w] < 0 {
		s.h[w] = d
		s.bfs = append(s.bfs, w)
	}
}

// mix is a 64-bit finalizer (the SplitMix64 one): a cheap, well-spread hash
// of the item index that picks where a zone-item starts walking its zone.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
