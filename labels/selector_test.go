package labels

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseSelector(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{" \t\r\n", ""},
		{"app", "app"},
		{"!app", "!app"},
		{"! app", "!app"},
		{"app=clicks", "app=clicks"},
		{"app==clicks", "app=clicks"},
		{"app = clicks", "app=clicks"},
		{"app!=clicks", "app!=clicks"},
		{"app != clicks", "app!=clicks"},
		{"region in (us)", "region in (us)"},
		{"region in (us, eu)", "region in (eu,us)"},
		{"region in(us,eu,us)", "region in (eu,us)"},
		{"region\tin\n(\tus ,eu )", "region in (eu,us)"},
		{"region notin (us, eu)", "region notin (eu,us)"},
		{"app=clicks, region in (us, eu), !deprecated", "app=clicks,!deprecated,region in (eu,us)"},
		{"  app=clicks ,  !deprecated  ", "app=clicks,!deprecated"},
		// Requirements sort by name, then op, then values.
		{"a notin (x),a in (x),a!=x,a=x,!a,a", "a,!a,a=x,a!=x,a in (x),a notin (x)"},
		{"a in (y),a in (x,y),a in (x)", "a in (x),a in (x,y),a in (y)"},
		// Repeats are removed; Equals and a one-value In stay distinct.
		{"a=x,a=x,a==x", "a=x"},
		{"a,a,a", "a"},
		{"a in (x),a=x", "a=x,a in (x)"},
		{"a in (x,y),a in (y,x)", "a in (x,y)"},
		// Contradictions are allowed.
		{"a,!a", "a,!a"},
		// Keywords are names where a name is expected.
		{"in", "in"},
		{"!notin", "!notin"},
		{"in in (in)", "in in (in)"},
		{"notin notin (notin)", "notin notin (notin)"},
		{"in=notin", "in=notin"},
		{"a=in", "a=in"},
		{"k in (日本, café)", "k in (café,日本)"},
		{"quire.dev/region:x_y-z=a/b:c", "quire.dev/region:x_y-z=a/b:c"},
	} {
		sel, err := ParseSelector(tc.in)
		if err != nil {
			t.Errorf("ParseSelector(%q): %v", tc.in, err)
			continue
		}
		if got := sel.String(); got != tc.want {
			t.Errorf("ParseSelector(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if err := sel.Validate(); err != nil {
			t.Errorf("ParseSelector(%q) is not canonical: %v", tc.in, err)
		}
		if sel.IsEmpty() != (tc.want == "") {
			t.Errorf("ParseSelector(%q).IsEmpty() = %v", tc.in, sel.IsEmpty())
		}
	}
}

func TestParseSelectorErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// Empty names, missing values.
		{",", `at 0: expected a label name, found ","`},
		{"=x", `at 0: expected a label name, found "="`},
		{"!", `at 1: expected a label name after "!", found end of input`},
		{"!,a", `at 1: expected a label name after "!", found ","`},
		{"app=,x", `at 4: expected a value after "app=", found ","`},
		{"app=", `at 4: expected a value after "app=", found end of input`},
		{"app= ", `at 5: expected a value after "app=", found end of input`},
		{"app!=", `at 5: expected a value after "app!=", found end of input`},
		{"app===x", `at 5: invalid label value "=x": character '=' is not allowed`},
		// Commas.
		{"a,", `at 2: expected a requirement after ",", found end of input`},
		{"a, ", `at 3: expected a requirement after ",", found end of input`},
		{"a,,b", `at 2: expected a requirement after ",", found ","`},
		{"a b", `at 2: expected "=", "!=", "in", "notin", "," or end of input after "a", found "b"`},
		{"a=x b=y", `at 4: expected "," or end of input after "a=x", found "b"`},
		{"!a=x", `at 2: expected "," or end of input after "!a", found "="`},
		{"a in (x) b", `at 9: expected "," or end of input after "a in (x)", found "b"`},
		// Operators and keywords.
		{"a!x", `at 1: expected "=", "!=", "in", "notin", "," or end of input after "a", found "!"`},
		{"a ! = x", `at 2: expected "=", "!=", "in", "notin", "," or end of input after "a", found "!"`},
		{"a inx (b)", `at 2: expected "=", "!=", "in", "notin", "," or end of input after "a", found "inx"`},
		{"a IN (b)", `found "IN"`},
		{"a in", `at 4: expected "(" after "a in", found end of input`},
		{"a in x", `at 5: expected "(" after "a in", found "x"`},
		{"a notin,b", `at 7: expected "(" after "a notin", found ","`},
		// Lists.
		{"a in ()", `at 6: expected a value after "a in (", found ")"`},
		{"a in (", `at 6: expected a value after "a in (", found end of input`},
		{"a in (x", `at 7: missing ")" to close "(" at 5`},
		{"a in (x,", `at 8: expected a value after "a in (x,", found end of input`},
		{"a in (x,)", `at 8: expected a value after "a in (x,", found ")"`},
		{"a in (x,,y)", `at 8: expected a value after "a in (x,", found ","`},
		{"a in (x y)", `at 8: expected "," or ")" after "a in (x", found "y"`},
		{"a in ((x))", `at 6: invalid label value "(x": character '(' is not allowed`},
		{"a in (x=y)", `at 7: invalid label value "x=y": character '=' is not allowed`},
		// Invalid names and values.
		{"a$b", `at 1: invalid label name "a$b": character '$' is not allowed`},
		{"a(b)", `at 1: invalid label name "a(b)": character '(' is not allowed`},
		{"-a", `at 0: invalid label name "-a": begins with '-', not a letter or digit`},
		{"x, !.a", `at 4: invalid label name ".a": begins with '.'`},
		{"é", `at 0: invalid label name "é": character 'é' is not allowed`},
		{strings.Repeat("n", 65), `at 0: invalid label name "nnn`},
		{"a=b)", `at 3: invalid label value "b)": character ')' is not allowed`},
		{"a=\xff", `at 2: invalid label value "\xff": invalid UTF-8 byte 0xff`},
		{"a=x\u00a0y", `at 3: invalid label value "x\u00a0y": character '\u00a0' is not allowed`},
		{"a in (x, " + strings.Repeat("v", 1025) + ")", `at 9: invalid label value "vvv`},
		{"a=" + strings.Repeat("v", 1025), "1025 bytes, longer than 1024"},
	} {
		sel, err := ParseSelector(tc.in)
		if err == nil {
			t.Errorf("ParseSelector(%q) = %q, want an error", tc.in, sel)
			continue
		}
		wantError(t, err, "selector "+quote(tc.in)+": at ", tc.want)
		if !reflect.DeepEqual(sel, Selector{}) {
			t.Errorf("ParseSelector(%q) returned %q with its error", tc.in, sel)
		}
	}
}

func TestParseSelectorErrorWraps(t *testing.T) {
	_, err := ParseSelector("a=b c")
	var se *syntaxError
	if !errors.As(err, &se) || se.pos != 4 {
		t.Errorf("error %v is not a syntax error at 4", err)
	}
	_, err = ParseSelector("a=b,c=(")
	var inv *invalidError
	if !errors.As(err, &inv) || inv.kind != "value" || inv.text != "(" {
		t.Errorf("error %v does not wrap the invalid value", err)
	}
}

func TestErrorsShortenLongInput(t *testing.T) {
	in := "a=" + strings.Repeat("v", 100_000) + ",b="
	_, err := ParseSelector(in)
	if err == nil || len(err.Error()) > 400 {
		t.Errorf("error for a long input is too long or missing: %q", err)
	}
	_, err = Parse("a=b," + strings.Repeat("é", 100))
	if err == nil || !strings.Contains(err.Error(), "éé...éé") {
		t.Errorf("shortened error %q splits a character or is not shortened", err)
	}
}

func TestMustParseSelector(t *testing.T) {
	if got := MustParseSelector("b, a").String(); got != "a,b" {
		t.Errorf("MustParseSelector = %q", got)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Error("MustParseSelector did not panic on invalid input")
		}
	}()
	MustParseSelector("a in (")
}

