package etcdclient

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/internal/tlstest"
)

// An etcd that requires mutual TLS answers a client with a certificate of
// its CA, and no other.
func TestDialTLS(t *testing.T) {
	pki := tlstest.New(t)
	srv, err := etcdtest.Start(t.TempDir(), etcdtest.Options{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, TrustedCAFile: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if !strings.HasPrefix(srv.Endpoint(), "https://") {
		t.Fatalf("endpoint %s, want https", srv.Endpoint())
	}
	ctx := context.Background()
	c, err := Dial(ctx, srv.Endpoint(), tlsconfig.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA}, User{}, "/quire/", 10*time.Second)
	if err != nil {
		t.Fatalf("with the client's certificate: %v", err)
	}
	if _, err := c.Put(ctx, "/quire/k", "v"); err != nil {
		t.Errorf("put over TLS: %v", err)
	}
	c.Close()

	for name, files := range map[string]tlsconfig.Files{
		"plaintext":             {},
		"no client certificate": {CA: pki.CA},
		"the system's roots":    {Cert: pki.ClientCert, Key: pki.ClientKey},
	} {
		if c, err := Dial(ctx, srv.Endpoint(), files, User{}, "/quire/", time.Second); err == nil {
			c.Close()
			t.Errorf("%s: etcd answered", name)
		} else if !strings.Contains(err.Error(), srv.Endpoint()) {
			t.Errorf("%s: error %q does not name the endpoint", name, err)
		}
	}
	if _, err := Dial(ctx, srv.Endpoint(), tlsconfig.Files{Cert: pki.ClientCert}, User{}, "/quire/", time.Second); err == nil ||
		!strings.Contains(err.Error(), "has no key file") {
		t.Errorf("a certificate without its key: %v", err)
	}
}

// A connection to etcd that idles (no watch, no request) stays open: the
// client pings only connections with streams, which etcd's servers
// permit. (Found by the soak: pinging idle connections made every etcd
// member answer GOAWAY too_many_pings after three pings, 30 s, and close
// them.) The test idles past three keepalive periods.
func TestIdleConnectionOutlivesEtcdsPingPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("idles for 45 s")
	}
	srv, err := etcdtest.Start(t.TempDir(), etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	c, err := Dial(ctx, srv.Endpoint(), tlsconfig.Files{}, User{}, "/quire/", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn := c.ActiveConnection()
	if s := conn.GetState(); s != connectivity.Ready {
		t.Fatalf("after a request, the connection is %s, want READY", s)
	}
	idle, cancel := context.WithTimeout(ctx, 3*(rpcbuf.KeepaliveTime+rpcbuf.KeepaliveTimeout))
	defer cancel()
	if conn.WaitForStateChange(idle, connectivity.Ready) {
		t.Fatalf("the idle connection went from READY to %s: etcd closed it", conn.GetState())
	}
}
