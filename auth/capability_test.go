package auth

import (
	"strings"
	"testing"
)

// Applications' bits are APP16 to APP31, parsed and printed by name, and
// ApplicationBit gives the same bits; no other name parses.
func TestApplicationBits(t *testing.T) {
	for _, tc := range []struct {
		text string
		want Capability
	}{
		{"APP16", ApplicationBit(16)},
		{"app31", ApplicationBit(31)},
		{" LIST , APP16 ", List | ApplicationBit(16)},
		{"READ,APP20,APP16", Read | ApplicationBit(16) | ApplicationBit(20)},
	} {
		got, err := ParseCapability(tc.text)
		if err != nil || got != tc.want {
			t.Errorf("ParseCapability(%q) = %v, %v; want %v", tc.text, got, err, tc.want)
		}
	}
	if got := (List | ApplicationBit(16) | ApplicationBit(31)).String(); got != "LIST,APP16,APP31" {
		t.Errorf("String = %q, want LIST,APP16,APP31", got)
	}
	if ApplicationBit(16) != 1<<FirstApplicationBit || All&ApplicationBit(16) != 0 {
		t.Errorf("ApplicationBit(16) = %#x: want the first bit above Quire's (All = %#x)", uint32(ApplicationBit(16)), uint32(All))
	}
	for _, text := range []string{"APP15", "APP32", "APP016", "APP+17", "APP", "BIT7", "APP16,"} {
		if c, err := ParseCapability(text); err == nil {
			t.Errorf("ParseCapability(%q) = %v, want an error", text, c)
		} else if !strings.Contains(err.Error(), text) {
			t.Errorf("ParseCapability(%q): %v, want the error to quote the text", text, err)
		}
	}
	for _, n := range []int{15, 32, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("ApplicationBit(%d) did not panic: an application's constant outside 16 to 31 is a programming error", n)
				}
			}()
			ApplicationBit(n)
		}()
	}
}
