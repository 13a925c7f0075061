package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/protocol"
)

var quietLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

// startBroker runs a broker of a fresh fleet (its own etcd prefix and file
// store) on a loopback port, until the test ends, and returns its address.
func startBroker(t *testing.T) string {
	t.Helper()
	return startBrokerWith(t, func(*broker.Config) {})
}

// startBrokerWith is startBroker, with edit applied to the broker's config.
func startBrokerWith(t *testing.T, edit func(*broker.Config)) string {
	t.Helper()
	etcd, root := etcdtest.Client(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.Config{Etcd: etcd, Root: root, Zone: "z", Suffix: "b1",
		Endpoint: lis.Addr().String(), Dir: t.TempDir(), DefaultStore: "file://" + t.TempDir() + "/",
		LeaseTTL: brokertest.DefaultLeaseTTL, Logger: quietLogger} // Nothing waits for it to run out.
	edit(&cfg)
	srv, err := broker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveBroker(ctx, nil, srv, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("broker: %v", err)
		}
	})
	// Serve RPCs only once announced: before, the broker counts no member
	// (apply's warnings count the brokers that can hold a journal).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for srv.Ready() != nil {
		select {
		case <-tick.C:
		case err := <-done:
			done <- err // For the cleanup.
			t.Fatalf("broker stopped before it was ready: %v", err)
		case <-deadline:
			t.Fatalf("broker not ready after 30 s: %v", srv.Ready())
		}
	}
	return lis.Addr().String()
}

// result is what a command printed, and returned.
type result struct {
	stdout, stderr string
	err            error
}

// quire runs the quire command in-process with stdin, under ctx.
func quire(ctx context.Context, stdin io.Reader, args ...string) result {
	cmd := newRootCommand()
	var stdout, stderr bytes.Buffer
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	cmd.SetIn(stdin)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return result{stdout.String(), stderr.String(), err}
}

// must runs a journals command against broker, failing the test if it fails.
func must(t *testing.T, broker string, stdin io.Reader, args ...string) result {
	t.Helper()
	r := quire(context.Background(), stdin, append(args, "--broker", broker)...)
	if r.err != nil {
		t.Fatalf("quire %s: %v\nstderr: %s", strings.Join(args, " "), r.err, r.stderr)
	}
	return r
}

