// Package fragment names, compresses and stores the fragments of journals.
//
// # Fragments
//
// A journal is an append-only byte stream. Brokers write its content in
// contiguous fragments: a Fragment is the byte range [Begin, End) of one
// journal, together with the SHA-256 of that range's uncompressed content
// and the Codec with which the range is compressed at rest. Brokers persist
// each fragment to a fragment store and afterwards keep no copy, so a broker
// can start empty and any broker can serve any journal's history.
//
// # Names
//
// A fragment's name is its object name relative to a store:
//
//	JOURNAL/BEGIN-END-SUM.EXT
//
// BEGIN and END are the content offsets as 16 lowercase hexadecimal digits,
// SUM is the SHA-256 of the uncompressed content as 64 lowercase hexadecimal
// digits, and EXT is the codec's extension (".raw", ".gz", ".zst" or ".sz").
// For example:
//
//	orders/eu/0000000000000000-0000000000100000-9f86d0…0a08.zst
//
// Names are content addressed: a reader verifies what it reads against the
// name, and two brokers that persist the same range of the same journal
// with the same codec write the same content under the same name, which
// makes persisting idempotent. Journal names are path-like (letters, digits and "-_./", no
// empty, "." or ".." segment, no leading or trailing "/"), so a journal's
// fragments nest under the journal's "directory", and the fragments of a
// journal never mix with those of a journal whose name extends it (such as
// "orders" and "orders/eu"). ParseName is the inverse of Fragment.Name.
//
// # Stores
//
// A Store lists, persists, opens and removes fragments, and signs URLs from
// which clients read a fragment's stored bytes directly. Open returns the
// store for a URL:
//
//	file:///var/lib/quire/fragments/
//	s3://bucket/prefix/?endpoint=127.0.0.1:8333&region=us-east-1&insecure=true
//
// A file store keeps each fragment as a file under a root directory. An S3
// store keeps each fragment as an object in a bucket of any S3-compatible
// service. Both make a fragment visible atomically and only after its
// content has been verified against its name: by its SHA-256, or by the
// content's own check if it is a CheckedContent (a broker's spool checks
// the bytes read back against a CRC32C of those it hashed as they were
// written). So a store never holds a partial fragment that it wrote
// itself, nor one whose content failed those checks; and Open verifies
// the content again as it is read, reporting ErrCorrupt if the stored bytes
// were damaged since. Errors about a fragment that is not in a store wrap
// fs.ErrNotExist.
package fragment
