package flow

import (
	"testing"
)

// benchFleet is the allocator at scale: 1,000 members in 3 zones, each
// with limit 400, and 100,000 items of replication 3.
func benchFleet() *Problem { return fleet(3, 1000, 400, 100_000, 3) }

// benchSolve solves p b.N times with one Solver and reports the fraction of
// assigned slots that are new.
func benchSolve(b *testing.B, p *Problem) {
	b.Helper()
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	var s Solver
	s.Solve(p) // warm the buffers, as a long-lived leader would
	b.ReportAllocs()
	b.ResetTimer()
	var sol Solution
	for b.Loop() {
		sol = s.Solve(p)
	}
	b.StopTimer()
	b.ReportMetric(float64(sol.Stats.Added)/float64(sol.Stats.Assigned), "moved-fraction")
	b.ReportMetric(float64(s.counters.globals), "global-relabels")
	b.ReportMetric(float64(s.counters.pushes), "pushes")
	if sol.Stats.Assigned != 300_000 {
		b.Fatalf("assigned %d slots, want 300000", sol.Stats.Assigned)
	}
}

func BenchmarkSolveFromEmpty(b *testing.B) {
	benchSolve(b, benchFleet())
}

func BenchmarkSolveMemberLeaves(b *testing.B) {
	p := benchFleet()
	var s Solver
	q := withCurrent(p, s.Solve(p).Assigned)
	q.Members[500].Limit = 0 // as if gone: it may hold nothing
	benchSolve(b, q)
}

func BenchmarkSolveMemberJoins(b *testing.B) {
	p := benchFleet()
	var s Solver
	q := withCurrent(p, s.Solve(p).Assigned)
	q.Members = append(q.Members, Member{Zone: 1, Limit: 400})
	benchSolve(b, q)
}

func BenchmarkSolveUnchanged(b *testing.B) {
	p := benchFleet()
	var s Solver
	benchSolve(b, withCurrent(p, s.Solve(p).Assigned))
}
