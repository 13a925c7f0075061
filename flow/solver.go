package flow

// Solver solves Problems. Its zero value is ready to use. A Solver reuses its
// buffers from one Solve to the next, so a long-lived Solver allocates little
// beyond the Solution it returns. It is not safe for concurrent use.
type Solver struct {
	p *Problem

	nItems   int32 // len(p.Items)
	nMembers int32 // len(p.Members)
	nz       int32 // Z_eff: zones having a member that can take an item
	n        int32 // nodes in the network, source and sink included

	// Node numbering: item i is node i, zone-item (i, z) is node ziBase+i*nz+z,
	// member m is node memBase+m. The source and the sink have no node index;
	// their heights are fixed at n and 0.
	ziBase, memBase int32

	// Zones. Only zones with a member of positive limit take part ("effective"
	// zones); members with limit 0 are in no zone and have no arcs.
	effZone   []int32 // problem zone → effective zone, or -1
	zoneOf    []int32 // member → effective zone, or -1 if the member takes nothing
	zoneStart []int32 // members of effective zone z are zoneMem[zoneStart[z]:zoneStart[z+1]]
	zoneMem   []int32

	// Items. rep is Replication capped at the number of members that can take
	// an item; fS is the flow on the arc source → item.
	rep []int32
	fS  []int32

	// Holders: the members item i sends flow to (through its zone-items) are
	// holdM[hOff[i]:hOff[i]+nh[i]]. Invariant: nh[i] ≤ fS[i] ≤ rep[i], since
	// no node sends on more than it receives, so rep[i] slots always suffice.
	// holdNew flags the units placed since the current stage began; see
	// frozen.
	hOff    []int32
	nh      []int32
	holdM   []int32
	holdNew []bool

	// frozen is set during the first stage of each phase, in which flow
	// already placed (holdNew false) stays put: a member may return only
	// units that arrived during the stage. New flow thus first takes free
	// room directly; rerouting existing flow, which moves replicas, waits
	// for the second stage and happens only if it still adds flow.
	frozen bool

	// Zone-items, indexed i*nz+z: flow on item → zone-item, its capacity in
	// the current phase, and the flow seeded from Current (a floor on capZ).
	fZ, capZ, seedZ []int32

	// Members: effective limit, flow on member → sink and its capacity in the
	// current phase, balance targets, and the items sending flow to the member
	// (unordered; each entry is one unit of flow on an implicit arc).
	lim, fT, capT, seedT []int32
	// Per zone, for targets: total limit, load bounds, free of its bounds.
	zl, zlo, zhi       []int64
	zfree              []bool
	floor, round, ceil []int32
	held               [][]int32

	// Push-relabel state per node: height, excess, current-arc position.
	h, ex, cur []int32

	// FIFO of active nodes. inQ[v] reports whether v is queued.
	queue  []int32
	qHead  int32
	qLen   int32
	inQ    []bool
	seeded []int32 // items that lost a seed; they are activated first in every phase

	// mark[m] == stamp marks members; see nextStamp.
	mark  []uint32
	stamp uint32

	// Global relabeling: BFS queue, and per effective zone the zone-items not
	// yet labeled (zoneList[z*nItems : z*nItems+zoneLen[z]] holds item indices).
	bfs      []int32
	zoneList []int32
	zoneLen  []int32

	// work counts arcs examined since the last global relabel; when it passes
	// workLimit heights are recomputed exactly.
	work, workLimit int64

	counters counters
}

// counters record the effort of the last Solve, for tests and tuning.
type counters struct {
	pushes, relabels, globals, leveled int
}

// Solve assigns items to members; see the package documentation for the
// priorities it honours and the method. p must be valid (see Validate).
func (s *Solver) Solve(p *Problem) Solution {
	s.p = p
	s.counters = counters{}
	s.setup()
	s.seed()
	for _, ph := range phases {
		s.runPhase(ph)
	}
	s.level()
	sol := s.solution()
	s.p = nil
	return sol
}

// zoneLevel is how many of an item's replicas one zone may take in a phase.
type zoneLevel uint8

const (
	zoneEven zoneLevel = iota // ceil(R / Z_eff): all zones evenly
	zoneTwo                   // at least two zones
	zoneAny                   // R: no zone constraint
)

// memberLevel is how many items a member may take in a phase.
type memberLevel uint8

const (
	memberFloor memberLevel = iota // its proportional share, rounded down
	memberRound                    // its proportional share, rounded to nearest
	memberCeil                     // its proportional share, rounded up
	memberLimit                    // its limit
)

