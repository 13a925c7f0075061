package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
)

// After fragments were restored to a store past a journal's write head,
// reset-head shows the move, changes nothing on a dry run or without a
// yes, and then moves the head to the stored end: the next append lands
// after the restored content.
func TestJournalsResetHead(t *testing.T) {
	store := "file://" + t.TempDir() + "/"
	b := startBrokerWith(t, func(cfg *broker.Config) { cfg.DefaultStore = store })
	must(t, b, strings.NewReader("journals: [{name: ops/restored, replication: 1, fragment: {refreshInterval: 1h}}]\n"), "journals", "apply", "-f", "-")
	must(t, b, strings.NewReader("live\n"), "journals", "append", "-j", "ops/restored")

	ctx := context.Background()
	fs, err := fragment.Open(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	restored := []byte("restored from a backup\n")
	end := int64(5 + len(restored))
	f := fragment.Fragment{Journal: "ops/restored", Begin: 5, End: end, Sum: sha256.Sum256(restored), Codec: fragment.None}
	if err := fs.Persist(ctx, f, bytes.NewReader(restored)); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, client.Config{Broker: b})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	head := func() int64 {
		t.Helper()
		h, err := c.WriteHead(ctx, "ops/restored")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	move := fmt.Sprintf("ops/restored: write head 5 → %d (1 stored fragments end past the head)", end)
	r := must(t, b, nil, "journals", "reset-head", "ops/restored", "--dry-run")
	if r.stdout != move+" (dry run)\n" || head() != 5 {
		t.Fatalf("dry run printed %q, head %d; want %q, head 5", r.stdout, head(), move+" (dry run)")
	}
	r = quire(ctx, strings.NewReader("n\n"), "journals", "reset-head", "ops/restored", "--broker", b)
	if r.err == nil || !strings.Contains(r.stderr, "[y/N]") || head() != 5 {
		t.Fatalf("answered no: %v, stderr %q, head %d; want an error and head 5", r.err, r.stderr, head())
	}
	r = must(t, b, strings.NewReader("y\n"), "journals", "reset-head", "-l", "name=ops/restored")
	if want := fmt.Sprintf("%s\nops/restored: write head moved to %d\n", move, end); r.stdout != want || head() != end {
		t.Fatalf("confirmed: printed %q, head %d; want %q, head %d", r.stdout, head(), want, end)
	}
	r = must(t, b, nil, "journals", "reset-head", "ops/restored", "--yes")
	if r.stdout != "" || !strings.Contains(r.stderr, "left alone") {
		t.Fatalf("again: stdout %q, stderr %q; want the journal left alone", r.stdout, r.stderr)
	}
	must(t, b, strings.NewReader("after\n"), "journals", "append", "-j", "ops/restored")
	want := "live\n" + string(restored) + "after\n"
	if got := must(t, b, nil, "journals", "read", "-j", "ops/restored").stdout; got != want {
		t.Fatalf("journal holds %q, want %q", got, want)
	}

	for _, args := range [][]string{
		{"journals", "reset-head"},
		{"journals", "reset-head", "a//b"},
		{"journals", "reset-head", "-l", "app in ("},
		{"journals", "reset-head", "-l", "app=x", "ops/restored"},
	} {
		if r := quire(ctx, nil, append(args, "--broker", b)...); !errors.As(r.err, new(usageError)) || r.stdout != "" {
			t.Errorf("%v: err %v, stdout %q; want a usage error and nothing printed", args, r.err, r.stdout)
		}
	}
	if r := quire(ctx, nil, "journals", "reset-head", "ops/missing", "--broker", b); r.err == nil || !strings.Contains(r.err.Error(), "not found") {
		t.Errorf("a missing journal: %v, want it named not found", r.err)
	}
}
