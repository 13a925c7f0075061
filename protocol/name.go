package protocol

import (
	"errors"
	"fmt"
	"strings"
)

// MaxJournalNameLength is the longest journal name, in bytes. It keeps a
// journal's etcd key (ROOT/items/NAME), its fragment paths in stores (NAME/
// followed by a fragment's file name) and its labels ("name" and "prefix"
// values, at most 1024 bytes) well within the limits of etcd, file systems
// and S3 (1024-byte object keys), and matches the allocator's limit on item
// IDs.
const MaxJournalNameLength = 512

// ValidateJournalName returns an error if name is not a valid journal name.
//
// A journal name is path-like: 1 to MaxJournalNameLength bytes of ASCII
// letters, digits and the characters '-', '_', '.' and '/', in segments
// separated by single '/'s. It neither begins nor ends with '/', and no
// segment is "." or "..". So a name is also a clean relative path, a valid
// etcd key suffix and allocator item ID, and a prefix of object keys that
// no other journal's keys collide with: examples/words/part-000.
func ValidateJournalName(name string) error {
	if name == "" {
		return errors.New("journal name is empty")
	}
	if len(name) > MaxJournalNameLength {
		return fmt.Errorf("journal name %s is %d bytes, longer than %d", quoteShort(name), len(name), MaxJournalNameLength)
	}
	for i := 0; i < len(name); i++ {
		if !isJournalNameByte(name[i]) {
			return fmt.Errorf("journal name %q has %s at byte %d (want letters, digits and -_./)", name, describeByte(name[i]), i)
		}
	}
	switch {
	case name[0] == '/':
		return fmt.Errorf("journal name %q begins with '/'", name)
	case name[len(name)-1] == '/':
		return fmt.Errorf("journal name %q ends with '/'", name)
	case strings.Contains(name, "//"):
		return fmt.Errorf("journal name %q has an empty segment (\"//\")", name)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("journal name %q has a %q segment", name, seg)
		}
	}
	return nil
}

func isJournalNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '/'
}

// describeByte describes byte c for an error message.
func describeByte(c byte) string {
	if c < 0x20 || c >= 0x7f {
		return fmt.Sprintf("byte %#02x", c)
	}
	return fmt.Sprintf("character %q", c)
}

// quoteShort quotes s for an error message, eliding all but its beginning
// and end when it is long.
func quoteShort(s string) string {
	const max, keep = 64, 28
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q", s[:keep]+"..."+s[len(s)-keep:])
}

// namePrefixes returns the path prefixes of journal name that end in '/',
// shortest first: "a/", "a/b/" for "a/b/c".
func namePrefixes(name string) []string {
	var out []string
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			out = append(out, name[:i+1])
		}
	}
	return out
}
