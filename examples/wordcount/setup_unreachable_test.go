package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/freeport"
)

// setup and publish against a broker that is not there give up within
// their bounds, with an error that names the broker, and print nothing.
func TestSetupAndPublishGiveUpOnAnUnreachableBroker(t *testing.T) {
	broker := "127.0.0.1:" + strconv.Itoa(freeport.Port(t)) // Nothing listens there.
	consumerAddr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	for _, args := range [][]string{
		{"setup", "--broker", broker, "--consumer", consumerAddr, "--timeout", "1s"},
		{"publish", "--broker", broker},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		out, err := run(ctx, strings.NewReader("a b\n"), args...)
		waited := ctx.Err() != nil
		cancel()
		switch {
		case err == nil || errors.As(err, new(consumer.UsageError)):
			t.Errorf("%s: err %v, want a failure that is not bad usage", args[0], err)
		case !strings.Contains(err.Error(), "broker "+broker):
			t.Errorf("%s: err %q does not name broker %s", args[0], err, broker)
		case waited:
			t.Errorf("%s: still waiting after %s", args[0], time.Since(start))
		}
		if out != "" {
			t.Errorf("%s printed %q", args[0], out)
		}
	}
	if _, err := run(context.Background(), nil, "setup", "--timeout", "0s"); !errors.As(err, new(consumer.UsageError)) {
		t.Errorf("setup --timeout 0s: err %v, want a usage error", err)
	}
}