func listSpecs(t *testing.T, broker string) []*protocol.JournalSpec {
	t.Helper()
	specs, err := protocol.ParseSpecFile([]byte(must(t, broker, nil, "journals", "list", "-o", "yaml").stdout))
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func fileSpecs(t *testing.T, path string) []*protocol.JournalSpec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := protocol.ParseSpecFile(data)
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

func equalSpecs(a, b []*protocol.JournalSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func TestJournalsApplyListDelete(t *testing.T) {
	b := startBroker(t)
	applied := must(t, b, nil, "journals", "apply", "-f", "testdata/journals.yaml")
	out := applied.stdout
	if out != "demo/a: created\ndemo/b: created\n" || applied.stderr != "" {
		t.Errorf("apply printed %q, and %q on stderr", out, applied.stderr)
	}
	// More replicas than brokers: applied, with a warning on stderr.
	applied = must(t, b, strings.NewReader("journals: [{name: wide/j, replication: 3}]\n"), "journals", "apply", "-f", "-")
	if want := "warning: wide/j: replication 3, but only 1 broker can hold journals: it is under-replicated until 2 more join\n"; applied.stderr != want ||
		applied.stdout != "wide/j: created\n" {
		t.Errorf("apply of replication 3 on one broker printed %q, and %q on stderr; want a warning %q", applied.stdout, applied.stderr, want)
	}
	must(t, b, nil, "journals", "delete", "wide/j")
	if want := fileSpecs(t, "testdata/journals.yaml"); !equalSpecs(listSpecs(t, b), want) {
		t.Errorf("list -o yaml after apply: %v, want %v", listSpecs(t, b), want)
	}

	// A dry run of changes reports them, and changes nothing.
	out = must(t, b, nil, "journals", "apply", "-f", "testdata/journals-updated.yaml", "--dry-run").stdout
	for _, want := range []string{"demo/a: would be updated\n  fragment.length: 128MiB → 32MiB\n",
		"demo/b: unchanged\n", "demo/c: would be created\n", "dry run: nothing was changed\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run printed %q, which lacks %q", out, want)
		}
	}
	if want := fileSpecs(t, "testdata/journals.yaml"); !equalSpecs(listSpecs(t, b), want) {
		t.Errorf("a dry run changed the journals: %v", listSpecs(t, b))
	}
	// Standard input, for real.
	updated, err := os.ReadFile("testdata/journals-updated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out = must(t, b, bytes.NewReader(updated), "journals", "apply", "-f", "-").stdout
	if !strings.Contains(out, "demo/a: updated") || !strings.Contains(out, "demo/c: created") {
		t.Errorf("apply printed %q", out)
	}
	if want := fileSpecs(t, "testdata/journals-updated.yaml"); !equalSpecs(listSpecs(t, b), want) {
		t.Errorf("list after the update: %v, want %v", listSpecs(t, b), want)
	}

	// An append waits for demo/a to have its broker; list shows it then.
	must(t, b, strings.NewReader("x"), "journals", "append", "-j", "demo/a")
	table := must(t, b, nil, "journals", "list", "-l", "tier!=gold").stdout
	if !regexp.MustCompile(`(?m)^NAME +REPLICATION +ROUTE +LABELS\ndemo/a +1 +z#b1 +app=demo\ndemo/c +1 +\S+ +app=demo\n$`).MatchString(table) {
		t.Errorf("table:\n%s", table)
	}
	// -o json: numbers as numbers, labels as a map, members as zone#suffix,
	// and a spec that a spec file takes back.
	var resp struct {
		Journals []struct {
			Spec                        json.RawMessage
			CreateRevision, ModRevision any
			Route                       struct{ Members, Endpoints []string }
		}
	}
	listed := must(t, b, nil, "journals", "list", "-o", "json", "-l", "name=demo/a").stdout
	if err := json.Unmarshal([]byte(listed), &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Journals) != 1 {
		t.Fatalf("list -o json of one journal:\n%s", listed)
	}
	j := resp.Journals[0]
	if rev, ok := j.ModRevision.(float64); !ok || rev == 0 || j.CreateRevision == nil {
		t.Errorf("list -o json gives revisions %v %v, want numbers", j.CreateRevision, j.ModRevision)
	}
	if !slices.Equal(j.Route.Members, []string{"z#b1"}) || !slices.Equal(j.Route.Endpoints, []string{b}) {
		t.Errorf("list -o json gives the route %+v", j.Route)
	}
	var spec map[string]any
	json.Unmarshal(j.Spec, &spec)
	if labels, ok := spec["labels"].(map[string]any); !ok || labels["app"] != "demo" {
		t.Errorf("list -o json gives the labels %v, want a map", spec["labels"])
	}
	back, err := protocol.ParseSpecFile([]byte(`{"journals": [` + string(j.Spec) + `]}`))
	if err != nil || !equalSpecs(back, listSpecs(t, b)[:1]) {
		t.Errorf("the spec of list -o json reads back as %v (%v), want %v", back, err, listSpecs(t, b)[:1])
	}

	// Deleting.
	if r := quire(context.Background(), nil, "journals", "delete", "--broker", b); !errors.As(r.err, new(usageError)) {
		t.Errorf("delete with no selector: %v, want a usage error", r.err)
	}
	if r := quire(context.Background(), nil, "journals", "delete", "demo/zzz", "--broker", b); r.err == nil || !strings.Contains(r.err.Error(), `"demo/zzz" not found`) {
		t.Errorf("delete of a missing journal: %v", r.err)
	}
	if out := must(t, b, nil, "journals", "delete", "demo/c", "--dry-run").stdout; !strings.Contains(out, "demo/c: would be deleted") {
		t.Errorf("delete --dry-run printed %q", out)
	}
	if out := must(t, b, nil, "journals", "delete", "demo/c").stdout; out != "demo/c: deleted\n" {
		t.Errorf("delete printed %q", out)
	}
	if out := must(t, b, nil, "journals", "delete", "-l", "app=demo").stdout; out != "demo/a: deleted\ndemo/b: deleted\n" {
		t.Errorf("delete -l printed %q", out)
	}
	if specs := listSpecs(t, b); len(specs) != 0 {
		t.Errorf("journals left after deleting them all: %v", specs)
	}
}

func TestJournalsApplyBadSpecs(t *testing.T) {
	b := startBroker(t)
	dir := t.TempDir()
	for _, tc := range []struct{ name, file, want string }{
		{"unknown field", "journals:\n  - {name: a, replication: 1}\n  - {name: b, replication: 1, lenght: 5}\n", `journals[1] (b): unknown field "lenght"`},
		{"negative length", "journals:\n  - name: a\n    replication: 1\n    fragment: {length: -5}\n", "journals[0] (a): fragment.length: -5 is negative"},
		{"replication", "journals:\n  - {name: a, replication: 17}\n", "journals[0] (a): replication: 17 is above 16"},
		{"bad name", "journals:\n  - {name: ok, replication: 1}\n  - {name: 'a//b', replication: 1}\n", "journals[1]"},
		{"not yaml", "journals: [\n", "spec file"},
		{"empty", "", "lists no journals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			r := quire(context.Background(), nil, "journals", "apply", "-f", path, "--broker", b)
			if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), tc.want) {
				t.Errorf("err %v; want a usage error naming %q", r.err, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("printed %q", r.stdout)
			}
		})
	}
	if specs := listSpecs(t, b); len(specs) != 0 {
		t.Errorf("bad spec files created journals: %v", specs)
	}
	for _, args := range [][]string{
		{"journals", "list", "-o", "xml"},
		{"journals", "list", "-l", "app in ("},
		{"journals", "list", "--broker", "nohost"},
		{"journals", "apply"},
		{"journals", "apply", "-f", filepath.Join(dir, "missing.yaml")},
		{"journals", "append"},
		{"journals", "append", "-j", "a//b"},
		{"journals", "append", "-j", "a", "--framing", "words"},
		{"journals", "append", "-j", "a", "--chunk", "65MiB"},
		{"journals", "read", "-j", "a", "--offset", "-2"},
		{"journals", "read", "-j", "a", "--offset", "3", "--tail"},
		{"journals", "read", "a", "b"},
		{"journals", "read", "-j", "a", "a"},
		{"journals", "read", "a//b"},
		{"journals", "append", "a", "-l", "app=x", "--framing", "lines"},
		{"journals", "fragments", "a", "-j", "b"},
		{"journals", "fragments", "-j", "a", "-o", "yaml"},
		{"journals", "delete", "-l", "app=x", "--all"},
		{"journals", "edit"},
	} {
		if r := quire(context.Background(), nil, args...); !errors.As(r.err, new(usageError)) {
			t.Errorf("%v: err %v, want a usage error", args, r.err)
		}
	}
}

