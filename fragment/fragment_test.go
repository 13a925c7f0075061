package fragment

import (
	"crypto/sha256"
	"strings"
	"testing"
)

func sumOf(s string) [32]byte { return sha256.Sum256([]byte(s)) }

const helloSum = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824" // sha256("hello")

func TestName(t *testing.T) {
	for _, tc := range []struct {
		f    Fragment
		want string
	}{
		{Fragment{Journal: "a", Begin: 0, End: 5, Sum: sumOf("hello")},
			"a/0000000000000000-0000000000000005-" + helloSum + ".raw"},
		{Fragment{Journal: "orders/eu-1/part_0.x", Begin: 0x1234, End: 0xabcdef0123, Sum: sumOf("hello"), Codec: Zstd},
			"orders/eu-1/part_0.x/0000000000001234-000000abcdef0123-" + helloSum + ".zst"},
		{Fragment{Journal: "j", Begin: 1<<63 - 6, End: 1<<63 - 1, Sum: sumOf("hello"), Codec: Gzip},
			"j/7ffffffffffffffa-7fffffffffffffff-" + helloSum + ".gz"},
		{Fragment{Journal: "j", Begin: 7, End: 7, Sum: sumOf(""), Codec: Snappy},
			"j/0000000000000007-0000000000000007-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.sz"},
	} {
		if got := tc.f.Name(); got != tc.want {
			t.Errorf("Name() = %q, want %q", got, tc.want)
		}
		if err := tc.f.Validate(); err != nil {
			t.Errorf("Validate(%q) = %v", tc.want, err)
		}
		got, err := ParseName(tc.want)
		if err != nil {
			t.Errorf("ParseName(%q): %v", tc.want, err)
		} else if got != tc.f {
			t.Errorf("ParseName(%q) = %+v, want %+v", tc.want, got, tc.f)
		}
	}
}

func TestParseNameErrors(t *testing.T) {
	const (
		b   = "0000000000000000"
		e   = "0000000000000005"
		ok  = b + "-" + e + "-" + helloSum + ".raw"
		bad = "not 16 lowercase hex digits"
	)
	for _, tc := range []struct {
		name, want string // want is a substring of the error.
	}{
		{"", "has no journal"},
		{ok, "has no journal"},
		{"/" + ok, "journal name is empty"},
		{"a//b/" + ok, "empty segment"},
		{"a/../" + ok, `".." segment`},
		{"./" + ok, `"." segment`},
		{"a b/" + ok, "invalid character ' '"},
		{"é/" + ok, "invalid character"},
		{strings.Repeat("j", MaxJournalLen+1) + "/" + ok, "maximum is 512"},
		{"j/", "is not BEGIN-END-SUM.EXT"},
		{"j/" + b, "is not BEGIN-END-SUM.EXT"},
		{"j/" + b + "-" + e, "is not BEGIN-END-SUM.EXT"},
		{"j/000000000000000-" + e + "-" + helloSum + ".raw", `begin offset "000000000000000": ` + bad},
		{"j/000000000000000A-" + e + "-" + helloSum + ".raw", `begin offset "000000000000000A": ` + bad},
		{"j/" + b + "-+000000000000005-" + helloSum + ".raw", `end offset "+000000000000005": ` + bad},
		{"j/" + b + "-8000000000000000-" + helloSum + ".raw", `end offset "8000000000000000": exceeds`},
		{"j/" + b + "-" + e + "-" + helloSum, "has no extension"},
		{"j/" + b + "-" + e + "-" + strings.ToUpper(helloSum) + ".raw", "is not 64 lowercase hex digits"},
		{"j/" + b + "-" + e + "-" + helloSum[1:] + ".raw", "is not 64 lowercase hex digits"},
		{"j/" + b + "-" + e + "-" + helloSum + ".bz2", `extension ".bz2" is not a codec's`},
		{"j/" + b + "-" + e + "-" + helloSum + ".raw.gz", `extension ".raw.gz"`},
		{"j/" + e + "-" + b + "-" + helloSum + ".raw", "end offset 0 is before begin offset 5"},
		{"j/" + e + "-" + e + "-" + helloSum + ".raw", "empty fragment at offset 5 has sum 2cf2"},
	} {
		_, err := ParseName(tc.name)
		if err == nil {
			t.Errorf("ParseName(%q) succeeded, want error containing %q", tc.name, tc.want)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseName(%q) = %q, want error containing %q", tc.name, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	good := Fragment{Journal: "j", Begin: 0, End: 5, Sum: sumOf("hello")}
	for _, tc := range []struct {
		mutate func(*Fragment)
		want   string
	}{
		{func(f *Fragment) { f.Journal = "" }, "journal name is empty"},
		{func(f *Fragment) { f.Journal = "j/" }, "empty segment"},
		{func(f *Fragment) { f.Begin = -1 }, "begin offset -1 is negative"},
		{func(f *Fragment) { f.End = 4; f.Begin = 5 }, "end offset 4 is before begin offset 5"},
		{func(f *Fragment) { f.Codec = 9 }, "unknown codec 9"},
		{func(f *Fragment) { f.Codec = -1 }, "unknown codec -1"},
	} {
		f := good
		tc.mutate(&f)
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want error containing %q", f, err, tc.want)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", good, err)
	}
	if got := good.Len(); got != 5 {
		t.Errorf("Len() = %d, want 5", got)
	}
}

func TestValidateJournal(t *testing.T) {
	for _, j := range []string{"a", "A-b_c.d/e", "a/b/c", "..a/b..", ".hidden", strings.Repeat("x", MaxJournalLen)} {
		if err := ValidateJournal(j); err != nil {
			t.Errorf("ValidateJournal(%q) = %v", j, err)
		}
	}
	for _, j := range []string{"", "/a", "a/", "a//b", ".", "..", "a/./b", "a/..", "a\x00b", "a:b", "a\\b", strings.Repeat("x", MaxJournalLen+1)} {
		if err := ValidateJournal(j); err == nil {
			t.Errorf("ValidateJournal(%q) succeeded, want an error", j)
		}
	}
}

func FuzzParseName(f *testing.F) {
	f.Add("a/0000000000000000-0000000000000005-" + helloSum + ".raw")
	f.Add("a/b/0000000000001234-000000abcdef0123-" + helloSum + ".zst")
	f.Add("j/0000000000000007-0000000000000007-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.sz")
	f.Add("j/ffffffffffffffff-ffffffffffffffff-" + helloSum + ".gz")
	f.Add("../0000000000000000-0000000000000005-" + helloSum + ".raw")
	f.Add("")
	f.Add("/")
	f.Add("j/--.")
	f.Fuzz(func(t *testing.T, name string) {
		frag, err := ParseName(name)
		if err != nil {
			return
		}
		if got := frag.Name(); got != name {
			t.Fatalf("ParseName(%q).Name() = %q", name, got)
		}
		if err := frag.Validate(); err != nil {
			t.Fatalf("ParseName(%q) = %+v, which does not validate: %v", name, frag, err)
		}
	})
}
