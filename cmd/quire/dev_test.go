package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// devProcess is `quire dev` running as a process: the test binary,
// re-executed as quire.
type devProcess struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer // What it printed up to "ready".
	stderr *bytes.Buffer // Safe to read once it has exited.
	done   chan struct{} // Closed when stdout is drained.
}

func startDev(t *testing.T, dir string, port, etcdPort, peerPort int) *devProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "dev", "--dir", dir, "--port", strconv.Itoa(port),
		"--etcd-port", strconv.Itoa(etcdPort), "--etcd-peer-port", strconv.Itoa(peerPort))
	cmd.Env = append(os.Environ(), "QUIRE_TEST_RUN_MAIN=1")
	p := &devProcess{cmd: cmd, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	ready := make(chan bool, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if !found {
				p.stdout.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "ready") {
					found = true
					ready <- true
				}
			}
		}
		if !found {
			ready <- false
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatalf("quire dev exited before it was ready: %s\nstderr: %s", p.stdout, p.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("quire dev not ready after 60s")
	}
	return p
}

// interrupt sends SIGINT, as Ctrl-C does, and returns the exit code.
func (p *devProcess) interrupt(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-p.done
	err := p.cmd.Wait()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

func TestDev(t *testing.T) {
	dir := t.TempDir()
	port, etcdPort, peerPort := freePort(t), freePort(t), freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dev := startDev(t, dir, port, etcdPort, peerPort)
	for _, want := range []string{"broker  " + addr, "QUIRE_BROKER=" + addr, "quire journals apply", dir} {
		if !strings.Contains(dev.stdout.String(), want) {
			t.Errorf("quire dev printed %q, which lacks %q", dev.stdout, want)
		}
	}

	content := "hello\x00, dev\nno newline at the end"
	must(t, addr, strings.NewReader("journals: [{name: dev/hello, replication: 1}]\n"), "journals", "apply", "-f", "-")
	must(t, addr, strings.NewReader(content), "journals", "append", "-j", "dev/hello")
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/hello").stdout; got != content {
		t.Fatalf("read %q, want %q", got, content)
	}

	// A second quire dev on the same directory fails, and says why.
	_, stderr, code := runBinary(t, "dev", "--dir", dir, "--port", strconv.Itoa(freePort(t)),
		"--etcd-port", strconv.Itoa(freePort(t)), "--etcd-peer-port", strconv.Itoa(freePort(t)))
	if code == 0 || !strings.Contains(stderr, "in use by another quire dev") {
		t.Errorf("second quire dev on %s: exit %d, stderr %q", dir, code, stderr)
	}
	// And on the same ports.
	_, stderr, code = runBinary(t, "dev", "--dir", t.TempDir(), "--port", strconv.Itoa(port),
		"--etcd-port", strconv.Itoa(etcdPort), "--etcd-peer-port", strconv.Itoa(peerPort))
	if code == 0 || !strings.Contains(stderr, "in use") {
		t.Errorf("second quire dev on the same ports: exit %d, stderr %q", code, stderr)
	}

	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("quire dev exited %d on SIGINT, want 0; stderr: %s", code, dev.stderr)
	}

	// Restarted on the same directory, it serves what was written.
	dev = startDev(t, dir, port, etcdPort, peerPort)
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/hello").stdout; got != content {
		t.Errorf("after a restart, read %q, want %q", got, content)
	}
	must(t, addr, strings.NewReader("more"), "journals", "append", "-j", "dev/hello")
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/hello").stdout; got != content+"more" {
		t.Errorf("after a restart and an append, read %q", got)
	}
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("restarted quire dev exited %d on SIGINT; stderr: %s", code, dev.stderr)
	}
	if !strings.Contains(dev.stderr.String(), "recovered spool") {
		t.Errorf("the restarted broker did not recover its spool: %s", dev.stderr)
	}
}

func TestDevFlags(t *testing.T) {
	for _, args := range [][]string{
		{"dev", "--port", "0"},
		{"dev", "--port", "70000"},
		{"dev", "--port", "7800", "--etcd-port", "7800"},
		{"dev", "--dir", ""},
	} {
		if r := quire(context.Background(), nil, args...); !errors.As(r.err, new(usageError)) {
			t.Errorf("%v: err %v, want a usage error", args, r.err)
		}
	}
}

// quire dev killed with SIGKILL in the middle of its work, then restarted
// on its directory, loses no acknowledged byte: its broker recovers the
// spool the kill left behind (replication 1: there is no other copy).
func TestDevSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	port, etcdPort, peerPort := freePort(t), freePort(t), freePort(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	dev := startDev(t, dir, port, etcdPort, peerPort)
	must(t, addr, strings.NewReader("journals: [{name: dev/killed, replication: 1}]\n"), "journals", "apply", "-f", "-")
	var want strings.Builder
	for i := range 20 {
		line := strings.Repeat(strconv.Itoa(i%10), 50) + "\n"
		must(t, addr, strings.NewReader(line), "journals", "append", "-j", "dev/killed")
		want.WriteString(line)
	}
	if err := dev.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dev.done
	dev.cmd.Wait()

	dev = startDev(t, dir, port, etcdPort, peerPort)
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/killed").stdout; got != want.String() {
		t.Fatalf("after kill -9 and a restart, read %d bytes, want %d", len(got), want.Len())
	}
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("restarted quire dev exited %d; stderr: %s", code, dev.stderr)
	}
	if !strings.Contains(dev.stderr.String(), "recovered spool") {
		t.Errorf("the restarted broker did not recover its spool: %s", dev.stderr)
	}
}
