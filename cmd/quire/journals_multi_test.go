package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/fragment"
)

// startBrokerStore is startBroker, also returning its file store's URL.
func startBrokerStore(t *testing.T) (addr, store string) {
	t.Helper()
	addr = startBrokerWith(t, func(cfg *broker.Config) { store = cfg.DefaultStore })
	return addr, store
}

// seedFragment writes content as the fragment of journal at begin into
// the file store, persisted (its file's modification time) at mod: what
// a broker lists when it loads the journal.
func seedFragment(t *testing.T, store, journal string, begin int64, content string, mod time.Time) fragment.Fragment {
	t.Helper()
	st, err := fragment.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	f := fragment.Fragment{Journal: journal, Begin: begin, End: begin + int64(len(content)),
		Sum: sha256.Sum256([]byte(content))}
	if err := st.Persist(context.Background(), f, strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
	setModTime(t, store, f, mod)
	return f
}

func fragmentPath(store string, f fragment.Fragment) string {
	return filepath.Join(strings.TrimPrefix(store, "file://"), filepath.FromSlash(f.Name()))
}

func setModTime(t *testing.T, store string, f fragment.Fragment, mod time.Time) {
	t.Helper()
	if err := os.Chtimes(fragmentPath(store, f), mod, mod); err != nil {
		t.Fatal(err)
	}
}

// cancelWriter cancels its context after its first write: a reader
// interrupted once it has written something.
type cancelWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cancel()
	return w.buf.Write(p)
}

func readOffsets(t *testing.T, path string) map[string]int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	offsets, err := parseOffsets(data)
	if err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	return offsets
}

// linesOf groups output lines by the journal they name (their prefix
// before '-'), in order.
func linesOf(out string) map[string][]string {
	by := make(map[string][]string)
	for _, l := range strings.SplitAfter(out, "\n") {
		if l != "" {
			j, _, _ := strings.Cut(l, "-")
			by[j] = append(by[j], l)
		}
	}
	return by
}

// A read of several journals, interrupted once it has written some
// records, resumes from --offsets-out with exactly the records it had not
// written, and those appended since; journals it did not read are carried
// through; an incomplete last line waits for its newline.
func TestJournalsReadSelectorResume(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("defaults: {replication: 1}\njournals: [{name: multi/a, labels: {app: multi}}, {name: multi/b, labels: {app: multi}},"+
		" {name: multi/c, labels: {app: multi}}, {name: other/x}]\n"), "journals", "apply", "-f", "-")
	want := map[string][]string{}
	appendRecords := func(from, to int) {
		for _, j := range []string{"a", "b", "c"} {
			var in strings.Builder
			for i := from; i <= to; i++ {
				rec := fmt.Sprintf("%s-%d\n", j, i)
				in.WriteString(rec)
				want[j] = append(want[j], rec)
			}
			must(t, b, strings.NewReader(in.String()), "journals", "append", "-j", "multi/"+j, "--framing", "lines")
		}
	}
	appendRecords(1, 200)
	must(t, b, strings.NewReader("x-1\n"), "journals", "append", "-j", "other/x")

	dir := t.TempDir()
	first, second, third := filepath.Join(dir, "1.json"), filepath.Join(dir, "2.json"), filepath.Join(dir, "3.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelWriter{cancel: cancel}
	cmd := newRootCommand()
	cmd.SetOut(out)
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"journals", "read", "-l", "app=multi", "--framing", "lines", "--block", "--offsets-out", first, "--broker", b})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("interrupted read: %v", err)
	}
	got1 := linesOf(out.buf.String())
	offsets := readOffsets(t, first)
	total := 0
	for _, j := range []string{"a", "b", "c"} {
		if n := int64(len(strings.Join(got1[j], ""))); offsets["multi/"+j] != n {
			t.Errorf("--offsets-out gives multi/%s %d, but %d bytes of it were written", j, offsets["multi/"+j], n)
		}
		total += len(got1[j])
	}
	if total == 0 || total == 600 {
		t.Fatalf("the interrupted read wrote %d records, want some but not all", total)
	}

	// More records, and the start of one, then the rest of the read.
	appendRecords(201, 210)
	must(t, b, strings.NewReader("c-partial"), "journals", "append", "-j", "multi/c")
	r := must(t, b, nil, "journals", "read", "-l", "app=multi", "--framing", "lines", "--offsets", first, "--offsets-out", second)
	got2 := linesOf(r.stdout)
	for _, j := range []string{"a", "b", "c"} {
		if all := append(slices.Clone(got1[j]), got2[j]...); !slices.Equal(all, want[j]) {
			t.Errorf("multi/%s read in two runs: %d + %d records, want the %d appended, in order, once each", j, len(got1[j]), len(got2[j]), len(want[j]))
		}
	}
	if !strings.Contains(r.stderr, "multi/c: 9 bytes at offset") {
		t.Errorf("stderr %q does not report the incomplete line", r.stderr)
	}
	cEnd := int64(len(strings.Join(want["c"], "")))
	if o := readOffsets(t, second); o["multi/c"] != cEnd || o["multi/a"] != int64(len(strings.Join(want["a"], ""))) {
		t.Errorf("--offsets-out after the second read: %v; want multi/c at %d, before its incomplete line", o, cEnd)
	}

	// The line completed; a read of one journal carries the others through.
	must(t, b, strings.NewReader(" done\n"), "journals", "append", "-j", "multi/c")
	r = must(t, b, nil, "journals", "read", "-l", "name=multi/c", "--framing", "lines", "--offsets", second, "--offsets-out", third)
	if r.stdout != "c-partial done\n" {
		t.Errorf("resumed read of multi/c: %q", r.stdout)
	}
	o2, o3 := readOffsets(t, second), readOffsets(t, third)
	if o3["multi/a"] != o2["multi/a"] || o3["multi/b"] != o2["multi/b"] || o3["multi/c"] != cEnd+int64(len("c-partial done\n")) {
		t.Errorf("--offsets-out of a read of multi/c: %v, after %v", o3, o2)
	}
	// Nothing new: nothing written, the same offsets.
	r = must(t, b, nil, "journals", "read", "-l", "app=multi", "--offsets", third, "--offsets-out", third)
	if r.stdout != "" || !equalOffsets(readOffsets(t, third), o3) {
		t.Errorf("a read with nothing new wrote %q, offsets %v", r.stdout, readOffsets(t, third))
	}
}

