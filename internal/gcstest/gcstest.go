// Package gcstest runs a Google Cloud Storage emulator for tests:
// fake-gcs-server, on a free loopback port, holding its objects in memory,
// and stopped when the test ends. Build it with .ci/build-fake-gcs (it
// lands in ${QUIRE_CACHE:-$HOME/.cache/quire}/bin/fake-gcs-server), or
// name it with $QUIRE_FAKE_GCS; without it, Start skips the test, saying
// so.
package gcstest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/toolbin"
)

// Bucket is the emulator's one bucket.
const Bucket = "quire-test"

// Binary returns the path of the fake-gcs-server binary: $QUIRE_FAKE_GCS,
// else ${QUIRE_CACHE:-$HOME/.cache/quire}/bin/fake-gcs-server, or "" if
// there is none.
func Binary() string { return toolbin.Path("QUIRE_FAKE_GCS", "fake-gcs-server") }

// Start starts the emulator, with bucket Bucket, and returns its endpoint
// (host:port, plain http) once it answers.
func Start(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("no fake-gcs-server binary: run .ci/build-fake-gcs (or set QUIRE_FAKE_GCS) to run the tests against a GCS emulator")
	}
	dir := t.TempDir()
	// The emulator makes a bucket of each directory under -data.
	if err := os.MkdirAll(filepath.Join(dir, "data", Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	port := freeport.Port(t)
	endpoint := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(dir, "fake-gcs-server.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // The child has its own descriptor.
	// The public host is the endpoint: the emulator serves signed URLs'
	// paths (/bucket/object) for requests to it.
	cmd := exec.Command(bin, "-scheme", "http", "-host", "127.0.0.1", "-port", strconv.Itoa(port),
		"-public-host", endpoint, "-external-url", "http://"+endpoint,
		"-backend", "memory", "-data", filepath.Join(dir, "data"), "-log-level", "warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	logTail := func() string {
		b, _ := os.ReadFile(logPath)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return string(b)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // Its objects are in memory: nothing to flush.
		<-exited
		if t.Failed() {
			t.Logf("fake-gcs-server's log ends:\n%s", logTail())
		}
	})

	// Ready when the bucket is there.
	url := fmt.Sprintf("http://%s/storage/v1/b/%s", endpoint, Bucket)
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return endpoint
		}
		if time.Now().After(deadline) {
			t.Fatalf("fake-gcs-server at %s is not ready after 30s (last: %v); its log ends:\n%s", endpoint, err, logTail())
		}
		select {
		case <-exited:
			t.Fatalf("fake-gcs-server exited (%v) before it was ready; its log ends:\n%s", waitErr, logTail())
		case <-tick.C:
		}
	}
}
