package allocator

import (
	"strings"
	"testing"
)

// threeMembers is a converged fleet of three members in three zones and
// two items at replication 2.
func threeMembers() *Scenario {
	sc := &Scenario{
		Members: []ScenarioMember{{Zone: "a", Suffix: "m1", ItemLimit: 10}, {Zone: "b", Suffix: "m2", ItemLimit: 10}, {Zone: "c", Suffix: "m3", ItemLimit: 10}},
		Items:   []ScenarioItem{{ID: "x", Replication: 2}, {ID: "y", Replication: 2}},
	}
	sc.Assignments = PlanScenario(sc).Assignments
	return sc
}

func moves(as []ScenarioAssignment) string {
	var s []string
	for _, a := range as {
		s = append(s, a.Item+"@"+MemberName(a.Zone, a.Suffix))
	}
	return strings.Join(s, " ")
}

func TestWhatIfDrainMovesOnlyTheDrainedMembersItems(t *testing.T) {
	sc := threeMembers()
	if p := PlanScenario(sc); len(p.Added)+len(p.Removed) != 0 {
		t.Fatalf("a converged fleet plans moves: +%s -%s", moves(p.Added), moves(p.Removed))
	}
	// The member holding both items drains: each moves to the member
	// that lacks it, and nothing else moves.
	var drained string
	held := map[string]int{}
	for _, a := range sc.Assignments {
		held[MemberName(a.Zone, a.Suffix)]++
	}
	for name, n := range held {
		if n == 2 {
			drained = name
		}
	}
	if err := sc.Apply(WhatIf{Drain: []string{drained}}); err != nil {
		t.Fatal(err)
	}
	p := PlanScenario(sc)
	if len(p.Removed) != 2 || len(p.Added) != 2 {
		t.Fatalf("drain of %s: +%s -%s, want both its items moved", drained, moves(p.Added), moves(p.Removed))
	}
	for _, a := range p.Removed {
		if MemberName(a.Zone, a.Suffix) != drained {
			t.Errorf("drain of %s removes %s", drained, moves([]ScenarioAssignment{a}))
		}
	}
	if p.Stats.Added != len(p.Added) || p.Stats.Removed != len(p.Removed) {
		t.Errorf("stats %+v disagree with moves +%d -%d", p.Stats, len(p.Added), len(p.Removed))
	}
}

func TestWhatIfAddAndReplication(t *testing.T) {
	sc := threeMembers()
	m, err := ParseAddedMember("d#m4:10")
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Apply(WhatIf{Add: []ScenarioMember{m}, Replication: map[string]int{"x": 4}}); err != nil {
		t.Fatal(err)
	}
	p := PlanScenario(sc)
	if got := moves(p.Added); !strings.Contains(got, "x@d#m4") || len(p.Added) != 2 {
		t.Errorf("x at replication 4 with a 4th member: added %s, want x on the two members lacking it, d#m4 among them", got)
	}
	if len(p.Removed) != 0 {
		t.Errorf("removed %s, want nothing", moves(p.Removed))
	}
}

func TestWhatIfRefusesUnknownNames(t *testing.T) {
	for _, w := range []WhatIf{
		{Drain: []string{"z#nope"}},
		{Add: []ScenarioMember{{Zone: "a", Suffix: "m1", ItemLimit: 1}}},
		{Replication: map[string]int{"nope": 1}},
	} {
		if err := threeMembers().Apply(w); err == nil || !strings.Contains(err.Error(), "m1") && !strings.Contains(err.Error(), "nope") {
			t.Errorf("%+v: %v, want an error naming it", w, err)
		}
	}
	for _, s := range []string{"a#m", "a:3", "#m:3", "a#m:-1", "a#m:x", "a b#m:1"} {
		if _, err := ParseAddedMember(s); err == nil {
			t.Errorf("ParseAddedMember(%q) accepted", s)
		}
	}
	for _, s := range []string{"x", "=2", "x=-1", "x=two"} {
		if _, _, err := ParseReplication(s); err == nil {
			t.Errorf("ParseReplication(%q) accepted", s)
		}
	}
	if id, n, err := ParseReplication("a/b=3"); id != "a/b" || n != 3 || err != nil {
		t.Errorf("ParseReplication(a/b=3) = %q %d %v", id, n, err)
	}
}
