package labels

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// set builds a Set from name, value pairs, failing the test on error.
func set(t testing.TB, pairs ...string) Set {
	t.Helper()
	s, err := New(pairs...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wantError fails the test unless err is non-nil and contains every one of
// wants.
func wantError(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", wants)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

func TestValidateName(t *testing.T) {
	valid := []string{
		"a", "Z", "0", "app", "quire.dev/region", "content-type", "a_b", "a:b",
		"in", "notin", "9lives", "a.", "a-", strings.Repeat("n", 64),
	}
	for _, name := range valid {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", name, err)
		}
	}
	invalid := []struct{ name, want string }{
		{"", `invalid label name "": empty`},
		{strings.Repeat("n", 65), "65 bytes, longer than 64"},
		{"-a", `begins with '-', not a letter or digit`},
		{".a", `begins with '.'`},
		{"_a", `begins with '_'`},
		{"/a", `begins with '/'`},
		{"a b", `character ' ' is not allowed`},
		{"a=b", `character '=' is not allowed`},
		{"a,b", `character ',' is not allowed`},
		{"a!", `character '!' is not allowed`},
		{"a(b)", `character '(' is not allowed`},
		{"é", `character 'é' is not allowed`},
		{"a\x00", `character '\x00' is not allowed`},
		{"a\xff", `invalid UTF-8 byte 0xff`},
	}
	for _, tc := range invalid {
		err := ValidateName(tc.name)
		wantError(t, err, "invalid label name", tc.want)
	}
}

func TestValidateValue(t *testing.T) {
	valid := []string{
		"", "a", "clicks", "us-east-1", "application/x-ndjson", `"quoted"`, "a;b", "a&b|c",
		"日本", "café", "~", "<>", strings.Repeat("v", 1024), strings.Repeat("é", 512),
	}
	for _, value := range valid {
		if err := ValidateValue(value); err != nil {
			t.Errorf("ValidateValue(%q) = %v, want nil", value, err)
		}
	}
	invalid := []struct{ value, want string }{
		{strings.Repeat("v", 1025), "1025 bytes, longer than 1024"},
		{"a b", `character ' ' is not allowed`},
		{"a\tb", `character '\t' is not allowed`},
		{"a,b", `character ',' is not allowed`},
		{"(", `character '(' is not allowed`},
		{")", `character ')' is not allowed`},
		{"a=b", `character '=' is not allowed`},
		{"!a", `character '!' is not allowed`},
		{"\x7f", `character '\x7f' is not allowed`},
		{"a\u00a0b", `character '\u00a0' is not allowed`},
		{"a\u200bb", `character '\u200b' is not allowed`},
		{"\xc3", `invalid UTF-8 byte 0xc3`},
	}
	for _, tc := range invalid {
		err := ValidateValue(tc.value)
		wantError(t, err, "invalid label value", tc.want)
	}
}

func TestNew(t *testing.T) {
	s, err := New("region", "us", "app", "clicks", "region", "eu", "app", "clicks")
	if err != nil {
		t.Fatal(err)
	}
	want := Set{{"app", "clicks"}, {"region", "eu"}, {"region", "us"}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("New = %v, want %v", s, want)
	}
	if s, err := New(); s != nil || err != nil {
		t.Errorf("New() = %v, %v; want nil, nil", s, err)
	}

	_, err = New("app", "clicks", "region")
	wantError(t, err, "odd number of arguments (3)", `name "region" has no value`)
	_, err = New("app", "clicks", "re gion", "us")
	wantError(t, err, `pair 1 ("re gion", "us")`, `invalid label name "re gion"`)
	_, err = New("app", "a,b")
	wantError(t, err, `pair 0 ("app", "a,b")`, `invalid label value "a,b"`)
	var inv *invalidError
	if !errors.As(err, &inv) {
		t.Errorf("New's error %v does not wrap the validation error", err)
	}
}

func TestSetValidate(t *testing.T) {
	valid := []Set{
		nil,
		{},
		{{"a", ""}},
		{{"a", ""}, {"a", "x"}, {"b", "x"}},
	}
	for _, s := range valid {
		if err := s.Validate(); err != nil {
			t.Errorf("%v.Validate() = %v", s, err)
		}
	}
	invalid := []struct {
		s     Set
		wants []string
	}{
		{Set{{"", "x"}}, []string{`label 0 ("=x")`, "invalid label name"}},
		{Set{{"a", "x"}, {"b", "x y"}}, []string{`label 1 ("b=x y")`, `invalid label value "x y"`}},
		{Set{{"a", "x"}, {"a", "x"}}, []string{`label 1 ("a=x") repeats label 0`}},
		{Set{{"b", "x"}, {"a", "x"}}, []string{`label 1 ("a=x") is out of order`, `label 0 ("b=x")`}},
		{Set{{"a", "y"}, {"a", "x"}}, []string{`label 1 ("a=x") is out of order`}},
	}
	for _, tc := range invalid {
		wantError(t, tc.s.Validate(), tc.wants...)
	}
}

func TestParse(t *testing.T) {
	valid := []struct{ in, want string }{
		{"", ""},
		{"   \t\n", ""},
		{"app=clicks", "app=clicks"},
		{"region=us,app=clicks", "app=clicks,region=us"},
		{" region = us , region=eu,app= clicks ", "app=clicks,region=eu,region=us"},
		{"a=x,a=x,a=x", "a=x"},
		{"a=", "a="},
		{"a= ,b=", "a=,b="},
		{"a=,a=x", "a=,a=x"},
		{"in=notin", "in=notin"},
		{"k=日本", "k=日本"},
		{"type=application/x-ndjson", "type=application/x-ndjson"},
	}
	for _, tc := range valid {
		s, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := s.String(); got != tc.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got, tc.want)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("Parse(%q) is invalid: %v", tc.in, err)
		}
	}
	invalid := []struct{ in, want string }{
		{",", `at 0: expected a label name, found ","`},
		{"=x", `at 0: expected a label name, found "="`},
		{"a", `at 1: expected "=" after "a", found end of input`},
		{"a b=c", `at 2: expected "=" after "a", found "b"`},
		{"a=b,", `at 4: expected a label after ",", found end of input`},
		{"a=b, ", `at 5: expected a label after ",", found end of input`},
		{"a=b,,c=d", `at 4: expected a label after ",", found ","`},
		{"a=b c", `at 4: expected "," or end of input after "a=b", found "c"`},
		{"a==b", `at 2: invalid label value "=b": character '=' is not allowed`},
		{"a=(b)", `at 2: invalid label value "(b)": character '(' is not allowed`},
		{"a=b,c$=d", `at 5: invalid label name "c$": character '$' is not allowed`},
		{"-a=b", `at 0: invalid label name "-a": begins with '-'`},
		{"a=\xffb", `at 2: invalid label value "\xffb": invalid UTF-8 byte 0xff`},
		{"a=x" + strings.Repeat("y", 1024), `at 2: invalid label value "xyyy`},
		{"a=x" + strings.Repeat("y", 1024), `1025 bytes, longer than 1024`},
		{strings.Repeat("n", 65) + "=v", `at 0: invalid label name "nnn`},
	}
	for _, tc := range invalid {
		s, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) = %q, want an error", tc.in, s)
			continue
		}
		wantError(t, err, "label set "+quote(tc.in)+": at ", tc.want)
	}
}