func TestJournalsAppendRead(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("journals: [{name: data/bin, replication: 1}, {name: data/lines, replication: 1}]\n"),
		"journals", "apply", "-f", "-")

	// Binary content, NULs and all, with no trailing newline, in four appends.
	content := make([]byte, 200_000)
	rand.Read(content)
	content[0], content[1000], content[len(content)-1] = 0, 0, 0
	r := must(t, b, bytes.NewReader(content), "journals", "append", "-j", "data/bin", "--chunk", "64KiB", "-v")
	if !strings.Contains(r.stderr, "appended 200000 bytes to data/bin in 4 appends: [0, 200000)") ||
		!strings.Contains(r.stderr, "appended [196608, 200000) to data/bin") {
		t.Errorf("append reported %q", r.stderr)
	}
	if got := must(t, b, nil, "journals", "read", "-j", "data/bin").stdout; got != string(content) {
		t.Errorf("read %d bytes, which differ from the %d appended", len(got), len(content))
	}
	if got := must(t, b, nil, "journals", "read", "data/bin").stdout; got != string(content) {
		t.Errorf("read NAME: %d bytes, which differ from the %d appended", len(got), len(content))
	}
	if got := must(t, b, nil, "journals", "read", "-j", "data/bin", "--offset", "123456").stdout; got != string(content[123456:]) {
		t.Errorf("read --offset 123456: %d bytes, which differ from the content from there", len(got))
	}
	if got := must(t, b, nil, "journals", "read", "-j", "data/bin", "--offset", "-1").stdout; got != "" {
		t.Errorf("read at the write head: %q", got)
	}
	if r := must(t, b, nil, "journals", "read", "-j", "data/bin", "--offset", "999999"); r.stdout != "" ||
		!strings.Contains(r.stderr, "--offset 999999 is past the write head, 200000") {
		t.Errorf("read past the write head: stdout %q, stderr %q; want nothing, and a word on stderr", r.stdout, r.stderr)
	}
	if r := must(t, b, nil, "journals", "read", "-j", "data/bin", "--offset", "200000"); r.stderr != "" {
		t.Errorf("read at the write head, from its offset: stderr %q, want nothing", r.stderr)
	}

	// Lines: a record each, in order.
	lines := "first\n\x00second\n\nlast, with no newline"
	r = must(t, b, strings.NewReader(lines), "journals", "append", "-j", "data/lines", "--framing", "lines", "-v")
	wantLines := "line 1: [0, 6)\nline 2: [6, 14)\nline 3: [14, 15)\nline 4: [15, 36)\n" +
		"appended 36 bytes to data/lines in 4 lines: [0, 36)\n"
	if r.stderr != wantLines {
		t.Errorf("append --framing lines reported %q, want %q", r.stderr, wantLines)
	}
	if got := must(t, b, nil, "journals", "read", "-j", "data/lines").stdout; got != lines {
		t.Errorf("read %q, want %q", got, lines)
	}
	r = must(t, b, nil, "journals", "append", "-j", "data/lines")
	if !strings.Contains(r.stderr, "nothing appended") {
		t.Errorf("empty append reported %q", r.stderr)
	}

	if r := quire(context.Background(), nil, "journals", "read", "-j", "data/missing", "--broker", b); r.err == nil ||
		!strings.Contains(r.err.Error(), `journal "data/missing" not found`) {
		t.Errorf("read of a missing journal: %v", r.err)
	}
	if r := quire(context.Background(), nil, "journals", "fragments", "data/missing", "--broker", b); r.err == nil ||
		!strings.Contains(r.err.Error(), `journal "data/missing" not found ('quire journals list' lists the journals)`) {
		t.Errorf("fragments of a missing journal: %v", r.err)
	}
	frags := must(t, b, nil, "journals", "fragments", "data/bin").stdout
	if !strings.HasPrefix(frags, "BEGIN") {
		t.Errorf("fragments printed %q", frags)
	}
	// A rolled fragment, in -o json.
	must(t, b, strings.NewReader("journals: [{name: data/small, replication: 1, fragment: {length: 1KiB}}]\n"), "journals", "apply", "-f", "-")
	for range 2 {
		must(t, b, bytes.NewReader(content[:4096]), "journals", "append", "-j", "data/small")
	}
	var listed struct {
		Fragments []map[string]any
	}
	if err := json.Unmarshal([]byte(must(t, b, nil, "journals", "fragments", "-j", "data/small", "-o", "json").stdout), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed.Fragments) == 0 {
		t.Fatalf("fragments -o json lists none; the table:\n%s", frags)
	}
	f := listed.Fragments[0]
	if _, ok := f["end"].(float64); !ok || f["journal"] != "data/small" || len(f["sum"].(string)) != 64 {
		t.Errorf("fragments -o json gives %v, want numbers for offsets and the sum in hex", f)
	}
}

