package labels

import (
	"fmt"
	"slices"
	"strings"
)

// Parse parses the text form of a label set, such as "app=clicks,region=us",
// and returns its labels sorted and without repeats. Labels may be given in
// any order, and white space may surround each token. The empty string, or
// only white space, is the empty set.
func Parse(text string) (Set, error) {
	p := &parser{what: "label set", in: text}
	p.skipSpace()
	if p.atEnd() {
		return nil, nil
	}
	var s Set
	for {
		start := p.pos
		l, err := p.label()
		if err != nil {
			return nil, err
		}
		s = append(s, l)
		if err := p.separator(start, "a label"); err != nil {
			return nil, err
		}
		if p.atEnd() {
			return canonicalSet(s), nil
		}
	}
}

// ParseSelector parses the text form of a selector, such as
// "app=clicks, region in (us, eu), !deprecated", and returns it in
// canonical form. The empty string, or only white space, is the empty
// selector. The package documentation gives the grammar.
func ParseSelector(text string) (Selector, error) {
	p := &parser{what: "selector", in: text}
	p.skipSpace()
	if p.atEnd() {
		return Selector{}, nil
	}
	var rs []Requirement
	for {
		start := p.pos
		r, err := p.requirement()
		if err != nil {
			return Selector{}, err
		}
		rs = append(rs, r)
		if err := p.separator(start, "a requirement"); err != nil {
			return Selector{}, err
		}
		if p.atEnd() {
			return Selector{Requirements: canonicalRequirements(rs)}, nil
		}
	}
}

// parser holds the state of Parse or ParseSelector.
type parser struct {
	what string // "label set" or "selector"
	in   string // the whole input
	pos  int    // byte offset of the next unread byte of in
}

// delimiters are the bytes that end a token, with white space.
const delimiters = ",=!()"

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

func (p *parser) atEnd() bool { return p.pos == len(p.in) }

func (p *parser) skipSpace() {
	for p.pos < len(p.in) && isSpace(p.in[p.pos]) {
		p.pos++
	}
}

// consume advances past tok if the input continues with it.
func (p *parser) consume(tok string) bool {
	if strings.HasPrefix(p.in[p.pos:], tok) {
		p.pos += len(tok)
		return true
	}
	return false
}

// scan advances past the longest run of bytes that are neither white space
// nor in stop, and returns it.
func (p *parser) scan(stop string) string {
	start := p.pos
	for p.pos < len(p.in) && !isSpace(p.in[p.pos]) && strings.IndexByte(stop, p.in[p.pos]) < 0 {
		p.pos++
	}
	return p.in[start:p.pos]
}

// found describes, for an error, what the input has at p.pos.
func (p *parser) found() string {
	if p.atEnd() {
		return "end of input"
	}
	if c := p.in[p.pos]; isSpace(c) || strings.IndexByte(delimiters, c) >= 0 {
		return quote(string(c))
	}
	end := p.pos
	for end < len(p.in) && !isSpace(p.in[end]) && strings.IndexByte(delimiters, p.in[end]) < 0 {
		end++
	}
	return quote(p.in[p.pos:end])
}

// syntaxError is an error of Parse or ParseSelector.
type syntaxError struct {
	what string // "label set" or "selector"
	in   string // the whole input
	pos  int    // byte offset of the problem
	err  error
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("%s %s: at %d: %v", e.what, quote(e.in), e.pos, e.err)
}

func (e *syntaxError) Unwrap() error { return e.err }

// fail returns an error at pos wrapping err.
func (p *parser) fail(pos int, err error) error {
	return &syntaxError{what: p.what, in: p.in, pos: pos, err: err}
}

