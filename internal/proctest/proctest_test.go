package proctest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quire-dev/quire/internal/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Main(m, nil)) }

// etcd, as a process: frozen by SIGSTOP it does not answer, and does
// again after SIGCONT; SIGTERM ends it, it restarts on its data, and
// SIGKILL ends it.
func TestEtcdProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds etcd")
	}
	e := proctest.StartEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	e.Stop()
	if _, err := health(ctx, e, 300*time.Millisecond); err == nil {
		t.Error("a stopped etcd answered its health check")
	}
	e.Cont()
	proctest.Await(t, 10*time.Second, func() error { _, err := health(ctx, e, time.Second); return err })

	e.Term()
	// etcd stops cleanly, then dies of the signal, as shells expect.
	if err := e.Wait(ctx); signal(err) != syscall.SIGTERM {
		t.Fatalf("etcd after SIGTERM: %v", err)
	}
	e.Restart()
	proctest.Await(t, 30*time.Second, func() error { _, err := health(ctx, e, time.Second); return err })

	e.Kill()
	if err := e.Wait(ctx); signal(err) != syscall.SIGKILL {
		t.Errorf("etcd after SIGKILL: %v", err)
	}
	if log := e.Log(); strings.Count(log, "=== proctest: etcd, run ") != 2 {
		t.Errorf("the log does not show two runs:\n%s", e.Tail(proctest.LogLines))
	}
}

// signal is the signal that ended a process, or -1.
func signal(exit error) syscall.Signal {
	var e *exec.ExitError
	if !errors.As(exit, &e) {
		return -1
	}
	if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return -1
}

// health asks etcd's /health, as a load balancer would.
func health(ctx context.Context, e *proctest.EtcdServer, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Endpoint+"/health", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return string(body), err
}

// Run returns what a command printed, and its failure with the output.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds etcd")
	}
	bin := proctest.Binaries(t, proctest.Etcd)[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := proctest.Run(ctx, bin, "--version"); err != nil || !strings.Contains(out, "etcd Version: 3.") {
		t.Errorf("etcd --version printed %q: %v", out, err)
	}
	if out, err := proctest.Run(ctx, bin, "--no-such-flag"); err == nil || !strings.Contains(err.Error(), out) {
		t.Errorf("etcd --no-such-flag printed %q: %v, want an error with the output", out, err)
	}
}
