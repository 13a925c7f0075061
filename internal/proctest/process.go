package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quire-dev/quire/internal/freeport"
)

// Process is a binary running as a process of its own, which a test
// signals, waits for and starts again with the same arguments, as a
// supervisor would. Its methods that take no context fail the test on
// error, so call them from the test's goroutine.
type Process struct {
	Name string

	t       testing.TB
	path    string
	args    []string
	logPath string
	wg      sync.WaitGroup // the goroutines that wait for each run

	mu  sync.Mutex
	cur *run
	n   int // runs started
}

// A run is one life of a process.
type run struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // how it exited; set before exited is closed
}

// LogLines is how many of a process's last log lines a failed test
// prints.
const LogLines = 40

// Start runs the executable at path with args as a process named name
// (a word, used in its log's file name), its standard output and error
// appended to the log. When the test ends the process is killed, if it
// still runs, and waited for; if the test failed, the tail of its log is
// printed.
func Start(t testing.TB, name, path string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, t: t, path: path, args: args, logPath: filepath.Join(t.TempDir(), name+".log")}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.end)
	return p
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil && !p.cur.hasExited() {
		return fmt.Errorf("proctest: starting %s: it is running", p.Name)
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("proctest: starting %s: %w", p.Name, err)
	}
	p.n++
	fmt.Fprintf(log, "=== proctest: %s, run %d: %s %s\n", p.Name, p.n, filepath.Base(p.path), strings.Join(p.args, " "))
	r := &run{cmd: exec.Command(p.path, p.args...), exited: make(chan struct{})}
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("proctest: starting %s: %w", p.Name, err)
	}
	p.cur = r
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := r.cmd.Wait()
		fmt.Fprintf(log, "=== proctest: %s exited: %s\n", p.Name, exitText(err))
		log.Close()
		r.err = err
		close(r.exited)
	}()
	return nil
}

func (r *run) hasExited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// end kills the process if it runs (SIGKILL ends a stopped process too),
// and waits for it.
func (p *Process) end() {
	r := p.run()
	if !r.hasExited() {
		r.cmd.Process.Kill()
	}
	p.wg.Wait()
	if p.t.Failed() {
		p.t.Logf("proctest: the last lines of %s's log (%s):\n%s", p.Name, p.logPath, p.Tail(LogLines))
	}
}

func (p *Process) run() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// Restart starts the process again, with the same arguments and log,
// once it has exited.
func (p *Process) Restart() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

// Pid is the process ID of the current run.
func (p *Process) Pid() int { return p.run().cmd.Process.Pid }

// Exited is closed when the current run has exited.
func (p *Process) Exited() <-chan struct{} { return p.run().exited }

// Wait waits for the current run to exit, and returns how it exited: nil
// for status 0, an *exec.ExitError otherwise. It returns ctx's error if
// ctx ends first.
func (p *Process) Wait(ctx context.Context) error {
	r := p.run()
	select {
	case <-r.exited:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("proctest: waiting for %s to exit: %w", p.Name, ctx.Err())
	}
}

// Kill sends SIGKILL, a crash, and waits for the process to exit.
func (p *Process) Kill() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	<-p.Exited()
}

// Term sends SIGTERM: Quire's servers drain, then exit.
func (p *Process) Term() {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
}

// Stop sends SIGSTOP, freezing the process as a long pause of its
// machine would (its sockets stay open, its timers stop), and returns
// once the process is stopped.
func (p *Process) Stop() {
	p.t.Helper()
	p.signal(syscall.SIGSTOP)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Poll(ctx, p.isStopped); err != nil {
		p.t.Fatalf("proctest: %s after SIGSTOP: %v", p.Name, err)
	}
}

// Cont sends SIGCONT: a stopped process runs on.
func (p *Process) Cont() {
	p.t.Helper()
	p.signal(syscall.SIGCONT)
}

func (p *Process) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.run().cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("proctest: sending %s to %s: %v", sig, p.Name, err)
	}
}

// isStopped tells, from /proc, whether the process is stopped by a
// signal. Where there is no /proc, it trusts that the signal arrived.
func (p *Process) isStopped() error {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/stat")
	if errors.Is(err, os.ErrNotExist) && p.run().hasExited() {
		return fmt.Errorf("%s exited", p.Name)
	} else if err != nil {
		return nil
	}
	// pid (comm) state …: comm may hold spaces and parentheses.
	_, rest, _ := bytes.Cut(raw[bytes.LastIndexByte(raw, ')')+1:], []byte(" "))
	if len(rest) > 0 && rest[0] == 'T' {
		return nil
	}
	return fmt.Errorf("%s is not stopped yet (state %.1s)", p.Name, rest)
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	raw, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

// Log returns the process's whole log, of every run.
func (p *Process) Log() string {
	raw, _ := os.ReadFile(p.logPath)
	return string(raw)
}

// Run runs the executable at path with args to completion, and returns
// what it printed (standard output and error). A failure to run, or an
// exit status other than 0, is an error that includes the output.
func Run(ctx context.Context, path string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w\n%s", filepath.Base(path), strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Addr returns a loopback host:port that is free, for a process's
// --listen flag.
func Addr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
}

// Tick is how often Poll checks its condition.
const Tick = 20 * time.Millisecond

// Poll checks cond every Tick until it returns nil, and returns nil; or
// returns ctx's error, with cond's last, once ctx ends. It is for the
// state of other processes, of which no event reaches the test.
func Poll(ctx context.Context, cond func() error) error {
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// Await polls cond until it returns nil, and fails the test with its last
// error if that takes longer than timeout.
func Await(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := Poll(ctx, cond); err != nil {
		t.Fatalf("proctest: after %s: %v", timeout, err)
	}
}