// syncBuffer is a bytes.Buffer that is safe for concurrent use, and
// signals writes.
type syncBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// read --tail writes what is appended after it starts: a contiguous run
// of the last records appended, however late it began.
func TestJournalsReadTail(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("journals: [{name: tail/j, replication: 1}]\n"), "journals", "apply", "-f", "-")
	must(t, b, strings.NewReader("before the tail\n"), "journals", "append", "-j", "tail/j")

	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{wrote: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetOut(out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"journals", "read", "-j", "tail/j", "--tail", "--broker", b})
		done <- cmd.ExecuteContext(ctx)
	}()
	// The tail starts at some point: append records until it has written
	// some. Which came first does not matter; what it writes does.
	var appended []string
	deadline := time.After(30 * time.Second)
	for i := 1; out.String() == "" || !strings.HasSuffix(out.String(), appended[len(appended)-1]); i++ {
		rec := fmt.Sprintf("record %d\n", i)
		must(t, b, strings.NewReader(rec), "journals", "append", "-j", "tail/j")
		appended = append(appended, rec)
		select {
		case <-out.wrote:
		case <-time.After(50 * time.Millisecond): // Not yet tailing: append another.
		case <-deadline:
			t.Fatalf("read --tail wrote %q after %d records", out.String(), i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("read --tail returned %v after its context was cancelled, want nil", err)
	}
	got := out.String()
	all := strings.Join(appended, "")
	if !strings.HasSuffix(all, got) || !strings.HasPrefix(got, "record ") {
		t.Errorf("read --tail wrote %q: not a run of whole records ending with the last of %q", got, all)
	}
}

func TestJournalsEdit(t *testing.T) {
	b := startBroker(t)
	must(t, b, nil, "journals", "apply", "-f", "testdata/journals.yaml")
	editor := func(script string) {
		path, err := filepath.Abs(filepath.Join("testdata", script))
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("EDITOR", path)
	}

	editor("edit-label.sh")
	out := must(t, b, nil, "journals", "edit", "-l", "tier=gold").stdout
	if out != "demo/b: updated\n  labels.app: demo → edited\n" {
		t.Errorf("edit printed %q", out)
	}
	specs := listSpecs(t, b)
	if got := protocol.LabelsOf(specs[1].Labels).String(); got != "app=edited,tier=gold" || len(specs) != 2 {
		t.Errorf("after edit: demo/b labels %s, %d journals", got, len(specs))
	}
	if got := protocol.LabelsOf(specs[0].Labels).String(); got != "app=demo" {
		t.Errorf("edit changed demo/a, which it did not select: %s", got)
	}

	// Edited again, nothing matches the script's pattern: no changes.
	if out := must(t, b, nil, "journals", "edit", "demo/b").stdout; out != "no changes\n" {
		t.Errorf("edit with no change printed %q", out)
	}

	editor("edit-invalid.sh")
	r := quire(context.Background(), nil, "journals", "edit", "demo/a", "--broker", b)
	if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), "not valid") {
		t.Fatalf("edit to invalid YAML: %v, want a usage error", r.err)
	}
	kept := regexp.MustCompile(`kept in (\S+)`).FindStringSubmatch(r.err.Error())
	if kept == nil {
		t.Fatalf("error %q does not name the kept file", r.err)
	}
	defer os.Remove(kept[1])
	if data, err := os.ReadFile(kept[1]); err != nil || !strings.HasPrefix(string(data), "journals: [") {
		t.Errorf("kept file %s: %q, %v", kept[1], data, err)
	}
	if got := protocol.LabelsOf(listSpecs(t, b)[0].Labels).String(); got != "app=demo" {
		t.Errorf("a failed edit changed demo/a: %s", got)
	}
}

