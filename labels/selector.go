package labels

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Selector selects label sets: it matches a set when each of its
// requirements holds for the set. The zero Selector has no requirements and
// matches every set.
//
// A canonical selector has its requirements sorted by Name, then by Op, then
// by Values, without repeats; see the package documentation.
type Selector struct {
	Requirements []Requirement
}

// Op is the test a Requirement applies to the values of its name.
type Op int

// The ops, in canonical order. The zero Op is invalid.
const (
	Exists    Op = iota + 1 // name: the set has name
	NotExists               // !name: the set does not have name
	Equals                  // name=v: some value of name is v
	NotEquals               // name!=v: no value of name is v
	In                      // name in (v, w): some value of name is in the list
	NotIn                   // name notin (v, w): no value of name is in the list
)

var opNames = [...]string{
	Exists:    "Exists",
	NotExists: "NotExists",
	Equals:    "Equals",
	NotEquals: "NotEquals",
	In:        "In",
	NotIn:     "NotIn",
}

// String returns the Go name of op, such as "NotIn", or "Op(n)" for an
// invalid op.
func (op Op) String() string {
	if op.valid() {
		return opNames[op]
	}
	return fmt.Sprintf("Op(%d)", int(op))
}

func (op Op) valid() bool { return Exists <= op && op <= NotIn }

// Requirement is one test of a Selector: Op applied to the values of the
// label Name. Values are sorted and unique; Equals and NotEquals have one,
// In and NotIn at least one, Exists and NotExists none.
type Requirement struct {
	Name   string
	Op     Op
	Values []string
}

// Matches reports whether s satisfies every requirement of sel. A name with
// several values in s satisfies Equals and In if any of its values is
// listed, and NotEquals and NotIn if none is; a name absent from s satisfies
// NotEquals and NotIn. A requirement with an invalid Op is never satisfied.
// s must be sorted, as Sets are.
func (sel Selector) Matches(s Set) bool {
	for i := range sel.Requirements {
		if !sel.Requirements[i].matches(s) {
			return false
		}
	}
	return true
}

func (r *Requirement) matches(s Set) bool {
	lo, hi := s.span(r.Name)
	switch r.Op {
	case Exists:
		return lo < hi
	case NotExists:
		return lo == hi
	case Equals, In:
		return anyListed(s[lo:hi], r.Values)
	case NotEquals, NotIn:
		return !anyListed(s[lo:hi], r.Values)
	}
	return false
}

// anyListed reports whether the value of some label of ls is in values. Both
// are sorted by value.
func anyListed(ls Set, values []string) bool {
	i, j := 0, 0
	for i < len(ls) && j < len(values) {
		switch strings.Compare(ls[i].Value, values[j]) {
		case -1:
			i++
		case 1:
			j++
		default:
			return true
		}
	}
	return false
}

// IsEmpty reports whether sel has no requirements, and so matches every set.
func (sel Selector) IsEmpty() bool { return len(sel.Requirements) == 0 }

// String returns the canonical text form of sel, such as
// "app=clicks,!deprecated,region in (eu,us)": its requirements in order,
// separated by commas. The empty selector is "". For a canonical sel,
// ParseSelector(sel.String()) returns a selector equal to sel.
func (sel Selector) String() string {
	var b strings.Builder
	for i := range sel.Requirements {
		if i > 0 {
			b.WriteByte(',')
		}
		sel.Requirements[i].write(&b)
	}
	return b.String()
}

