// Package devetcd runs the embedded, single-member etcd server of the
// development cluster (`quire dev`): a real etcd, in the quire process,
// whose data lives in a directory and survives restarts.
//
// It is not for production: one member, no TLS, loopback only.
package devetcd

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Config configures a server.
type Config struct {
	// Dir holds etcd's data. It is created if missing.
	Dir string
	// Host is the address both listeners bind: 127.0.0.1 if empty.
	Host string
	// ClientPort serves clients; PeerPort is etcd's peer listener, which a
	// single member needs but nobody uses. Both must be free.
	ClientPort, PeerPort int
	// ReadyTimeout bounds the wait for the server to serve. Zero means 60s.
	ReadyTimeout time.Duration
}

// Server is a running embedded etcd.
type Server struct {
	endpoint string
	etcd     *embed.Etcd
	level    zap.AtomicLevel // of etcd's logger
}

// Start starts a server and waits until it serves clients. A port in use
// is reported as such, naming the port.
func Start(cfg Config) (*Server, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.Dir == "" {
		return nil, errors.New("devetcd: Config.Dir is empty")
	}
	for _, p := range []struct {
		what string
		port int
	}{{"client", cfg.ClientPort}, {"peer", cfg.PeerPort}} {
		if err := checkFree(cfg.Host, p.port); err != nil {
			return nil, fmt.Errorf("etcd %s port: %w", p.what, err)
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating etcd data directory: %w", err)
	}
	clientURL := url.URL{Scheme: "http", Host: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.ClientPort))}
	peerURL := url.URL{Scheme: "http", Host: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.PeerPort))}

	ec := embed.NewConfig()
	ec.Name = "quire-dev"
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = fmt.Sprintf("%s=%s", ec.Name, peerURL.String())
	ec.Logger = "zap"
	level := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(errorLogger(level))
	// Keep an hour of history, so a long-lived dev cluster stays small.
	ec.AutoCompactionMode = "periodic"
	ec.AutoCompactionRetention = "1h"

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("starting etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd in %s failed while starting: %w", cfg.Dir, err)
	case <-time.After(cfg.ReadyTimeout):
		e.Close()
		return nil, fmt.Errorf("etcd in %s not ready after %s", cfg.Dir, cfg.ReadyTimeout)
	}
	return &Server{endpoint: clientURL.String(), etcd: e, level: level}, nil
}

// errorLogger logs etcd's messages at level and above to standard error.
func errorLogger(level zap.AtomicLevel) *zap.Logger {
	enc := zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(os.Stderr), level)).Named("etcd")
}

// checkFree reports a port in use with a clear error, before etcd would
// fail with a less clear one.
func checkFree(host string, port int) error {
	if port <= 0 || port > 65535 {
		return fmt.Errorf("%d is not a port (want 1 to 65535)", port)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is in use or cannot be bound: %w", addr, err)
	}
	return l.Close()
}

// Endpoint is the server's client URL, such as http://127.0.0.1:7701.
func (s *Server) Endpoint() string { return s.endpoint }

// Err returns a channel that reports the server failing while it runs.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Client returns a new client of the server. The caller closes it.
func (s *Server) Client() (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd at %s: %w", s.endpoint, err)
	}
	return c, nil
}

// Close stops the server, keeping its data. etcd reports its listeners
// closing as errors; Close silences them.
func (s *Server) Close() {
	s.level.SetLevel(zapcore.FatalLevel)
	s.etcd.Close()
}
