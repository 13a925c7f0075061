package recoverylog

import (
	"time"

	"github.com/cockroachdb/pebble/v2"
)

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

// DefaultSeparateMinSize is the value size from which SeparateValues
// keeps values in blob files when it is given none.
const DefaultSeparateMinSize = 256

// SeparateValues has a recorded Pebble database keep values of minSize
// bytes or more (DefaultSeparateMinSize if minSize ≤ 0) apart from their
// keys, in blob files written once, when a memtable is flushed.
// Compactions then rewrite keys and references to values rather than the
// values themselves, so the recovery log grows by less than it would
// with every compaction's output holding the values again: with 1 KiB
// values, a log held 2.6–3.2 times the values written without it and
// 2.0–2.1 times with it (docs/recoverylog.md, "Large values").
//
// Pebble reclaims the space of overwritten and deleted values by
// rewriting a blob file once a fifth of its bytes are garbage and it is
// at least five minutes old; until then the log keeps them live too. A
// compaction output references at most ten overlapping blob files, and
// rewrites values past that.
//
// It raises opts.FormatMajorVersion to pebble.FormatValueSeparation, if
// lower: Pebble never lowers a database's format, so a database opened so
// cannot be opened again by a Pebble too old to know that format. Pebble calls value separation
// experimental, so it is opt-in.
func SeparateValues(opts *pebble.Options, minSize int) {
	if minSize <= 0 {
		minSize = DefaultSeparateMinSize
	}
	if opts.FormatMajorVersion < pebble.FormatValueSeparation {
		opts.FormatMajorVersion = pebble.FormatValueSeparation
	}
	opts.Experimental.ValueSeparationPolicy = func() pebble.ValueSeparationPolicy {
		return pebble.ValueSeparationPolicy{
			Enabled:               true,
			MinimumSize:           minSize,
			MaxBlobReferenceDepth: 10,
			RewriteMinimumAge:     5 * time.Minute,
			TargetGarbageRatio:    0.2,
		}
	}
}
