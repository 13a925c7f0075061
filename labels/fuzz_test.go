package labels

import (
	"reflect"
	"strings"
	"testing"
)

var setSeeds = []string{
	"",
	"app=clicks",
	" region = us , region=eu,app= clicks ",
	"a=,a=x,b=",
	"k=日本,in=notin",
	"a=b,",
	"a==b",
	"a=(b)",
	"=x",
	"a=\xff",
	strings.Repeat("n", 65) + "=v",
}

var selectorSeeds = []string{
	"",
	"app=clicks, region in (us, eu), !deprecated",
	"a notin (x),a in (x),a!=x,a==x,!a,a",
	"in in (in), notin notin(notin)",
	"app=,x",
	"a in (x",
	"a in ()",
	"a in (x,)",
	"a,",
	"a b",
	"!",
	"a!x",
	"a in ((x))",
	"a=\xff",
	"k in (日本, café)",
}

func FuzzParse(f *testing.F) {
	for _, s := range append(setSeeds, selectorSeeds...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := Parse(text)
		if err != nil {
			if s != nil {
				t.Fatalf("Parse(%q) returned %q with error %v", text, s, err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse(%q) = %q, invalid: %v", text, s, err)
		}
		canon := s.String()
		again, err := Parse(canon)
		if err != nil {
			t.Fatalf("Parse(%q) = %q, which does not parse: %v", text, canon, err)
		}
		if !again.Equal(s) {
			t.Fatalf("Parse(%q) = %q, which parses to %q", text, canon, again)
		}
		if again.String() != canon {
			t.Fatalf("%q is not a fixed point: it gives %q", canon, again.String())
		}
	})
}

func FuzzParseSelector(f *testing.F) {
	for _, s := range append(selectorSeeds, setSeeds...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		sel, err := ParseSelector(text)
		if err != nil {
			if !reflect.DeepEqual(sel, Selector{}) {
				t.Fatalf("ParseSelector(%q) returned %q with error %v", text, sel, err)
			}
			return
		}
		if err := sel.Validate(); err != nil {
			t.Fatalf("ParseSelector(%q) = %q, not canonical: %v", text, sel, err)
		}
		canon := sel.String()
		again, err := ParseSelector(canon)
		if err != nil {
			t.Fatalf("ParseSelector(%q) = %q, which does not parse: %v", text, canon, err)
		}
		if !reflect.DeepEqual(again, sel) {
			t.Fatalf("ParseSelector(%q) = %q, which parses to %#v, not %#v", text, canon, again, sel)
		}
		if again.String() != canon {
			t.Fatalf("%q is not a fixed point: it gives %q", canon, again.String())
		}
	})
}
