package composetest

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"
)

// Every command that drives the cluster runs under a timeout. A Docker
// daemon that stops answering, or a container the kernel cannot freeze,
// then fails the command, named, with what it printed, rather than
// hanging the test until go test's deadline kills the binary before its
// cleanups run, leaving the cluster for the next Up to remove.
const (
	// DockerTimeout bounds one docker or docker-compose command, or one
	// of the host's quire CLI against the cluster. Bringing the cluster up
	// or down takes seconds, up to a minute on a busy machine; five
	// minutes is a daemon that is stuck.
	DockerTimeout = 5 * time.Minute
	// BuildTimeout bounds building the images or the host's binaries,
	// which take minutes from a cold cache on two cores.
	BuildTimeout = 20 * time.Minute
)

// ErrTimedOut is wrapped by the error of a command killed at its timeout.
var ErrTimedOut = errors.New("timed out")

// waitDelay is how long a killed command's output pipes stay open for
// children that inherited them (docker-compose's plugins).
const waitDelay = 5 * time.Second

// Run runs cmd, killing it if it has not exited after timeout, and
// returns its standard output, with its standard error interleaved if
// combined. The error of a command that fails names it and, unless
// combined, ends with its standard error; it wraps the command's
// *exec.ExitError, or ErrTimedOut.
func Run(cmd *exec.Cmd, timeout time.Duration, combined bool) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if combined {
		cmd.Stderr = &stdout
	}
	cmd.WaitDelay = waitDelay
	name := strings.Join(cmd.Args, " ")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var killed atomic.Bool
	timer := time.AfterFunc(timeout, func() {
		killed.Store(true)
		cmd.Process.Kill()
	})
	err := cmd.Wait()
	timer.Stop()
	switch {
	case killed.Load():
		err = fmt.Errorf("%s: %w after %s", name, ErrTimedOut, timeout)
	case err != nil:
		err = fmt.Errorf("%s: %w", name, err)
	}
	if err != nil && stderr.Len() > 0 {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), err
}

// Docker runs docker with args under DockerTimeout, and returns what it
// printed on standard output; see Run.
func Docker(args ...string) ([]byte, error) {
	return Run(exec.Command("docker", args...), DockerTimeout, false)
}