func equalOffsets(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// --from starts at the first fragment persisted at or after the time
// (the stores' modification times), or at spooled content; fragments
// --from/--to lists those persisted in between.
func TestJournalsFrom(t *testing.T) {
	b, store := startBrokerStore(t)
	now := time.Now()
	seedFragment(t, store, "from/j", 0, "j-old-111\n", now.Add(-3*time.Hour))
	seedFragment(t, store, "from/j", 10, "j-mid-222\n", now.Add(-2*time.Hour))
	seedFragment(t, store, "from/j", 20, "j-new-333\n", now.Add(-time.Hour))
	seedFragment(t, store, "from/k", 0, "k-old-111\n", now.Add(-3*time.Hour))
	must(t, b, strings.NewReader("defaults: {replication: 1}\njournals: [{name: from/j, labels: {app: from}}, {name: from/k, labels: {app: from}}]\n"),
		"journals", "apply", "-f", "-")
	must(t, b, strings.NewReader("j-live\n"), "journals", "append", "-j", "from/j")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-j", "from/j", "--from", "150m"}, "j-mid-222\nj-new-333\nj-live\n"},
		{[]string{"-j", "from/j", "--from", now.Add(-90 * time.Minute).UTC().Format(time.RFC3339)}, "j-new-333\nj-live\n"},
		{[]string{"-l", "app=from", "--from", "30m"}, "j-live\n"}, // Only spooled content is newer; from/k has none.
		{[]string{"-l", "app=from", "--from", "4h", "--framing", "lines"}, "j-old-111\nj-mid-222\nj-new-333\nj-live\nk-old-111\n"},
	} {
		r := must(t, b, nil, append([]string{"journals", "read"}, tc.args...)...)
		lines := strings.SplitAfter(r.stdout, "\n")
		slices.Sort(lines) // Journals interleave; each one's lines stay in order (checked by the resume test).
		wantLines := strings.SplitAfter(tc.want, "\n")
		slices.Sort(wantLines)
		if got := strings.Join(lines, ""); got != strings.Join(wantLines, "") {
			t.Errorf("read %v: %q, want %q", tc.args, got, tc.want)
		}
	}

	var listed struct{ Fragments []fragmentJSON }
	out := must(t, b, nil, "journals", "fragments", "-l", "app=from", "--from", "150m", "--to", "90m", "-o", "json").stdout
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed.Fragments) != 1 || listed.Fragments[0].Journal != "from/j" || listed.Fragments[0].Begin != 10 {
		t.Errorf("fragments --from 150m --to 90m: %s", out)
	}
	if r := must(t, b, nil, "journals", "fragments", "-l", "app=none", "-o", "json"); !strings.Contains(r.stderr, `no journals match "app=none"`) ||
		json.Unmarshal([]byte(r.stdout), &listed) != nil || len(listed.Fragments) != 0 {
		t.Errorf("fragments of no journals: stdout %q, stderr %q; want an empty listing, and why on stderr", r.stdout, r.stderr)
	}
	table := must(t, b, nil, "journals", "fragments", "-l", "app=from").stdout
	// from/j's three persisted fragments and its spool, which holds j-live.
	spooled := regexp.MustCompile(`(?m)^from/j +\d+ +\d+ +\d+ +\S+ +- `)
	if !strings.HasPrefix(table, "JOURNAL ") || strings.Count(table, "from/j ") != 4 || strings.Count(table, "from/k ") != 1 ||
		len(spooled.FindAllString(table, -1)) != 1 {
		t.Errorf("fragments -l table:\n%s", table)
	}
}

