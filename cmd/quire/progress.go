package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progressEvery is how often a long command reports its progress when
// standard error is not a terminal; a variable for tests.
var progressEvery = 5 * time.Second

// startProgress reports a long command's progress on w, the line that
// line returns, until the returned function is called. On a terminal, the
// line is rewritten in place every 200ms, and ended when done; otherwise
// (a log, a CI job) a line "quire: LINE" is written every progressEvery,
// and nothing when done, so that logs stay readable.
func startProgress(w io.Writer, line func() string) (done func()) {
	tty := isTerminal(w)
	every := progressEvery
	if tty {
		every = 200 * time.Millisecond
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if tty {
					fmt.Fprintf(w, "\r%s\x1b[K", line())
				} else {
					fmt.Fprintf(w, "quire: %s\n", line())
				}
			case <-stop:
				if tty {
					fmt.Fprintf(w, "\r%s\x1b[K\n", line())
				}
				return
			}
		}
	}()
	return func() {
		close(stop)
		<-stopped
	}
}

// isTerminal tells whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
