package allocator

import (
	"sort"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quire-dev/quire/keyspace"
)

// State is a fleet as of one keyspace revision, indexed for allocation.
// It is immutable once built.
type State struct {
	Root     string
	Revision int64

	Members     []MemberKV     // sorted by zone, then suffix
	Items       []ItemKV       // sorted by ID
	Assignments []AssignmentKV // sorted by item, then zone, suffix, slot

	// Load[m] is the number of assignments held by Members[m].
	Load []int
	// Leader indexes the member with the oldest key, or is -1 when there
	// are no members.
	Leader int

	memberIndex map[memberName]int // index in Members
	itemIndex   map[string]int     // ID -> index in Items
}

// memberName keys members by zone and suffix without building strings.
type memberName struct{ zone, suffix string }

// MemberKV is a member and its etcd key.
type MemberKV struct {
	Member
	KV *mvccpb.KeyValue
}

// ItemKV is an item and its etcd key.
type ItemKV struct {
	Item
	KV *mvccpb.KeyValue
}

// AssignmentKV is an assignment and its etcd key. Member indexes State's
// Members, or is -1 if the assigned member has no key.
type AssignmentKV struct {
	Assignment
	KV     *mvccpb.KeyValue
	Member int
}

// NewState indexes a snapshot of a fleet's keyspace rooted at root.
func NewState(root string, kvs keyspace.KeyValues, rev int64) *State {
	s := &State{
		Root:        root,
		Revision:    rev,
		Leader:      -1,
		memberIndex: make(map[memberName]int),
	}
	for kv := range kvs.Prefixed(root + MembersPrefix).All() {
		if m, ok := kv.Decoded.(Member); ok {
			s.memberIndex[memberName{m.Zone, m.Suffix}] = len(s.Members)
			s.Members = append(s.Members, MemberKV{Member: m, KV: kv.Raw})
		}
	}
	items := kvs.Prefixed(root + ItemsPrefix)
	n := items.Len()
	s.itemIndex = make(map[string]int, n)
	s.Items = make([]ItemKV, 0, n)
	for kv := range items.All() {
		if it, ok := kv.Decoded.(Item); ok {
			s.itemIndex[it.ID] = len(s.Items)
			s.Items = append(s.Items, ItemKV{Item: it, KV: kv.Raw})
		}
	}
	s.indexAssignments(kvs.Prefixed(root + AssignmentsPrefix))
	s.Leader = oldest(s.Members)
	return s
}

func (s *State) indexAssignments(kvs keyspace.KeyValues) {
	s.Load = make([]int, len(s.Members))
	s.Assignments = make([]AssignmentKV, 0, kvs.Len())
	for kv := range kvs.All() {
		a, ok := kv.Decoded.(Assignment)
		if !ok {
			continue
		}
		m, ok := s.memberIndex[memberName{a.Zone, a.Suffix}]
		if !ok {
			m = -1
		} else {
			s.Load[m]++
		}
		s.Assignments = append(s.Assignments, AssignmentKV{Assignment: a, KV: kv.Raw, Member: m})
	}
	// Keys order slots as text ("10" < "2"), and IDs by the bytes after
	// them; order by item, then slot, if they are not already.
	less := func(a, b *AssignmentKV) bool {
		if a.Item != b.Item {
			return a.Item < b.Item
		}
		return a.Slot < b.Slot
	}
	for i := 1; i < len(s.Assignments); i++ {
		if less(&s.Assignments[i], &s.Assignments[i-1]) {
			sort.SliceStable(s.Assignments, func(i, j int) bool { return less(&s.Assignments[i], &s.Assignments[j]) })
			break
		}
	}
}

func oldest(members []MemberKV) int {
	leader := -1
	for i := range members {
		if leader == -1 || members[i].KV.CreateRevision < members[leader].KV.CreateRevision {
			leader = i
		}
	}
	return leader
}

// MemberIndex returns the index of member ZONE#SUFFIX, or -1.
func (s *State) MemberIndex(zone, suffix string) int {
	if i, ok := s.memberIndex[memberName{zone, suffix}]; ok {
		return i
	}
	return -1
}

// ItemIndex returns the index of item id, or -1.
func (s *State) ItemIndex(id string) int {
	if i, ok := s.itemIndex[id]; ok {
		return i
	}
	return -1
}

// ItemAssignments returns the assignments of item id, ordered by slot.
func (s *State) ItemAssignments(id string) []AssignmentKV {
	lo := sort.Search(len(s.Assignments), func(i int) bool { return s.Assignments[i].Item >= id })
	hi := lo
	for hi < len(s.Assignments) && s.Assignments[hi].Item == id {
		hi++
	}
	return s.Assignments[lo:hi]
}

// MemberAssignments returns the assignments held by member ZONE#SUFFIX.
func (s *State) MemberAssignments(zone, suffix string) []AssignmentKV {
	var out []AssignmentKV
	for _, a := range s.Assignments {
		if a.Zone == zone && a.Suffix == suffix {
			out = append(out, a)
		}
	}
	return out
}

// limit is the effective limit of member m: zero while it is exiting.
func (s *State) limit(m int) int {
	v := s.Members[m].Value
	if v.IsExiting() {
		return 0
	}
	return max(v.ItemLimit(), 0)
}

// groupByItem calls fn for each item ID that has an item key or
// assignments, in order, with its item index (or -1) and assignments.
func (s *State) groupByItem(fn func(id string, item int, as []AssignmentKV)) {
	ai := 0
	for ii := 0; ii < len(s.Items) || ai < len(s.Assignments); {
		var id string
		switch {
		case ii == len(s.Items):
			id = s.Assignments[ai].Item
		case ai == len(s.Assignments) || s.Items[ii].ID <= s.Assignments[ai].Item:
			id = s.Items[ii].ID
		default:
			id = s.Assignments[ai].Item
		}
		start := ai
		for ai < len(s.Assignments) && s.Assignments[ai].Item == id {
			ai++
		}
		item := -1
		if ii < len(s.Items) && s.Items[ii].ID == id {
			item = ii
			ii++
		}
		fn(id, item, s.Assignments[start:ai])
	}
}