// append -l distributes lines as documented: by FNV-1a of the key modulo
// the selected journals sorted by name, or by a field naming the journal.
func TestJournalsAppendMapping(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("defaults: {replication: 1}\njournals: [{name: map/2, labels: {app: map}}, {name: map/0, labels: {app: map}},"+
		" {name: map/1, labels: {app: map}}, {name: map/other, labels: {app: other}}]\n"), "journals", "apply", "-f", "-")
	sorted := []string{"map/0", "map/1", "map/2"}
	want := map[string]string{}
	var in strings.Builder
	for i := range 60 {
		key := fmt.Sprintf("user-%d", i%13)
		line := fmt.Sprintf(`{"n": %d, "user": %q}`+"\n", i, key)
		in.WriteString(line)
		h := fnv.New32a()
		h.Write([]byte(key))
		want[sorted[h.Sum32()%3]] += line
	}
	plain := []string{"plain one\n", "plain two\n", "plain three\n"}
	r := must(t, b, strings.NewReader(in.String()), "journals", "append", "-l", "app=map", "--framing", "lines", "--key-field", "user")
	if !strings.Contains(r.stderr, "appended") {
		t.Errorf("append -l reported %q", r.stderr)
	}
	must(t, b, strings.NewReader(strings.Join(plain, "")), "journals", "append", "-l", "app=map", "--framing", "lines")
	for _, line := range plain {
		h := fnv.New32a()
		h.Write([]byte(strings.TrimSuffix(line, "\n")))
		want[sorted[h.Sum32()%3]] += line
	}
	for _, j := range sorted {
		if got := must(t, b, nil, "journals", "read", "-j", j).stdout; got != want[j] {
			t.Errorf("%s holds %q, want %q", j, got, want[j])
		}
	}

	// By a field naming the journal; one naming a journal not selected
	// stops the append there.
	r = quire(context.Background(), strings.NewReader(`{"to": "map/1", "v": 1}`+"\n"+`{"to": "map/2", "v": 2}`+"\n"+
		`{"to": "map/other", "v": 3}`+"\n"+`{"to": "map/1", "v": 4}`+"\n"),
		"journals", "append", "-l", "app=map", "--framing", "lines", "--mapping", "field", "--key-field", "to", "--broker", b)
	if r.err == nil || errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), `line 3: `) ||
		!strings.Contains(r.err.Error(), `"map/other"`) {
		t.Errorf("append of a record naming an unselected journal: %v, want an error (exit 1) naming line 3", r.err)
	}
	if got := must(t, b, nil, "journals", "read", "-j", "map/1").stdout; !strings.HasSuffix(got, `{"to": "map/1", "v": 1}`+"\n") {
		t.Errorf("map/1 ends with %q", got[max(0, len(got)-40):])
	}
	if got := must(t, b, nil, "journals", "read", "-j", "map/2").stdout; !strings.HasSuffix(got, `{"to": "map/2", "v": 2}`+"\n") {
		t.Errorf("map/2 ends with %q", got[max(0, len(got)-40):])
	}
	if got := must(t, b, nil, "journals", "read", "-j", "map/other").stdout; got != "" {
		t.Errorf("map/other got %q", got)
	}
}

