// Package tlsconfig builds the TLS configurations of Quire's gRPC servers
// and clients, and of their etcd clients, from PEM files.
//
// One set of files serves a process both ways. A broker presents its
// certificate to its clients, and presents it too, as a client, to the
// brokers it connects to; with a CA, it verifies its peers against it, and
// as a server it then requires clients to present a certificate that the
// CA signed (mutual TLS). Without any file, connections are plaintext, as
// in development.
//
// A certificate and its key are read again when their files change
// (checked at most once a second, as connections are made), so rotating
// them needs no restart; CAs are read once.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Files are the PEM files of a process's TLS. The zero Files is
// plaintext.
type Files struct {
	// Cert and Key are the process's certificate (chain) and its private
	// key.
	Cert, Key string
	// CA holds the certificates of the authorities that sign the peers'.
	// Without it, clients verify servers against the system's roots, and
	// servers do not ask clients for certificates.
	CA string
}

// IsZero tells whether f names no file: plaintext.
func (f Files) IsZero() bool { return f == Files{} }

// Validate checks that f's files go together and can be read.
func (f Files) Validate() error {
	if err := f.paired(); err != nil {
		return err
	}
	if f.Cert != "" {
		if _, err := newKeyPair(f.Cert, f.Key); err != nil {
			return err
		}
	}
	if f.CA != "" {
		if _, err := f.pool(); err != nil {
			return err
		}
	}
	return nil
}

// paired checks that a certificate comes with its key, and a key with its
// certificate.
func (f Files) paired() error {
	switch {
	case f.Cert != "" && f.Key == "":
		return fmt.Errorf("tls: the certificate %s has no key file", f.Cert)
	case f.Key != "" && f.Cert == "":
		return fmt.Errorf("tls: the key %s has no certificate file", f.Key)
	}
	return nil
}

// Server returns the configuration of a server that presents f.Cert and,
// with f.CA, requires clients to present a certificate that f.CA signed.
// It is nil for the zero Files.
func (f Files) Server() (*tls.Config, error) {
	if f.IsZero() {
		return nil, nil
	}
	if f.Cert == "" {
		return nil, errors.New("tls: a server needs a certificate and its key (only a CA was given)")
	}
	if err := f.paired(); err != nil {
		return nil, err
	}
	kp, err := newKeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get(), nil }}
	if f.CA != "" {
		if cfg.ClientCAs, err = f.pool(); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client returns the configuration of a client that verifies servers
// against f.CA (or the system's roots) and presents f.Cert, if given. It
// is nil for the zero Files.
func (f Files) Client() (*tls.Config, error) {
	if f.IsZero() {
		return nil, nil
	}
	if err := f.paired(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := f.pool()
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		kp, err := newKeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get(), nil }
	}
	return cfg, nil
}

// ServerOptions are the gRPC server options of f: none for plaintext.
func (f Files) ServerOptions() ([]grpc.ServerOption, error) {
	cfg, err := f.Server()
	if cfg == nil || err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg))}, nil
}

// DialOptions are the gRPC dial options of f: its transport credentials,
// plaintext for the zero Files.
func (f Files) DialOptions() ([]grpc.DialOption, error) {
	cfg, err := f.Client()
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, nil
}

// Options are f's gRPC server and dial options together, for a process
// that is a server and a client of its peers.
func (f Files) Options() ([]grpc.ServerOption, []grpc.DialOption, error) {
	server, err := f.ServerOptions()
	if err != nil {
		return nil, nil, err
	}
	dial, err := f.DialOptions()
	if err != nil {
		return nil, nil, err
	}
	return server, dial, nil
}

func (f Files) pool() (*x509.CertPool, error) {
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("tls: CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: CA %s holds no PEM certificate", f.CA)
	}
	return pool, nil
}

// AddFlags adds the flags --PREFIX-cert, --PREFIX-key and --PREFIX-ca,
// which set f and default to the environment variables ENV_CERT, ENV_KEY
// and ENV_CA; who names what they configure ("the broker", say).
func (f *Files) AddFlags(fl *pflag.FlagSet, prefix, env, who string) {
	fl.StringVar(&f.Cert, prefix+"-cert", os.Getenv(env+"_CERT"),
		fmt.Sprintf("PEM certificate that %s presents; with --%s-key, TLS (env %s_CERT)", who, prefix, env))
	fl.StringVar(&f.Key, prefix+"-key", os.Getenv(env+"_KEY"),
		fmt.Sprintf("PEM private key of --%s-cert (env %s_KEY)", prefix, env))
	fl.StringVar(&f.CA, prefix+"-ca", os.Getenv(env+"_CA"),
		fmt.Sprintf("PEM certificates of the CAs that %s trusts; a server given them requires client certificates (env %s_CA; default: the system's)", who, env))
}

// Flags names the flags of AddFlags with prefix, for messages.
func Flags(prefix string) string {
	return fmt.Sprintf("--%s-cert, --%s-key, --%s-ca", prefix, prefix, prefix)
}

// recheck is how often a certificate's files are checked for a change; a
// variable, for tests.
var recheck = time.Second

// keyPair is a certificate and key, read again when their files change.
type keyPair struct {
	certFile, keyFile string

	mu         sync.Mutex
	cert       *tls.Certificate
	certMod    time.Time
	keyMod     time.Time
	checkedAt  time.Time
	failedMods [2]time.Time // of files that failed to load; not tried again
}

func newKeyPair(certFile, keyFile string) (*keyPair, error) {
	kp := &keyPair{certFile: certFile, keyFile: keyFile}
	certMod, keyMod := modTime(certFile), modTime(keyFile)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s and key %s: %w", certFile, keyFile, err)
	}
	kp.cert, kp.certMod, kp.keyMod, kp.checkedAt = &cert, certMod, keyMod, time.Now()
	return kp, nil
}

// get returns the certificate, read again if its files changed since it
// was read. A change that does not load (a key written after its
// certificate, say) keeps the certificate in use, and is tried again once
// the files change again.
func (kp *keyPair) get() *tls.Certificate {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if time.Since(kp.checkedAt) < recheck {
		return kp.cert
	}
	kp.checkedAt = time.Now()
	mods := [2]time.Time{modTime(kp.certFile), modTime(kp.keyFile)}
	if (mods[0].Equal(kp.certMod) && mods[1].Equal(kp.keyMod)) || mods == kp.failedMods {
		return kp.cert
	}
	cert, err := tls.LoadX509KeyPair(kp.certFile, kp.keyFile)
	if err != nil {
		kp.failedMods = mods
		slog.Warn("tls: the changed certificate does not load; still using the one before",
			"cert", kp.certFile, "key", kp.keyFile, "err", err)
		return kp.cert
	}
	kp.cert, kp.certMod, kp.keyMod = &cert, mods[0], mods[1]
	slog.Info("tls: certificate reloaded", "cert", kp.certFile)
	return kp.cert
}

func modTime(path string) time.Time {
	if fi, err := os.Stat(path); err == nil {
		return fi.ModTime()
	}
	return time.Time{}
}
