package flow

import (
	"fmt"
	"math"
)

// Problem is an allocation problem: which members should hold which items.
// Members, items and zones are identified by their index.
type Problem struct {
	// Zones is the number of zones; zones are 0..Zones-1.
	Zones int
	// Members are the processes that may hold items.
	Members []Member
	// Items are the things to place, each on Replication distinct members.
	Items []Item
}

// Member is a process that holds items.
type Member struct {
	// Zone is the failure domain of the member, in [0, Problem.Zones).
	Zone int
	// Limit is the most items the member may hold. A member with limit 0
	// takes nothing, which is how a draining member sheds its items.
	Limit int
}

// Item is a thing to be placed on members.
type Item struct {
	// Replication is the desired number of replicas, each on a distinct member.
	Replication int
	// Current lists the members holding the item now, in slot order (primary
	// first). Entries are distinct member indices.
	Current []int
}

// Solution is the result of Solver.Solve.
type Solution struct {
	// Assigned[i] lists the members assigned item i: members kept from
	// Current first, in Current's order, then new members.
	Assigned [][]int
	// Stats summarizes the solution.
	Stats Stats
}

// Stats summarizes a Solution and its difference from the current assignment.
type Stats struct {
	// Desired is Σ Replication over all items.
	Desired int
	// Assigned is the number of assigned slots: the maximum flow.
	Assigned int
	// Kept counts assignments present both in Current and in Assigned.
	Kept int
	// Added counts assignments in Assigned but not in Current.
	Added int
	// Removed counts assignments in Current but not in Assigned.
	Removed int
}

// maxNodes bounds the flow network so that every node index and height,
// including the 2n heights of nodes that cannot reach the sink, fits an int32.
const maxNodes = math.MaxInt32 / 4

// Validate reports the first problem in p, naming the entry and its value.
// A Problem that passes Validate may be given to Solver.Solve.
func (p *Problem) Validate() error {
	if p.Zones < 0 {
		return fmt.Errorf("flow: Zones is %d, want ≥ 0", p.Zones)
	}
	for m, mem := range p.Members {
		if mem.Zone < 0 || mem.Zone >= p.Zones {
			return fmt.Errorf("flow: Members[%d].Zone is %d, want in [0, %d)", m, mem.Zone, p.Zones)
		}
		if mem.Limit < 0 {
			return fmt.Errorf("flow: Members[%d].Limit is %d, want ≥ 0", m, mem.Limit)
		}
	}
	// The network has a node per item, per (item, zone) pair and per member.
	// Bound each factor first so that the product cannot overflow.
	if p.Zones > maxNodes || len(p.Items) > maxNodes || len(p.Members) > maxNodes ||
		int64(len(p.Items))*int64(p.Zones+1)+int64(len(p.Members))+2 > maxNodes {
		return fmt.Errorf("flow: problem too large: %d items × %d zones and %d members exceed %d network nodes",
			len(p.Items), p.Zones, len(p.Members), maxNodes)
	}
	// seen[m] == i+1 when member m has been seen in Items[i].Current.
	seen := make([]int, len(p.Members))
	for i, it := range p.Items {
		if it.Replication < 0 {
			return fmt.Errorf("flow: Items[%d].Replication is %d, want ≥ 0", i, it.Replication)
		}
		for k, m := range it.Current {
			if m < 0 || m >= len(p.Members) {
				return fmt.Errorf("flow: Items[%d].Current[%d] is %d, not a member index in [0, %d)",
					i, k, m, len(p.Members))
			}
			if seen[m] == i+1 {
				return fmt.Errorf("flow: Items[%d].Current[%d] is member %d, which is listed twice", i, k, m)
			}
			seen[m] = i + 1
		}
	}
	return nil
}