// phase is the pair of capacity levels of one phase.
type phase struct {
	zone   zoneLevel
	member memberLevel
}

// phases relax the network one constraint at a time, most important
// constraint (zone spread) last, so that each phase only adds flow that the
// previous, stricter network could not carry.
var phases = [...]phase{
	{zoneEven, memberFloor},
	{zoneEven, memberRound},
	{zoneEven, memberCeil},
	{zoneEven, memberLimit},
	{zoneTwo, memberLimit},
	{zoneAny, memberLimit},
}

// zoneCap returns the capacity of a zone-item of an item with (capped)
// replication r at level l.
func (s *Solver) zoneCap(r int32, l zoneLevel) int32 {
	switch l {
	case zoneEven:
		if s.nz == 0 {
			return r // then r is 0: no member can take anything
		}
		return (r + s.nz - 1) / s.nz
	case zoneTwo:
		if s.nz >= 2 && r >= 2 {
			return r - 1
		}
	}
	return r
}

// setup sizes the buffers and computes zones, capped replication and member
// targets for s.p.
func (s *Solver) setup() {
	s.nItems, s.nMembers = int32(len(s.p.Items)), int32(len(s.p.Members))
	active := s.setupZones()
	s.setupMembersOfZones(active)
	s.setupItems(active)
	s.setupMembers()
	s.targets()
	s.setupNodes()
}

// setupZones caps limits and numbers the effective zones (those with a
// member able to take items). It returns the number of such members.
func (s *Solver) setupZones() (active int32) {
	p := s.p
	// A member can hold each item at most once, so a limit above the number
	// of items is never binding. Capping it keeps Σ limits small enough for
	// the 128-bit share arithmetic of targets and for int32 loads.
	s.lim = resize(s.lim, int(s.nMembers))
	s.effZone = resize(s.effZone, p.Zones)
	for z := range s.effZone {
		s.effZone[z] = -1
	}
	for m, mem := range p.Members {
		s.lim[m] = int32(min(mem.Limit, len(p.Items)))
		if s.lim[m] > 0 {
			s.effZone[mem.Zone] = 0
			active++
		}
	}
	s.nz = 0
	for z, e := range s.effZone {
		if e == 0 {
			s.effZone[z] = s.nz
			s.nz++
		}
	}
	return active
}

// setupMembersOfZones lists the members of each effective zone, in member
// order (compressed sparse rows).
func (s *Solver) setupMembersOfZones(active int32) {
	p := s.p
	s.zoneOf = resize(s.zoneOf, int(s.nMembers))
	s.zoneStart = resize(s.zoneStart, int(s.nz)+1)
	for m, mem := range p.Members {
		s.zoneOf[m] = -1
		if s.lim[m] > 0 {
			z := s.effZone[mem.Zone]
			s.zoneOf[m] = z
			s.zoneStart[z+1]++
		}
	}
	for z := int32(0); z < s.nz; z++ {
		s.zoneStart[z+1] += s.zoneStart[z]
	}
	s.zoneMem = resize(s.zoneMem, int(active))
	fill := s.zoneLen[:0]
	fill = append(fill, s.zoneStart[:s.nz]...)
	for m := range p.Members {
		if z := s.zoneOf[m]; z >= 0 {
			s.zoneMem[fill[z]] = int32(m)
			fill[z]++
		}
	}
	s.zoneLen = fill
}

// setupItems caps replications and sizes the items' holder slots.
func (s *Solver) setupItems(active int32) {
	s.rep = resize(s.rep, int(s.nItems))
	s.fS = resize(s.fS, int(s.nItems))
	s.nh = resize(s.nh, int(s.nItems))
	s.hOff = resize(s.hOff, int(s.nItems)+1)
	for i, it := range s.p.Items {
		s.rep[i] = int32(min(it.Replication, int(active)))
		s.hOff[i+1] = s.hOff[i] + s.rep[i]
	}
	s.holdM = resize(s.holdM, int(s.hOff[s.nItems]))
	s.holdNew = resize(s.holdNew, int(s.hOff[s.nItems]))
}

