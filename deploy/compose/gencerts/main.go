// Command gencerts writes the certificates of the compose cluster's TLS
// variant (compose.tls.yaml): a CA, a certificate for each etcd member,
// broker and word-count process (for its hostname, its address on the
// cluster's subnet, and loopback), and one for clients (the host's quire
// and wordcount commands, the setup container). Every certificate serves
// and is a client: brokers are clients of each other and of etcd.
//
//	go run ./deploy/compose/gencerts            # into deploy/compose/tls/
//	go run ./deploy/compose/gencerts -subnet 10.207.99 -dir /some/dir
//
// These are an example's: a CA whose key sits beside its certificates,
// keys readable by the containers' user. A production cluster takes its
// certificates from its own PKI.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/quire-dev/quire/internal/env"
)

// hosts are the cluster's servers and their addresses' last octets, as in
// compose.yaml.
var hosts = []struct {
	name  string
	octet int
}{
	{"etcd1", 11}, {"etcd2", 12}, {"etcd3", 13},
	{"broker1", 21}, {"broker2", 22}, {"broker3", 23},
	{"wordcount1", 31}, {"wordcount2", 32}, {"wordcount3", 33},
}

func main() {
	dir := flag.String("dir", "deploy/compose/tls", "directory to write the PEM files into")
	subnet := flag.String("subnet", env.Or("QUIRE_SUBNET", "10.207.14"), "the cluster's subnet, its first three octets (env QUIRE_SUBNET)")
	valid := flag.Duration("valid", 90*24*time.Hour, "how long the certificates are valid")
	flag.Parse()
	if net.ParseIP(*subnet+".1") == nil {
		fmt.Fprintf(os.Stderr, "gencerts: -subnet %q: want three octets, such as 10.207.14\n", *subnet)
		os.Exit(2)
	}
	if err := generate(*dir, *subnet, *valid); err != nil {
		fmt.Fprintln(os.Stderr, "gencerts:", err)
		os.Exit(1)
	}
	fmt.Printf("gencerts: wrote ca.pem, client.pem and the servers' certificates into %s\n", *dir)
}

func generate(dir, subnet string, valid time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ca, caKey, err := authority(valid)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", ca.Raw); err != nil {
		return err
	}
	for _, h := range hosts {
		ip := net.ParseIP(fmt.Sprintf("%s.%d", subnet, h.octet))
		if err := issue(dir, h.name, []string{h.name, "localhost"}, []net.IP{ip, net.IPv4(127, 0, 0, 1)}, ca, caKey, valid); err != nil {
			return err
		}
	}
	return issue(dir, "client", nil, nil, ca, caKey, valid)
}

func authority(valid time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "quire compose example CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(valid),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// issue writes NAME.pem and NAME-key.pem, a certificate for dnsNames and
// ips that serves and is a client.
func issue(dir, name string, dnsNames []string, ips []net.IP, ca *x509.Certificate, caKey *ecdsa.PrivateKey, valid time.Duration) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("issuing %s: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, name+".pem"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, name+"-key.pem"), "PRIVATE KEY", keyDER)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail.
	}
	return n
}

// writePEM writes one PEM block. Keys too are readable by all: the
// containers run as a user of their own, which must read them.
func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644)
}
