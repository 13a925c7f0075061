// Package etcdtest runs a real etcd server in-process for tests.
//
// Tests never mock etcd: coordination bugs hide in exactly the behaviour a
// mock would get wrong (revisions, leases, compaction, watch cancellation).
// Instead, each test binary shares one embedded etcd server listening on
// loopback with random ports and a temporary data directory, and each test
// gets a fresh key prefix so tests cannot see each other's keys.
//
// Tests that must stop or restart etcd start a dedicated server with Start.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/quire-dev/quire/internal/freeport"
)

// Server is an embedded, single-member etcd server.
type Server struct {
	Dir       string
	clientURL url.URL
	peerURL   url.URL
	maxTxnOps uint
	fsync     bool
	tls       transport.TLSInfo
	etcd      *embed.Etcd
}

// Options configure a dedicated server.
type Options struct {
	// MaxTxnOps is the server's --max-txn-ops; zero means etcd's default (128).
	MaxTxnOps uint
	// CertFile and KeyFile, if set, make the server serve its clients
	// over TLS (an https endpoint); with TrustedCAFile, it requires them
	// to present a certificate that the CA signed. Client does not reach
	// such a server: dial it with the files of its clients.
	CertFile, KeyFile, TrustedCAFile string
	// Fsync makes the server sync its WAL before it answers, as a
	// production etcd does. Without it, a test's etcd survives a restart
	// but not a power loss, and answers sooner.
	Fsync bool
}

// Start starts a dedicated server in dir (a fresh temporary directory if
// empty) on two free loopback ports.
func Start(dir string, opts Options) (*Server, error) {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "quire-etcd-"); err != nil {
			return nil, fmt.Errorf("creating etcd data directory: %w", err)
		}
	}
	s := &Server{Dir: dir, maxTxnOps: opts.MaxTxnOps, fsync: opts.Fsync}
	if opts.CertFile != "" {
		s.tls = transport.TLSInfo{CertFile: opts.CertFile, KeyFile: opts.KeyFile,
			TrustedCAFile: opts.TrustedCAFile, ClientCertAuth: opts.TrustedCAFile != ""}
	}
	// A port found free may be taken before etcd binds it (by another
	// test process: go test runs packages in parallel), so a start that
	// finds its port in use tries others.
	for attempt := 1; ; attempt++ {
		clientPort, err := freeport.Find()
		if err != nil {
			return nil, err
		}
		peerPort, err := freeport.Find()
		if err != nil {
			return nil, err
		}
		s.clientURL = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
		s.peerURL = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
		if opts.CertFile != "" {
			s.clientURL.Scheme = "https"
		}
		err = s.start()
		if err == nil || attempt == 5 || !inUse(err) {
			return s, err
		}
	}
}

// inUse tells whether err is that of a port already in use.
func inUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func (s *Server) start() error {
	cfg := embed.NewConfig()
	cfg.Name = "quire-test"
	cfg.Dir = s.Dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = fmt.Sprintf("%s=%s", cfg.Name, s.peerURL.String())
	cfg.ClientTLSInfo = s.tls
	cfg.UnsafeNoFsync = !s.fsync
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if s.maxTxnOps != 0 {
		cfg.MaxTxnOps = s.maxTxnOps
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting embedded etcd in %s: %w", s.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("embedded etcd in %s not ready after 60s", s.Dir)
	}
	s.etcd = e
	return nil
}

// Endpoint is the client URL of the server.
func (s *Server) Endpoint() string { return s.clientURL.String() }

// Client returns a new client of the server. The caller closes it.
func (s *Server) Client() (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to embedded etcd at %s: %w", s.Endpoint(), err)
	}
	return c, nil
}

// Stop stops the server, keeping its data directory.
func (s *Server) Stop() {
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
	}
}

// Restart starts a stopped server again on the same ports and data.
func (s *Server) Restart() error {
	s.Stop()
	return s.start()
}

// Close stops the server and removes its data directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.Dir)
}

var (
	shared     *Server
	sharedErr  error
	sharedOnce sync.Once
	prefixSeq  atomic.Int64
)

// Shared returns the server shared by this test binary, starting it on
// first use. It lives until the binary exits; use Main to remove its data.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = Start("", Options{}) })
	if sharedErr != nil {
		t.Fatalf("shared etcd: %v", sharedErr)
	}
	return shared
}

// Client returns a client of the shared server and a key prefix, ending in
// "/", that no other test of this binary uses. The client is closed and the
// prefix deleted when the test ends.
func Client(t testing.TB) (*clientv3.Client, string) {
	t.Helper()
	c, err := Shared(t).Client()
	if err != nil {
		t.Fatal(err)
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	prefix := fmt.Sprintf("/test/%s-%d/", name, prefixSeq.Add(1))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c.Delete(ctx, prefix, clientv3.WithPrefix())
		c.Close()
	})
	return c, prefix
}

// Main runs the tests of a package and then stops the shared server and
// removes its data. Call it from TestMain: os.Exit(etcdtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	return code
}
