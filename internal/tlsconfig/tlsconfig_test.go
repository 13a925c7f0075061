package tlsconfig

import (
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/internal/tlstest"
)

// Files that do not go together, or cannot be read, are refused, naming
// the file.
func TestValidate(t *testing.T) {
	p := tlstest.New(t)
	junk := filepath.Join(t.TempDir(), "junk.pem")
	os.WriteFile(junk, []byte("not PEM"), 0o600)
	for _, tc := range []struct {
		name  string
		files Files
		want  string // in the error; "" for none
	}{
		{"plaintext", Files{}, ""},
		{"server, mutual", Files{Cert: p.ServerCert, Key: p.ServerKey, CA: p.CA}, ""},
		{"CA only", Files{CA: p.CA}, ""},
		{"certificate without key", Files{Cert: p.ServerCert}, "has no key file"},
		{"key without certificate", Files{Key: p.ServerKey}, "has no certificate file"},
		{"mismatched key", Files{Cert: p.ServerCert, Key: p.ClientKey}, p.ClientKey},
		{"missing certificate", Files{Cert: "/nonexistent/cert.pem", Key: p.ServerKey}, "/nonexistent/cert.pem"},
		{"missing CA", Files{CA: "/nonexistent/ca.pem"}, "/nonexistent/ca.pem"},
		{"CA not PEM", Files{CA: junk}, "holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.files.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want an error naming %q", err, tc.want)
			}
		})
	}
	if _, err := (Files{CA: p.CA}).Server(); err == nil {
		t.Error("a server with a CA and no certificate was accepted")
	}
	if cfg, err := (Files{}).Server(); cfg != nil || err != nil {
		t.Errorf("plaintext server: %v, %v", cfg, err)
	}
}

// handshake runs a TLS handshake between a server of srv and a client of
// cli, and returns the client's error, and the subject that the server
// presented.
func handshake(t *testing.T, srv, cli Files) (string, error) {
	t.Helper()
	scfg, err := srv.Server()
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := cli.Client()
	if err != nil {
		t.Fatal(err)
	}
	if ccfg == nil {
		ccfg = &tls.Config{}
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	served := make(chan error, 1)
	go func() {
		conn, err := lis.Accept()
		if err == nil {
			err = conn.(*tls.Conn).Handshake()
			if err == nil {
				_, err = conn.Write([]byte("ok"))
			}
			conn.Close()
		}
		served <- err
	}()
	conn, err := tls.Dial("tcp", lis.Addr().String(), ccfg)
	if err == nil {
		defer conn.Close()
		// With TLS 1.3 a refused client certificate shows on reading.
		_, err = io.ReadAll(conn)
	}
	<-served
	if err != nil {
		return "", err
	}
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

// Mutual TLS: a client needs the CA to trust the server, and the server
// requires the client's certificate.
func TestHandshakes(t *testing.T) {
	p, other := tlstest.New(t), tlstest.New(t)
	server := Files{Cert: p.ServerCert, Key: p.ServerKey, CA: p.CA}
	for _, tc := range []struct {
		name   string
		server Files
		client Files
		ok     bool
	}{
		{"mutual", server, Files{Cert: p.ClientCert, Key: p.ClientKey, CA: p.CA}, true},
		{"server only", Files{Cert: p.ServerCert, Key: p.ServerKey}, Files{CA: p.CA}, true},
		{"no client certificate", server, Files{CA: p.CA}, false},
		{"a client certificate of another CA", server, Files{Cert: other.ClientCert, Key: other.ClientKey, CA: p.CA}, false},
		{"server of another CA", Files{Cert: other.ServerCert, Key: other.ServerKey}, Files{CA: p.CA}, false},
		{"the system's roots", Files{Cert: p.ServerCert, Key: p.ServerKey}, Files{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, err := handshake(t, tc.server, tc.client)
			if tc.ok && (err != nil || name != "server") {
				t.Fatalf("handshake: %q, %v", name, err)
			}
			if !tc.ok && err == nil {
				t.Fatal("handshake succeeded")
			}
		})
	}
}

// A server presents its rotated certificate once its files change, and
// keeps the one before while the new files do not load.
func TestRotation(t *testing.T) {
	defer func(d time.Duration) { recheck = d }(recheck)
	recheck = 0
	p := tlstest.New(t)
	server := Files{Cert: p.ServerCert, Key: p.ServerKey}
	cfg, err := server.Server()
	if err != nil {
		t.Fatal(err)
	}
	first := cfg.GetCertificate
	cert := func() string {
		c, err := first(nil)
		if err != nil {
			t.Fatal(err)
		}
		return string(c.Certificate[0])
	}
	before := cert()

	// A half-written rotation (a new certificate, the old key) is not used.
	newCert, newKey := p.Issue(t, "server-2")
	copyFile(t, newCert, p.ServerCert)
	if cert() != before {
		t.Fatal("a certificate that does not match its key was taken")
	}
	copyFile(t, newKey, p.ServerKey)
	if cert() == before {
		t.Fatal("the rotated certificate was not taken")
	}
	if name, err := handshake(t, server, Files{CA: p.CA}); err != nil || name != "server-2" {
		t.Fatalf("after rotation the server presents %q (%v), want server-2", name, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
