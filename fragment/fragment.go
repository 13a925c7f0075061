package fragment

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxJournalLen is the maximum length of a journal name, in bytes.
const MaxJournalLen = 512

// Fragment describes a fragment of a journal: the content of the journal's
// byte range [Begin, End), identified by its SHA-256.
type Fragment struct {
	// Journal is the name of the journal.
	Journal string
	// Begin and End are the content offsets [Begin, End) of the fragment in
	// the journal; End ≥ Begin.
	Begin, End int64
	// Sum is the SHA-256 of the fragment's uncompressed content.
	Sum [32]byte
	// Codec is the codec with which the fragment is stored.
	Codec Codec
	// ModTime is when the fragment was persisted, as listed by a store;
	// zero otherwise.
	ModTime time.Time
	// Store is the URL of the store from which the fragment was listed;
	// empty otherwise.
	Store string
}

// emptySum is the SHA-256 of no bytes: the Sum of every empty fragment.
var emptySum = sha256.Sum256(nil)

// Len returns the length of the fragment's content, End - Begin.
func (f Fragment) Len() int64 { return f.End - f.Begin }

// Name returns the fragment's object name relative to a store:
// JOURNAL/BEGIN-END-SUM.EXT. It does not validate f; a valid Fragment's
// name parses back to it with ParseName.
func (f Fragment) Name() string {
	var b strings.Builder
	b.Grow(len(f.Journal) + 1 + 16 + 1 + 16 + 1 + 64 + 4)
	b.WriteString(f.Journal)
	b.WriteByte('/')
	b.WriteString(f.baseName())
	return b.String()
}

// baseName returns the last element of f's name, BEGIN-END-SUM.EXT.
func (f Fragment) baseName() string {
	var buf [16 + 1 + 16 + 1 + 64]byte
	b := buf[:0]
	b = appendHex16(b, uint64(f.Begin))
	b = append(b, '-')
	b = appendHex16(b, uint64(f.End))
	b = append(b, '-')
	b = hex.AppendEncode(b, f.Sum[:])
	return string(b) + f.Codec.Extension()
}

func appendHex16(b []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[(v>>uint(shift))&0xf])
	}
	return b
}

// Validate returns an error naming what is wrong with f, if anything: its
// journal name, its offsets, its codec, or the Sum of an empty fragment
// (which must be the SHA-256 of no bytes).
func (f Fragment) Validate() error {
	if err := ValidateJournal(f.Journal); err != nil {
		return err
	}
	switch {
	case f.Begin < 0:
		return fmt.Errorf("fragment of journal %q: begin offset %d is negative", f.Journal, f.Begin)
	case f.End < f.Begin:
		return fmt.Errorf("fragment of journal %q: end offset %d is before begin offset %d", f.Journal, f.End, f.Begin)
	case f.End == f.Begin && f.Sum != emptySum:
		return fmt.Errorf("fragment of journal %q: empty fragment at offset %d has sum %x, not the SHA-256 of no bytes", f.Journal, f.Begin, f.Sum)
	}
	if err := f.Codec.Validate(); err != nil {
		return fmt.Errorf("fragment of journal %q: %w", f.Journal, err)
	}
	return nil
}

// ValidateJournal returns an error naming what is wrong with journal name
// j, if anything. A journal name is 1 to MaxJournalLen bytes of letters,
// digits and "-_./", in "/"-separated segments none of which is empty, "."
// or "..".
func ValidateJournal(j string) error {
	if j == "" {
		return errors.New("journal name is empty")
	}
	if len(j) > MaxJournalLen {
		return fmt.Errorf("journal name %.32q… is %d bytes long; the maximum is %d", j, len(j), MaxJournalLen)
	}
	for i := 0; i < len(j); i++ {
		if !journalByte(j[i]) {
			return fmt.Errorf("journal name %q has invalid character %q at byte %d (want letters, digits and -_./)", j, j[i], i)
		}
	}
	for i, seg := range strings.Split(j, "/") {
		switch seg {
		case "":
			return fmt.Errorf("journal name %q has an empty segment %d (a leading, trailing or doubled \"/\")", j, i)
		case ".", "..":
			return fmt.Errorf("journal name %q has a %q segment", j, seg)
		}
	}
	return nil
}

func journalByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '_' || c == '.' || c == '/'
}

// ParseName parses a fragment name as returned by Fragment.Name, the
// inverse of Name: Name(ParseName(name)) == name when ParseName succeeds.
// The returned Fragment is valid, and its ModTime and Store are zero.
// Errors name the part of the name that is wrong.
func ParseName(name string) (Fragment, error) {
	slash := strings.LastIndexByte(name, '/')
	if slash < 0 {
		return Fragment{}, fmt.Errorf("fragment name %q has no journal (want JOURNAL/BEGIN-END-SUM.EXT)", name)
	}
	journal, base := name[:slash], name[slash+1:]
	if err := ValidateJournal(journal); err != nil {
		return Fragment{}, fmt.Errorf("fragment name %q: %w", name, err)
	}
	f, err := parseBase(base)
	if err != nil {
		return Fragment{}, fmt.Errorf("fragment name %q: %w", name, err)
	}
	f.Journal = journal
	if err := f.Validate(); err != nil {
		return Fragment{}, fmt.Errorf("fragment name %q: %w", name, err)
	}
	return f, nil
}

// parseBase parses the last element of a fragment name, BEGIN-END-SUM.EXT.
func parseBase(base string) (Fragment, error) {
	var f Fragment
	begin, rest, ok := strings.Cut(base, "-")
	if !ok {
		return f, fmt.Errorf("base name %q is not BEGIN-END-SUM.EXT", base)
	}
	end, rest, ok := strings.Cut(rest, "-")
	if !ok {
		return f, fmt.Errorf("base name %q is not BEGIN-END-SUM.EXT", base)
	}
	var err error
	if f.Begin, err = parseOffset(begin); err != nil {
		return f, fmt.Errorf("begin offset %q: %w", begin, err)
	}
	if f.End, err = parseOffset(end); err != nil {
		return f, fmt.Errorf("end offset %q: %w", end, err)
	}
	dot := strings.IndexByte(rest, '.')
	if dot < 0 {
		return f, fmt.Errorf("base name %q has no extension", base)
	}
	sum, ext := rest[:dot], rest[dot:]
	if len(sum) != 64 || !lowerHex(sum) {
		return f, fmt.Errorf("sum %q is not 64 lowercase hex digits", sum)
	}
	hex.Decode(f.Sum[:], []byte(sum)) // Cannot fail: checked above.
	var known bool
	if f.Codec, known = codecForExtension(ext); !known {
		return f, fmt.Errorf("extension %q is not a codec's (want .raw, .gz, .zst or .sz)", ext)
	}
	return f, nil
}

// parseOffset parses a 16-digit lowercase hex offset.
func parseOffset(s string) (int64, error) {
	if len(s) != 16 || !lowerHex(s) {
		return 0, errors.New("not 16 lowercase hex digits")
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, err
	}
	if v > 1<<63-1 {
		return 0, errors.New("exceeds the largest offset")
	}
	return int64(v), nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