// prune removes exactly the fragments persisted longer ago than their
// journal's retention; --dry-run removes nothing; a journal without
// retention is skipped.
func TestJournalsPrune(t *testing.T) {
	b, store := startBrokerStore(t)
	now := time.Now()
	var frags []fragment.Fragment
	for i, c := range []string{"r-1\n", "r-2\n", "r-3\n"} {
		frags = append(frags, seedFragment(t, store, "prune/r", int64(4*i), c, now))
	}
	kept := seedFragment(t, store, "prune/keep", 0, "k-1\n", now.Add(-48*time.Hour))
	// Brokers prune too, at each refresh: with an hour between refreshes,
	// theirs is done before the fragments age below (see flushed).
	must(t, b, strings.NewReader(`defaults: {replication: 1}
journals:
  - {name: prune/r, labels: {app: prune}, fragment: {retention: 1h, refreshInterval: 1h, flushInterval: 1s}}
  - {name: prune/keep, labels: {app: prune}, fragment: {refreshInterval: 1h}}
`), "journals", "apply", "-f", "-")
	must(t, b, strings.NewReader("r-4\n"), "journals", "append", "-j", "prune/r")
	flushed(t, b, "prune/r", 12)
	setModTime(t, store, frags[0], now.Add(-2*time.Hour))
	setModTime(t, store, frags[1], now.Add(-61*time.Minute))

	r := must(t, b, nil, "journals", "prune", "-l", "app=prune", "--dry-run")
	wantLines := []string{"prune/r [0, 4) persisted", "would be removed", "prune/r [4, 8) persisted", "dry run: nothing was removed"}
	for _, w := range wantLines {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("prune --dry-run printed %q, which lacks %q", r.stdout, w)
		}
	}
	if strings.Contains(r.stdout, "[8, 12)") || strings.Contains(r.stdout, "prune/keep [") {
		t.Errorf("prune --dry-run would remove too much: %q", r.stdout)
	}
	if !strings.Contains(r.stderr, "prune/keep: no fragment.retention: skipped") {
		t.Errorf("prune --dry-run stderr %q", r.stderr)
	}
	for _, f := range append(frags, kept) {
		if _, err := os.Stat(fragmentPath(store, f)); err != nil {
			t.Errorf("after a dry run: %v", err)
		}
	}

	r = must(t, b, nil, "journals", "prune", "-l", "app=prune")
	if strings.Count(r.stdout, ": removed\n") != 2 || strings.Contains(r.stdout, "dry run") {
		t.Errorf("prune printed %q", r.stdout)
	}
	for i, f := range append(frags, kept) {
		_, err := os.Stat(fragmentPath(store, f))
		if gone := errors.Is(err, os.ErrNotExist); gone != (i < 2) {
			t.Errorf("fragment %s: gone %v after prune (%v)", f.Name(), gone, err)
		}
	}
	// Reads jump the removed content.
	if r := must(t, b, nil, "journals", "read", "-j", "prune/r"); r.stdout != "r-3\nr-4\n" {
		t.Errorf("read after prune: %q (stderr %q)", r.stdout, r.stderr)
	}
}

// flushed waits until journal's content from offset is persisted by its
// broker: rolled at its flush interval, which only the loop that refreshes
// and prunes does, after its first refresh. Brokers report nothing sooner
// to wait on, so this polls.
func flushed(t *testing.T, b, journal string, offset int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var listed struct{ Fragments []fragmentJSON }
		out := must(t, b, nil, "journals", "fragments", "-j", journal, "-o", "json").stdout
		if err := json.Unmarshal([]byte(out), &listed); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(listed.Fragments, func(f fragmentJSON) bool { return f.Begin == offset && f.Store != "" }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s from %d not persisted within 30s:\n%s", journal, offset, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestJournalsMultiBadFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"a": -1}`), 0o644)
	for _, args := range [][]string{
		{"journals", "read", "-j", "a", "-l", "app=x"},
		{"journals", "read", "-l", "app in ("},
		{"journals", "read", "-l", "app=x", "--offset", "5"},
		{"journals", "read", "-l", "app=x", "--framing", "words"},
		{"journals", "read", "-l", "app=x", "--from", "yesterday"},
		{"journals", "read", "-l", "app=x", "--from", "-1h"},
		{"journals", "read", "-l", "app=x", "--from", "1h", "--tail"},
		{"journals", "read", "-l", "app=x", "--offsets", filepath.Join(dir, "missing.json")},
		{"journals", "read", "-l", "app=x", "--offsets", bad},
		{"journals", "read", "-l", "app=x", "--offsets-out", filepath.Join(dir, "no/such/dir.json")},
		{"journals", "fragments", "-l", "app=x", "--from", "soon"},
		{"journals", "fragments", "-l", "app=x", "--from", "1h", "--to", "2h"},
		{"journals", "fragments"},
		{"journals", "append", "-l", "app=x"},
		{"journals", "append", "-l", "app=x", "--framing", "lines", "--mapping", "random"},
		{"journals", "append", "-l", "app=x", "--framing", "lines", "--mapping", "field"},
		{"journals", "append", "-j", "a", "--key-field", "k"},
		{"journals", "prune", "-l", "app in ("},
	} {
		r := quire(context.Background(), nil, append(args, "--broker", "127.0.0.1:1")...)
		if !errors.As(r.err, new(usageError)) || r.stdout != "" {
			t.Errorf("%v: err %v, stdout %q; want a usage error and no output", args, r.err, r.stdout)
		}
	}
}