// setupMembers sizes the members' flows, targets and held lists, keeping
// the lists' capacity.
func (s *Solver) setupMembers() {
	s.fT = resize(s.fT, int(s.nMembers))
	s.capT = resize(s.capT, int(s.nMembers))
	s.seedT = resize(s.seedT, int(s.nMembers))
	s.floor = resize(s.floor, int(s.nMembers))
	s.round = resize(s.round, int(s.nMembers))
	s.ceil = resize(s.ceil, int(s.nMembers))
	s.mark = resize(s.mark, int(s.nMembers))
	s.stamp = 0
	if cap(s.held) >= int(s.nMembers) {
		s.held = s.held[:s.nMembers]
	} else {
		s.held = append(s.held[:cap(s.held)], make([][]int32, int(s.nMembers)-cap(s.held))...)
	}
	for m := range s.held {
		s.held[m] = s.held[m][:0]
	}
}

// setupNodes sizes the zone-items and the per-node push-relabel state.
func (s *Solver) setupNodes() {
	nzi := int(s.nItems) * int(s.nz)
	s.fZ = resize(s.fZ, nzi)
	s.capZ = resize(s.capZ, nzi)
	s.seedZ = resize(s.seedZ, nzi)
	s.ziBase = s.nItems
	s.memBase = s.ziBase + int32(nzi)
	s.n = s.memBase + s.nMembers + 2
	nodes := int(s.memBase + s.nMembers)
	s.h = resize(s.h, nodes)
	s.ex = resize(s.ex, nodes)
	s.cur = resize(s.cur, nodes)
	s.inQ = resize(s.inQ, nodes)
	s.queue = resize(s.queue, nodes)
	s.qHead, s.qLen = 0, 0
	s.seeded = s.seeded[:0]
	s.bfs = resize(s.bfs, nodes)[:0]
	s.zoneList = resize(s.zoneList, nzi)
}

// seed installs the feasible flow that keeps current assignments. A current
// member is kept while it can take items, the item still wants replicas, the
// zone is under the even cap (spreading outranks keeping: an item whose
// replicas crowd into fewer zones than it could use moves one, as a member
// over its share does), and the member
// is under its ceil target (balance: a member over its share sheds the
// excess seeds; they come back in later phases if nothing needs the room,
// because zone-items try their current members first). A balanced solution
// has every load within [floor, ceil], so re-solving it keeps every seed;
// as its flow is then already maximum in every phase, nothing moves.
func (s *Solver) seed() {
	for i := range s.p.Items {
		r := s.rep[i]
		even := s.zoneCap(r, zoneEven)
		base := int32(i) * s.nz
		lost := false
		for _, m := range s.p.Items[i].Current {
			z := s.zoneOf[m]
			if z < 0 || s.nh[i] >= r || s.fZ[base+z] >= even || s.fT[m] >= s.ceil[m] {
				lost = lost || z >= 0 && r > 0
				continue
			}
			s.hold(int32(i), int32(m))
			s.fZ[base+z]++
			s.fT[m]++
		}
		s.fS[i] = s.nh[i]
		if lost {
			s.seeded = append(s.seeded, int32(i))
		}
	}
	copy(s.seedZ, s.fZ)
	copy(s.seedT, s.fT)
}

// runPhase sets the capacities of phase ph and runs its two stages: first
// with the flow present at the start frozen, then free. On return the flow
// is a maximum flow of the phase's network (excess that could not reach the
// sink has returned to the source).
func (s *Solver) runPhase(ph phase) {
	for i := int32(0); i < s.nItems; i++ {
		c := s.zoneCap(s.rep[i], ph.zone)
		for zi := i * s.nz; zi < (i+1)*s.nz; zi++ {
			s.capZ[zi] = max(c, s.seedZ[zi])
		}
	}
	for m := range s.capT {
		switch ph.member {
		case memberFloor:
			s.capT[m] = s.floor[m]
		case memberRound:
			s.capT[m] = s.round[m]
		case memberCeil:
			s.capT[m] = s.ceil[m]
		default:
			s.capT[m] = s.lim[m]
		}
		s.capT[m] = max(s.capT[m], s.seedT[m])
	}
	s.frozen = true
	clear(s.holdNew)
	s.stage()
	s.frozen = false
	s.stage()
}

// stage saturates the source arcs and discharges until no node is active.
func (s *Solver) stage() {
	// Items that lost a seed go first so that their zone-items reach their
	// previous holders before other items take the room.
	for _, i := range s.seeded {
		s.saturate(i)
	}
	for i := int32(0); i < s.nItems; i++ {
		s.saturate(i)
	}
	if s.qLen == 0 {
		return // every item has its replicas: nothing can change
	}
	s.globalRelabel()
	for s.qLen > 0 {
		v := s.pop()
		s.discharge(v)
		if s.work > s.workLimit {
			s.globalRelabel()
		}
	}
}

