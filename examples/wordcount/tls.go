package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/authflag"
)

// tlsFlags are a client command's TLS files, for brokers and processes
// that serve TLS (the serve command's --tls-* flags): a CA to trust them
// by, and a certificate of the client's own where they require one.
type tlsFlags struct {
	cert, key, ca string
	token         authflag.Client
}

func (f *tlsFlags) add(fl *pflag.FlagSet) {
	fl.StringVar(&f.cert, "tls-cert", os.Getenv("QUIRE_TLS_CERT"), "PEM certificate this client presents to servers that require one (env QUIRE_TLS_CERT)")
	fl.StringVar(&f.key, "tls-key", os.Getenv("QUIRE_TLS_KEY"), "PEM private key of --tls-cert (env QUIRE_TLS_KEY)")
	fl.StringVar(&f.ca, "tls-ca", os.Getenv("QUIRE_TLS_CA"), "PEM certificates of the CAs that sign the servers' certificates; with any --tls-* flag, the client speaks TLS (env QUIRE_TLS_CA; default: the system's)")
	f.token.AddFlags(fl, "this client")
}

// dialOptions are the gRPC dial options of the flags: TLS (or plaintext)
// and the token.
func (f tlsFlags) dialOptions() ([]grpc.DialOption, error) {
	opts, err := f.transport()
	if err != nil {
		return nil, err
	}
	tokenOpts, err := f.token.DialOptions()
	if err != nil {
		return nil, consumer.UsageError{Err: err}
	}
	return append(opts, tokenOpts...), nil
}

// transport is the transport credentials of the flags: plaintext without
// any, TLS with any.
func (f tlsFlags) transport() ([]grpc.DialOption, error) {
	if f.cert == "" && f.key == "" && f.ca == "" {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if (f.cert == "") != (f.key == "") {
		return nil, usagef("--tls-cert %q and --tls-key %q: give both, or neither", f.cert, f.key)
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, usagef("--tls-cert %s, --tls-key %s: %v", f.cert, f.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, usagef("--tls-ca: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca %s: %v", f.ca, fmt.Errorf("no PEM certificate in it"))
		}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}, nil
}