// With QUIRE_BROKER set, commands need no --broker.
func TestJournalsBrokerFromEnv(t *testing.T) {
	b := startBroker(t)
	t.Setenv("QUIRE_BROKER", b)
	if r := quire(context.Background(), nil, "journals", "list"); r.err != nil || !strings.HasPrefix(r.stdout, "NAME") {
		t.Errorf("list with QUIRE_BROKER: %q, %v", r.stdout, r.err)
	}
	t.Setenv("QUIRE_BROKER", "")
	port := freeport.Port(t)
	r := quire(context.Background(), nil, "journals", "list", "--broker", "127.0.0.1:"+strconv.Itoa(port), "--timeout", "300ms")
	if r.err == nil || !strings.Contains(r.err.Error(), "no answer from broker") {
		t.Errorf("list of a broker that is not there: %v", r.err)
	}
}

func TestBench(t *testing.T) {
	b := startBroker(t)
	r := quire(context.Background(), nil, "bench", "append", "--broker", b, "-j", "bench/t", "--writers", "2",
		"--size", "1KiB", "--duration", "300ms", "-o", "json")
	if r.err != nil {
		t.Fatal(r.err)
	}
	var res benchAppendResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if res.Appends == 0 || res.Bytes != res.Appends*1024 || res.P50Ms <= 0 || res.P999Ms < res.P50Ms || res.MBPerSecond <= 0 {
		t.Errorf("bench append: %+v", res)
	}
	r = quire(context.Background(), nil, "bench", "read", "--broker", b, "-j", "bench/t")
	if r.err != nil || !strings.Contains(r.stdout, "MB/S") {
		t.Fatalf("bench read: %q, %v", r.stdout, r.err)
	}
	// The first, untimed, append is read too.
	if want := strconv.FormatInt(res.Bytes+1024, 10); !strings.Contains(r.stdout, " "+want+" ") {
		t.Errorf("bench read printed %q, want %s bytes", r.stdout, want)
	}
}