func TestSetLookups(t *testing.T) {
	s := set(t, "app", "clicks", "region", "us", "region", "eu", "tier", "", "zone", "a")
	for _, tc := range []struct {
		name   string
		values []string
	}{
		{"app", []string{"clicks"}},
		{"region", []string{"eu", "us"}},
		{"tier", []string{""}},
		{"absent", nil},
		{"", nil},
		{"a", nil},
		{"zzz", nil},
	} {
		if got := s.Values(tc.name); !reflect.DeepEqual(got, tc.values) {
			t.Errorf("Values(%q) = %q, want %q", tc.name, got, tc.values)
		}
		v, ok := s.Value(tc.name)
		if ok != (tc.values != nil) || ok && v != tc.values[0] {
			t.Errorf("Value(%q) = %q, %v; want the first of %q", tc.name, v, ok, tc.values)
		}
		if got := s.Has(tc.name); got != (tc.values != nil) {
			t.Errorf("Has(%q) = %v", tc.name, got)
		}
	}
	if Set(nil).Has("a") || Set(nil).Values("a") != nil {
		t.Error("the empty set has a label")
	}
}

func TestPrefixed(t *testing.T) {
	s := set(t, "a", "1", "w/x", "2", "w/y", "3", "w/y", "4", "wz", "5", "x", "6")
	for _, tc := range []struct {
		prefix string
		want   Set
	}{
		{"w/", Set{{"w/x", "2"}, {"w/y", "3"}, {"w/y", "4"}}},
		{"w", Set{{"w/x", "2"}, {"w/y", "3"}, {"w/y", "4"}, {"wz", "5"}}},
		{"", s},
		{"b", Set{}},
		{"zz", Set{}},
	} {
		got := s.Prefixed(tc.prefix)
		if !reflect.DeepEqual(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("Prefixed(%q) = %v, want %v", tc.prefix, got, tc.want)
		}
		if len(got) > 0 {
			_ = append(got, Label{"zzz", ""}) // Must not write over s.
		}
	}
	if !reflect.DeepEqual(s, set(t, "a", "1", "w/x", "2", "w/y", "3", "w/y", "4", "wz", "5", "x", "6")) {
		t.Errorf("appending to a part of s changed s: %v", s)
	}
}

