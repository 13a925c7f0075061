package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

// list --watch prints the list, then again each time a selected journal,
// its spec or its route changes, as one JSON object a line, until its
// context ends (no error).
func TestJournalsListWatch(t *testing.T) {
	b := startBroker(t)
	must(t, b, strings.NewReader("journals: [{name: watch/a, replication: 1}]\n"), "journals", "apply", "-f", "-")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{wrote: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetOut(out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"journals", "list", "--watch", "-o", "json", "-l", "prefix=watch/", "--broker", b})
		done <- cmd.ExecuteContext(ctx)
	}()
	type line struct {
		Time     string `json:"time"`
		Revision int64  `json:"revision"`
		Journals []struct {
			Spec struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"spec"`
			ModRevision int64 `json:"modRevision"`
			Route       struct {
				Members []string `json:"members"`
			} `json:"route"`
		} `json:"journals"`
	}
	lines := func() []line {
		var ls []line
		for _, s := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var l line
			if s == "" {
				continue
			}
			if err := json.Unmarshal([]byte(s), &l); err != nil {
				t.Fatalf("--watch -o json printed a line that is not a JSON object: %q: %v", s, err)
			}
			ls = append(ls, l)
		}
		return ls
	}
	// awaitLine waits until the watcher has printed a line for which ok
	// holds.
	awaitLine := func(what string, ok func(line) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			for _, l := range lines() {
				if ok(l) {
					return
				}
			}
			select {
			case <-out.wrote:
			case err := <-done:
				t.Fatalf("list --watch ended (%v) before printing %s; printed:\n%s", err, what, out.String())
			case <-deadline:
				t.Fatalf("list --watch did not print %s; printed:\n%s", what, out.String())
			}
		}
	}
	names := func(l line) string {
		var ns []string
		for _, j := range l.Journals {
			ns = append(ns, j.Spec.Name)
		}
		return strings.Join(ns, " ")
	}
	awaitLine("watch/a", func(l line) bool { return names(l) == "watch/a" })

	// Outside the selector: no line of its own. Then a new journal, and a
	// change of a spec.
	must(t, b, strings.NewReader("journals: [{name: other/x, replication: 1}]\n"), "journals", "apply", "-f", "-")
	must(t, b, strings.NewReader("journals: [{name: watch/b, replication: 1}]\n"), "journals", "apply", "-f", "-")
	awaitLine("watch/b with its route", func(l line) bool {
		return names(l) == "watch/a watch/b" && len(l.Journals[1].Route.Members) == 1
	})
	must(t, b, strings.NewReader("journals: [{name: watch/a, replication: 1, labels: {app: new}}]\n"), "journals", "apply", "-f", "-")
	awaitLine("watch/a's new label", func(l line) bool {
		return names(l) == "watch/a watch/b" && l.Journals[0].Spec.Labels["app"] == "new"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("list --watch returned %v once its context ended, want nil", err)
	}

	// Each line is a change: none repeats the one before, and every one
	// has a time and a revision, which only grows.
	ls := lines()
	for i, l := range ls {
		if _, err := time.Parse(time.RFC3339, l.Time); err != nil || l.Revision <= 0 {
			t.Errorf("line %d: time %q, revision %d", i, l.Time, l.Revision)
		}
		if i > 0 && (reflect.DeepEqual(l.Journals, ls[i-1].Journals) || l.Revision <= ls[i-1].Revision) {
			t.Errorf("line %d repeats line %d, or does not move its revision on: %+v after %+v", i, i-1, l, ls[i-1])
		}
		if strings.Contains(names(l), "other/") {
			t.Errorf("line %d lists a journal outside the selector: %s", i, names(l))
		}
	}

	// The table form: a timestamped block.
	tctx, tcancel := context.WithCancel(context.Background())
	tout := &syncBuffer{wrote: make(chan struct{}, 1)}
	tdone := make(chan error, 1)
	go func() {
		cmd := newRootCommand()
		cmd.SetOut(tout)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"journals", "list", "-w", "-l", "prefix=watch/", "--broker", b})
		tdone <- cmd.ExecuteContext(tctx)
	}()
	select {
	case <-tout.wrote:
	case err := <-tdone:
		t.Fatalf("list -w ended at once: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("list -w printed nothing")
	}
	tcancel()
	if err := <-tdone; err != nil {
		t.Fatalf("list -w returned %v once its context ended, want nil", err)
	}
	if got := tout.String(); !strings.HasPrefix(got, "# ") || !strings.Contains(got, " revision ") || !strings.Contains(got, "\nNAME") || !strings.Contains(got, "watch/b") {
		t.Errorf("list -w printed %q, want a comment line with the time and revision, then the table", got)
	}

	r := quire(context.Background(), nil, "journals", "list", "--watch", "-o", "xml", "--broker", b)
	if !errors.As(r.err, new(usageError)) || r.stdout != "" {
		t.Errorf("list --watch -o xml: %v, stdout %q; want a usage error and no output", r.err, r.stdout)
	}
}
