// Package keyspace keeps a live, sorted, decoded mirror of an etcd prefix.
//
// A KeySpace loads every key under its Root at one revision, then watches
// the prefix and applies each watch response as a single atomic step, so a
// reader never sees half of an etcd transaction. Values are decoded once, by
// the KeySpace's Decoder; a value that does not decode is logged and kept out
// of the mirror, and it never stops the watch.
//
// Readers take a Snapshot: a sorted KeyValues and the revision it reflects.
// Snapshots are immutable; every applied change builds a new version, which
// shares with the version before it all that the change left alone, so a
// snapshot may be kept and read without locks. To react to changes, take
// Changed before reading a Snapshot, or register an observer with Observe.
// WaitForRevision blocks until the mirror reflects a revision, typically the
// revision of the caller's own etcd write, or one that another process
// read from etcd. Since etcd's revision also moves with writes under other
// prefixes, which no event of the watch reflects, a waiter asks the watch
// for a progress notification: it gets there in a round trip to etcd.
// Each watch runs on a gRPC stream of its own, since etcd answers a
// progress request for a whole stream and its client passes the answer to
// every watch of the stream, whether or not that watch has caught up.
//
// Watch survives what etcd does to a long-lived watch: cancellation and
// errors (it re-watches from the next revision), compaction of the revision
// it needs (it reloads the whole prefix at the latest revision) and an etcd
// restart (it retries with backoff while its context lives).
package keyspace
