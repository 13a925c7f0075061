package allocator

import (
	"hash/fnv"
	"strconv"

	"github.com/quire-dev/quire/flow"
)

// Problem builds the flow problem of a State: zones indexed in the order
// they first appear among the (sorted) members; an exiting member's limit
// is zero; an item's current members are its assigned members in slot
// order, each once, ignoring assignments to members without keys.
func (s *State) Problem() *flow.Problem {
	p := &flow.Problem{
		Members: make([]flow.Member, len(s.Members)),
		Items:   make([]flow.Item, len(s.Items)),
	}
	zones := make(map[string]int)
	for m, mkv := range s.Members {
		z, ok := zones[mkv.Zone]
		if !ok {
			z = len(zones)
			zones[mkv.Zone] = z
		}
		p.Members[m] = flow.Member{Zone: z, Limit: s.limit(m)}
	}
	p.Zones = len(zones)
	// Items' Current slices share one backing array, cut to capacity so an
	// append by one cannot overwrite the next.
	backing := make([]int, 0, len(s.Assignments))
	for i, it := range s.Items {
		p.Items[i].Replication = max(it.Value.DesiredReplication(), 0)
		start := len(backing)
		for _, a := range s.ItemAssignments(it.ID) {
			if a.Member >= 0 && !contains(backing[start:], a.Member) {
				backing = append(backing, a.Member)
			}
		}
		p.Items[i].Current = backing[start:len(backing):len(backing)]
	}
	return p
}

// fingerprint hashes the inputs of a solve that are not assignments:
// members (key, limit, exiting) and items (ID, replication). While it is
// unchanged, the leader keeps converging towards its last solution rather
// than solving again: its own converge steps change assignments, and
// re-solving mid-move would only risk undoing moves under way.
func (s *State) fingerprint() uint64 {
	h := fnv.New64a()
	for m, mkv := range s.Members {
		h.Write(mkv.KV.Key)
		h.Write([]byte{0})
		h.Write(strconv.AppendInt(nil, int64(s.limit(m)), 10))
		h.Write([]byte{0})
	}
	h.Write([]byte{1})
	for _, it := range s.Items {
		h.Write([]byte(it.ID))
		h.Write([]byte{0})
		h.Write(strconv.AppendInt(nil, int64(it.Value.DesiredReplication()), 10))
		h.Write([]byte{0})
	}
	return h.Sum64()
}
