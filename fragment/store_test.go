package fragment

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// storeHarness is a Store under test, with access around it.
type storeHarness struct {
	store Store
	// putRaw stores data as the object named name (relative to the
	// store), bypassing Persist.
	putRaw func(t *testing.T, name string, data []byte)
	// objects returns the names, relative to the store, of every object in
	// it, temporary ones included.
	objects func(t *testing.T) []string
	// fetch GETs a URL returned by the store's SignURL.
	fetch func(t *testing.T, url string) []byte
}

// testContent returns n bytes of compressible, non-repeating text.
func testContent(n int, seed int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, `{"seq":%d,"seed":%d,"user":"user-%d","event":"view"}`+"\n", i, seed, (i*7919+seed)%1000)
	}
	return b.Bytes()[:n]
}

// fragmentOf returns the fragment of journal at begin with content.
func fragmentOf(journal string, begin int64, content []byte, c Codec) Fragment {
	return Fragment{Journal: journal, Begin: begin, End: begin + int64(len(content)), Sum: sha256.Sum256(content), Codec: c}
}

// listAll lists journal in s.
func listAll(t *testing.T, s Store, journal string) []Fragment {
	t.Helper()
	var fs []Fragment
	if err := s.List(context.Background(), journal, func(f Fragment) error {
		fs = append(fs, f)
		return nil
	}); err != nil {
		t.Fatalf("List(%q): %v", journal, err)
	}
	slices.SortFunc(fs, func(a, b Fragment) int { return strings.Compare(a.Name(), b.Name()) })
	return fs
}

// names returns the names of fs.
func names(fs []Fragment) []string {
	var ns []string
	for _, f := range fs {
		ns = append(ns, f.Name())
	}
	return ns
}

// readFragment opens f in s and reads it all, returning the first error of
// Open, Read or Close.
func readFragment(s Store, f Fragment) ([]byte, error) {
	r, err := s.Open(context.Background(), f)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return b, err
}

func persist(t *testing.T, s Store, f Fragment, content []byte) {
	t.Helper()
	if err := s.Persist(context.Background(), f, bytes.NewReader(content)); err != nil {
		t.Fatalf("Persist(%s): %v", f.Name(), err)
	}
}

// objectsUnder returns h's objects whose names begin with journal + "/".
func objectsUnder(t *testing.T, h storeHarness, journal string) []string {
	var out []string
	for _, o := range h.objects(t) {
		if strings.HasPrefix(o, journal+"/") {
			out = append(out, o)
		}
	}
	return out
}

// errReader fails every read.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("content must not be read") }

// checkedReader is content that vouches for itself (a CheckedContent),
// as a broker's spool does: verify says what Verify returns.
type checkedReader struct {
	io.Reader
	verify error
	sums   [][32]byte // Verify's arguments.
}

func (c *checkedReader) Verify(sum [32]byte) error {
	c.sums = append(c.sums, sum)
	return c.verify
}

