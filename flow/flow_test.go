package flow

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// refMaxFlow computes, by Edmonds–Karp on an explicit graph, the maximum
// flow of p's network with zone-item capacities zoneCap(i) and member
// capacities Limit. It shares no code with the solver.
func refMaxFlow(p *Problem, zoneCap func(i int) int) int {
	type edge struct{ to, cap, rev int }
	nI, nM, nZ := len(p.Items), len(p.Members), p.Zones
	src, sink := 0, 1
	item := func(i int) int { return 2 + i }
	zoneItem := func(i, z int) int { return 2 + nI + i*nZ + z }
	member := func(m int) int { return 2 + nI + nI*nZ + m }
	g := make([][]edge, 2+nI+nI*nZ+nM)
	add := func(u, v, c int) {
		g[u] = append(g[u], edge{v, c, len(g[v])})
		g[v] = append(g[v], edge{u, 0, len(g[u]) - 1})
	}
	for i, it := range p.Items {
		add(src, item(i), it.Replication)
		for z := 0; z < nZ; z++ {
			add(item(i), zoneItem(i, z), zoneCap(i))
		}
		for m, mem := range p.Members {
			add(zoneItem(i, mem.Zone), member(m), 1)
		}
	}
	for m, mem := range p.Members {
		add(member(m), sink, mem.Limit)
	}
	total := 0
	prev := make([][2]int, len(g)) // node, edge index into prev node's list
	for {
		for v := range prev {
			prev[v] = [2]int{-1, -1}
		}
		prev[src] = [2]int{src, -1}
		queue := []int{src}
		for len(queue) > 0 && prev[sink][0] < 0 {
			u := queue[0]
			queue = queue[1:]
			for k, e := range g[u] {
				if e.cap > 0 && prev[e.to][0] < 0 {
					prev[e.to] = [2]int{u, k}
					queue = append(queue, e.to)
				}
			}
		}
		if prev[sink][0] < 0 {
			return total
		}
		aug := int(^uint(0) >> 1)
		for v := sink; v != src; v = prev[v][0] {
			aug = min(aug, g[prev[v][0]][prev[v][1]].cap)
		}
		for v := sink; v != src; v = prev[v][0] {
			e := &g[prev[v][0]][prev[v][1]]
			e.cap -= aug
			g[v][e.rev].cap += aug
		}
		total += aug
	}
}

// facts are the spec-level quantities a test needs about a problem.
type facts struct {
	active int   // members with Limit > 0 (and some item to hold)
	zEff   int   // zones with such a member
	rep    []int // replication capped at active
}

func factsOf(p *Problem) facts {
	var f facts
	zones := map[int]bool{}
	for _, m := range p.Members {
		if m.Limit > 0 && len(p.Items) > 0 {
			f.active++
			zones[m.Zone] = true
		}
	}
	f.zEff = len(zones)
	for _, it := range p.Items {
		f.rep = append(f.rep, min(it.Replication, f.active))
	}
	return f
}

func (f facts) even(i int) int { return (f.rep[i] + f.zEff - 1) / max(f.zEff, 1) }

func (f facts) two(i int) int {
	if f.zEff >= 2 && f.rep[i] >= 2 {
		return f.rep[i] - 1
	}
	return f.rep[i]
}

