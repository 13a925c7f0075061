// Package broker serves journals: it is the process that holds journals'
// replicas, sequences their appends, replicates them, and serves reads.
//
// # Routes
//
// Brokers are allocator members of the brokers' fleet; journals are its
// items. A journal's route is the list of brokers assigned to it, in slot
// order: the primary first. Every broker mirrors the fleet's keyspace and
// resolves routes from it, so any broker can serve any request, proxying it
// to the right broker: appends to the primary, reads to a replica.
//
// # Appends and the pipeline
//
// Only the primary assigns offsets (invariant: one sequencer). It holds a
// pipeline: one Replicate stream to each other replica of the current
// route. Every replica keeps a spool — the journal's current fragment on
// local disk (package spool). Building the pipeline synchronizes spools:
// the primary proposes its spool; a replica holding a different one answers
// with it, and the primary rolls every replica to a new, empty spool at the
// greatest end offset any of them (or the fragment stores) knows, so no
// offset is ever written twice. Content past the primary's end that a
// peer committed alone (an append that failed elsewhere) the primary
// first copies from that peer (catchUp), so it does not rest on one
// replica.
//
// An append streams its content down the pipeline as pending content,
// then proposes a commit: the spool's new end and SHA-256, and the
// journal's registers after the append. Each replica commits and
// acknowledges; only when all have does the primary commit, and the
// append is acknowledged to the client with its offset range (invariant:
// acknowledged is durable; the primary never holds a committed byte its
// peers lack). A failure anywhere rolls pending content back and tears
// the pipeline down; the next append builds a new one.
//
// A replica that is not yet synchronized with the primary on the current
// route, or that lacks an offset (only the primary judges content gone),
// passes the read to the primary, or redirects the reader there
// (NOT_PRIMARY) when asked not to proxy, and a broker that
// restarts adopts a recovered spool of a replicated journal only if the
// journal's primary serves the same bytes over its offsets (else it is
// quarantined).
//
// A route change fences pipelines: each replica's route context is
// cancelled when its route changes, ending any pipeline stream built on the
// old route, and a replica accepts a pipeline only if its header's route
// equals its own view at (or after) the header's etcd revision.
//
// The primary's registers become every replica's at synchronization; a
// primary new to the journal (which no proposal reached) first adopts
// those of a peer that knows them, and a broker restarted on its disk
// takes them from its recovered spool.
//
// A replica that leaves a route persists its spool only if the primary
// serves no other content over its offsets: its spool may end in an
// append that committed on it alone as it left. A broker that resigned,
// isolated, keeps its spools for its next start to check.
//
// Once a pipeline is synchronized on a route, the primary writes that route
// into each replica's assignment value: the allocator counts a replica as
// ready only while its assignment holds the current route.
//
// # Isolation
//
// A broker that reaches etcd but none of its peers keeps its lease, and
// stays on routes whose pipelines it breaks. It resigns (revokes its
// lease, so its journals move at once) after Config.IsolationTimeout.
// Brokers cut off from some peers only report those peers in etcd, and
// the reports choose, the same for every broker, which of them resign
// (cuts.go). A broker starting waits until it reaches its peers before it
// announces itself. See isolation.go for what is decided and what is not.
//
// # Fragments
//
// A spool rolls when it reaches the journal's target fragment length, or
// at a flush-interval boundary, and the rolled spool is persisted to the
// journal's first fragment store by the persister, then deleted locally.
// Each replica keeps an index of the journal's fragments: its spools and
// the stores' listings, refreshed periodically, so a broker restarted with
// an empty disk serves old offsets from the store. A broker restarted on
// its old disk first recovers its spools (see spool.Recover) and persists
// them: even at replication 1, a killed broker loses no acknowledged byte.
package broker
