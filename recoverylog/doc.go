// Package recoverylog records the file operations of an embedded Pebble
// database into a journal, the database's recovery log, and plays them
// back anywhere to rebuild the database's directory.
//
// # The idea
//
// Pebble, an LSM tree, writes its state as files that are written once,
// from start to end, then renamed, linked or removed: sstables, the WAL,
// the MANIFEST, OPTIONS and marker files. A Recorder is a vfs.FS given to
// Pebble (pebble.Options.FS) over a local directory: it passes every
// operation to the local file system and also encodes every change as an
// Op: create, link, unlink, rename and write (an append of bytes at the
// file's end). Files written in place, as SQLite writes its database and
// WAL, also record write-at ops (bytes written anywhere) and truncates;
// frames of those two kinds carry version 2 of the format, so that a
// player too old to apply them stops at the first, naming the version,
// while logs without them stay readable by it. A Player reads the log
// from its start and makes the same
// changes in a fresh directory, which Pebble then opens: the database as
// of the last op recorded. A player may also keep reading at the log's
// write head, a hot standby, until told to finish and hand over.
//
// Files are tracked by node: a node is one file's content, across its
// renames and hard links, identified by the sequence number of the op that
// created it. The FSM is the state of the log: its live nodes, their links
// and lengths, and the last op's sequence number. Each op must follow from
// it (the next sequence number, an existing node, a write at the node's
// length, a link to a free path, ...); one that does not is a corruption
// or a race between writers, and is reported with the log offset of its
// frame (an *OpError), never applied.
//
// # Log format
//
// The log is a sequence of frames, one per op (see AppendOp): a header
// with a magic number, a version, the body's length and its CRC-32C, and a
// body of varint fields. A frame that is cut short, has a bad checksum or
// bad fields is reported as ErrCorrupt, naming its offset.
//
// # Durability
//
// Ops are buffered in memory and appended to the journal, in order, when
// Pebble syncs any file or directory (Sync or SyncData; Pebble's WAL
// syncs with SyncData), or when the buffer exceeds
// RecorderConfig.MaxBuffer. A sync returns to Pebble only once every op
// recorded before it has committed on every replica of the journal. So
// what Pebble believes durable (a synced WAL write, a synced MANIFEST
// edit) is in the log; writes not yet synced may be lost, as they would
// be in a crash of the local disk. Playback reproduces the directory as
// of the last append, and Pebble's own recovery (it reads the WAL up to
// its last whole record) does the rest. SyncTo, which promises nothing
// durable unless it reports a full sync, only starts the append.
//
// The log, not the local disk, makes the directory durable: syncs do not
// fsync the local files. A directory whose machine crashed is never used
// again (a recorder starts only from a player's directory, and a player
// from an empty one); after a crash of the process alone, the machine's
// page cache still holds every file.
//
// Two appends are in flight at a time; the ops recorded meanwhile go
// together in the next (a group commit). Every append requires the
// log's write head to be where the recorder's previous append ended: the
// log always holds a prefix of the recorder's ops, never a gap, and a
// retried append that had committed after all is refused rather than
// written twice (the recorder then stops, as it cannot know).
//
// The log may still hold a gap where a recorder's append was: one that
// committed on a single replica of the journal and failed at its
// primary, whose next pipeline rolled past it when that replica was lost
// with its disk. It was never acknowledged (nor shown to any reader), so
// the recorder never reported it durable; it stopped instead, and the
// next recorder appends after the gap, continuing from the ops before it.
// A player crosses a gap that begins at a frame's boundary, logging it
// and counting it in quire_recoverylog_gaps_crossed_total, and the next
// op must follow from the state before the gap: a gap of ops that later
// ones depend on fails playback, naming the gap.
//
// What Pebble does that the recorder simplifies: ReuseForWrite (WAL
// recycling, which Pebble cannot disable) creates a new file rather than
// reusing the old one, as its contract allows. Files opened with
// OpenReadWrite may be written anywhere and truncated (the file's
// Truncate method); a file that is never closed is never sealed, so its
// ops from its creation on stay in the replay horizon (see Hints). Writes
// to a file with no links left are not recorded, as nobody can see them;
// directories and the LOCK file are not recorded, and the player creates
// the directories of the paths it links. Files moved or linked into the directory from
// outside (as ingestion does) are recorded whole.
//
// # Hints, and a bounded replay horizon
//
// Recorder.Hints describes the live nodes: for each, the log offsets of
// its create op and just past its last write (all its ops lie between),
// its length and links, whether it is sealed (no handle writes it any
// more: Pebble never writes a file again once it closed it), and, for
// small nodes, their content inline (Hints documents which, and the
// bounds RecorderConfig.HintInlineMax and HintInlineTotal). Hints are
// JSON (MarshalHints, UnmarshalHints, which validates them) for a
// consumer to keep in etcd; they describe only ops already appended.
//
// A Player given hints (PlayerConfig.Hints) writes the inline nodes,
// then reads only the log segments of the other live nodes
// (Hints.Segments; segments closer than PlayerConfig.SegmentGap are read
// as one), applying their create and write ops and skipping every other
// op (those of nodes that are gone, and links, renames and unlinks: the
// hints give the final links). Within a segment it checks that sequence
// numbers follow one another and that writes land at each node's length;
// at the end each node must have the length the hints give. It then takes
// the hints' state as its own and plays every op after the hints' offset
// with full checks, as from the start. Progress reports the bytes read
// and skipped.
//
// What keeps the log bytes read near the database's size: PebbleOptions
// makes Pebble roll its MANIFEST over (it would otherwise stay live, and
// its ops needed, up to 128 MiB); the current WAL lives until its
// memtable is flushed; OPTIONS, markers and small MANIFESTs ride inline;
// and an sstable, however old, is one short segment of the log. After a
// long run of overwrites the bytes read from fresh hints are within 2× of
// the database's size on disk (docs/benchmarks.md).
//
// Prune removes the fragments of the log that end before
// Hints.PruneBefore: the earliest create op of a live node that is not
// both inline and sealed (an inline node still open may outgrow the
// inline bound, and later hints would need its ops; a sealed node once
// inline stays inline in later hints of the same recorder, and of a
// recorder continuing from a player of those hints). It removes only
// persisted fragments, from their stores, so it needs the stores'
// credentials. Playback from the hints pruned by, or from later ones,
// never reads the removed range; playback from the start or from older
// hints fails with an error naming the missing content.
//
// One limit: a recorder continuing from a player that started before the
// hints used to prune may choose other small sealed nodes to inline, if
// together they exceed HintInlineTotal; its hints may then need pruned
// ops, and playback from them fails, naming the missing content.
//
// # Fencing
//
// A log has one writer. NewRecorder takes over the log with an empty
// append that requires the write head to be where the recorder's FSM ends
// (so the recorder knows every op before its own) and sets the journal's
// register author=ID. Every later append requires author=ID. Once another
// recorder has taken over, the deposed one's next append is refused
// (client.ErrRegisterMismatch, or, if the successor has appended already,
// client.ErrWrongAppendOffset, after which the recorder checks the
// register) and leaves nothing in the log; from then on Err returns an
// error wrapping ErrFenced, and the recorder records nothing more. A
// recorder whose append failed otherwise (ErrRecorderFailed) stops the
// same way: whether the append committed is unknown, so it cannot go on.
//
// A failed recorder does not fail Pebble's file operations: it becomes the
// base file system, and its syncs return at once. Pebble treats a failed
// sync as fatal (it panics, or its logger's Fatalf exits), which would end
// the whole process — every other shard of a consumer with it — for the
// failure of one recovery log. So a sync's success does not prove
// durability alone: after Pebble reports a commit durable, check Err; only
// if it is nil is the commit in the log (a recorder fails before any sync
// it cannot honour returns). The consumer framework does so after each
// transaction's commit, and fails the shard otherwise; Recorder.Sync, an
// explicit call, does return the error.
//
// The handover of a shard: the new primary plays the log to the write
// head (or finishes its hot standby), then creates a Recorder from the
// player's FSM over the player's directory, then opens Pebble on it. If
// the old primary appended in between, the takeover fails with
// client.ErrWrongAppendOffset: play on, then retry.
package recoverylog