// checkSolution reports every way sol is not a valid solution of p, and
// whether it misses a higher-priority property that the reference max flow
// shows is attainable.
func checkSolution(p *Problem, sol Solution) error {
	var errs []string
	errf := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(sol.Assigned) != len(p.Items) {
		return fmt.Errorf("len(Assigned) = %d, want %d", len(sol.Assigned), len(p.Items))
	}
	var st Stats
	load := make([]int, len(p.Members))
	for i, as := range sol.Assigned {
		it := p.Items[i]
		st.Desired += it.Replication
		if len(as) > it.Replication {
			errf("item %d: %d members assigned, replication %d", i, len(as), it.Replication)
		}
		seen := map[int]bool{}
		lastKept, sawNew := -1, false
		for _, m := range as {
			if m < 0 || m >= len(p.Members) {
				errf("item %d: member %d out of range", i, m)
				continue
			}
			if seen[m] {
				errf("item %d: member %d twice", i, m)
			}
			seen[m] = true
			load[m]++
			if k := slices.Index(it.Current, m); k >= 0 {
				st.Kept++
				if sawNew || k < lastKept {
					errf("item %d: kept member %d out of Current order in %v (Current %v)", i, m, as, it.Current)
				}
				lastKept = k
			} else {
				st.Added++
				sawNew = true
			}
		}
		for _, m := range it.Current {
			if !seen[m] {
				st.Removed++
			}
		}
	}
	for m, l := range load {
		if l > p.Members[m].Limit {
			errf("member %d: load %d over limit %d", m, l, p.Members[m].Limit)
		}
	}
	st.Assigned = st.Kept + st.Added
	if st != sol.Stats {
		errf("Stats = %+v, recomputed %+v", sol.Stats, st)
	}

	f := factsOf(p)
	want := refMaxFlow(p, func(i int) int { return p.Items[i].Replication })
	if sol.Stats.Assigned != want {
		errf("assigned %d slots, reference max flow is %d", sol.Stats.Assigned, want)
	}
	// Spreading: when the stricter zone caps cost no flow, they must hold.
	// A zone may exceed the even cap only with replicas it already had.
	zoneCount := func(i int, list []int) []int {
		c := make([]int, p.Zones)
		for _, m := range list {
			if p.Members[m].Limit > 0 {
				c[p.Members[m].Zone]++
			}
		}
		return c
	}
	if refMaxFlow(p, f.two) == want {
		for i, as := range sol.Assigned {
			for z, c := range zoneCount(i, as) {
				if c > f.two(i) {
					errf("item %d: %d replicas in zone %d, two-zone cap %d is attainable", i, c, z, f.two(i))
				}
			}
		}
	}
	if refMaxFlow(p, f.even) == want {
		for i, as := range sol.Assigned {
			cur := zoneCount(i, p.Items[i].Current)
			for z, c := range zoneCount(i, as) {
				if c > max(f.even(i), cur[z]) {
					errf("item %d: %d replicas in zone %d, even cap %d is attainable", i, c, z, f.even(i))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// randomProblem draws a valid problem: zones 1–4, members 1–30 with limits
// 0–10, items 0–60 with replication 0–5 and random current holders.
func randomProblem(r *rand.Rand) *Problem {
	p := &Problem{Zones: 1 + r.IntN(4)}
	for range 1 + r.IntN(30) {
		p.Members = append(p.Members, Member{Zone: r.IntN(p.Zones), Limit: r.IntN(11)})
	}
	for range r.IntN(61) {
		it := Item{Replication: r.IntN(6)}
		perm := r.Perm(len(p.Members))
		it.Current = perm[:r.IntN(min(len(perm), 6)+1)]
		p.Items = append(p.Items, it)
	}
	return p
}

func TestSolveRandomMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s Solver // reused: buffers must not leak between problems
	n := 400
	if testing.Short() {
		n = 50
	}
	for k := range n {
		p := randomProblem(r)
		if err := p.Validate(); err != nil {
			t.Fatalf("problem %d: Validate: %v", k, err)
		}
		sol := s.Solve(p)
		if err := checkSolution(p, sol); err != nil {
			t.Fatalf("problem %d: %v\nproblem: %+v", k, err, p)
		}
		// A re-solve from the solution is valid too.
		next := withCurrent(p, sol.Assigned)
		if err := checkSolution(next, s.Solve(next)); err != nil {
			t.Fatalf("problem %d re-solved: %v", k, err)
		}
	}
}

// withCurrent returns a copy of p whose items currently hold assigned.
func withCurrent(p *Problem, assigned [][]int) *Problem {
	q := &Problem{Zones: p.Zones, Members: slices.Clone(p.Members), Items: slices.Clone(p.Items)}
	for i := range q.Items {
		q.Items[i].Current = slices.Clone(assigned[i])
	}
	return q
}

// fleet builds a problem of n members spread round-robin over zones, all
// with the given limit, and items of replication r.
func fleet(zones, n, limit, items, r int) *Problem {
	p := &Problem{Zones: zones}
	for m := range n {
		p.Members = append(p.Members, Member{Zone: m % zones, Limit: limit})
	}
	for range items {
		p.Items = append(p.Items, Item{Replication: r})
	}
	return p
}

// loads returns each member's number of assigned items.
func loads(p *Problem, assigned [][]int) []int {
	l := make([]int, len(p.Members))
	for _, as := range assigned {
		for _, m := range as {
			l[m]++
		}
	}
	return l
}

// spread returns (min, max) load over members m with keep(m).
func spread(l []int, keep func(m int) bool) (lo, hi int) {
	lo, hi = int(^uint(0)>>1), -1
	for m, x := range l {
		if keep(m) {
			lo, hi = min(lo, x), max(hi, x)
		}
	}
	return lo, hi
}

func zonesSpanned(p *Problem, as []int) int {
	z := map[int]bool{}
	for _, m := range as {
		z[p.Members[m].Zone] = true
	}
	return len(z)
}

func mustSolve(t *testing.T, s *Solver, p *Problem) Solution {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	sol := s.Solve(p)
	if err := checkSolution(p, sol); err != nil {
		t.Fatal(err)
	}
	return sol
}

func TestIdempotent(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		zones, members, limit, items int
		r                            int
	}{
		{"even", 3, 30, 20, 100, 3},
		{"uneven-division", 3, 31, 20, 97, 3},
		{"two-zones-r2", 2, 9, 40, 70, 2},
		{"one-zone", 1, 7, 50, 50, 2},
		{"tight", 3, 12, 25, 100, 3},
		{"r5-four-zones", 4, 23, 30, 120, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Solver
			p := fleet(tc.zones, tc.members, tc.limit, tc.items, tc.r)
			first := mustSolve(t, &s, p)
			next := withCurrent(p, first.Assigned)
			again := mustSolve(t, &s, next)
			if again.Stats.Added != 0 || again.Stats.Removed != 0 {
				t.Fatalf("re-solve moved replicas: %+v", again.Stats)
			}
			for i := range first.Assigned {
				if !slices.Equal(first.Assigned[i], again.Assigned[i]) {
					t.Fatalf("item %d: %v then %v", i, first.Assigned[i], again.Assigned[i])
				}
			}
		})
	}
}

func TestIdempotentRandomFleets(t *testing.T) {
	// Random-ish fleets: random limits and replication, enough capacity.
	r := rand.New(rand.NewPCG(7, 8))
	var s Solver
	for k := range 50 {
		p := &Problem{Zones: 1 + r.IntN(4)}
		for range 3 + r.IntN(30) {
			p.Members = append(p.Members, Member{Zone: r.IntN(p.Zones), Limit: 5 + r.IntN(30)})
		}
		for range r.IntN(100) {
			p.Items = append(p.Items, Item{Replication: 1 + r.IntN(3)})
		}
		first := mustSolve(t, &s, p)
		again := mustSolve(t, &s, withCurrent(p, first.Assigned))
		if again.Stats.Added != 0 || again.Stats.Removed != 0 {
			t.Fatalf("fleet %d: re-solve moved replicas: %+v", k, again.Stats)
		}
	}
}

func TestChurn(t *testing.T) {
	const zones, n, limit, items, r = 3, 30, 40, 250, 3 // 750 slots: 25 each
	var s Solver
	p := fleet(zones, n, limit, items, r)
	sol := mustSolve(t, &s, p)
	all := func(int) bool { return true }
	if lo, hi := spread(loads(p, sol.Assigned), all); hi-lo > 1 {
		t.Errorf("from empty: loads in [%d, %d]", lo, hi)
	}
	for i, as := range sol.Assigned {
		if zonesSpanned(p, as) != 3 {
			t.Fatalf("item %d on %v spans %d zones", i, as, zonesSpanned(p, as))
		}
	}

	t.Run("member leaves", func(t *testing.T) {
		const gone = 7
		q := withCurrent(p, sol.Assigned)
		q.Members[gone].Limit = 0
		former := loads(p, sol.Assigned)[gone]
		next := mustSolve(t, &s, q)
		if next.Stats.Added != former || next.Stats.Removed != former {
			t.Errorf("member with %d items left: %+v", former, next.Stats)
		}
		checkZoneBalance(t, q, next.Assigned)
		for i, as := range next.Assigned {
			if zonesSpanned(q, as) != 3 {
				t.Fatalf("item %d on %v spans %d zones", i, as, zonesSpanned(q, as))
			}
		}
	})

	t.Run("member joins", func(t *testing.T) {
		q := withCurrent(p, sol.Assigned)
		q.Members = append(q.Members, Member{Zone: 1, Limit: limit})
		next := mustSolve(t, &s, q)
		slots := items * r
		if bound := (slots+n)/(n+1) + 2; next.Stats.Added > bound {
			t.Errorf("member joined: %+v, want Added ≤ %d", next.Stats, bound)
		}
		if next.Stats.Added != next.Stats.Removed {
			t.Errorf("member joined: %+v, want Added == Removed", next.Stats)
		}
		checkZoneBalance(t, q, next.Assigned)
	})
}

// checkZoneBalance checks that loads of members with positive limit differ
// by at most one within each zone. (Across zones, the even spread of R=3
// over 3 zones fixes each zone's total, so a zone with more members has
// lighter ones.)
func checkZoneBalance(t *testing.T, p *Problem, assigned [][]int) {
	t.Helper()
	l := loads(p, assigned)
	for z := range p.Zones {
		lo, hi := spread(l, func(m int) bool { return p.Members[m].Zone == z && p.Members[m].Limit > 0 })
		if hi-lo > 1 {
			t.Errorf("zone %d: loads in [%d, %d]: %v", z, lo, hi, l)
		}
	}
}

func TestZones(t *testing.T) {
	var s Solver
	t.Run("uneven zones still spread", func(t *testing.T) {
		// Zone 0 has one member, zone 1 nine; R=2 fits one replica per zone.
		p := &Problem{Zones: 2, Members: []Member{{Zone: 0, Limit: 50}}}
		for range 9 {
			p.Members = append(p.Members, Member{Zone: 1, Limit: 50})
		}
		for range 50 {
			p.Items = append(p.Items, Item{Replication: 2})
		}
		sol := mustSolve(t, &s, p)
		for i, as := range sol.Assigned {
			if len(as) != 2 || zonesSpanned(p, as) != 2 {
				t.Errorf("item %d on %v", i, as)
			}
		}
		// Even from a current assignment using only zone 1.
		cur := make([][]int, len(p.Items))
		for i := range cur {
			cur[i] = []int{1 + i%9, 1 + (i+1)%9}
		}
		q := withCurrent(p, cur)
		sol = mustSolve(t, &s, q)
		for i, as := range sol.Assigned {
			if len(as) != 2 || zonesSpanned(q, as) != 2 || as[0] != q.Items[i].Current[0] {
				t.Errorf("item %d on %v, current %v", i, as, q.Items[i].Current)
			}
		}
	})
	t.Run("spread yields to capacity", func(t *testing.T) {
		// The single zone-0 member holds 10: the other 40 items use zone 1 twice.
		p := fleet(2, 10, 50, 50, 2)
		for m := range p.Members {
			p.Members[m].Zone = min(m, 1)
		}
		p.Members[0].Limit = 10
		sol := mustSolve(t, &s, p)
		if sol.Stats.Assigned != 100 || loads(p, sol.Assigned)[0] != 10 {
			t.Errorf("stats %+v, zone-0 load %d", sol.Stats, loads(p, sol.Assigned)[0])
		}
	})
	t.Run("infeasible replication", func(t *testing.T) {
		p := fleet(2, 3, 10, 4, 5)
		sol := mustSolve(t, &s, p)
		for i, as := range sol.Assigned {
			if len(as) != 3 {
				t.Errorf("item %d: %v, want all 3 members", i, as)
			}
		}
	})
	t.Run("limit zero gets nothing", func(t *testing.T) {
		p := fleet(3, 9, 10, 20, 3)
		p.Members[4].Limit = 0
		p.Members[5].Limit = 0
		for i := range p.Items {
			p.Items[i].Current = []int{4, 5}
		}
		sol := mustSolve(t, &s, p)
		l := loads(p, sol.Assigned)
		if l[4] != 0 || l[5] != 0 {
			t.Errorf("loads %v", l)
		}
		if sol.Stats.Removed != 40 || sol.Stats.Assigned != 60 {
			t.Errorf("stats %+v", sol.Stats)
		}
	})
	t.Run("lowering limits sheds only the excess", func(t *testing.T) {
		// Limits are tight (126 for 120 slots) so that the lowered limits
		// stay at or above the members' proportional shares: with loose
		// limits, lowering one also lowers that member's share, and
		// balancing then sheds more than the excess.
		p := fleet(3, 9, 14, 120, 1) // loads 13 or 14
		first := mustSolve(t, &s, p)
		before := loads(p, first.Assigned)
		q := withCurrent(p, first.Assigned)
		q.Members[2].Limit = 11
		q.Members[6].Limit = 12
		excess := before[2] - 11 + before[6] - 12
		next := mustSolve(t, &s, q)
		if next.Stats.Removed != excess || next.Stats.Added != excess {
			t.Errorf("stats %+v, want %d moved", next.Stats, excess)
		}
		after := loads(q, next.Assigned)
		if after[2] != 11 || after[6] != 12 {
			t.Errorf("loads %v", after)
		}
		moved := 0
		for i, as := range next.Assigned {
			for _, m := range q.Items[i].Current {
				if !slices.Contains(as, m) && m != 2 && m != 6 {
					moved++
				}
			}
		}
		if moved != 0 {
			t.Errorf("%d replicas left members whose limit did not change", moved)
		}
	})
	t.Run("single zone", func(t *testing.T) {
		p := fleet(1, 5, 10, 20, 2)
		sol := mustSolve(t, &s, p)
		if lo, hi := spread(loads(p, sol.Assigned), func(int) bool { return true }); lo != 8 || hi != 8 {
			t.Errorf("loads in [%d, %d], want all 8", lo, hi)
		}
	})
	t.Run("balance by limit", func(t *testing.T) {
		// Limits 10, 20, 30 in one zone, 30 items of R=1: loads 5, 10, 15.
		p := &Problem{Zones: 1, Members: []Member{{0, 10}, {0, 20}, {0, 30}}}
		for range 30 {
			p.Items = append(p.Items, Item{Replication: 1})
		}
		sol := mustSolve(t, &s, p)
		if l := loads(p, sol.Assigned); !slices.Equal(l, []int{5, 10, 15}) {
			t.Errorf("loads %v, want [5 10 15]", l)
		}
	})
	t.Run("uneven zones level within zone", func(t *testing.T) {
		// Zone sizes 4, 3, 3 with R=3: each zone holds one replica of
		// every item, so zone 0 members hold 30 and the others 40.
		p := fleet(3, 10, 100, 120, 3)
		sol := mustSolve(t, &s, p)
		l := loads(p, sol.Assigned)
		for z := range 3 {
			lo, hi := spread(l, func(m int) bool { return m%3 == z })
			if hi-lo > 1 {
				t.Errorf("zone %d: loads in [%d, %d]: %v", z, lo, hi, l)
			}
		}
	})
}

func TestPrimaryOrderKept(t *testing.T) {
	var s Solver
	p := fleet(3, 6, 10, 3, 3)
	p.Items[0].Current = []int{4, 0}
	p.Items[1].Current = []int{2, 1, 0}
	p.Items[2].Current = []int{5}
	sol := mustSolve(t, &s, p)
	for i, as := range sol.Assigned {
		cur := p.Items[i].Current
		if !slices.Equal(as[:len(cur)], cur) {
			t.Errorf("item %d: %v does not start with current %v", i, as, cur)
		}
	}
}

func TestEmptyAndDegenerate(t *testing.T) {
	var s Solver
	for _, p := range []*Problem{
		{},
		{Zones: 2},
		{Zones: 1, Members: []Member{{0, 0}}},
		{Zones: 1, Items: []Item{{Replication: 3}}},
		{Zones: 2, Members: []Member{{1, 5}}, Items: []Item{{Replication: 0, Current: []int{0}}, {Replication: 2}}},
		{Zones: 3, Members: []Member{{0, 1 << 60}, {2, 1 << 62}}, Items: []Item{{Replication: 1 << 40}}},
	} {
		if err := p.Validate(); err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if err := checkSolution(p, s.Solve(p)); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := func() *Problem {
		return &Problem{
			Zones:   2,
			Members: []Member{{0, 3}, {1, 0}},
			Items:   []Item{{Replication: 2, Current: []int{1, 0}}, {}},
		}
	}
	for _, tc := range []struct {
		name   string
		modify func(p *Problem)
		want   string // substring of the error; "" for none
	}{
		{"valid", func(*Problem) {}, ""},
		{"negative zones", func(p *Problem) { p.Zones = -1; p.Members = nil }, "Zones is -1"},
		{"zone too large", func(p *Problem) { p.Members[1].Zone = 2 }, "Members[1].Zone is 2"},
		{"zone negative", func(p *Problem) { p.Members[0].Zone = -3 }, "Members[0].Zone is -3"},
		{"negative limit", func(p *Problem) { p.Members[1].Limit = -1 }, "Members[1].Limit is -1"},
		{"negative replication", func(p *Problem) { p.Items[1].Replication = -2 }, "Items[1].Replication is -2"},
		{"unknown member", func(p *Problem) { p.Items[0].Current[1] = 2 }, "Items[0].Current[1] is 2"},
		{"negative member", func(p *Problem) { p.Items[1].Current = []int{-1} }, "Items[1].Current[0] is -1"},
		{"member twice", func(p *Problem) { p.Items[0].Current = []int{0, 1, 0} }, "Items[0].Current[2] is member 0, which is listed twice"},
		{"too large", func(p *Problem) { p.Zones = 1 << 29; p.Items = make([]Item, 8) }, "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ok()
			tc.modify(p)
			err := p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want error containing %q", err, tc.want)
			}
		})
	}
}