// expected returns an error saying that want was expected at p.pos, after
// the input from start, and what was found instead.
func (p *parser) expected(start int, want string) error {
	after := strings.TrimRightFunc(p.in[start:p.pos], func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
	if after == "" {
		return p.fail(p.pos, fmt.Errorf("expected %s, found %s", want, p.found()))
	}
	return p.fail(p.pos, fmt.Errorf("expected %s after %s, found %s", want, quote(after), p.found()))
}

// separator reads what follows a label or requirement that began at start:
// the end of input, or a comma and another item (what), with white space.
func (p *parser) separator(start int, what string) error {
	p.skipSpace()
	if p.atEnd() {
		return nil
	}
	comma := p.pos
	if !p.consume(",") {
		return p.expected(start, `"," or end of input`)
	}
	p.skipSpace()
	if p.atEnd() || p.in[p.pos] == ',' {
		return p.expected(comma, what)
	}
	return nil
}

// name reads a label name, which ends at white space or a byte in stop. An
// error says the name was expected after the input from start.
func (p *parser) name(start int, stop string) (string, error) {
	pos := p.pos
	name := p.scan(stop)
	if name == "" {
		return "", p.expected(start, "a label name")
	}
	if e := checkName(name); e != nil {
		return "", p.fail(pos+e.off, e)
	}
	return name, nil
}

// value reads a label value, which ends at white space or a byte in stop.
// If nonEmpty, an empty value is an error, saying that a value was expected
// after the input from start.
func (p *parser) value(start int, stop string, nonEmpty bool) (string, error) {
	pos := p.pos
	value := p.scan(stop)
	if value == "" && nonEmpty {
		return "", p.expected(start, "a value")
	}
	if e := checkValue(value); e != nil {
		return "", p.fail(pos+e.off, e)
	}
	return value, nil
}

// label reads name=value.
func (p *parser) label() (Label, error) {
	start := p.pos
	name, err := p.name(start, ",=")
	if err != nil {
		return Label{}, err
	}
	p.skipSpace()
	if !p.consume("=") {
		return Label{}, p.expected(start, `"="`)
	}
	p.skipSpace()
	value, err := p.value(start, ",", false)
	if err != nil {
		return Label{}, err
	}
	return Label{Name: name, Value: value}, nil
}

// requirement reads one requirement of a selector.
func (p *parser) requirement() (Requirement, error) {
	start := p.pos
	if p.consume("!") {
		p.skipSpace()
		name, err := p.name(start, ",=!")
		if err != nil {
			return Requirement{}, err
		}
		return Requirement{Name: name, Op: NotExists}, nil
	}
	name, err := p.name(start, ",=!")
	if err != nil {
		return Requirement{}, err
	}
	r := Requirement{Name: name}
	nameEnd := p.pos
	p.skipSpace()
	switch {
	case p.atEnd() || p.in[p.pos] == ',':
		r.Op = Exists
		return r, nil
	case p.consume("=="), p.consume("="):
		r.Op = Equals
	case p.consume("!="):
		r.Op = NotEquals
	}
	if r.Op != 0 {
		p.skipSpace()
		v, err := p.value(start, ",", true)
		if err != nil {
			return Requirement{}, err
		}
		r.Values = []string{v}
		return r, nil
	}
	if p.pos > nameEnd { // a keyword must follow white space
		switch kw := p.in[p.pos:]; {
		case hasKeyword(kw, "in"):
			r.Op = In
			p.pos += len("in")
		case hasKeyword(kw, "notin"):
			r.Op = NotIn
			p.pos += len("notin")
		}
	}
	if r.Op == 0 {
		return Requirement{}, p.expected(start, `"=", "!=", "in", "notin", "," or end of input`)
	}
	values, err := p.list(start)
	if err != nil {
		return Requirement{}, err
	}
	r.Values = values
	return r, nil
}

// hasKeyword reports whether s begins with the keyword kw, followed by the
// end of input, white space or a delimiter.
func hasKeyword(s, kw string) bool {
	if !strings.HasPrefix(s, kw) {
		return false
	}
	return len(s) == len(kw) || isSpace(s[len(kw)]) || strings.IndexByte(delimiters, s[len(kw)]) >= 0
}

// list reads "(" value { "," value } ")" and returns the values sorted and
// unique.
func (p *parser) list(start int) ([]string, error) {
	p.skipSpace()
	open := p.pos
	if !p.consume("(") {
		return nil, p.expected(start, `"("`)
	}
	var values []string
	for {
		p.skipSpace()
		v, err := p.value(start, ",)", true)
		if err != nil {
			return nil, err
		}
		values = append(values, v)
		p.skipSpace()
		switch {
		case p.consume(")"):
			slices.Sort(values)
			return slices.Compact(values), nil
		case p.consume(","):
		case p.atEnd():
			return nil, p.fail(p.pos, fmt.Errorf(`missing ")" to close "(" at %d`, open))
		default:
			return nil, p.expected(start, `"," or ")"`)
		}
	}
}
