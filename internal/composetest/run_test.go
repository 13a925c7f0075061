package composetest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A command that outlives its timeout is killed, and its error says so.
func TestRunKillsAtTimeout(t *testing.T) {
	_, err := Run(exec.Command("sh", "-c", "exec sleep 60"), 100*time.Millisecond, false)
	if !errors.Is(err, ErrTimedOut) || !strings.Contains(err.Error(), "sleep 60") {
		t.Errorf("error %v; want %v, naming the command", err, ErrTimedOut)
	}
}

// Standard error joins the output when combined, and the error otherwise.
func TestRunOutput(t *testing.T) {
	script := "echo out; echo err >&2; exit 3"
	out, err := Run(exec.Command("sh", "-c", script), time.Minute, true)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || string(out) != "out\nerr\n" {
		t.Errorf("combined: output %q, error %v; want both lines and exit status 3", out, err)
	}
	out, err = Run(exec.Command("sh", "-c", script), time.Minute, false)
	if !errors.As(err, &exit) || string(out) != "out\n" || !strings.HasSuffix(err.Error(), ": err") {
		t.Errorf("apart: output %q, error %v; want stdout alone, and stderr at the end of the error", out, err)
	}
	if out, err := Run(exec.Command("sh", "-c", "echo ok"), time.Minute, false); err != nil || string(out) != "ok\n" {
		t.Errorf("success: output %q, error %v", out, err)
	}
}
