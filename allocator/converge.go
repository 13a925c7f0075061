package allocator

import (
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadyFunc tells whether assignment a is a ready replica of its item,
// given all of the item's assignments. It is supplied by the fleet's owner:
// a broker replica is ready once it has joined the journal's route, a shard
// standby once it has caught up with its recovery log.
type ReadyFunc func(a AssignmentKV, all []AssignmentKV) bool

// AllReady is the ReadyFunc of fleets whose replicas are ready at once.
func AllReady(AssignmentKV, []AssignmentKV) bool { return true }

// roundStats counts the changes of a round, or of a group of it.
type roundStats struct {
	added, removed, moved int
}

func (s *roundStats) add(o roundStats) {
	s.added += o.added
	s.removed += o.removed
	s.moved += o.moved
}

// converger plans one converge round: the groups of checked operations
// that move the fleet in State one safe step towards a target.
type converger struct {
	s       *State
	target  [][]int // by item index: members in the solution
	ready   ReadyFunc
	initial string // value of a new assignment
	b       *batch

	pending []int      // adds planned this round, by member
	stats   roundStats // of the group being planned
}

func (c *converger) plan() error {
	c.pending = make([]int, len(c.s.Members))
	var err error
	c.s.groupByItem(func(id string, item int, as []AssignmentKV) {
		if err == nil {
			c.planItem(id, item, as)
			err = c.b.Checkpoint(c.stats)
			c.stats = roundStats{}
		}
	})
	return err
}

// planItem plans one item's step. Each step is one of: promote a replica
// to the vacant primary slot; or add missing replicas, then hand off the
// primary or remove surplus replicas where that keeps the item as ready
// as it needs.
func (c *converger) planItem(id string, item int, as []AssignmentKV) {
	var want []int
	if item >= 0 {
		want = c.target[item]
	}
	if len(as) != 0 && as[0].Slot != 0 {
		c.promote(as, want)
	} else {
		added := c.addMissing(id, as, want)
		c.removeSurplus(as, want, item, added)
	}
	if len(c.b.ops) == 0 {
		return // Nothing to change, so nothing to check.
	}
	if item >= 0 {
		c.b.If(clientv3.Compare(clientv3.ModRevision(string(c.s.Items[item].KV.Key)), "=", c.s.Items[item].KV.ModRevision))
	} else {
		c.b.If(clientv3.Compare(clientv3.CreateRevision(ItemKey(c.s.Root, id)), "=", 0))
	}
	for _, a := range as {
		c.b.If(clientv3.Compare(clientv3.ModRevision(string(a.KV.Key)), "=", a.KV.ModRevision))
	}
}

// keep reports whether assignment i of as is wanted: its member is in want
// and it is that member's first assignment of the item.
func keep(as []AssignmentKV, i int, want []int) bool {
	a := as[i]
	if a.Member < 0 || !contains(want, a.Member) {
		return false
	}
	for _, b := range as[:i] {
		if b.Member == a.Member {
			return false
		}
	}
	return true
}

// promote fills a vacant primary slot with the best remaining replica:
// wanted and ready, else ready, else wanted, else the lowest slot.
func (c *converger) promote(as []AssignmentKV, want []int) {
	best, score := 0, -1
	for i, a := range as {
		s := 0
		if c.isReady(a, as) {
			s += 2
		}
		if keep(as, i, want) {
			s++
		}
		if s > score {
			best, score = i, s
		}
	}
	c.move(as[best], 0)
}

// move rewrites assignment a at another slot, keeping its value and lease.
func (c *converger) move(a AssignmentKV, slot int) {
	key := AssignmentKey(c.s.Root, a.Item, a.Zone, a.Suffix, slot)
	c.b.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
	c.b.Then(clientv3.OpDelete(string(a.KV.Key)), clientv3.OpPut(key, string(a.KV.Value), leaseOpt(a.KV.Lease)))
	c.stats.moved++
}

// addMissing adds wanted members that do not hold the item, within their
// limits (counting adds planned earlier in this round, but not removals,
// which may yet fail).
func (c *converger) addMissing(id string, as []AssignmentKV, want []int) (added int) {
	used := make(map[int]bool, len(as))
	for _, a := range as {
		used[a.Slot] = true
	}
	for _, m := range want {
		if holds(as, m) || c.s.Load[m]+c.pending[m] >= c.s.limit(m) {
			continue
		}
		slot := 0
		for used[slot] || (slot == 0 && len(as) != 0) {
			slot++
		}
		used[slot] = true
		mkv := c.s.Members[m]
		key := AssignmentKey(c.s.Root, id, mkv.Zone, mkv.Suffix, slot)
		c.b.If(clientv3.Compare(clientv3.ModRevision(string(mkv.KV.Key)), "=", mkv.KV.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
		c.b.Then(clientv3.OpPut(key, c.initial, leaseOpt(mkv.KV.Lease)))
		c.pending[m]++
		c.stats.added++
		added++
	}
	return added
}

// removeSurplus removes unwanted replicas, each only if the item keeps at
// least `needed` ready replicas without it. Needed is the item's
// replication bounded by what the solution could give it, so that a
// replica dropped for want of capacity (a lowered limit or replication, a
// deleted item) may go once the rest are ready. A draining member's
// replica goes likewise, but never as the last ready replica of an item
// that wants one. Replicas of members that are gone hold nothing and
// always go. An unwanted primary with peers (existing, or added this round) first
// hands the primary slot to a ready wanted replica: in the same
// transaction that removes it, if it may be removed; otherwise the two
// swap slots and it is removed later.
//
// Readiness is counted, not assumed from the replica being removed: an
// owner may count every replica unready while a route changes (brokers
// do), and removing one then would lose the copy a new replica has yet to
// catch up from.
func (c *converger) removeSurplus(as []AssignmentKV, want []int, item, added int) {
	replication := 0
	if item >= 0 {
		replication = c.s.Items[item].Value.DesiredReplication()
	}
	ready := 0
	for _, a := range as {
		if c.isReady(a, as) {
			ready++
		}
	}
	for i, a := range as {
		if keep(as, i, want) {
			continue
		}
		isReady := c.isReady(a, as)
		need := min(len(want), replication)
		if replication > 0 && a.Member >= 0 && c.s.Members[a.Member].Value.IsExiting() {
			// A draining member's replica goes once the members that can
			// hold the item hold it ready, as any unwanted replica, but
			// never the last ready replica of an item that still wants
			// one: a drain that no other member can take over from waits
			// for capacity. (A deleted item's replicas always go.)
			need = max(need, 1)
		}
		after := ready
		if isReady {
			after--
		}
		removable := a.Member < 0 || after >= need
		if a.Slot == 0 && len(as)+added > 1 {
			h := c.heir(as, want, isReady)
			if h < 0 {
				continue // Wait for a replica able to take over.
			}
			c.move(as[h], 0)
			if !removable {
				c.move(a, as[h].Slot)
				continue
			}
		} else if !removable {
			continue
		}
		ready = after
		c.b.Then(clientv3.OpDelete(string(a.KV.Key)))
		c.stats.removed++
	}
}

// isReady tells whether a is a ready replica: its member is live and the
// owner says so.
func (c *converger) isReady(a AssignmentKV, as []AssignmentKV) bool {
	return a.Member >= 0 && c.ready(a, as)
}

// heir picks the replica of as that takes over from the unwanted primary
// as[0]: a wanted ready one or, if the primary is not ready itself, any
// wanted one. It returns -1 if there is none.
func (c *converger) heir(as []AssignmentKV, want []int, primaryReady bool) int {
	fallback := -1
	for i := 1; i < len(as); i++ {
		if !keep(as, i, want) {
			continue
		}
		if c.isReady(as[i], as) {
			return i
		}
		if fallback < 0 && !primaryReady {
			fallback = i
		}
	}
	return fallback
}

func leaseOpt(lease int64) clientv3.OpOption {
	return clientv3.WithLease(clientv3.LeaseID(lease))
}

func holds(as []AssignmentKV, m int) bool {
	for _, a := range as {
		if a.Member == m {
			return true
		}
	}
	return false
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
