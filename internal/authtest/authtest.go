// Package authtest makes the keys and tokens of authorization tests: an
// Ed25519 key pair in a temporary directory, and tokens it signs.
package authtest

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/labels"
)

// Key is an Ed25519 key pair in files.
type Key struct {
	t testing.TB
	// Private and Public are the paths of the PEM files.
	Private, Public string
	signer          auth.SigningKey
}

// NewKey writes a new key pair into a temporary directory.
func NewKey(t testing.TB) *Key {
	t.Helper()
	priv, pub, err := auth.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	k := &Key{t: t, Private: filepath.Join(dir, "key.key"), Public: filepath.Join(dir, "key.pub")}
	if err := os.WriteFile(k.Private, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.Public, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	if k.signer, err = auth.LoadSigningKey(k.Private); err != nil {
		t.Fatal(err)
	}
	return k
}

// Authorizer returns an Authorizer that trusts k.
func (k *Key) Authorizer() *auth.Authorizer {
	k.t.Helper()
	a, err := auth.New(auth.Config{Keys: []string{k.Public}})
	if err != nil {
		k.t.Fatal(err)
	}
	return a
}

// Token mints a token for subject, granting caps over what sel (a
// selector's text) matches, valid for ttl from now (expired for a
// negative ttl).
func (k *Key) Token(subject string, caps auth.Capability, sel string, ttl time.Duration) string {
	k.t.Helper()
	s, err := labels.ParseSelector(sel)
	if err != nil {
		k.t.Fatal(err)
	}
	now := time.Now()
	iat := now
	if ttl < 0 {
		iat = now.Add(2 * ttl)
	}
	tok, err := k.signer.Mint(auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: subject, IssuedAt: jwt.NewNumericDate(iat), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))},
		Capability:       caps, Selector: s})
	if err != nil {
		k.t.Fatal(err)
	}
	return tok
}

// NotYetValid mints a token like Token's, valid for an hour from an hour
// from now: refused until then.
func (k *Key) NotYetValid(subject string, caps auth.Capability, sel string) string {
	k.t.Helper()
	s, err := labels.ParseSelector(sel)
	if err != nil {
		k.t.Fatal(err)
	}
	now := time.Now()
	tok, err := k.signer.Mint(auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: subject, IssuedAt: jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now.Add(time.Hour)), ExpiresAt: jwt.NewNumericDate(now.Add(2 * time.Hour))},
		Capability: caps, Selector: s})
	if err != nil {
		k.t.Fatal(err)
	}
	return tok
}

// Forged returns a token granting everything, signed by method with key
// (jwt.UnsafeAllowNoneSignatureType for alg none, an HMAC secret, a public
// key's bytes): a forgery no server trusting only Ed25519 keys may accept.
func Forged(t testing.TB, method jwt.SigningMethod, key any) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, jwt.MapClaims{"sub": "forger", "cap": All.Names(),
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// HMACSecret is a fresh HMAC secret, as 'quire auth keygen --hmac' makes.
func HMACSecret(t testing.TB) []byte {
	t.Helper()
	s, err := auth.GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// All is every capability Quire checks.
const All = auth.All

// Broker is the capability of a broker's own token.
const Broker = auth.Replicate | auth.Read | auth.List
