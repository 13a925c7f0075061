package allocator

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MemberName is how a member is written for people and on command lines:
// ZONE#SUFFIX, as in its key.
func MemberName(zone, suffix string) string { return zone + sep + suffix }

// ParseMemberName parses ZONE#SUFFIX.
func ParseMemberName(name string) (zone, suffix string, err error) {
	return parseMemberName(name)
}

// WhatIf is a change to a fleet that a planner asks about: members that
// drain, members that join, and items whose replication changes.
type WhatIf struct {
	Drain       []string // members, as ZONE#SUFFIX
	Add         []ScenarioMember
	Replication map[string]int // by item ID
}

// ParseAddedMember parses ZONE#SUFFIX:LIMIT, the form of a joining member.
func ParseAddedMember(s string) (ScenarioMember, error) {
	name, limit, ok := strings.Cut(s, ":")
	if !ok {
		return ScenarioMember{}, fmt.Errorf("member %q: want ZONE#SUFFIX:LIMIT", s)
	}
	zone, suffix, err := parseMemberName(name)
	if err != nil {
		return ScenarioMember{}, fmt.Errorf("member %q: %w", s, err)
	}
	n, err := strconv.Atoi(limit)
	if err != nil || n < 0 {
		return ScenarioMember{}, fmt.Errorf("member %q: limit %q is not a count of items", s, limit)
	}
	m := ScenarioMember{Zone: zone, Suffix: suffix, ItemLimit: n}
	return m, validateScenarioMember(m)
}

// ParseReplication parses ITEM=N, the form of a replication change.
func ParseReplication(s string) (id string, n int, err error) {
	id, count, ok := strings.Cut(s, "=")
	if !ok || id == "" {
		return "", 0, fmt.Errorf("replication %q: want ITEM=N", s)
	}
	if n, err = strconv.Atoi(count); err != nil || n < 0 {
		return "", 0, fmt.Errorf("replication %q: %q is not a count of replicas", s, count)
	}
	return id, n, nil
}

// Apply changes the scenario as w says. Every member drained and every
// item whose replication changes must be in the scenario, and every member
// added must not be.
func (sc *Scenario) Apply(w WhatIf) error {
	index := make(map[string]int, len(sc.Members))
	for i, m := range sc.Members {
		index[MemberName(m.Zone, m.Suffix)] = i
	}
	for _, name := range w.Drain {
		i, ok := index[name]
		if !ok {
			return fmt.Errorf("drain %q: no such member (members are %s)", name, sc.memberNames())
		}
		sc.Members[i].Exiting = true
	}
	for _, m := range w.Add {
		name := MemberName(m.Zone, m.Suffix)
		if _, ok := index[name]; ok {
			return fmt.Errorf("add %q: the fleet has that member already", name)
		}
		index[name] = len(sc.Members)
		sc.Members = append(sc.Members, m)
	}
	for id, n := range w.Replication {
		i := sc.itemIndex(id)
		if i < 0 {
			return fmt.Errorf("replication of %q: no such item", id)
		}
		sc.Items[i].Replication = n
	}
	return nil
}

func (sc *Scenario) itemIndex(id string) int {
	for i, it := range sc.Items {
		if it.ID == id {
			return i
		}
	}
	return -1
}

// memberNames lists the members, for an error naming what there is.
func (sc *Scenario) memberNames() string {
	if len(sc.Members) == 0 {
		return "none"
	}
	names := make([]string, len(sc.Members))
	for i, m := range sc.Members {
		names[i] = MemberName(m.Zone, m.Suffix)
	}
	return strings.Join(names, ", ")
}

// changes are the assignments of plan that sc lacks (added) and those of
// sc that plan lacks (removed), by item and member, each sorted by item
// then member: a primary handed to a replica the item had already is no
// change here.
func (sc *Scenario) changes(plan []ScenarioAssignment) (added, removed []ScenarioAssignment) {
	key := func(a ScenarioAssignment) string { return a.Item + sep + MemberName(a.Zone, a.Suffix) }
	diff := func(from, less []ScenarioAssignment) []ScenarioAssignment {
		in := make(map[string]bool, len(less))
		for _, a := range less {
			in[key(a)] = true
		}
		out := []ScenarioAssignment{}
		for _, a := range from {
			if !in[key(a)] {
				out = append(out, a)
			}
		}
		sort.Slice(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
		return out
	}
	return diff(plan, sc.Assignments), diff(sc.Assignments, plan)
}