func TestMatches(t *testing.T) {
	// Sets, by the name of their region labels.
	sets := map[string]Set{
		"none":  set(t, "app", "clicks"),
		"us":    set(t, "app", "clicks", "region", "us"),
		"eu+us": set(t, "app", "clicks", "region", "us", "region", "eu"),
		"empty": set(t, "app", "clicks", "region", ""),
	}
	for _, tc := range []struct {
		sel     string
		matches []string // the sets it matches
	}{
		{"", []string{"none", "us", "eu+us", "empty"}},
		{"region", []string{"us", "eu+us", "empty"}},
		{"!region", []string{"none"}},
		{"region=us", []string{"us", "eu+us"}},
		{"region=eu", []string{"eu+us"}},
		{"region=ap", nil},
		{"region!=us", []string{"none", "empty"}},
		{"region!=eu", []string{"none", "us", "empty"}},
		{"region!=ap", []string{"none", "us", "eu+us", "empty"}},
		{"region in (us)", []string{"us", "eu+us"}},
		{"region in (ap, eu)", []string{"eu+us"}},
		{"region in (ap, us)", []string{"us", "eu+us"}},
		{"region in (ap, sa)", nil},
		{"region notin (us)", []string{"none", "empty"}},
		{"region notin (ap, eu)", []string{"none", "us", "empty"}},
		{"region notin (ap, sa)", []string{"none", "us", "eu+us", "empty"}},
		{"region, region notin (ap, sa)", []string{"us", "eu+us", "empty"}},
		{"app=clicks, region=us", []string{"us", "eu+us"}},
		{"app=views, region=us", nil},
		{"app=clicks, region=us, region=eu", []string{"eu+us"}},
		{"region=us, region!=eu", []string{"us"}},
		{"region, !region", nil},
		{"app in (clicks), !tier", []string{"none", "us", "eu+us", "empty"}},
		{"a", nil},
		{"zzz", nil},
		{"!a, !zzz", []string{"none", "us", "eu+us", "empty"}},
	} {
		sel := MustParseSelector(tc.sel)
		for name, s := range sets {
			want := slices.Contains(tc.matches, name)
			if got := sel.Matches(s); got != want {
				t.Errorf("%q matches %q (%s): %v, want %v", tc.sel, s, name, got, want)
			}
		}
	}
	if !(Selector{}).Matches(nil) {
		t.Error("the empty selector does not match the empty set")
	}
	bad := Selector{Requirements: []Requirement{{Name: "app", Op: 0}}}
	if bad.Matches(sets["us"]) {
		t.Error("a requirement with an invalid op matched")
	}
}

func TestSelectorValidate(t *testing.T) {
	req := func(name string, op Op, values ...string) Requirement {
		return Requirement{Name: name, Op: op, Values: values}
	}
	for _, tc := range []struct {
		reqs []Requirement
		want string // "" for valid
	}{
		{nil, ""},
		{[]Requirement{req("a", Exists), req("a", NotExists), req("a", Equals, "x"), req("b", In, "x", "y")}, ""},
		{[]Requirement{req("", Exists)}, `requirement 0 ("")`},
		{[]Requirement{req("a", 0)}, `invalid op Op(0)`},
		{[]Requirement{req("a", NotIn+1)}, `invalid op Op(7)`},
		{[]Requirement{req("a", Exists, "x")}, `op Exists takes no values, not 1`},
		{[]Requirement{req("a", NotExists, "x")}, `op NotExists takes no values, not 1`},
		{[]Requirement{req("a", Equals)}, `op Equals takes one value, not 0`},
		{[]Requirement{req("a", NotEquals, "x", "y")}, `op NotEquals takes one value, not 2`},
		{[]Requirement{req("a", In)}, `op In takes one value or more, not 0`},
		{[]Requirement{req("a", NotIn)}, `op NotIn takes one value or more, not 0`},
		{[]Requirement{req("a", Equals, "")}, `value 0 is empty`},
		{[]Requirement{req("a", In, "x", "")}, `value 1 is empty`},
		{[]Requirement{req("a", Equals, "x y")}, `invalid label value "x y"`},
		{[]Requirement{req("a", In, "y", "x")}, `requirement 0 ("a in (y,x)"): value 1 ("x") is out of order or repeated`},
		{[]Requirement{req("a", In, "x", "x")}, `value 1 ("x") is out of order or repeated`},
		{[]Requirement{req("b", Exists), req("a", Exists)}, `requirement 1 ("a") is out of order: it sorts before requirement 0 ("b")`},
		{[]Requirement{req("a", NotExists), req("a", Exists)}, `requirement 1 ("a") is out of order`},
		{[]Requirement{req("a", In, "y"), req("a", In, "x", "y")}, `requirement 1 ("a in (x,y)") is out of order`},
		{[]Requirement{req("a", Equals, "x"), req("a", Equals, "x")}, `requirement 1 ("a=x") repeats requirement 0`},
	} {
		sel := Selector{Requirements: tc.reqs}
		err := sel.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q.Validate() = %v", sel, err)
			}
			continue
		}
		wantError(t, err, "selector: ", tc.want)
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{
		Exists: "Exists", NotExists: "NotExists", Equals: "Equals",
		NotEquals: "NotEquals", In: "In", NotIn: "NotIn", 0: "Op(0)", -1: "Op(-1)", 7: "Op(7)",
	} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", int(op), got, want)
		}
	}
}

