// Package spool keeps the fragment a broker is writing on local disk, so
// that an acknowledged append survives the broker's crash.
//
// A spool holds the content of one fragment of a journal from its begin
// offset: content that replicas have acknowledged (committed), followed by
// content of the append in progress (pending). Its files, in a directory
// per journal beneath the spool root:
//
//	BEGIN.content   the fragment's bytes from BEGIN, committed then pending
//	BEGIN.commits   one record per commit: the committed end offset, the
//	                SHA-256 of the content up to it, and the journal's
//	                registers, each record checksummed
//
// Commit appends a record once the content it covers is written, so the
// last intact record always describes a prefix of the content file. A
// process that is killed loses nothing the kernel accepted: the files
// survive it, and Recover, at the next start, truncates each spool to its
// last commit, verifies the content against the record's sum, and returns
// it for persisting to the fragment store. Machine crashes lose unsynced
// writes; Sync flushes both files, and a Syncer shares one flush among
// concurrent committers (group commit), so fsync-before-acknowledge costs
// one flush per group of appends, not per append.
//
// A spool also keeps, in memory, a CRC32C of the content as it is written.
// Its Reader checks the content it reads back against it, so that the
// rolled spool's persister need not hash the content a second time: the
// SHA-256 was computed from the very bytes the CRC32C vouches for.
//
// Invariant: records are appended in commit order, each with an end offset
// at least the previous one's; the content file is never truncated below
// the last record's end.
package spool