func TestUnion(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"", "", ""},
		{"a=x", "", "a=x"},
		{"", "a=x", "a=x"},
		{"a=x", "a=x", "a=x"},
		{"a=x", "a=y", "a=x,a=y"},
		{"a=x,c=z", "b=y,c=z,d=w", "a=x,b=y,c=z,d=w"},
		{"a=", "a=x", "a=,a=x"},
	} {
		a, b := mustParse(t, tc.a), mustParse(t, tc.b)
		aText, bText := a.String(), b.String()
		got := a.Union(b)
		if got.String() != tc.want {
			t.Errorf("%q ∪ %q = %q, want %q", tc.a, tc.b, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%q ∪ %q: %v", tc.a, tc.b, err)
		}
		if a.String() != aText || b.String() != bText {
			t.Errorf("Union modified its operands")
		}
	}
}

func TestSubtract(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{"", "", ""},
		{"", "a=x", ""},
		{"a=x", "", "a=x"},
		{"a=x", "a=x", ""},
		{"a=x,a=y,b=z", "a=x", "a=y,b=z"},
		{"a=x,a=y,b=z", "a=", "b=z"},          // the empty value removes every value
		{"a=,a=y,b=z", "a=", "b=z"},           // including the empty one
		{"a=,a=y,b=z", "a=y", "a=,b=z"},       // others remove only themselves
		{"a=x,b=z", "a=q,c=z,b=q", "a=x,b=z"}, // same name or value is not enough
		{"a=x,b=y,c=z", "a=x,b=y,c=z", ""},
	} {
		a, b := mustParse(t, tc.a), mustParse(t, tc.b)
		aText := a.String()
		got := a.Subtract(b)
		if got.String() != tc.want {
			t.Errorf("%q − %q = %q, want %q", tc.a, tc.b, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%q − %q: %v", tc.a, tc.b, err)
		}
		if a.String() != aText {
			t.Errorf("Subtract modified its receiver")
		}
	}
}

func TestAppendIsString(t *testing.T) {
	for _, text := range []string{"", "a=x", "a=,a=x,b=y", "app=clicks,region=eu,region=us"} {
		s := mustParse(t, text)
		if got := string(s.Append([]byte("<"))); got != "<"+s.String() || s.String() != text {
			t.Errorf("%q: Append gives %q after \"<\", String %q", text, got, s.String())
		}
	}
}

