package main

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// suspend and resume, as a user runs them: a suspended journal is listed
// as such and still read; resume, or an append, resumes it where it was.
func TestJournalsSuspendAndResume(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("journals: [{name: ops/quiet, replication: 1}]\n"), "journals", "apply", "-f", "-")
	must(t, b, strings.NewReader("one\n"), "journals", "append", "-j", "ops/quiet")

	if r := must(t, b, nil, "journals", "suspend", "ops/quiet"); r.stdout != "ops/quiet: suspended at offset 4\n" {
		t.Fatalf("suspend printed %q", r.stdout)
	}
	if r := must(t, b, nil, "journals", "list"); !strings.Contains(r.stdout, "suspended at 4") {
		t.Fatalf("list printed %q; want the journal shown suspended at 4", r.stdout)
	}
	if r := must(t, b, nil, "journals", "list", "-o", "json"); !strings.Contains(r.stdout, `"suspension": {
          "active": true,
          "offset": 4,`) {
		t.Fatalf("list -o json printed %q; want the journal's suspension", r.stdout)
	}
	if r := must(t, b, nil, "journals", "read", "-j", "ops/quiet"); r.stdout != "one\n" {
		t.Fatalf("read of the suspended journal printed %q, want its content", r.stdout)
	}
	if r := must(t, b, nil, "journals", "fragments", "-j", "ops/quiet", "-o", "json"); !strings.Contains(r.stdout, `"end": 4`) {
		t.Fatalf("fragments of the suspended journal printed %q; want its stored fragment, ending at 4", r.stdout)
	}
	if r := must(t, b, nil, "journals", "suspend", "-l", "name=ops/quiet"); !strings.HasPrefix(r.stdout, "ops/quiet: already suspended at offset 4, since ") {
		t.Fatalf("suspend again printed %q", r.stdout)
	}
	if r := must(t, b, nil, "journals", "resume", "ops/quiet"); r.stdout != "ops/quiet: resumed at offset 4\n" {
		t.Fatalf("resume printed %q", r.stdout)
	}
	if r := must(t, b, nil, "journals", "resume", "ops/quiet"); r.stdout != "ops/quiet: not suspended\n" {
		t.Fatalf("resume again printed %q", r.stdout)
	}

	must(t, b, nil, "journals", "suspend", "ops/quiet")
	must(t, b, strings.NewReader("two\n"), "journals", "append", "-j", "ops/quiet")
	if r := must(t, b, nil, "journals", "read", "-j", "ops/quiet"); r.stdout != "one\ntwo\n" {
		t.Fatalf("after an append resumed it, the journal holds %q", r.stdout)
	}

	ctx := context.Background()
	for _, args := range [][]string{
		{"journals", "suspend"},
		{"journals", "resume"},
		{"journals", "suspend", "a//b"},
		{"journals", "suspend", "-l", "app=x", "ops/quiet"},
	} {
		if r := quire(ctx, nil, append(args, "--broker", b)...); !errors.As(r.err, new(usageError)) || r.stdout != "" {
			t.Errorf("%v: err %v, stdout %q; want a usage error and nothing printed", args, r.err, r.stdout)
		}
	}
	if r := quire(ctx, nil, "journals", "suspend", "ops/missing", "--broker", b); r.err == nil || !strings.Contains(r.err.Error(), "not found") {
		t.Errorf("a missing journal: %v, want it named not found", r.err)
	}
}
