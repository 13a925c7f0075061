package labels

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on the length of names and values, in bytes.
const (
	maxNameLen  = 64
	maxValueLen = 1024
)

// Label is a name and a value.
type Label struct {
	Name  string
	Value string
}

// Set is a set of labels, sorted by Name then Value, without duplicate
// pairs. A name may carry several values (e.g. region=eu and region=us). The
// zero value is the empty set.
type Set []Label

// invalidError reports an invalid name or value. off is the byte offset of
// the problem within text, which parsers add to the token's position.
type invalidError struct {
	kind string // "name" or "value"
	text string
	off  int
	msg  string
}

func (e *invalidError) Error() string {
	return fmt.Sprintf("invalid label %s %s: %s", e.kind, quote(e.text), e.msg)
}

// ValidateName returns an error if name is not a valid label name: 1 to 64
// bytes of ASCII letters, digits, '.', '_', '-', '/' and ':', beginning with
// a letter or a digit.
func ValidateName(name string) error {
	if e := checkName(name); e != nil {
		return e
	}
	return nil
}

// ValidateValue returns an error if value is not a valid label value: 0 to
// 1024 bytes of valid UTF-8, each character printable (unicode.IsPrint) and
// none of ' ', ',', '(', ')', '=' and '!'.
func ValidateValue(value string) error {
	if e := checkValue(value); e != nil {
		return e
	}
	return nil
}

