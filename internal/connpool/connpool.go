// Package connpool keeps one gRPC client connection per endpoint, shared by
// a server's proxies: a broker's to other brokers, a consumer's to other
// consumer processes.
package connpool

import (
	"fmt"
	"sync"

	"github.com/quire-dev/quire/internal/rpcbuf"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Pool is a set of connections by endpoint. The zero Pool is ready, and
// dials in plaintext.
type Pool struct {
	// Options are added to the pool's dial options (rpcbuf's, and
	// plaintext transport credentials, which options may replace: with
	// TLS, say). Set them before the first Get.
	Options []grpc.DialOption

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// Get returns the connection to endpoint (host:port), made on first use.
func (p *Pool) Get(endpoint string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.conns[endpoint]; ok {
		return c, nil
	}
	opts := append(rpcbuf.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	c, err := grpc.NewClient(endpoint, append(opts, p.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", endpoint, err)
	}
	if p.conns == nil {
		p.conns = map[string]*grpc.ClientConn{}
	}
	p.conns[endpoint] = c
	return c, nil
}

// Close closes every connection; the pool may be used again after.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
