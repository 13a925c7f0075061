package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Delays double from the first to the greatest, each within half of its
// interval either way, and start over after Reset.
func TestDelaysDoubleWithinTheirJitter(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	for _, interval := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		interval *= time.Millisecond
		if d := b.Next(); d < interval/2 || d > interval*3/2 {
			t.Fatalf("delay %s, want within half of %s", d, interval)
		}
	}
	b.Reset()
	if d := b.Next(); d > 150*time.Millisecond {
		t.Fatalf("delay after Reset %s, want about the first", d)
	}
}

// A wait ends with its context.
func TestWaitEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(time.Hour, time.Hour).Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait of a cancelled context: %v", err)
	}
}
