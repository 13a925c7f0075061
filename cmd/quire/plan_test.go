package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/etcdtest"
)

func TestMain(m *testing.M) {
	// The test binary doubles as the quire binary, so tests can check what
	// a user sees: exit codes, stdout and stderr.
	if os.Getenv("QUIRE_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(etcdtest.Main(m))
}

// runBinary runs quire as a process, returning stdout, stderr and the exit
// code.
func runBinary(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "QUIRE_TEST_RUN_MAIN=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestBinaryExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("members: [{zone: z, suffix: m, itemLimit: -3}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := runBinary(t, "allocator", "plan", "-f", bad)
	if code != 2 || stdout != "" || !strings.Contains(stderr, "members[0]") || !strings.Contains(stderr, "-3") {
		t.Errorf("bad scenario: exit %d, stdout %q, stderr %q; want 2, nothing, an error naming members[0] and -3", code, stdout, stderr)
	}
	stdout, _, code = runBinary(t, "allocator", "plan", "-f", "testdata/small.yaml", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"assignments"`) {
		t.Errorf("good scenario: exit %d, stdout %q", code, stdout)
	}
	if _, _, code = runBinary(t, "allocator", "plan", "-f", filepath.Join(dir, "missing.yaml")); code != 2 {
		t.Errorf("missing scenario file: exit %d, want 2", code)
	}
	if stdout, _, code = runBinary(t); code != 0 || !strings.Contains(stdout, "allocator plan") {
		t.Errorf("bare quire: exit %d, stdout %q; want 0 and the list of commands", code, stdout)
	}
	// An unknown command is bad input at every level, named, with a hint.
	for _, args := range [][]string{{"bogus"}, {"journals", "lst"}, {"shards", "lsit"}, {"allocator", "plann"}, {"bench", "x"}} {
		stdout, stderr, code := runBinary(t, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, fmt.Sprintf("unknown command %q", args[len(args)-1])) {
			t.Errorf("quire %v: exit %d, stdout %q, stderr %q; want 2, nothing, and the unknown command named", args, code, stdout, stderr)
		}
	}
	if _, stderr, _ := runBinary(t, "journals", "lst"); !strings.Contains(stderr, `did you mean "list"`) {
		t.Errorf("quire journals lst: stderr %q, want a hint of list", stderr)
	}
	// A stray argument to a command that takes none (or fewer) is bad
	// input too, before the command does anything.
	for _, args := range [][]string{{"dev", "stray"}, {"broker", "serve", "stray"}, {"bench", "append", "stray"},
		{"journals", "read", "a", "stray"}, {"journals", "list", "stray"}, {"shards", "list", "stray"},
		{"health", "a", "b"}, {"version", "stray"}, {"console", "stray"}, {"allocator", "member", "stray"}} {
		if stdout, stderr, code := runBinary(t, args...); code != 2 || stdout != "" {
			t.Errorf("quire %v: exit %d, stdout %q, stderr %q; want 2 and nothing on stdout", args, code, stdout, stderr)
		}
	}
}

// run runs the quire command with args, returning stdout, and the error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return stdout.String(), err
}

func TestPlanJSON(t *testing.T) {
	out, err := run(t, "allocator", "plan", "-f", "testdata/small.yaml", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var plan struct {
		Assignments []struct {
			Item, Zone, Suffix string
			Slot               int
		} `json:"assignments"`
		Added, Removed []struct {
			Item, Zone, Suffix string
			Slot               int
		}
		Stats map[string]float64 `json:"stats"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&plan); err != nil {
		t.Fatalf("output %s: %v", out, err)
	}
	if len(plan.Assignments) != 5 {
		t.Fatalf("%d assignments, want 5: %s", len(plan.Assignments), out)
	}
	for i, a := range plan.Assignments {
		if i > 0 {
			p := plan.Assignments[i-1]
			if p.Item > a.Item || (p.Item == a.Item && p.Slot >= a.Slot) {
				t.Errorf("assignments not sorted by item, then slot: %v before %v", p, a)
			}
		}
	}
	if a := plan.Assignments[0]; a.Item != "a" || a.Zone != "z1" || a.Slot != 0 {
		t.Errorf("current primary of a not kept: %+v", a)
	}
	for _, k := range []string{"desiredSlots", "assignedSlots", "kept", "added", "removed", "solveSeconds"} {
		if _, ok := plan.Stats[k]; !ok {
			t.Errorf("stats lack %q", k)
		}
	}
	if plan.Stats["desiredSlots"] != 5 || plan.Stats["assignedSlots"] != 5 || plan.Stats["kept"] != 1 || plan.Stats["added"] != 4 {
		t.Errorf("stats %v", plan.Stats)
	}
	if len(plan.Added) != 4 || len(plan.Removed) != 0 {
		t.Errorf("moves +%v -%v, want the 4 new replicas added", plan.Added, plan.Removed)
	}
}

func TestPlanFormats(t *testing.T) {
	for _, format := range []string{"yaml", "table"} {
		out, err := run(t, "allocator", "plan", "-f", "testdata/small.yaml", "-o", format)
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		if !strings.Contains(out, "z3") {
			t.Errorf("%s output lacks assignments: %s", format, out)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, scenario, want string
	}{
		{"unknown field", "members: []\nitems: []\nextra: 1\n", "extra"},
		{"unknown member field", "members: [{zone: z, suffix: m, itemLimit: 1, color: red}]\n", "color"},
		{"duplicate member", "members: [{zone: z, suffix: m, itemLimit: 1}, {zone: z, suffix: m, itemLimit: 2}]\n", "members[1]: duplicate member"},
		{"duplicate item", "items: [{id: a, replication: 1}, {id: a, replication: 1}]\n", `items[1]: duplicate item "a"`},
		{"negative limit", "members: [{zone: z, suffix: m, itemLimit: -1}]\n", "itemLimit -1 is negative"},
		{"negative replication", "items: [{id: a, replication: -2}]\n", "replication -2 is negative"},
		{"unknown member", "members: [{zone: z, suffix: m, itemLimit: 1}]\nitems: [{id: a, replication: 1}]\nassignments: [{item: a, zone: z, suffix: x, slot: 0}]\n", `assignments[0]: unknown member zone "z" suffix "x"`},
		{"unknown item", "members: [{zone: z, suffix: m, itemLimit: 1}]\nassignments: [{item: b, zone: z, suffix: m, slot: 0}]\n", `unknown item "b"`},
		{"hash in zone", "members: [{zone: 'z#1', suffix: m, itemLimit: 1}]\n", `contains "#"`},
		{"not yaml", "members: [\n", "scenario"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.scenario), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "allocator", "plan", "-f", path, "-o", "json")
			var u usageError
			if !errors.As(err, &u) {
				t.Fatalf("err %v is not a usage error (exit code 2)", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %q does not name %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("printed %q to stdout on bad input", out)
			}
		})
	}
	for _, args := range [][]string{
		{"allocator", "plan"},
		{"allocator", "plan", "-f", "testdata/small.yaml", "-o", "xml"},
		{"allocator", "plan", "-f", "testdata/small.yaml", "--etcd", "http://127.0.0.1:1"},
		{"allocator", "plan", "-f", "testdata/small.yaml", "--prefix", "/quire/brokers/"},
		{"allocator", "plan", "--bogus"},
	} {
		if _, err := run(t, args...); !errors.As(err, new(usageError)) {
			t.Errorf("%v: err %v is not a usage error", args, err)
		}
	}
}

func TestPlanLiveFleet(t *testing.T) {
	client, root := etcdtest.Client(t)
	ctx := context.Background()
	for _, kv := range [][2]string{
		{allocator.MemberKey(root, "z1", "m1"), allocator.Encode(allocator.MemberSpec{Limit: 5})},
		{allocator.MemberKey(root, "z2", "m1"), allocator.Encode(allocator.MemberSpec{Limit: 5})},
		{allocator.ItemKey(root, "journal/a"), allocator.Encode(allocator.ItemSpec{Replication: 2})},
		{allocator.AssignmentKey(root, "journal/a", "z2", "m1", 0), ""},
	} {
		if _, err := client.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	out, err := run(t, "allocator", "plan", "--etcd", etcdtest.Shared(t).Endpoint(), "--prefix", root, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var plan allocator.Plan
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatal(err)
	}
	if plan.Stats.Kept != 1 || plan.Stats.Added != 1 || len(plan.Assignments) != 2 || plan.Assignments[0].Zone != "z2" {
		t.Errorf("plan %+v", plan)
	}
	// Without --etcd, the fleet is read from $QUIRE_ETCD (else quire dev's).
	t.Setenv("QUIRE_ETCD", etcdtest.Shared(t).Endpoint())
	out, err = run(t, "allocator", "plan", "--prefix", root, "-o", "json")
	var again allocator.Plan
	if err == nil {
		err = json.Unmarshal([]byte(out), &again)
	}
	again.Stats.SolveSeconds = plan.Stats.SolveSeconds
	if err != nil || !reflect.DeepEqual(again, plan) {
		t.Errorf("plan --prefix with $QUIRE_ETCD: %v, %+v; want the plan read with --etcd, %+v", err, again, plan)
	}
}