func TestStringOfInvalidSelectorDoesNotParse(t *testing.T) {
	for _, sel := range []Selector{
		{Requirements: []Requirement{{Name: "a", Op: 0}}},
		{Requirements: []Requirement{{Name: "a", Op: Equals}}},
		{Requirements: []Requirement{{Name: "a", Op: Equals, Values: []string{"x", "y"}}}},
		{Requirements: []Requirement{{Name: "a", Op: In}}},
		{Requirements: []Requirement{{Name: "a", Op: NotEquals, Values: []string{"x", "y"}}}},
		{Requirements: []Requirement{{Name: "a", Op: Exists, Values: []string{"x"}}}},
		{Requirements: []Requirement{{Name: "a", Op: NotExists, Values: []string{"x"}}}},
		{Requirements: []Requirement{{Name: "a", Op: -3, Values: []string{"x"}}}},
	} {
		if got, err := ParseSelector(sel.String()); err == nil {
			t.Errorf("invalid %#v wrote %q, which parses to %#v", sel, sel.String(), got)
		}
	}
}

// randSelector returns a random canonical selector over the pools of random
// sets.
func randSelector(rng *rand.Rand) Selector {
	var rs []Requirement
	for range rng.IntN(6) {
		r := Requirement{Name: randName(rng), Op: Exists + Op(rng.IntN(6))}
		switch r.Op {
		case Equals, NotEquals:
			r.Values = []string{randValue(rng, false)}
		case In, NotIn:
			for range 1 + rng.IntN(4) {
				r.Values = append(r.Values, randValue(rng, false))
			}
			slices.Sort(r.Values)
			r.Values = slices.Compact(r.Values)
		}
		rs = append(rs, r)
	}
	return Selector{Requirements: canonicalRequirements(rs)}
}

// refMatches is Matches by the definitions, label by label.
func refMatches(sel Selector, s Set) bool {
	for _, r := range sel.Requirements {
		has, listed := false, false
		for _, l := range s {
			if l.Name == r.Name {
				has = true
				listed = listed || slices.Contains(r.Values, l.Value)
			}
		}
		var ok bool
		switch r.Op {
		case Exists:
			ok = has
		case NotExists:
			ok = !has
		case Equals, In:
			ok = listed
		case NotEquals, NotIn:
			ok = !listed
		}
		if !ok {
			return false
		}
	}
	return true
}

func TestSelectorRoundTripAndMatches(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	matched := 0
	for range 5000 {
		sel := randSelector(rng)
		if err := sel.Validate(); err != nil {
			t.Fatal(err)
		}
		text := sel.String()
		got, err := ParseSelector(text)
		if err != nil {
			t.Fatalf("ParseSelector(%q): %v", text, err)
		}
		if !reflect.DeepEqual(got, sel) {
			t.Fatalf("ParseSelector(%q) = %#v, want %#v", text, got, sel)
		}
		for range 4 {
			s := randSet(rng)
			want := refMatches(sel, s)
			if sel.Matches(s) != want {
				t.Fatalf("%q matches %q: %v, want %v", sel, s, !want, want)
			}
			if want {
				matched++
			}
		}
	}
	if matched < 1000 {
		t.Errorf("only %d random sets matched: the test is weak", matched)
	}
}
