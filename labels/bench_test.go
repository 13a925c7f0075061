package labels

import "testing"

// BenchmarkMatches matches a three-requirement selector against a set of
// ten labels, which it matches: every requirement is checked.
func BenchmarkMatches(b *testing.B) {
	s := set(b,
		"app", "clicks",
		"content-type", "application/x-ndjson",
		"env", "production",
		"owner", "analytics",
		"quire.dev/managed-by", "quire",
		"region", "eu",
		"region", "us",
		"retention", "30d",
		"team", "data",
		"tier", "gold",
	)
	sel := MustParseSelector("app=clicks, region in (ap, us), !deprecated")
	if !sel.Matches(s) {
		b.Fatal("the selector does not match")
	}
	b.ReportAllocs()
	for b.Loop() {
		if !sel.Matches(s) {
			b.Fatal("the selector does not match")
		}
	}
}

// BenchmarkParseSelector parses a typical selector.
func BenchmarkParseSelector(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseSelector("app=clicks, region in (us, eu), !deprecated"); err != nil {
			b.Fatal(err)
		}
	}
}
