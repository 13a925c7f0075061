package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/etcdclient"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/internal/tlstest"
)

// Brokers serving mutual TLS, with an etcd that requires it too: clients
// with a certificate of the fleet's CA append and read, through either
// broker, at replication 2 (so the brokers replicate to each other over
// TLS); a client without TLS, or without a certificate, is refused.
func TestBrokersServeMutualTLS(t *testing.T) {
	pki := tlstest.New(t)
	etcdSrv, err := etcdtest.Start(t.TempDir(), etcdtest.Options{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, TrustedCAFile: pki.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer etcdSrv.Close()
	root := "/quire/brokers/"
	etcdTLS := tlsconfig.Files{Cert: pki.ClientCert, Key: pki.ClientKey, CA: pki.CA}
	etcd, err := etcdclient.Dial(context.Background(), etcdSrv.Endpoint(), etcdTLS, etcdclient.User{}, root, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	serverTLS := []string{"--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey, "--tls-ca", pki.CA,
		"--etcd-cert", pki.ClientCert, "--etcd-key", pki.ClientKey, "--etcd-ca", pki.CA}
	clientTLS := []string{"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey, "--tls-ca", pki.CA}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var addrs []string
	for _, name := range []string{"b1", "b2"} {
		addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
		addrs = append(addrs, addr)
		srvCtx, stop := context.WithCancel(context.Background())
		done := make(chan result, 1)
		go func() {
			done <- quire(srvCtx, nil, append([]string{"broker", "serve", "--etcd", etcdSrv.Endpoint(),
				"--prefix", root, "--zone", "z" + name, "--suffix", name, "--listen", addr, "--dir", t.TempDir(),
				"--store", "file://" + t.TempDir() + "/", "--lease", "3s", "--log-level", "warn"}, serverTLS...)...)
		}()
		t.Cleanup(func() { stop(); <-done })
		if err := awaitKey(ctx, etcd, allocator.MemberKey(root, "z"+name, name)); err != nil {
			t.Fatalf("broker %s never announced itself: %v", name, err)
		}
	}

	with := func(args ...string) []string { return append(args, clientTLS...) }
	must(t, addrs[0], strings.NewReader("journals: [{name: secure/j, replication: 2}]\n"), with("journals", "apply", "-f", "-")...)
	must(t, addrs[1], strings.NewReader("over TLS"), with("journals", "append", "-j", "secure/j")...)
	for _, addr := range addrs {
		if got := must(t, addr, nil, with("journals", "read", "-j", "secure/j")...).stdout; got != "over TLS" {
			t.Errorf("read through %s: %q", addr, got)
		}
	}
	if got := must(t, addrs[0], nil, with("journals", "list")...).stdout; !strings.Contains(got, "zb1#b1") || !strings.Contains(got, "zb2#b2") {
		t.Errorf("secure/j is not replicated on both brokers:\n%s", got)
	}

	for _, tc := range []struct {
		name string
		args []string
		hint string
	}{
		// How a server's refusal shows (the hint) depends on timing; a
		// certificate the client does not trust, never.
		{"plaintext", nil, ""},
		{"no client certificate", []string{"--tls-ca", pki.CA}, ""},
		{"the system's roots", []string{"--tls-cert", pki.ClientCert, "--tls-key", pki.ClientKey}, "give --tls-ca"},
	} {
		r := quire(context.Background(), nil, append([]string{"journals", "list", "--broker", addrs[0], "--timeout", "2s"}, tc.args...)...)
		if r.err == nil || !strings.Contains(r.err.Error(), tc.hint) {
			t.Errorf("%s: journals list against brokers that require mutual TLS: %v, want an error saying %q", tc.name, r.err, tc.hint)
		}
	}
}

// A client with TLS against a broker without it is told so.
func TestTLSClientOfPlaintextBroker(t *testing.T) {
	pki := tlstest.New(t)
	b := startBroker(t)
	r := quire(context.Background(), nil, "journals", "list", "--broker", b, "--timeout", "2s", "--tls-ca", pki.CA)
	if r.err == nil || !strings.Contains(r.err.Error(), "does not serve TLS") {
		t.Errorf("journals list with TLS against a plaintext broker: %v", r.err)
	}
}

// TLS flags that do not go together are refused before anything starts.
func TestTLSFlags(t *testing.T) {
	pki := tlstest.New(t)
	for _, args := range [][]string{
		{"journals", "list", "--tls-cert", pki.ClientCert},
		{"journals", "list", "--tls-ca", "/nonexistent/ca.pem"},
		{"shards", "list", "--tls-key", pki.ClientKey},
		{"broker", "serve", "--dir", t.TempDir(), "--store", "file:///tmp/store/", "--tls-ca", pki.CA},
		{"broker", "serve", "--dir", t.TempDir(), "--store", "file:///tmp/store/", "--etcd-cert", pki.ClientCert},
	} {
		r := quire(context.Background(), nil, args...)
		if !errors.As(r.err, new(usageError)) {
			t.Errorf("quire %s: %v, want a usage error", strings.Join(args, " "), r.err)
		}
	}
}
