package protocol

import (
	"path"
	"strings"
	"testing"

	"github.com/quire-dev/quire/allocator"
)

func TestValidateJournalName(t *testing.T) {
	long := strings.Repeat("a", MaxJournalNameLength)
	for _, tc := range []struct {
		name, err string
	}{
		{"a", ""},
		{"examples/words/part-000", ""},
		{"A-Z_0.9/x.y/...", ""},
		{".hidden/x", ""},
		{"a..b/c.", ""},
		{long, ""},
		{"", "journal name is empty"},
		{long + "a", "is 513 bytes, longer than 512"},
		{"/a", `journal name "/a" begins with '/'`},
		{"a/", `journal name "a/" ends with '/'`},
		{"/", `begins with '/'`},
		{"a//b", `journal name "a//b" has an empty segment ("//")`},
		{"a/./b", `journal name "a/./b" has a "." segment`},
		{"..", `journal name ".." has a ".." segment`},
		{"a/..", `has a ".." segment`},
		{".", `has a "." segment`},
		{"a b", `journal name "a b" has character ' ' at byte 1`},
		{"a#b", `has character '#' at byte 1`},
		{"a\x00b", `has byte 0x00 at byte 1`},
		{"é", `has byte 0xc3 at byte 0`},
	} {
		err := ValidateJournalName(tc.name)
		checkErr(t, "ValidateJournalName("+quoteShort(tc.name)+")", err, tc.err)
	}
}

func TestNamePrefixes(t *testing.T) {
	got := strings.Join(namePrefixes("a/bb/c"), " ")
	if got != "a/ a/bb/" {
		t.Errorf("namePrefixes = %q", got)
	}
	if p := namePrefixes("abc"); p != nil {
		t.Errorf("namePrefixes(abc) = %q", p)
	}
}

func FuzzValidateJournalName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a//b", "/a", "a/", "a/./b", "a/../b", "..", "x/...", "a b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateJournalName(name) != nil {
			return
		}
		if name == "" || len(name) > MaxJournalNameLength || strings.Contains(name, "//") ||
			strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
			t.Fatalf("accepted %q", name)
		}
		// A name is a clean relative path: joined beneath a store root and
		// followed by a fragment's file name, it comes back unchanged, and
		// no other name shares its directory.
		joined := path.Join("/root", name, "0000-0001.raw")
		if got := strings.TrimSuffix(strings.TrimPrefix(joined, "/root/"), "/0000-0001.raw"); got != name {
			t.Fatalf("%q joins to %q, which gives back %q", name, joined, got)
		}
		if path.Clean(name) != name || path.IsAbs(name) {
			t.Fatalf("%q is not a clean relative path", name)
		}
		if err := allocator.ValidateToken("item ID", name, true); err != nil {
			t.Fatalf("%q is not an allocator item ID: %v", name, err)
		}
		for _, seg := range strings.Split(name, "/") {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("%q has segment %q", name, seg)
			}
		}
	})
}

// checkErr checks that err is nil if want is empty, and otherwise that it
// contains want.
func checkErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: unexpected error: %v", what, err)
	case want != "" && err == nil:
		t.Errorf("%s: no error, want one containing %q", what, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q does not contain %q", what, err, want)
	}
}
