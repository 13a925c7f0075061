package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m, etcdtest.Main)) }

// run runs the binary's command in-process.
func run(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	cmd := consumer.NewCommand(wordcount.App{}, commands()...)
	var out bytes.Buffer
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	cmd.SetIn(stdin)
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// The commands, as a user runs them: serve, setup, publish and query.
func TestCommands(t *testing.T) {
	bc := brokertest.New(t)
	b := bc.Start("b1")
	root := strings.TrimSuffix(bc.Root, "/") + "-wc/"
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	t.Setenv("QUIRE_BROKER", b.Endpoint)
	t.Setenv("QUIRE_CONSUMER", addr)
	t.Setenv("QUIRE_CONSUMER_PREFIX", root)
	t.Setenv("QUIRE_ETCD", etcdtest.Shared(t).Endpoint())

	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { _, err := run(ctx, nil, "serve", "--listen", addr, "--log-level", "warn"); served <- err }()
	t.Cleanup(func() { cancel(); <-served })

	var out string
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The process may not serve yet.
		if out, err = run(context.Background(), nil, "setup"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("setup: %v", err)
		}
	}
	if n := strings.Count(out, ": created\n"); n != 3*wordcount.Partitions {
		t.Errorf("setup printed %q", out)
	}
	if _, err := run(context.Background(), strings.NewReader("a b a\n\n  c a\tb\n"), "publish"); err != nil {
		t.Fatal(err)
	}
	if out, err := run(context.Background(), nil, "query", "a", "b", "c", "d"); err != nil || out != "a 3\nb 2\nc 1\nd 0\n" {
		t.Errorf("query printed %q: %v", out, err)
	}
	if out, err := run(context.Background(), nil, "setup"); err != nil || out != "" {
		t.Errorf("setup again printed %q: %v", out, err)
	}

	// Bad usage.
	for _, args := range [][]string{{"query"}, {"query", "--consumer", "", "a"}, {"publish", "--broker", ""},
		{"publish", "extra"}, {"query", "--timeout", "soon", "a"}} {
		if _, err := run(context.Background(), nil, args...); !errors.As(err, new(consumer.UsageError)) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
