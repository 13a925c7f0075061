package allocator

import (
	"fmt"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quire-dev/quire/flow"
	"github.com/quire-dev/quire/keyspace"
)

// Scenario describes a fleet without etcd, for planning: what would the
// allocator do with these members, items and current assignments?
type Scenario struct {
	Members     []ScenarioMember     `json:"members" yaml:"members"`
	Items       []ScenarioItem       `json:"items" yaml:"items"`
	Assignments []ScenarioAssignment `json:"assignments,omitempty" yaml:"assignments,omitempty"`
}

// ScenarioMember is a member of a Scenario.
type ScenarioMember struct {
	Zone      string `json:"zone" yaml:"zone"`
	Suffix    string `json:"suffix" yaml:"suffix"`
	ItemLimit int    `json:"itemLimit" yaml:"itemLimit"`
	Exiting   bool   `json:"exiting,omitempty" yaml:"exiting,omitempty"`
}

// ScenarioItem is an item of a Scenario.
type ScenarioItem struct {
	ID          string `json:"id" yaml:"id"`
	Replication int    `json:"replication" yaml:"replication"`
}

// ScenarioAssignment is an assignment of a Scenario.
type ScenarioAssignment struct {
	Item   string `json:"item" yaml:"item"`
	Zone   string `json:"zone" yaml:"zone"`
	Suffix string `json:"suffix" yaml:"suffix"`
	Slot   int    `json:"slot" yaml:"slot"`
}

// Validate reports the first bad entry of the scenario, naming it.
func (sc *Scenario) Validate() error {
	members := make(map[string]bool)
	for i, m := range sc.Members {
		if err := validateScenarioMember(m); err != nil {
			return fmt.Errorf("members[%d]: %w", i, err)
		}
		name := m.Zone + sep + m.Suffix
		if members[name] {
			return fmt.Errorf("members[%d]: duplicate member zone %q suffix %q", i, m.Zone, m.Suffix)
		}
		members[name] = true
	}
	items := make(map[string]bool)
	for i, it := range sc.Items {
		if err := ValidateToken("id", it.ID, true); err != nil {
			return fmt.Errorf("items[%d]: %w", i, err)
		}
		if it.Replication < 0 {
			return fmt.Errorf("items[%d] (%s): replication %d is negative", i, it.ID, it.Replication)
		}
		if items[it.ID] {
			return fmt.Errorf("items[%d]: duplicate item %q", i, it.ID)
		}
		items[it.ID] = true
	}
	return validateScenarioAssignments(sc.Assignments, members, items)
}

func validateScenarioMember(m ScenarioMember) error {
	if err := ValidateToken("zone", m.Zone, false); err != nil {
		return err
	}
	if err := ValidateToken("suffix", m.Suffix, false); err != nil {
		return err
	}
	if m.ItemLimit < 0 {
		return fmt.Errorf("member %s: itemLimit %d is negative", MemberName(m.Zone, m.Suffix), m.ItemLimit)
	}
	return nil
}

func validateScenarioAssignments(as []ScenarioAssignment, members, items map[string]bool) error {
	seen := make(map[string]bool)
	for i, a := range as {
		name := a.Zone + sep + a.Suffix
		switch {
		case !items[a.Item]:
			return fmt.Errorf("assignments[%d]: unknown item %q", i, a.Item)
		case !members[name]:
			return fmt.Errorf("assignments[%d]: unknown member zone %q suffix %q", i, a.Zone, a.Suffix)
		case a.Slot < 0:
			return fmt.Errorf("assignments[%d]: slot %d is negative", i, a.Slot)
		case seen[a.Item+sep+name]:
			return fmt.Errorf("assignments[%d]: item %q is assigned to member %s twice", i, a.Item, MemberName(a.Zone, a.Suffix))
		case seen[fmt.Sprintf("%s%s%d", a.Item, sep+sep, a.Slot)]:
			return fmt.Errorf("assignments[%d]: item %q has slot %d twice", i, a.Item, a.Slot)
		}
		seen[a.Item+sep+name] = true
		seen[fmt.Sprintf("%s%s%d", a.Item, sep+sep, a.Slot)] = true
	}
	return nil
}

// State builds the State of a valid scenario, as if its keys were in etcd
// under root "" (member keys created in scenario order).
func (sc *Scenario) State() *State {
	kvs, rev := sc.keyValues()
	return NewState("", kvs, rev)
}