// bench messages publishes while a reader tails, and reads back exactly
// what it published; bad flags are refused.
func TestBenchMessages(t *testing.T) {
	b := startBroker(t)
	r := quire(context.Background(), nil, "bench", "messages", "--broker", b, "-j", "bench/m",
		"--duration", "300ms", "--body", "40", "-o", "json")
	if r.err != nil {
		t.Fatal(r.err)
	}
	var res benchMessagesResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if res.Messages == 0 || res.BytesPerMessage < 40 || res.PublishedPerSec <= 0 || res.ReadPerSec <= 0 ||
		res.P999Ms < res.P50Ms {
		t.Errorf("bench messages: %+v", res)
	}
	// The same journal, now in protobuf: the reader starts after the
	// JSON, and reads back exactly the protobuf messages.
	r = quire(context.Background(), nil, "bench", "messages", "--broker", b, "-j", "bench/m", "--framing", "proto",
		"--duration", "300ms", "--body", "40", "-o", "json")
	if r.err != nil {
		t.Fatal(r.err)
	}
	var proto benchMessagesResult
	if err := json.Unmarshal([]byte(r.stdout), &proto); err != nil {
		t.Fatalf("%v: %s", err, r.stdout)
	}
	if proto.Framing != "proto" || proto.Messages == 0 || proto.BytesPerMessage < 40 ||
		proto.BytesPerMessage >= res.BytesPerMessage || proto.ReadPerSec <= 0 {
		t.Errorf("bench messages --framing proto: %+v (JSON: %+v)", proto, res)
	}
	paced := quire(context.Background(), nil, "bench", "messages", "--broker", b, "-j", "bench/m",
		"--duration", "500ms", "--rate", "200", "-o", "json")
	if paced.err != nil {
		t.Fatal(paced.err)
	}
	if err := json.Unmarshal([]byte(paced.stdout), &res); err != nil || res.Messages < 50 || res.Messages > 101 {
		t.Errorf("bench messages at 200/s for 0.5s published %d messages (%v)", res.Messages, err)
	}
	for _, args := range [][]string{{"--rate", "-1"}, {"--body", "-2"}, {"--duration", "0s"}, {"-o", "yaml"}, {"--framing", "avro"}} {
		bad := quire(context.Background(), nil, append([]string{"bench", "messages", "--broker", b}, args...)...)
		if bad.err == nil {
			t.Errorf("bench messages %v: no error", args)
		}
	}
}

