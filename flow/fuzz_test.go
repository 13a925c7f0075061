package flow

import (
	"testing"
)

// decodeProblem builds a valid, bounded Problem from fuzz input: up to 4
// zones, 16 members with limits 0–7 and 24 items with replication 0–5 and
// up to 5 current members.
func decodeProblem(data []byte) *Problem {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	p := &Problem{Zones: 1 + next()%4}
	for range next() % 17 {
		p.Members = append(p.Members, Member{Zone: next() % p.Zones, Limit: next() % 8})
	}
	for range next() % 25 {
		it := Item{Replication: next() % 6}
		for range next() % 6 {
			if len(p.Members) == 0 {
				break
			}
			m := next() % len(p.Members)
			if !contains(it.Current, m) {
				it.Current = append(it.Current, m)
			}
		}
		p.Items = append(p.Items, it)
	}
	return p
}

func FuzzSolve(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 6, 0, 3, 1, 3, 0, 3, 1, 3, 0, 0, 4, 3, 2, 0, 1})
	f.Add([]byte{3, 9, 0, 7, 1, 7, 2, 7, 0, 1, 1, 1, 2, 0, 0, 5, 1, 5, 3, 3, 0, 4, 8, 2, 5, 1})
	f.Add([]byte("a longer seed: zones, members and items with current holders..."))
	var s Solver
	f.Fuzz(func(t *testing.T, data []byte) {
		p := decodeProblem(data)
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded problem invalid: %v", err)
		}
		sol := s.Solve(p)
		if err := checkSolution(p, sol); err != nil {
			t.Fatalf("%v\nproblem: %+v", err, p)
		}
	})
}
