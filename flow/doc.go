// Package flow is the allocator's solver: it decides which members hold
// which item replicas. It is pure computation — no etcd, no I/O — so that it
// can be tested exhaustively and run by whichever process leads the fleet.
//
// # Problem and priorities
//
// A Problem lists members (each in a zone, each with a limit on the number of
// items it holds), items (each with a desired replication and the members
// holding it now) and the number of zones. Solve returns an assignment that
// honours, in strict priority order:
//
//  1. Maximize assigned slots. No assignment has more replicas in total, given
//     that a member holds an item at most once and at most Limit items.
//  2. Keep current assignments. Replicas move only when a higher priority (or
//     balance, see below) needs them to.
//  3. Spread each item across zones: at least two zones whenever at least two
//     zones have members that can take items and the item wants two replicas
//     or more; all zones evenly when capacity allows. Spreading outranks
//     keeping, as balance does: seeds beyond an item's even share of a zone
//     are dropped, and come back only if the even spread cannot be met.
//  4. Balance: loads proportional to limits; members with equal limits differ
//     by at most one item where the constraints above allow.
//
// # Network
//
// The solver computes a maximum flow on
//
//	source → item → zone-item → member → sink
//
// An item node's arc from the source has capacity R, its replication. There
// is one zone-item per item and zone; its arc from the item has a capacity
// bounding how many replicas that zone takes. A zone-item is adjacent to
// every member of its zone with capacity 1, so an item holds a member at most
// once. A member's arc to the sink bounds its load. A unit of flow through
// item i, zone-item (i, z) and member m is the assignment of i to m.
//
// Zone-item → member arcs are implicit: with a thousand members and a hundred
// thousand items there would be a hundred million of them. The solver keeps
// instead, per item, the few members it sends flow to (at most R), per
// member the items sending flow to it, and per zone its members. Residual
// adjacency follows: a zone-item may send to any member of its zone it does
// not already hold, and a member may return flow to any item it holds.
//
// Only zones having a member with a positive limit exist in the network
// (Z_eff of them); members with limit 0 have no arcs, so they get nothing. A
// replication above the number of members that can take items is capped,
// since the excess replicas could never be placed.
//
// # Priorities as phases
//
// Capacities encode the lower priorities; the solver starts tight and
// relaxes them in six phases, each computing a maximum flow of its network
// starting from the previous phase's flow:
//
//	phase  zone-item capacity        member capacity
//	1      even = ceil(R/Z_eff)      floor target
//	2      even                      round target
//	3      even                      ceil target
//	4      even                      Limit
//	5      two-zone = R−1            Limit
//	6      any = R                   Limit
//
// The two-zone level is R−1 when Z_eff ≥ 2 and R ≥ 2, so one zone cannot take
// every replica; otherwise it is R. A zone-item's capacity in a phase is
// never below the flow seeded into it, nor a member's below its seeded load.
//
// A member's targets are floor, nearest and ceiling of its share: its part,
// in proportion to its limit, of its zone's expected load. A zone's expected
// load is its part of D = Σ R in proportion to its total limit, clamped to
// what the even spread allows it (every item puts ⌊R/Z_eff⌋ replicas in every
// zone, and one more in R mod Z_eff of them) and rescaled to sum to D. Were
// targets blind to zones, members of a small zone, which the spread forces
// above the global average, would shed seeds on every solve that no other
// member may take. When D reaches Σ Limit, every target is Limit.
//
// Because capacities only grow, each phase's flow is feasible for the next.
// Flow placed in an early phase is rerouted later only along augmenting
// paths, which keep earlier flow's value: the final flow is a maximum flow of
// the last network (priority 1), and as much flow as possible was placed
// while the tighter spread and balance constraints held.
//
// Each phase runs in two stages. In the first, flow present when the stage
// begins is frozen: a member may return only units that arrived during the
// stage, so new flow can only take free room directly. The second stage lifts
// the freeze, so that existing replicas move only when that still adds flow
// (a minimum-cost flow would minimize moves exactly; freezing is the cheap
// approximation, and it keeps, say, a joining member from setting off a chain
// of swaps across zones).
//
// # Seeding
//
// Before phase 1 the flow is seeded with current assignments: each item keeps
// its current members, in slot order, while the member can take items, the
// item wants more replicas, the member's zone holds fewer than the even
// level of the item's replicas (spreading outranks keeping, as balance
// does), and the member is below its ceil target. Seeds beyond the target are dropped so that an
// overloaded member sheds load to underloaded ones (a joining member fills up
// this way); if nothing else needs the room, the dropped replica returns to
// its member in a later phase, because a zone-item tries its item's current
// members before any other member, and items that lost a seed are discharged
// first. A balanced solution has every load within its targets, so a re-solve
// keeps every seed; its flow is then maximum in every phase and nothing
// moves. Losing a member moves only its items.
//
// # Push-relabel
//
// Each stage saturates the source's arcs, computes exact heights by a
// global relabel, then discharges active nodes in FIFO order until none
// remain (a stage with no item short of replicas is skipped). A member
// returns its newest unit first: the one that just arrived is the one to
// bounce, not a replica it has long held. Excess that cannot reach the sink
// flows back to the source: the global relabel gives such nodes height n
// plus their distance to the source.
// The global relabel runs backwards from the sink over residual arcs; for the
// implicit arcs each zone keeps a list of its unlabeled zone-items, and a
// member's visit labels those of its zone that do not hold it, so the search
// costs O(nodes + flow). It is repeated whenever the discharges have examined
// about as many arcs as it costs.
//
// A zone-item's discharge walks, after its item's current members, its
// zone's members from an offset hashed from the item index. Without the
// offset every item would start at the same member and fill the zone in
// member order; with it, items spread over the zone, and the walk finds an
// admissible member after few steps.
//
// # Leveling
//
// Finally, within each zone, items move from the member with the highest
// load relative to its limit to the one with the lowest while that improves
// balance. The targets above are global, and when zones differ in size the
// even spread pushes zones off them; a move within a zone changes neither the
// flow value nor any zone's share, so it cannot undo a higher priority.
//
// # Using the solver
//
// Validate a Problem, then Solve it with a Solver, reused across calls to
// keep its buffers. Solutions list, per item, the kept current members in
// their slot order, then new members, so a caller can keep its primary.
package flow