// saturate fills the arc source → item i and activates i.
func (s *Solver) saturate(i int32) {
	if d := s.rep[i] - s.fS[i]; d > 0 {
		s.fS[i] = s.rep[i]
		s.ex[i] += d
		s.activate(i)
	}
}

// hold records one unit of flow from item i's zone-item to member m.
// The caller maintains fZ, fT and excesses.
func (s *Solver) hold(i, m int32) {
	s.holdM[s.hOff[i]+s.nh[i]] = m
	s.holdNew[s.hOff[i]+s.nh[i]] = true
	s.nh[i]++
	s.held[m] = append(s.held[m], i)
}

// unhold removes the unit of flow from the item at held[m][j] to member m.
// The caller maintains fZ, fT and excesses.
func (s *Solver) unhold(m int32, j int) {
	hm := s.held[m]
	i := hm[j]
	last := len(hm) - 1
	hm[j] = hm[last]
	s.held[m] = hm[:last]

	lo, hi := s.hOff[i], s.hOff[i]+s.nh[i]-1
	for k := lo; k <= hi; k++ {
		if s.holdM[k] == m {
			s.holdM[k], s.holdNew[k] = s.holdM[hi], s.holdNew[hi]
			break
		}
	}
	s.nh[i]--
}

// holds reports whether item i sends flow to member m.
func (s *Solver) holds(i, m int32) bool {
	for _, x := range s.holdM[s.hOff[i] : s.hOff[i]+s.nh[i]] {
		if x == m {
			return true
		}
	}
	return false
}

// returnable reports whether member m may return the unit item i sends it:
// always, except for units placed before the current frozen stage.
func (s *Solver) returnable(i, m int32) bool {
	if !s.frozen {
		return true
	}
	for k := s.hOff[i]; k < s.hOff[i]+s.nh[i]; k++ {
		if s.holdM[k] == m {
			return s.holdNew[k]
		}
	}
	return false
}

// nextStamp returns a stamp that no member is marked with.
func (s *Solver) nextStamp() uint32 {
	s.stamp++
	if s.stamp == 0 { // wrapped: old marks could collide
		clear(s.mark)
		s.stamp = 1
	}
	return s.stamp
}

// markHolders marks the members holding item i with a fresh stamp.
func (s *Solver) markHolders(i int32) uint32 {
	st := s.nextStamp()
	for _, m := range s.holdM[s.hOff[i] : s.hOff[i]+s.nh[i]] {
		s.mark[m] = st
	}
	return st
}

// activate queues node v if it has excess and is not queued.
func (s *Solver) activate(v int32) {
	if s.inQ[v] || s.ex[v] == 0 {
		return
	}
	s.inQ[v] = true
	t := s.qHead + s.qLen
	if t >= int32(len(s.queue)) {
		t -= int32(len(s.queue))
	}
	s.queue[t] = v
	s.qLen++
}

// pop dequeues the oldest active node.
func (s *Solver) pop() int32 {
	v := s.queue[s.qHead]
	s.qHead++
	if s.qHead == int32(len(s.queue)) {
		s.qHead = 0
	}
	s.qLen--
	s.inQ[v] = false
	return v
}

// solution builds the Solution from the flow: per item, the kept current
// members in Current's order, then the new ones.
func (s *Solver) solution() Solution {
	var sol Solution
	total := int(s.hOff[s.nItems])
	buf := make([]int, 0, total)
	sol.Assigned = make([][]int, s.nItems)
	for i, it := range s.p.Items {
		sol.Stats.Desired += it.Replication
		held := s.markHolders(int32(i))
		done := s.nextStamp()
		start := len(buf)
		for _, m := range it.Current {
			if s.mark[m] == held {
				buf = append(buf, m)
				s.mark[m] = done
				sol.Stats.Kept++
			} else {
				sol.Stats.Removed++
			}
		}
		for _, m := range s.holdM[s.hOff[i] : s.hOff[i]+s.nh[i]] {
			if s.mark[m] == held {
				buf = append(buf, int(m))
				sol.Stats.Added++
			}
		}
		sol.Assigned[i] = buf[start:len(buf):len(buf)]
	}
	sol.Stats.Assigned = sol.Stats.Kept + sol.Stats.Added
	return sol
}

// resize returns s with length n and all elements zero, reusing its array
// when large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}