// benchRecordingJSON runs bench recording against broker with args and
// -o json, and returns its result and its stderr.
func benchRecordingJSON(t *testing.T, broker string, args ...string) (benchRecordingResult, string) {
	t.Helper()
	r := quire(context.Background(), nil, append([]string{"bench", "recording", "--broker", broker, "-o", "json"}, args...)...)
	if r.err != nil {
		t.Fatalf("bench recording %v: %v\n%s", args, r.err, r.stderr)
	}
	var res benchRecordingResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("bench recording %v: %v: %s", args, err, r.stdout)
	}
	return res, r.stderr
}

// bench recording writes plain and recorded, round by round, reports
// them, the cost over all runs and each round's, and deletes the journals
// it created, and their fragments.
func TestBenchRecording(t *testing.T) {
	storeDir := t.TempDir()
	b := startBrokerWith(t, func(cfg *broker.Config) { cfg.DefaultStore = "file://" + storeDir + "/" })
	res, stderr := benchRecordingJSON(t, b, "-j", "bench/rec", "--duration", "200ms", "--rounds", "2")
	if len(res.Runs) != 4 || res.Runs[0].Recorded || !res.Runs[1].Recorded || res.Runs[2].Recorded || !res.Runs[3].Recorded {
		t.Fatalf("runs %+v, want plain then recorded, twice", res.Runs)
	}
	if len(res.RoundCosts) != 2 {
		t.Fatalf("round costs %v, want 2", res.RoundCosts)
	}
	for k, c := range res.RoundCosts {
		if want := 1 - res.Runs[2*k+1].MBPerSecond/res.Runs[2*k].MBPerSecond; c != want {
			t.Errorf("round %d: cost %v, want %v from its runs", k, c, want)
		}
	}
	if want := (res.RoundCosts[0] + res.RoundCosts[1]) / 2; res.MedianCost != want {
		t.Errorf("median cost %v, want %v", res.MedianCost, want)
	}
	for _, run := range res.Runs {
		if run.Batches == 0 || run.MBPerSecond <= 0 || run.Recorded != (run.LogBytes > int64(run.Batches)*100*1024) {
			t.Errorf("run %+v", run)
		}
		// Its commits' percentiles, each at most as long as the run.
		if run.CommitP50Ms <= 0 || run.CommitP99Ms < run.CommitP50Ms || run.CommitP99Ms > run.Seconds*1000 {
			t.Errorf("run %+v: commit p50 %vms, p99 %vms", run, run.CommitP50Ms, run.CommitP99Ms)
		}
		// Write stalls, timed within the run.
		if run.Stalls < 0 || run.StalledSeconds < 0 || run.StalledSeconds > run.Seconds || (run.Stalls == 0 && run.StalledSeconds != 0) {
			t.Errorf("run %+v: %d stalls over %vs", run, run.Stalls, run.StalledSeconds)
		}
	}
	if res.Cost >= 1 {
		t.Errorf("cost %v", res.Cost)
	}
	if res.Codec != "zstd" || res.SeparateValues {
		t.Errorf("codec %q, separate values %v: want zstd, as journals default to, and not", res.Codec, res.SeparateValues)
	}
	if got := must(t, b, nil, "journals", "list", "-l", "prefix=bench/rec/").stdout; strings.Contains(got, "bench/rec/") {
		t.Errorf("the recovery logs were left:\n%s", got)
	}
	if left, _ := filepath.Glob(filepath.Join(storeDir, "bench", "rec", "*", "*")); len(left) != 0 {
		t.Errorf("the recovery logs' fragments were left: %v", left)
	}
	if strings.Contains(stderr, "removing") {
		t.Errorf("removing the journals failed: %s", stderr)
	}
	for _, args := range [][]string{{"--rounds", "0"}, {"--codec", "lz4"}} {
		bad := quire(context.Background(), nil, append([]string{"bench", "recording", "--broker", b}, args...)...)
		if !errors.As(bad.err, new(usageError)) || bad.stdout != "" {
			t.Errorf("bench recording %v: %v, stdout %q; want a usage error and nothing on stdout", args, bad.err, bad.stdout)
		}
	}
	// A run shorter than a batch still writes one: the costs are numbers.
	res, _ = benchRecordingJSON(t, b, "-j", "bench/rec", "--duration", "1ns", "--rounds", "2")
	for _, run := range res.Runs {
		if run.Batches != 1 {
			t.Errorf("--duration 1ns: run %+v, want 1 batch", run)
		}
	}
	// The recovery logs are created with the codec asked for, and both
	// runs can keep values in blob files.
	res, stderr = benchRecordingJSON(t, b, "-j", "bench/rec", "--duration", "200ms", "--codec", "none", "--separate-values")
	if res.Codec != "none" || !res.SeparateValues {
		t.Errorf("codec %q, separate values %v: want none, and values kept apart", res.Codec, res.SeparateValues)
	}
	if !strings.Contains(stderr, "replication 1, codec none") {
		t.Errorf("no recovery log was created with codec none: %s", stderr)
	}
	for _, run := range res.Runs {
		if run.Batches == 0 || run.Recorded != (run.LogBytes > int64(run.Batches)*100*1024) {
			t.Errorf("--codec none --separate-values: run %+v", run)
		}
	}
	// Pipelined commits: every batch applied is awaited and counted.
	res, _ = benchRecordingJSON(t, b, "-j", "bench/rec", "--duration", "200ms", "--pipelined")
	if !res.Pipelined || len(res.Runs) != 2 {
		t.Fatalf("--pipelined: pipelined %v, %d runs", res.Pipelined, len(res.Runs))
	}
	for _, run := range res.Runs {
		if run.Batches == 0 || run.Recorded != (run.LogBytes > int64(run.Batches)*100*1024) || run.CommitP50Ms <= 0 {
			t.Errorf("--pipelined: run %+v", run)
		}
	}
	// The table says so too.
	table := must(t, b, nil, "bench", "recording", "-j", "bench/rec", "--duration", "1ns", "--codec", "snappy", "--separate-values", "--pipelined").stdout
	if want := "recovery logs stored with snappy; values of 256 bytes or more kept in blob files; commits pipelined\n"; !strings.HasSuffix(table, want) {
		t.Errorf("the table does not end with %q:\n%s", want, table)
	}
	if !strings.HasPrefix(table, "RUN ") || !strings.Contains(table, " P50 ") || !strings.Contains(table, " P99 ") {
		t.Errorf("the table has no columns of the commits' percentiles:\n%s", table)
	}
}