// testStore is the conformance suite that every Store passes.
func testStore(t *testing.T, h storeHarness) {
	s := h.store
	ctx := context.Background()

	t.Run("PersistListOpenRemove", func(t *testing.T) {
		for _, c := range allCodecs {
			journal := "basic/" + c.String()
			content := testContent(100_000, int(c))
			f := fragmentOf(journal, 1000, content, c)
			persist(t, s, f, content)

			listed := listAll(t, s, journal)
			if len(listed) != 1 {
				t.Fatalf("List(%q) = %v, want [%s]", journal, names(listed), f.Name())
			}
			got := listed[0]
			if got.ModTime.IsZero() || got.Store != s.URL() {
				t.Errorf("listed %s with ModTime %v, Store %q; want a time and %q", got.Name(), got.ModTime, got.Store, s.URL())
			}
			got.ModTime, got.Store = f.ModTime, f.Store
			if got != f {
				t.Errorf("listed %+v, want %+v", got, f)
			}

			b, err := readFragment(s, f)
			if err != nil {
				t.Fatalf("reading %s: %v", f.Name(), err)
			}
			if !bytes.Equal(b, content) {
				t.Fatalf("read %d bytes that differ from the %d persisted", len(b), len(content))
			}

			signed, err := s.SignURL(ctx, f, time.Minute)
			if err != nil {
				t.Fatalf("SignURL(%s): %v", f.Name(), err)
			}
			stored := h.fetch(t, signed)
			if c == None && !bytes.Equal(stored, content) {
				t.Errorf("fetched %d stored bytes that differ from the content", len(stored))
			}
			if c != None && len(stored) >= len(content)/2 {
				t.Errorf("fetched %d stored bytes for %d bytes of text compressed with %v", len(stored), len(content), c)
			}
			dec, err := c.NewReader(bytes.NewReader(stored))
			if err != nil {
				t.Fatal(err)
			}
			if b, err := io.ReadAll(dec); err != nil || !bytes.Equal(b, content) {
				t.Errorf("decompressing the fetched bytes: %v (equal: %v)", err, bytes.Equal(b, content))
			}
			dec.Close()

			if err := s.Remove(ctx, f); err != nil {
				t.Fatalf("Remove(%s): %v", f.Name(), err)
			}
			if l := listAll(t, s, journal); len(l) != 0 {
				t.Errorf("List after Remove = %v", names(l))
			}
			if _, err := readFragment(s, f); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Open after Remove: %v, want fs.ErrNotExist", err)
			}
			if err := s.Remove(ctx, f); err != nil {
				t.Errorf("second Remove(%s): %v", f.Name(), err)
			}
		}
	})

	t.Run("ListMissingJournal", func(t *testing.T) {
		if l := listAll(t, s, "no/such/journal"); len(l) != 0 {
			t.Errorf("List = %v", names(l))
		}
	})

	t.Run("ManyFragments", func(t *testing.T) {
		const journal = "many"
		var want []string
		var begin int64
		for i := range 25 {
			content := testContent(100+i*37, i)
			f := fragmentOf(journal, begin, content, allCodecs[i%len(allCodecs)])
			persist(t, s, f, content)
			want = append(want, f.Name())
			begin = f.End
		}
		slices.Sort(want)
		if got := names(listAll(t, s, journal)); !slices.Equal(got, want) {
			t.Errorf("List = %v\nwant %v", got, want)
		}
	})

	t.Run("PersistIdempotent", func(t *testing.T) {
		const journal = "idempotent"
		content := testContent(5000, 1)
		f := fragmentOf(journal, 0, content, Gzip)
		persist(t, s, f, content)
		before := listAll(t, s, journal)
		// Persisting again neither reads the content nor rewrites the object.
		if err := s.Persist(ctx, f, errReader{}); err != nil {
			t.Fatalf("second Persist: %v", err)
		}
		after := listAll(t, s, journal)
		if len(after) != 1 || !after[0].ModTime.Equal(before[0].ModTime) {
			t.Errorf("after a second Persist, List = %+v, want %+v", after, before)
		}
		if objs := objectsUnder(t, h, journal); len(objs) != 1 {
			t.Errorf("objects = %v, want one", objs)
		}
	})

	t.Run("PersistConcurrently", func(t *testing.T) {
		const journal = "concurrent"
		content := testContent(200_000, 2)
		f := fragmentOf(journal, 0, content, Zstd)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { errs[i] = s.Persist(ctx, f, bytes.NewReader(content)) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Errorf("Persist: %v", err)
			}
		}
		if objs := objectsUnder(t, h, journal); len(objs) != 1 {
			t.Errorf("objects = %v, want one", objs)
		}
		if b, err := readFragment(s, f); err != nil || !bytes.Equal(b, content) {
			t.Errorf("reading: %v (equal: %v)", err, bytes.Equal(b, content))
		}
	})

	t.Run("PersistRejectsMismatch", func(t *testing.T) {
		const journal = "mismatch"
		content := testContent(10_000, 3)
		for _, c := range allCodecs {
			f := fragmentOf(journal, 0, content, c)
			other := bytes.Clone(content)
			other[5000] ^= 1
			for _, tc := range []struct {
				name    string
				content io.Reader
				want    string
			}{
				{"other content", bytes.NewReader(other), "content has SHA-256"},
				{"short content", bytes.NewReader(content[:9999]), "content ends at 9999 of 10000 bytes"},
				{"no content", strings.NewReader(""), "content ends at 0 of 10000 bytes"},
				{"failing content", errReader{}, "content must not be read"},
			} {
				err := s.Persist(ctx, f, tc.content)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%v: Persist of %s = %v, want an error containing %q", c, tc.name, err, tc.want)
				}
			}
		}
		if objs := objectsUnder(t, h, journal); len(objs) != 0 {
			t.Errorf("rejected persists left %v", objs)
		}
		if l := listAll(t, s, journal); len(l) != 0 {
			t.Errorf("List = %v", names(l))
		}
	})

	// Content that checks itself is verified by its own Verify, with the
	// fragment's sum, not by hashing it: a failed check persists nothing.
	// A fragment persisted from content that vouched for other bytes is
	// caught by its readers, who verify its SHA-256.
	t.Run("PersistCheckedContent", func(t *testing.T) {
		const journal = "checked"
		content := testContent(20_000, 6)
		f := fragmentOf(journal, 0, content, None)
		failing := &checkedReader{Reader: bytes.NewReader(content), verify: errors.New("its file changed")}
		if err := s.Persist(ctx, f, failing); err == nil || !strings.Contains(err.Error(), "its file changed") {
			t.Errorf("Persist of content whose check fails = %v", err)
		}
		if len(failing.sums) != 1 || failing.sums[0] != f.Sum {
			t.Errorf("Verify was called with %x, want once with the fragment's sum", failing.sums)
		}
		if objs := objectsUnder(t, h, journal); len(objs) != 0 {
			t.Errorf("a persist whose check failed left %v", objs)
		}
		other := bytes.Clone(content)
		other[10_000] ^= 1
		if err := s.Persist(ctx, f, &checkedReader{Reader: bytes.NewReader(other)}); err != nil {
			t.Fatalf("Persist of content that vouches for itself: %v", err)
		}
		if _, err := readFragment(s, f); !errors.Is(err, ErrCorrupt) {
			t.Errorf("reading a fragment stored from other content = %v, want ErrCorrupt", err)
		}
		if err := s.Remove(ctx, f); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PersistCancelled", func(t *testing.T) {
		const journal = "cancelled"
		content := testContent(1000, 4)
		f := fragmentOf(journal, 0, content, None)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Persist(cctx, f, bytes.NewReader(content)); !errors.Is(err, context.Canceled) {
			t.Errorf("Persist with a cancelled context = %v", err)
		}
		if objs := objectsUnder(t, h, journal); len(objs) != 0 {
			t.Errorf("cancelled persist left %v", objs)
		}
	})

	t.Run("OpenDetectsCorruption", func(t *testing.T) {
		content := testContent(50_000, 5)
		for _, c := range allCodecs {
			for _, damage := range []struct {
				name string
				fn   func([]byte) []byte
			}{
				{"flipped byte", func(b []byte) []byte { b = bytes.Clone(b); b[len(b)/2] ^= 0x40; return b }},
				{"truncated", func(b []byte) []byte { return b[:len(b)-10] }},
				{"extended", func(b []byte) []byte { return append(bytes.Clone(b), "more bytes"...) }},
				{"emptied", func([]byte) []byte { return nil }},
			} {
				journal := "corrupt/" + c.String() + "/" + strings.ReplaceAll(damage.name, " ", "-")
				f := fragmentOf(journal, 0, content, c)
				persist(t, s, f, content)
				signed, err := s.SignURL(ctx, f, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				h.putRaw(t, f.Name(), damage.fn(h.fetch(t, signed)))
				if _, err := readFragment(s, f); !errors.Is(err, ErrCorrupt) {
					t.Errorf("%v, %s: reading = %v, want ErrCorrupt", c, damage.name, err)
				}
			}
		}
	})

	t.Run("OpenMismatchedName", func(t *testing.T) {
		// A well-formed object under another fragment's name.
		content := testContent(1000, 6)
		claimed := fragmentOf("mislabelled", 0, testContent(1000, 7), None)
		h.putRaw(t, claimed.Name(), content)
		if _, err := readFragment(s, claimed); !errors.Is(err, ErrCorrupt) {
			t.Errorf("reading = %v, want ErrCorrupt", err)
		}
		longer := fragmentOf("mislabelled", 0, content[:999], None)
		h.putRaw(t, longer.Name(), content)
		if b, err := readFragment(s, longer); !errors.Is(err, ErrCorrupt) || len(b) > 999 {
			t.Errorf("reading = %d bytes, %v; want at most 999 bytes and ErrCorrupt", len(b), err)
		}
	})

	t.Run("NestedJournals", func(t *testing.T) {
		journals := []string{"nest/a", "nest/a/b", "nest/a/b/c", "nest/ab", "nest/a.b", "nest/a-"}
		want := map[string][]string{}
		for i, j := range journals {
			for k := range 2 {
				content := testContent(300, i*10+k)
				f := fragmentOf(j, int64(k*300), content, allCodecs[(i+k)%len(allCodecs)])
				persist(t, s, f, content)
				want[j] = append(want[j], f.Name())
			}
		}
		for _, j := range journals {
			if got := names(listAll(t, s, j)); !slices.Equal(got, want[j]) {
				t.Errorf("List(%q) = %v, want %v", j, got, want[j])
			}
		}
		if l := listAll(t, s, "nest"); len(l) != 0 {
			t.Errorf("List(nest) = %v, want none", names(l))
		}
	})

	t.Run("EmptyFragment", func(t *testing.T) {
		for _, c := range allCodecs {
			journal := "empty/" + c.String()
			f := fragmentOf(journal, 42, nil, c)
			persist(t, s, f, nil)
			if got := names(listAll(t, s, journal)); !slices.Equal(got, []string{f.Name()}) {
				t.Errorf("List = %v", got)
			}
			if b, err := readFragment(s, f); err != nil || len(b) != 0 {
				t.Errorf("reading %s = %q, %v", f.Name(), b, err)
			}
		}
	})

	t.Run("ListSkipsJunk", func(t *testing.T) {
		const journal = "junk"
		content := testContent(100, 8)
		f := fragmentOf(journal, 0, content, None)
		persist(t, s, f, content)
		for _, name := range []string{
			"junk/README",
			"junk/0000000000000000-0000000000000064.raw",
			"junk/0000000000000000-0000000000000064-" + helloSum + ".bz2",
			"junk/0000000000000064-0000000000000000-" + helloSum + ".raw",
			"junk/" + strings.ToUpper(f.Name()[len("junk/"):]),
		} {
			h.putRaw(t, name, []byte("junk"))
		}
		if got := names(listAll(t, s, journal)); !slices.Equal(got, []string{f.Name()}) {
			t.Errorf("List = %v, want [%s]", got, f.Name())
		}
	})

	t.Run("ListStopsOnError", func(t *testing.T) {
		stop := errors.New("stop")
		calls := 0
		err := s.List(ctx, "many", func(Fragment) error { calls++; return stop })
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("List = %v after %d calls, want %v after 1", err, calls, stop)
		}
	})

	t.Run("InvalidInput", func(t *testing.T) {
		bad := fragmentOf("../escape", 0, []byte("x"), None)
		if err := s.Persist(ctx, bad, strings.NewReader("x")); err == nil {
			t.Error("Persist of a fragment of journal ../escape succeeded")
		}
		if _, err := s.Open(ctx, bad); err == nil {
			t.Error("Open of a fragment of journal ../escape succeeded")
		}
		if err := s.Remove(ctx, bad); err == nil {
			t.Error("Remove of a fragment of journal ../escape succeeded")
		}
		if _, err := s.SignURL(ctx, bad, time.Minute); err == nil {
			t.Error("SignURL of a fragment of journal ../escape succeeded")
		}
		if err := s.List(ctx, "a//b", func(Fragment) error { return nil }); err == nil {
			t.Error("List of journal a//b succeeded")
		}
		backwards := Fragment{Journal: "j", Begin: 10, End: 5}
		if err := s.Persist(ctx, backwards, strings.NewReader("")); err == nil {
			t.Error("Persist of a fragment that ends before it begins succeeded")
		}
		for _, o := range h.objects(t) {
			if strings.Contains(o, "escape") || strings.HasPrefix(o, "j/") {
				t.Errorf("invalid input left object %q", o)
			}
		}
	})
}

