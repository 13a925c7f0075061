package allocator

import (
	"strings"
	"testing"
)

func TestLifecycle(t *testing.T) {
	var l Lifecycle
	if err := l.Ready(); err == nil || !strings.HasPrefix(err.Error(), "starting") {
		t.Fatalf("zero Lifecycle: Ready = %v, want starting", err)
	}
	l.Advance(Serving)
	if err := l.Ready(); err != nil {
		t.Fatalf("serving: Ready = %v", err)
	}
	l.Advance(Announcing) // Never back.
	if l.Phase() != Serving {
		t.Fatalf("phase %s after advancing to an earlier one, want serving", l.Phase())
	}
	for _, p := range []Phase{Draining, Stopped} {
		l.Advance(p)
		if err := l.Ready(); err == nil || !strings.HasPrefix(err.Error(), p.String()) {
			t.Errorf("%s: Ready = %v", p, err)
		}
	}
}
