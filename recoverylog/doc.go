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
// file's end). A Player reads the log from its start and makes the same
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
// Ops are buffered in memory and appended to the journal, in order and in
// one append per group, when Pebble syncs any file or directory (Sync,
// SyncData or SyncTo; Pebble's WAL syncs with SyncData), or when the
// buffer exceeds RecorderConfig.MaxBuffer. A sync returns to Pebble only
// once the append has committed on every replica of the journal. So what
// Pebble believes durable (a synced WAL write, a synced MANIFEST edit) is
// in the log; writes not yet synced may be lost, as they would be in a
// crash of the local disk. Playback reproduces the directory as of the
// last append, and Pebble's own recovery (it reads the WAL up to its last
// whole record) does the rest.
//
// What Pebble does that the recorder rejects or simplifies:
// ReuseForWrite (WAL recycling, which Pebble cannot disable) creates a
// new file rather than reusing the old one, as its contract allows;
// OpenReadWrite within the directory (used only by Pebble's shared cache)
// and WriteAt before a file's end are not supported; writes to a file with
// no links left are not recorded, as nobody can see them; directories and
// the LOCK file are not recorded, and the player creates the directories
// of the paths it links. Files moved or linked into the directory from
// outside (as ingestion does) are recorded whole.
//
// # Hints
//
// Recorder.Hints describes the live nodes: where each one's create op is
// in the log, its length and links. Playback from hints and pruning the
// log by them are not implemented yet.
//
// # Fencing
//
// A log has one writer. NewRecorder takes over the log with an empty
// append that requires the write head to be where the recorder's FSM ends
// (so the recorder knows every op before its own) and sets the journal's
// register author=ID. Every later append requires author=ID. Once another
// recorder has taken over, the deposed one's next append is refused
// (client.ErrRegisterMismatch) and leaves nothing in the log; from then on
// every file operation of the deposed recorder fails with an error
// wrapping ErrFenced, which Pebble surfaces. A recorder whose append
// failed otherwise (ErrRecorderFailed) stops the same way: whether the
// append committed is unknown, so it cannot go on.
//
// The handover of a shard: the new primary plays the log to the write
// head (or finishes its hot standby), then creates a Recorder from the
// player's FSM over the player's directory, then opens Pebble on it. If
// the old primary appended in between, the takeover fails with
// client.ErrWrongAppendOffset: play on, then retry.
package recoverylog
