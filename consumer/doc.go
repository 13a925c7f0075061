// Package consumer is Quire's consumer framework: a Go application
// processes journals as shards, each served by one primary replica that
// applies every message's effect exactly once, with hot standbys ready to
// take over within seconds.
//
// # Shards and replicas
//
// A shard is described by a ShardSpec, stored in etcd under the
// application's prefix (ROOT/items/ID): the journals it reads (its
// sources), its recovery log, its number of hot standbys and its
// transaction durations. Shards are allocator items: the consumer
// processes of an application are the members of its fleet, and the
// allocator assigns each shard 1+HotStandbys replicas, spread across
// zones; slot 0 is the primary.
//
// Each process runs a Server. Its resolver maps the process's assignments
// to replicas, whose lives are state machines reported in the assignments'
// values (Status, by checked etcd transactions):
//
//	IDLE → BACKFILL → STANDBY → PRIMARY, and FAILED on an error.
//
// A standby plays the shard's recovery log from its stored hints
// (BACKFILL) to the write head, then tails it (STANDBY): its copy of the
// store stays warm. When its assignment moves to slot 0 it finishes
// playback, takes over the recovery log (which fences the previous
// primary: invariant 6), opens the store, restores the checkpoint,
// re-writes the checkpoint's acknowledgements (completing or rolling back
// an interrupted commit), and processes. A primary is never demoted: when
// its assignment leaves slot 0 it stops, and a fresh standby starts.
//
// # Transactions
//
// A primary reads its sources through message.Decoders (each decodes its
// source in parallel, in up to message.DefaultDecoders goroutines) and
// sequences them (message.Sequencer: exactly once, committed messages
// only). A transaction begins with the first message ready, goes
// on while messages are ready and MaxTxnDuration has not passed, and
// closes when they stall, once MinTxnDuration has passed and the previous
// transaction's commit has resolved. The Application's FinalizeTxn then
// writes its state, the framework builds the acknowledgements of what the
// transaction published (Shard.Publisher), and commits the store together
// with the checkpoint — the sources' sequencer states and the
// acknowledgements (invariant 5) — and once the commit is durable it
// writes the acknowledgements. Transactions are pipelined: the next one
// consumes while the previous one's commit becomes durable
// (store.Pipeliner), but does not commit before it resolved.
//
// An error or panic of the application, or an error of its store, fails
// the shard: FAILED, with the error, in its status and the logs; the
// process and its other shards go on. Server.Unassign (quire shards
// unassign --failed) removes failed assignments so the shard starts
// afresh.
//
// # Handoff and failover
//
// A process that drains (Run's drain channel, on SIGTERM) is given no
// shards by the allocator, which moves each of its primaries to a ready
// standby (the standby's assignment moves to slot 0 as the old one is
// removed) and its standbys elsewhere, then Run returns. A process that
// dies leaves its lease to expire (Config.LeaseTTL); its standbys then
// become primaries the same way.
//
// # RPCs
//
// Server implements the protocol's Shard service: List, Stat (read your
// writes: wait until a primary has committed given source offsets), Apply,
// GetHints and Unassign. Resolve tells where a shard's primary is, and
// gives the local primary's store, for an application's own RPCs.
package consumer
