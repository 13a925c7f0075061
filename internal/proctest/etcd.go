package proctest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// EtcdServer is a single-member etcd cluster running as a process of its
// own: the real server, which tests can kill or stop like any other
// process.
type EtcdServer struct {
	*Process
	// Endpoint is the client URL, http://127.0.0.1:PORT.
	Endpoint string
	// Dir is the data directory.
	Dir string
}

// StartEtcd starts an etcd server with a fresh data directory, listening
// for clients and peers on free loopback ports, and returns once it
// answers its health check.
func StartEtcd(t testing.TB) *EtcdServer {
	t.Helper()
	bin := Binaries(t, Etcd)[0]
	// A free port may be taken before etcd binds it, by a test of another
	// package: then try others.
	for attempt := 1; ; attempt++ {
		e := &EtcdServer{Endpoint: "http://" + Addr(t), Dir: filepath.Join(t.TempDir(), "etcd")}
		peer := "http://" + Addr(t)
		e.Process = Start(t, "etcd", bin,
			"--name", "proctest", "--data-dir", e.Dir,
			"--listen-client-urls", e.Endpoint, "--advertise-client-urls", e.Endpoint,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "proctest="+peer,
			// Tests do not survive power loss; fsync would only slow them.
			"--unsafe-no-fsync", "--log-level", "warn")
		err := e.awaitHealthy(60 * time.Second)
		if err == nil {
			return e
		}
		if attempt == 3 || !strings.Contains(e.Log(), "address already in use") {
			t.Fatal(err)
		}
		e.Kill()
	}
}

// awaitHealthy waits until the server answers /health, or has exited.
func (e *EtcdServer) awaitHealthy(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := Poll(ctx, func() error {
		select {
		case <-e.Exited():
			return nil // Reported below.
		default:
		}
		return e.health(ctx)
	})
	select {
	case <-e.Exited():
		return fmt.Errorf("proctest: etcd exited at start: %w", e.Wait(ctx))
	default:
	}
	if err != nil {
		return fmt.Errorf("proctest: etcd at %s not healthy: %w", e.Endpoint, err)
	}
	return nil
}

func (e *EtcdServer) health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Endpoint+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("/health: %s %s", resp.Status, body)
	}
	return nil
}