// An append that cannot complete (no broker may take the journal: the
// only one is at its limit) says so after a while, and gives up when
// interrupted.
func TestJournalsAppendStillWaiting(t *testing.T) {
	b := startBrokerWith(t, func(cfg *broker.Config) { cfg.Limit = 1 })
	must(t, b, strings.NewReader("journals: [{name: wait/first, replication: 1}]\n"), "journals", "apply", "-f", "-")
	must(t, b, strings.NewReader("x"), "journals", "append", "-j", "wait/first")
	must(t, b, strings.NewReader("journals: [{name: wait/j, replication: 1}]\n"), "journals", "apply", "-f", "-")
	defer func(d time.Duration) { slowAppend = d }(slowAppend)
	slowAppend = 50 * time.Millisecond

	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuffer{wrote: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetIn(strings.NewReader("never appended"))
		cmd.SetOut(io.Discard)
		cmd.SetErr(stderr)
		cmd.SetArgs([]string{"journals", "append", "-j", "wait/j", "--broker", b})
		done <- cmd.ExecuteContext(ctx)
	}()
	for !strings.Contains(stderr.String(), "still waiting for wait/j") {
		select {
		case <-stderr.wrote:
		case err := <-done:
			t.Fatalf("append returned %v; stderr %q", err, stderr.String())
		case <-time.After(30 * time.Second):
			t.Fatalf("no notice after 30s: %q", stderr.String())
		}
	}
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Errorf("interrupted append returned %v", err)
	}
}