// write writes the text form of r to b. If r has an invalid op or the wrong
// number of values for its op, the text says so and does not parse.
func (r *Requirement) write(b *strings.Builder) {
	if n := len(r.Values); !r.Op.valid() || n < minValues[r.Op] || n > maxValues[r.Op] {
		fmt.Fprintf(b, "%s %v (%s)", r.Name, r.Op, strings.Join(r.Values, ","))
		return
	}
	switch r.Op {
	case Exists:
		b.WriteString(r.Name)
	case NotExists:
		b.WriteByte('!')
		b.WriteString(r.Name)
	case Equals:
		b.WriteString(r.Name)
		b.WriteByte('=')
		b.WriteString(r.Values[0])
	case NotEquals:
		b.WriteString(r.Name)
		b.WriteString("!=")
		b.WriteString(r.Values[0])
	case In, NotIn:
		b.WriteString(r.Name)
		if r.Op == In {
			b.WriteString(" in (")
		} else {
			b.WriteString(" notin (")
		}
		for j, v := range r.Values {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(v)
		}
		b.WriteByte(')')
	}
}

// The number of values each op takes.
var (
	minValues = [...]int{Exists: 0, NotExists: 0, Equals: 1, NotEquals: 1, In: 1, NotIn: 1}
	maxValues = [...]int{Exists: 0, NotExists: 0, Equals: 1, NotEquals: 1, In: math.MaxInt, NotIn: math.MaxInt}
)

func (r *Requirement) text() string {
	var b strings.Builder
	r.write(&b)
	return b.String()
}

// Validate returns an error if sel is not canonical: if a requirement has
// an invalid name, op or value, the wrong number of values, or values out of
// order or repeated, or if requirements are out of order or repeated. The
// error names the offending requirement.
func (sel Selector) Validate() error {
	for i := range sel.Requirements {
		r := &sel.Requirements[i]
		if err := r.validate(); err != nil {
			return fmt.Errorf("selector: requirement %d (%s): %w", i, quote(r.text()), err)
		}
		if i == 0 {
			continue
		}
		switch prev := &sel.Requirements[i-1]; compareRequirements(prev, r) {
		case 0:
			return fmt.Errorf("selector: requirement %d (%s) repeats requirement %d", i, quote(r.text()), i-1)
		case 1:
			return fmt.Errorf("selector: requirement %d (%s) is out of order: it sorts before requirement %d (%s)",
				i, quote(r.text()), i-1, quote(prev.text()))
		}
	}
	return nil
}

func (r *Requirement) validate() error {
	if err := ValidateName(r.Name); err != nil {
		return err
	}
	if !r.Op.valid() {
		return fmt.Errorf("invalid op %v", r.Op)
	}
	if n := len(r.Values); n < minValues[r.Op] || n > maxValues[r.Op] {
		return fmt.Errorf("op %v takes %s, not %d", r.Op, valueCount(r.Op), n)
	}
	for j, v := range r.Values {
		if v == "" {
			return fmt.Errorf("value %d is empty", j)
		}
		if err := ValidateValue(v); err != nil {
			return err
		}
		if j > 0 && r.Values[j-1] >= v {
			return fmt.Errorf("value %d (%s) is out of order or repeated: it follows %s", j, quote(v), quote(r.Values[j-1]))
		}
	}
	return nil
}

func valueCount(op Op) string {
	switch op {
	case Exists, NotExists:
		return "no values"
	case Equals, NotEquals:
		return "one value"
	}
	return "one value or more"
}

// compareRequirements orders requirements by name, then op, then values.
func compareRequirements(a, b *Requirement) int {
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	if a.Op != b.Op {
		if a.Op < b.Op {
			return -1
		}
		return 1
	}
	return slices.Compare(a.Values, b.Values)
}

// canonicalRequirements sorts rs and removes repeated requirements, in
// place. The values of each requirement must already be sorted and unique.
func canonicalRequirements(rs []Requirement) []Requirement {
	slices.SortFunc(rs, func(a, b Requirement) int { return compareRequirements(&a, &b) })
	return slices.CompactFunc(rs, func(a, b Requirement) bool { return compareRequirements(&a, &b) == 0 })
}

// MustParseSelector is like ParseSelector but panics if text does not parse.
// It is meant for tests and for selectors fixed in a program's source.
func MustParseSelector(text string) Selector {
	sel, err := ParseSelector(text)
	if err != nil {
		panic(err)
	}
	return sel
}
