package main

import (
	"testing"
	"time"
)

// writes sends each write to a channel.
type writes chan string

func (w writes) Write(p []byte) (int, error) {
	w <- string(p)
	return len(p), nil
}

// Not on a terminal, progress is a whole line, "quire: LINE", every
// progressEvery, and nothing more once done.
func TestProgressOffATerminalWritesWholeLines(t *testing.T) {
	defer func(d time.Duration) { progressEvery = d }(progressEvery)
	progressEvery = time.Millisecond
	w := make(writes, 100)
	n := 0
	done := startProgress(w, func() string { n++; return "step" })
	for range 3 {
		if got := <-w; got != "quire: step\n" {
			t.Fatalf("progress wrote %q, want a whole line", got)
		}
	}
	done()
	close(w)
	for got := range w {
		if got != "quire: step\n" {
			t.Fatalf("progress wrote %q, want only whole lines", got)
		}
	}
	if n < 3 {
		t.Fatalf("line was asked %d times, want at least 3", n)
	}
}
