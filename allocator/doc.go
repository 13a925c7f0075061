// Package allocator places items on members: journals on brokers, shards on
// consumer processes. It is the heart of Quire's failover and scaling.
//
// # Model
//
// A fleet lives under one etcd prefix (a keyspace root). Beneath it:
//
//	members/ZONE#SUFFIX            member spec, under the member's lease
//	items/ID                       item spec (a journal or shard spec)
//	assign/ID#ZONE#SUFFIX#SLOT     assignment, under the assigned member's lease
//
// A member is a process able to hold items, identified by its zone and a
// suffix unique within it, with a limit on the items it holds. An item
// wants a number of replicas (its replication). An assignment places one
// replica of an item on a member, in a slot: slot 0 is the primary. The
// value of an assignment is defined by the owner of the fleet (a broker's
// route status, a shard replica's status); whether a replica is "ready" (it
// has caught up and could lose a peer) is likewise decided by the owner,
// through a ReadyFunc, so the allocator stays generic. Zones, suffixes and
// item IDs never contain '#'.
//
// Member and item specs default to JSON documents (MemberSpec, ItemSpec);
// an owner may store richer specs, as long as their decoded values
// implement MemberValue and ItemValue.
//
// # Leader, solve and converge
//
// Every member runs Allocate. The member whose key is oldest (lowest create
// revision) is the leader; only it changes assignments. It solves the
// placement problem with package flow — maximize assigned replicas, then
// keep current assignments, then spread items across zones, then balance
// load — and converges the fleet towards the solution in rounds. Each round
// is a set of small groups of operations, one per item, each checked by
// compares on every key it changes or relies on, packed into few etcd
// transactions that also check the leader's own member key. A stale leader
// therefore changes nothing, and a round computed from an outdated view
// fails and is recomputed.
//
// Converge never makes things worse while moving: it never adds to a member
// at its limit; it adds a replacement replica first and removes the old one
// only once the item keeps as many ready replicas as it needs without it;
// and it hands the primary slot to a ready replica before removing the old
// primary.
//
// # Drain
//
// A member that marks itself exiting (Announcement.Drain) is given nothing
// by the solver, so its items move to other members as their spare capacity
// and readiness allow, and its Allocate returns once it holds nothing.
package allocator