// testProbe is the conformance of Probe: every step passes on a healthy
// store, the probe is gone afterwards, it is never listed as a fragment,
// and probes left behind for more than an hour are removed.
func testProbe(t *testing.T, h storeHarness) {
	ctx := context.Background()
	content := testContent(100, 9)
	f := fragmentOf("probed", 0, content, None)
	persist(t, h.store, f, content)
	stale := fmt.Sprintf("%s/%d-0123456789abcdef%s", ProbeDir, time.Now().Add(-2*time.Hour).UnixNano(), probeSuffix)
	fresh := fmt.Sprintf("%s/%d-fedcba9876543210%s", ProbeDir, time.Now().Add(-time.Minute).UnixNano(), probeSuffix)
	h.putRaw(t, stale, []byte("left behind"))
	h.putRaw(t, fresh, []byte("another's, in progress"))

	res := Probe(ctx, h.store, "test")
	if !res.OK() {
		t.Fatalf("Probe of a healthy store failed at %s: %v", res.Failed, res.Err)
	}
	var steps []string
	for _, st := range res.Passed {
		steps = append(steps, st.Step.String())
		if st.Latency <= 0 {
			t.Errorf("step %s took %v", st.Step, st.Latency)
		}
	}
	if got := strings.Join(steps, ","); got != "write,read,list,delete" {
		t.Errorf("passed steps %s, want write,read,list,delete", got)
	}
	var left []string
	for _, o := range h.objects(t) {
		if strings.HasPrefix(o, ProbeDir+"/") {
			left = append(left, o)
		}
	}
	if !slices.Equal(left, []string{fresh}) {
		t.Errorf("objects under %s after Probe: %q, want only %q (the stale one removed, the fresh one kept)", ProbeDir, left, fresh)
	}
	if l := listAll(t, h.store, "probed"); len(l) != 1 || l[0].Name() != f.Name() {
		t.Errorf("List(probed) = %v, want only %s", names(l), f.Name())
	}
	// No journal lists the probes: their directory is no journal's.
	if err := ValidateJournal(ProbeDir); err == nil {
		t.Errorf("%q is a valid journal name: a journal's listing could see probes", ProbeDir)
	}
}