// keyValues are the decoded keys of a scenario and their revision.
func (sc *Scenario) keyValues() (keyspace.KeyValues, int64) {
	var kvs []*keyspace.KeyValue
	add := func(key string, rev int64, v any) {
		kvs = append(kvs, &keyspace.KeyValue{
			Raw:     &mvccpb.KeyValue{Key: []byte(key), CreateRevision: rev, ModRevision: rev},
			Decoded: v,
		})
	}
	for i, m := range sc.Members {
		add(MemberKey("", m.Zone, m.Suffix), int64(i+1),
			Member{Zone: m.Zone, Suffix: m.Suffix, Value: MemberSpec{Limit: m.ItemLimit, Exiting: m.Exiting}})
	}
	for _, it := range sc.Items {
		add(ItemKey("", it.ID), 1, Item{ID: it.ID, Value: ItemSpec{Replication: it.Replication}})
	}
	for _, a := range sc.Assignments {
		add(AssignmentKey("", a.Item, a.Zone, a.Suffix, a.Slot), 1,
			Assignment{Item: a.Item, Zone: a.Zone, Suffix: a.Suffix, Slot: a.Slot})
	}
	return keyspace.NewKeyValues(kvs...), int64(len(sc.Members) + 1)
}

// ScenarioOf describes a live fleet's state as a Scenario.
func ScenarioOf(s *State) *Scenario {
	sc := &Scenario{}
	for _, m := range s.Members {
		sc.Members = append(sc.Members, ScenarioMember{
			Zone: m.Zone, Suffix: m.Suffix, ItemLimit: m.Value.ItemLimit(), Exiting: m.Value.IsExiting(),
		})
	}
	for _, it := range s.Items {
		sc.Items = append(sc.Items, ScenarioItem{ID: it.ID, Replication: it.Value.DesiredReplication()})
	}
	for _, a := range s.Assignments {
		if a.Member >= 0 && s.ItemIndex(a.Item) >= 0 {
			sc.Assignments = append(sc.Assignments, ScenarioAssignment{Item: a.Item, Zone: a.Zone, Suffix: a.Suffix, Slot: a.Slot})
		}
	}
	return sc
}

// Plan is what the allocator would converge a fleet to.
type Plan struct {
	Assignments []ScenarioAssignment `json:"assignments" yaml:"assignments"`
	// Added and Removed are the moves: assignments to members that do not
	// hold the item now, and current ones the plan drops.
	Added   []ScenarioAssignment `json:"added" yaml:"added"`
	Removed []ScenarioAssignment `json:"removed" yaml:"removed"`
	Stats   PlanStats            `json:"stats" yaml:"stats"`
}

// PlanStats summarize a Plan.
type PlanStats struct {
	DesiredSlots  int     `json:"desiredSlots" yaml:"desiredSlots"`
	AssignedSlots int     `json:"assignedSlots" yaml:"assignedSlots"`
	Kept          int     `json:"kept" yaml:"kept"`
	Added         int     `json:"added" yaml:"added"`
	Removed       int     `json:"removed" yaml:"removed"`
	SolveSeconds  float64 `json:"solveSeconds" yaml:"solveSeconds"`
}

// PlanScenario solves a valid scenario. Kept assignments keep their slots
// (if the primary is not kept, the kept replica of lowest slot becomes
// primary); new ones take the lowest free slots. Assignments are sorted by
// item, then slot.
func PlanScenario(sc *Scenario) *Plan {
	s := sc.State()
	var solver flow.Solver
	start := time.Now()
	sol := solver.Solve(s.Problem())
	plan := &Plan{Stats: PlanStats{
		DesiredSlots:  sol.Stats.Desired,
		AssignedSlots: sol.Stats.Assigned,
		Kept:          sol.Stats.Kept,
		Added:         sol.Stats.Added,
		Removed:       sol.Stats.Removed,
		SolveSeconds:  time.Since(start).Seconds(),
	}}
	plan.Assignments = []ScenarioAssignment{}
	for i, it := range s.Items {
		plan.Assignments = append(plan.Assignments, finalSlots(s, it.ID, sol.Assigned[i])...)
	}
	plan.Added, plan.Removed = sc.changes(plan.Assignments)
	return plan
}

// finalSlots places the members of want in slots, keeping current slots.
func finalSlots(s *State, id string, want []int) []ScenarioAssignment {
	slots := make(map[int]int) // member -> slot
	used := make(map[int]bool)
	for _, a := range s.ItemAssignments(id) {
		if a.Member >= 0 && contains(want, a.Member) {
			if _, dup := slots[a.Member]; !dup {
				slots[a.Member] = a.Slot
				used[a.Slot] = true
			}
		}
	}
	if !used[0] && len(slots) != 0 {
		lowest := -1
		for m, slot := range slots {
			if lowest < 0 || slot < slots[lowest] || (slot == slots[lowest] && m < lowest) {
				lowest = m
			}
		}
		delete(used, slots[lowest])
		slots[lowest], used[0] = 0, true
	}
	out := make([]ScenarioAssignment, 0, len(want))
	for _, m := range want {
		slot, ok := slots[m]
		if !ok {
			for slot = 0; used[slot]; slot++ {
			}
			used[slot] = true
		}
		out = append(out, ScenarioAssignment{Item: id, Zone: s.Members[m].Zone, Suffix: s.Members[m].Suffix, Slot: slot})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}
