package client_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/freeport"
)

// textLog is a text log that tests read back.
type textLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *textLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *textLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

func (l *textLog) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// deadBroker is an address where nothing listens.
func deadBroker(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(freeport.Port(t)) }

// With several brokers configured, requests go on to the next while the
// first is unreachable, and the client warns of the one it waits for.
func TestSeveralBrokersTriedInTurn(t *testing.T) {
	c := brokertest.New(t)
	b := c.Start("b1")
	c.Journals(c.Client(b), 1, "turns/j")
	dead := deadBroker(t)
	var log textLog
	cl, err := client.New(context.Background(), client.Config{Broker: dead + ", " + b.Endpoint, Logger: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if js, err := cl.ListAll(ctx, "name=turns/j"); err != nil || len(js) != 1 {
		t.Fatalf("listing through %s, then %s: %v, %v", dead, b.Endpoint, js, err)
	}
	fresh, err := client.New(context.Background(), client.Config{Broker: dead + "," + b.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if _, err := fresh.Append(ctx, client.AppendRequest{Journal: "turns/j"}, strings.NewReader("hello")); err != nil {
		t.Fatalf("appending with the first broker unreachable: %v", err)
	}
	r := cl.NewReader(ctx, client.ReadRequest{Journal: "turns/j", EndOffset: 5})
	if got, err := io.ReadAll(r); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
	lines := log.lines()
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "broker="+dead) ||
		!strings.Contains(lines[0], "connection refused") {
		t.Errorf("logged %q, want one warning naming the unreachable broker %s and why", lines, dead)
	}
}

// A client that reaches no broker warns while it retries, at most every
// UnreachableWarnInterval, and gives up when its context ends.
func TestUnreachableBrokerWarningsAreRateLimited(t *testing.T) {
	dead := deadBroker(t)
	var log textLog
	cl, err := client.New(context.Background(), client.Config{Broker: dead, Logger: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // Well under UnreachableWarnInterval.
	defer cancel()
	if _, err := cl.ListAll(ctx, ""); err == nil || !strings.Contains(err.Error(), dead) {
		t.Fatalf("listing through %s alone: %v, want an error naming it", dead, err)
	}
	if lines := log.lines(); len(lines) != 1 || !strings.Contains(lines[0], "broker="+dead) {
		t.Errorf("logged %q over a second of retries, want one warning", lines)
	}
}

func TestNewRefusesAnEmptyBrokerInTheList(t *testing.T) {
	if _, err := client.New(context.Background(), client.Config{Broker: "a:1,,b:2"}); err == nil ||
		!strings.Contains(err.Error(), `Broker "a:1,,b:2"`) {
		t.Fatalf("err = %v, want one naming the list", err)
	}
}