func newFileHarness(t *testing.T) storeHarness {
	root := t.TempDir()
	s, err := Open(context.Background(), "file://"+root+"/")
	if err != nil {
		t.Fatal(err)
	}
	return storeHarness{
		store: s,
		putRaw: func(t *testing.T, name string, data []byte) {
			p := filepath.Join(root, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		objects: func(t *testing.T) []string {
			var out []string
			err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, err := filepath.Rel(root, p)
				out = append(out, filepath.ToSlash(rel))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
		fetch: func(t *testing.T, rawURL string) []byte {
			u, err := url.Parse(rawURL)
			if err != nil || u.Scheme != "file" {
				t.Fatalf("SignURL gave %q (%v), want a file:// URL", rawURL, err)
			}
			b, err := os.ReadFile(u.Path)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
}

func TestFileStore(t *testing.T) {
	testStore(t, newFileHarness(t))
	t.Run("Probe", func(t *testing.T) { testProbe(t, newFileHarness(t)) })
}

// A file store whose probe directory cannot be made fails the write step,
// naming it, and takes no other.
func TestFileStoreProbeFailsToWrite(t *testing.T) {
	root := t.TempDir()
	s, err := Open(context.Background(), "file://"+root+"/")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, ProbeDir), []byte("a file where the directory goes"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := Probe(context.Background(), s, "test")
	if res.OK() || res.Failed != ProbeWrite || len(res.Passed) != 0 {
		t.Fatalf("Probe = %+v, want a failed write and nothing passed", res)
	}
	if msg := res.Err.Error(); !strings.Contains(msg, "write "+ProbeDir+"/") || !strings.Contains(msg, s.URL()) || !strings.Contains(msg, "not a directory") {
		t.Errorf("error %q does not name the step, the probe, the store and the cause", msg)
	}
}

func TestFileStoreDetails(t *testing.T) {
	root := filepath.Join(t.TempDir(), "new", "root")
	s, err := Open(context.Background(), "file://"+root+"/")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		t.Fatalf("Open did not create %s: %v", root, err)
	}
	if got, want := s.URL(), "file://"+root+"/"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	content := testContent(1000, 1)
	f := fragmentOf("a/b", 0, content, Snappy)
	persist(t, s, f, content)
	p := filepath.Join(root, "a", "b", filepath.Base(f.Name()))
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatalf("fragment file: %v", err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("fragment file mode %v, want 0644", fi.Mode().Perm())
	}
	signed, err := s.SignURL(context.Background(), f, time.Hour)
	if err != nil || signed != "file://"+p {
		t.Errorf("SignURL = %q, %v; want %q", signed, err, "file://"+p)
	}
	// A temporary file left by a crash is neither listed nor complained of.
	if err := os.WriteFile(filepath.Join(root, "a", "b", tempPrefix+"x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := names(listAll(t, s, "a/b")); !slices.Equal(got, []string{f.Name()}) {
		t.Errorf("List = %v", got)
	}
	// An I/O error is not corruption.
	if err := os.Chmod(p, 0); err == nil && os.Getuid() != 0 {
		if _, err := readFragment(s, f); err == nil || errors.Is(err, ErrCorrupt) {
			t.Errorf("reading an unreadable file = %v, want an error that is not ErrCorrupt", err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, "ftp://x/"); err == nil || !strings.Contains(err.Error(), `scheme "ftp"`) {
		t.Errorf("Open(ftp://x/) = %v", err)
	}
	// A root that cannot be a directory.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, "file://"+file+"/sub/"); err == nil || !strings.Contains(err.Error(), "creating directory") {
		t.Errorf("Open under a file = %v", err)
	}
}
