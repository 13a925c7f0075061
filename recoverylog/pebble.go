package recoverylog

import "github.com/cockroachdb/pebble/v2"

// DefaultMaxManifestFileSize is the MANIFEST size past which
// PebbleOptions has Pebble roll it over (Pebble's own default is 128 MiB).
const DefaultMaxManifestFileSize = 1 << 20

// PebbleOptions sets the options of a recorded Pebble database that keep
// the live content of its recovery log near the size of the database,
// so that playback from hints reads little more than the database and
// pruning can remove the rest:
//
//   - MaxManifestFileSize: Pebble appends every version edit to its
//     MANIFEST, a file that would otherwise stay live (and its ops needed)
//     until it reaches 128 MiB. With a small limit Pebble rolls it over to
//     a new MANIFEST holding a snapshot of the current version once the
//     edits since the last snapshot outnumber the live files, and removes
//     the old one; the live MANIFEST stays within about twice the size of
//     a snapshot (or the limit), and is usually small enough to ride in
//     the hints inline.
//   - NumPrevManifest: 1, the least Pebble keeps, so one obsolete MANIFEST
//     at most stays live.
//
// The caller sets FS to the Recorder. Other sources of old live content are bounded
// already: a WAL lives until its memtable is flushed (MemTableSize bounds
// it; a recycled WAL lives until it is reused, one rotation later), an
// OPTIONS file and the marker files are small (inline in hints), and an
// sstable's ops are contiguous in the log (a player reads its segment
// only, however old). It leaves every other option as it is.
func PebbleOptions(opts *pebble.Options) {
	if opts.MaxManifestFileSize <= 0 || opts.MaxManifestFileSize > DefaultMaxManifestFileSize {
		opts.MaxManifestFileSize = DefaultMaxManifestFileSize
	}
	opts.NumPrevManifest = 1
}