func TestWith(t *testing.T) {
	for _, tc := range []struct{ a, name, value, want string }{
		{"", "a", "x", "a=x"},
		{"b=y", "a", "x", "a=x,b=y"},
		{"b=y", "c", "x", "b=y,c=x"},
		{"a=x,b=y,c=z", "b", "q", "a=x,b=q,c=z"},
		{"a=x,b=y,b=z,c=z", "b", "q", "a=x,b=q,c=z"}, // every value of the name goes
		{"a=x", "a", "", "a="},
	} {
		a := mustParse(t, tc.a)
		aText := a.String()
		got := a.With(tc.name, tc.value)
		if got.String() != tc.want {
			t.Errorf("%q with %s=%s = %q, want %q", tc.a, tc.name, tc.value, got, tc.want)
		}
		// It is what a subtraction of the name and a union give.
		if want := a.Subtract(Set{{Name: tc.name}}).Union(Set{{Name: tc.name, Value: tc.value}}); !got.Equal(want) {
			t.Errorf("%q with %s=%s = %q, but subtracting and joining gives %q", tc.a, tc.name, tc.value, got, want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%q with %s=%s: %v", tc.a, tc.name, tc.value, err)
		}
		if a.String() != aText {
			t.Errorf("With modified its receiver")
		}
	}
}

func TestSetResultsShareNoMemory(t *testing.T) {
	a := set(t, "a", "x", "b", "y")
	u := a.Union(nil)
	u[0].Value = "changed"
	d := a.Subtract(nil)
	d[0].Value = "changed"
	w := a.With("b", "z")
	w[0].Value = "changed"
	if a[0].Value != "x" {
		t.Errorf("a result of Union, Subtract or With shares its receiver's memory")
	}
}

func TestEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b Set
		want bool
	}{
		{nil, nil, true},
		{nil, Set{}, true},
		{Set{{"a", "x"}}, Set{{"a", "x"}}, true},
		{Set{{"a", "x"}}, Set{{"a", "y"}}, false},
		{Set{{"a", "x"}}, Set{{"b", "x"}}, false},
		{Set{{"a", "x"}}, Set{{"a", "x"}, {"b", "y"}}, false},
		{Set{{"a", "x"}}, nil, false},
	} {
		if got := tc.a.Equal(tc.b); got != tc.want {
			t.Errorf("%q.Equal(%q) = %v", tc.a, tc.b, got)
		}
		if got := tc.b.Equal(tc.a); got != tc.want {
			t.Errorf("%q.Equal(%q) = %v", tc.b, tc.a, got)
		}
	}
}

func mustParse(t testing.TB, text string) Set {
	t.Helper()
	s, err := Parse(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Pools for random sets and selectors: few names and values, so that they
// collide often, and some that test the edges of the rules.
var (
	namePool  = []string{"a", "b", "app", "in", "notin", "quire.dev/region", "x-y_z:0", strings.Repeat("n", 64)}
	valuePool = []string{"x", "y", "us", "eu", "in", "日本", "a/b:c", `"q"`, "~", strings.Repeat("v", 1024)}
)

func randName(rng *rand.Rand) string { return namePool[rng.IntN(len(namePool))] }

func randValue(rng *rand.Rand, empty bool) string {
	if empty && rng.IntN(8) == 0 {
		return ""
	}
	return valuePool[rng.IntN(len(valuePool))]
}

func randSet(rng *rand.Rand) Set {
	var pairs []string
	for range rng.IntN(12) {
		pairs = append(pairs, randName(rng), randValue(rng, true))
	}
	s, err := New(pairs...)
	if err != nil {
		panic(err)
	}
	return s
}

func TestSetRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		s := randSet(rng)
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		text := s.String()
		got, err := Parse(text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", text, err)
		}
		if !got.Equal(s) {
			t.Fatalf("Parse(%q) = %q, want %q", text, got, s)
		}
		// Union and Subtract of valid sets are valid, and consistent.
		o := randSet(rng)
		u := s.Union(o)
		d := s.Subtract(o)
		if err := u.Validate(); err != nil {
			t.Fatalf("%q ∪ %q: %v", s, o, err)
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("%q − %q: %v", s, o, err)
		}
		// Compare with the definitions, checked label by label.
		for _, l := range s.Union(o).Union(s).Union(d) {
			inS, inO := slicesContains(s, l), slicesContains(o, l)
			if slicesContains(u, l) != (inS || inO) {
				t.Fatalf("%q ∪ %q is wrong about %v", s, o, l)
			}
			removed := false
			for _, m := range o {
				removed = removed || m.Name == l.Name && (m.Value == "" || m.Value == l.Value)
			}
			if slicesContains(d, l) != (inS && !removed) {
				t.Fatalf("%q − %q is wrong about %v", s, o, l)
			}
		}
	}
}

func slicesContains(s Set, l Label) bool {
	for _, m := range s {
		if m == l {
			return true
		}
	}
	return false
}