func checkName(name string) *invalidError {
	invalid := func(off int, format string, args ...any) *invalidError {
		return &invalidError{kind: "name", text: name, off: off, msg: fmt.Sprintf(format, args...)}
	}
	if name == "" {
		return invalid(0, "empty")
	}
	if len(name) > maxNameLen {
		return invalid(0, "%d bytes, longer than %d", len(name), maxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !isNameByte(name[i]) {
			return invalid(i, "%s", charProblem(name[i:]))
		}
	}
	if !isAlnum(name[0]) {
		return invalid(0, "begins with %q, not a letter or digit", name[0])
	}
	return nil
}

func checkValue(value string) *invalidError {
	invalid := func(off int, format string, args ...any) *invalidError {
		return &invalidError{kind: "value", text: value, off: off, msg: fmt.Sprintf(format, args...)}
	}
	if len(value) > maxValueLen {
		return invalid(0, "%d bytes, longer than %d", len(value), maxValueLen)
	}
	for i := 0; i < len(value); {
		r, size := utf8.DecodeRuneInString(value[i:])
		if !isValueRune(r, size) {
			return invalid(i, "%s", charProblem(value[i:]))
		}
		i += size
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isNameByte(c byte) bool {
	return isAlnum(c) || strings.IndexByte("._-/:", c) >= 0
}

// isValueRune reports whether r, decoded from size bytes, may appear in a
// value.
func isValueRune(r rune, size int) bool {
	switch {
	case r == utf8.RuneError && size == 1:
		return false // invalid UTF-8
	case r < utf8.RuneSelf:
		return '!' < r && r <= '~' && strings.IndexByte(",()=", byte(r)) < 0
	default:
		return unicode.IsPrint(r)
	}
}

// charProblem says why the character that s begins with is not allowed.
func charProblem(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size == 1 {
		return fmt.Sprintf("invalid UTF-8 byte %#02x", s[0])
	}
	return fmt.Sprintf("character %q is not allowed", r)
}

// quote quotes s for an error message, eliding the middle of a long s.
func quote(s string) string {
	const max, keep = 64, 28
	if len(s) <= max {
		return strconv.Quote(s)
	}
	head, tail := keep, len(s)-keep
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return strconv.Quote(s[:head] + "..." + s[tail:])
}

// New returns the set of the labels given as name, value pairs, such as
// New("app", "clicks", "region", "us"), sorted and without repeats. It
// returns an error if a name or value is invalid, or if the last name has
// no value.
func New(pairs ...string) (Set, error) {
	if len(pairs)%2 != 0 {
		return nil, fmt.Errorf("labels.New: odd number of arguments (%d): name %s has no value",
			len(pairs), quote(pairs[len(pairs)-1]))
	}
	if len(pairs) == 0 {
		return nil, nil
	}
	s := make(Set, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		l := Label{Name: pairs[i], Value: pairs[i+1]}
		if err := l.validate(); err != nil {
			return nil, fmt.Errorf("labels.New: pair %d (%s, %s): %w", i/2, quote(l.Name), quote(l.Value), err)
		}
		s = append(s, l)
	}
	return canonicalSet(s), nil
}

// canonicalSet sorts s and removes repeated labels, in place.
func canonicalSet(s Set) Set {
	slices.SortFunc(s, compareLabels)
	return slices.Compact(s)
}

func (l Label) validate() error {
	if err := ValidateName(l.Name); err != nil {
		return err
	}
	return ValidateValue(l.Value)
}

func (l Label) text() string { return l.Name + "=" + l.Value }

// compareLabels orders labels by name, then by value.
func compareLabels(a, b Label) int {
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return strings.Compare(a.Value, b.Value)
}

// String returns the canonical text form of s, such as
// "app=clicks,region=eu,region=us": its labels in order, each written
// name=value, separated by commas. The empty set is "".
func (s Set) String() string {
	n := max(len(s)-1, 0) + len(s) // Commas and equal signs.
	for _, l := range s {
		n += len(l.Name) + len(l.Value)
	}
	return string(s.Append(make([]byte, 0, n)))
}

// Append appends the text of s, as String gives it, to b.
func (s Set) Append(b []byte) []byte {
	for i, l := range s {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, l.Name...)
		b = append(b, '=')
		b = append(b, l.Value...)
	}
	return b
}

// Validate returns an error if a name or value of s is invalid, or if s is
// not sorted or repeats a label. The error names the offending label.
func (s Set) Validate() error {
	for i, l := range s {
		if err := l.validate(); err != nil {
			return fmt.Errorf("label set: label %d (%s): %w", i, quote(l.text()), err)
		}
		if i == 0 {
			continue
		}
		switch prev := s[i-1]; compareLabels(prev, l) {
		case 0:
			return fmt.Errorf("label set: label %d (%s) repeats label %d", i, quote(l.text()), i-1)
		case 1:
			return fmt.Errorf("label set: label %d (%s) is out of order: it sorts before label %d (%s)",
				i, quote(l.text()), i-1, quote(prev.text()))
		}
	}
	return nil
}

// span returns the bounds of the labels of s named name: s[lo:hi].
func (s Set) span(name string) (lo, hi int) {
	lo, hi = 0, len(s)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s[m].Name < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	hi = lo
	for hi < len(s) && s[hi].Name == name {
		hi++
	}
	return lo, hi
}

// Values returns the values of name in s, in order, or nil if s does not
// have name.
func (s Set) Values(name string) []string {
	lo, hi := s.span(name)
	if lo == hi {
		return nil
	}
	values := make([]string, 0, hi-lo)
	for _, l := range s[lo:hi] {
		values = append(values, l.Value)
	}
	return values
}

// Value returns the first value of name in s, and whether s has name.
func (s Set) Value(name string) (string, bool) {
	lo, hi := s.span(name)
	if lo == hi {
		return "", false
	}
	return s[lo].Value, true
}

// Prefixed returns the labels of s whose names begin with prefix: a
// part of s, which they share.
func (s Set) Prefixed(prefix string) Set {
	lo, _ := slices.BinarySearchFunc(s, prefix, func(l Label, p string) int { return strings.Compare(l.Name, p) })
	hi := lo
	for hi < len(s) && strings.HasPrefix(s[hi].Name, prefix) {
		hi++
	}
	return s[lo:hi:hi]
}

// Has reports whether s has a label named name, whatever its value.
func (s Set) Has(name string) bool {
	lo, hi := s.span(name)
	return lo < hi
}

// Union returns the labels that are in s, in o, or in both.
func (s Set) Union(o Set) Set {
	if len(s)+len(o) == 0 {
		return nil
	}
	out := make(Set, 0, len(s)+len(o))
	i, j := 0, 0
	for i < len(s) && j < len(o) {
		switch compareLabels(s[i], o[j]) {
		case -1:
			out = append(out, s[i])
			i++
		case 1:
			out = append(out, o[j])
			j++
		default:
			out = append(out, s[i])
			i++
			j++
		}
	}
	out = append(out, s[i:]...)
	return append(out, o[j:]...)
}

// With returns s with name's labels replaced by the one label name=value.
// It is Union(Set{{name, value}}) of s without name's labels, in one
// allocation.
func (s Set) With(name, value string) Set {
	lo, hi := s.span(name)
	out := make(Set, 0, len(s)-(hi-lo)+1)
	out = append(out, s[:lo]...)
	out = append(out, Label{Name: name, Value: value})
	return append(out, s[hi:]...)
}

// Subtract returns the labels of s that o does not remove. A label of o
// removes the label of s with the same name and value; a label of o with the
// empty value removes every label of s with its name, whatever the value.
// So a label with the empty value can be removed alone only from a set that
// has no other value for its name.
func (s Set) Subtract(o Set) Set {
	var out Set
	for _, l := range s {
		if !o.removes(l) {
			if out == nil {
				out = make(Set, 0, len(s))
			}
			out = append(out, l)
		}
	}
	return out
}

// removes reports whether subtracting o removes l.
func (o Set) removes(l Label) bool {
	lo, hi := o.span(l.Name)
	for _, r := range o[lo:hi] {
		if r.Value == "" || r.Value == l.Value {
			return true
		}
	}
	return false
}

// Equal reports whether s and o hold the same labels. Nil and empty sets are
// equal.
func (s Set) Equal(o Set) bool { return slices.Equal(s, o) }
