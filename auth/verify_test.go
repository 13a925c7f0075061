package auth

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/quire-dev/quire/labels"
)

// keyFiles writes a new Ed25519 pair and an HMAC secret into dir.
type keyFiles struct{ priv, pub, secret string }

func newKeyFiles(t testing.TB, dir, prefix string) keyFiles {
	t.Helper()
	priv, pub, err := GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := GenerateSecret()
	if err != nil {
		t.Fatal(err)
	}
	kf := keyFiles{filepath.Join(dir, prefix+".key"), filepath.Join(dir, prefix+".pub"), filepath.Join(dir, prefix+".secret")}
	for path, data := range map[string][]byte{kf.priv: priv, kf.pub: pub, kf.secret: secret} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return kf
}

func signer(t testing.TB, path string) SigningKey {
	t.Helper()
	k, err := LoadSigningKey(path)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func claims(caps Capability, sel string, ttl time.Duration) Claims {
	now := time.Now()
	return Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: "orders-writer", IssuedAt: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl))},
		Capability: caps, Selector: labels.MustParseSelector(sel),
	}
}

func mint(t *testing.T, k SigningKey, c Claims) string {
	t.Helper()
	tok, err := k.Mint(c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// rawToken signs header and claims as given, with key: for tokens that
// SigningKey would never mint.
func rawToken(t *testing.T, method jwt.SigningMethod, header map[string]any, claims jwt.MapClaims, key any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyAcceptsOnlyValidTokens(t *testing.T) {
	dir := t.TempDir()
	trusted, other := newKeyFiles(t, dir, "trusted"), newKeyFiles(t, dir, "other")
	edOnly, err := LoadKeys(trusted.pub)
	if err != nil {
		t.Fatal(err)
	}
	withSecret, err := LoadKeys(trusted.pub, trusted.secret)
	if err != nil {
		t.Fatal(err)
	}
	ed, hmacKey := signer(t, trusted.priv), signer(t, trusted.secret)
	good := claims(Read|Append, "app=orders", time.Hour)
	pubPEM, _ := os.ReadFile(trusted.pub)
	pubDER, _ := pemDER(pubPEM)
	mapClaims := jwt.MapClaims{"sub": "x", "cap": []string{"READ"}, "exp": time.Now().Add(time.Hour).Unix()}

	tampered := mint(t, ed, good)
	parts := strings.Split(tampered, ".")
	body, _ := json.Marshal(claims(Read|Append|Apply, "", time.Hour))
	parts[1] = base64.RawURLEncoding.EncodeToString(body)

	for _, tc := range []struct {
		name  string
		keys  *Keys
		token string
		want  string // "" for accepted; else a part of the error.
	}{
		{"ed25519", edOnly, mint(t, ed, good), ""},
		{"hmac", withSecret, mint(t, hmacKey, good), ""},
		{"ed25519 beside a secret", withSecret, mint(t, ed, good), ""},
		{"expired", edOnly, mint(t, ed, claims(Read, "", -time.Hour)), "expired at"},
		{"not yet valid", edOnly, mint(t, ed, func() Claims {
			c := good
			c.NotBefore = jwt.NewNumericDate(time.Now().Add(time.Hour))
			return c
		}()), "not valid before"},
		{"issued in the future", edOnly, mint(t, ed, func() Claims {
			c := good
			c.IssuedAt = jwt.NewNumericDate(time.Now().Add(time.Hour))
			return c
		}()), "issued in the future"},
		{"no expiry", edOnly, mint(t, ed, func() Claims { c := good; c.ExpiresAt = nil; return c }()), "no expiry"},
		{"unknown key", edOnly, mint(t, signer(t, other.priv), good), "does not trust"},
		{"unknown key, no kid", edOnly, rawToken(t, jwt.SigningMethodEdDSA, nil, mapClaims, mustPriv(t, other.priv)), "signed by another key"},
		{"tampered", edOnly, strings.Join(parts, "."), "does not verify"},
		{"alg none", edOnly, rawToken(t, jwt.SigningMethodNone, nil, mapClaims, jwt.UnsafeAllowNoneSignatureType), `alg "none" is not accepted`},
		{"hmac where only ed25519 is trusted", edOnly, mint(t, signer(t, trusted.secret), good), `alg "HS256" is not accepted`},
		{"hmac keyed by the public key", edOnly, rawToken(t, jwt.SigningMethodHS256, nil, mapClaims, pubDER), `alg "HS256" is not accepted`},
		{"unknown capability", edOnly, rawToken(t, jwt.SigningMethodEdDSA, map[string]any{"kid": ed.ID()},
			jwt.MapClaims{"sub": "x", "cap": []string{"READ", "DESTROY"}, "exp": time.Now().Add(time.Hour).Unix()}, mustPriv(t, trusted.priv)), `unknown name "DESTROY"`},
		{"no capability", edOnly, rawToken(t, jwt.SigningMethodEdDSA, nil,
			jwt.MapClaims{"sub": "x", "exp": time.Now().Add(time.Hour).Unix()}, mustPriv(t, trusted.priv)), "grants no capability"},
		{"no subject", edOnly, rawToken(t, jwt.SigningMethodEdDSA, nil,
			jwt.MapClaims{"cap": []string{"READ"}, "exp": time.Now().Add(time.Hour).Unix()}, mustPriv(t, trusted.priv)), "names no subject"},
		{"bad selector", edOnly, rawToken(t, jwt.SigningMethodEdDSA, nil,
			jwt.MapClaims{"sub": "x", "cap": []string{"READ"}, "sel": "app in (", "exp": time.Now().Add(time.Hour).Unix()}, mustPriv(t, trusted.priv)), "claim sel"},
		{"garbage", edOnly, "not.a.token", "malformed"},
		{"empty", edOnly, "", "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.keys.Verify(tc.token)
			t.Logf("Verify: %v", err)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Verify: %v, want the token accepted", err)
			case tc.want == "" && (c.Subject != "orders-writer" || c.Capability != Read|Append || c.Selector.String() != "app=orders"):
				t.Fatalf("claims %+v, want those minted", c)
			case tc.want != "" && err == nil:
				t.Fatalf("Verify accepted the token, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("Verify: %v, want an error with %q", err, tc.want)
			case err != nil && tc.token != "" && strings.Contains(err.Error(), tc.token):
				t.Fatalf("the error %q quotes the token", err)
			}
		})
	}
}

func pemDER(data []byte) ([]byte, error) {
	keys, err := parseKeys(data)
	if err != nil {
		return nil, err
	}
	return x509.MarshalPKIXPublicKey(keys[0].verify)
}

func mustPriv(t *testing.T, path string) ed25519.PrivateKey {
	return signer(t, path).k.sign.(ed25519.PrivateKey)
}

// A verified token stays verified only while it is unexpired and its key
// is trusted: the cache of verified tokens must not outlive either.
func TestVerifyFollowsKeyRotation(t *testing.T) {
	setRecheck(t, 0)
	dir := t.TempDir()
	oldKey, newKey := newKeyFiles(t, dir, "old"), newKeyFiles(t, dir, "new")
	oldPub, _ := os.ReadFile(oldKey.pub)
	newPub, _ := os.ReadFile(newKey.pub)
	trust := filepath.Join(dir, "trusted.pub")
	write := func(data ...[]byte) {
		t.Helper()
		if err := os.WriteFile(trust, []byte(strings.Join(toStrings(data), "")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(oldPub)
	keys, err := LoadKeys(trust)
	if err != nil {
		t.Fatal(err)
	}
	byOld := mint(t, signer(t, oldKey.priv), claims(Read, "", time.Hour))
	byNew := mint(t, signer(t, newKey.priv), claims(Read, "", time.Hour))
	check := func(token string, accepted bool) {
		t.Helper()
		if _, err := keys.Verify(token); (err == nil) != accepted {
			t.Fatalf("Verify: %v, want accepted %v", err, accepted)
		}
	}
	check(byOld, true)
	check(byNew, false)
	write(oldPub, newPub) // the rotation begins: both keys trusted.
	check(byOld, true)
	check(byNew, true)
	write([]byte("-----BEGIN PUBLIC KEY-----\nhalf written")) // does not parse: keys kept.
	check(byOld, true)
	write(newPub) // the old key is retired.
	check(byOld, false)
	check(byNew, true)
}

func toStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func TestKeyFilesAreChecked(t *testing.T) {
	dir := t.TempDir()
	kf := newKeyFiles(t, dir, "k")
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("too short\n"), 0o600)
	badPEM := filepath.Join(dir, "bad.pem")
	os.WriteFile(badPEM, []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o600)
	for _, tc := range []struct {
		path, want string
	}{
		{short, "too short for an HMAC secret"},
		{badPEM, "PEM block 1 (PUBLIC KEY)"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		if _, err := LoadKeys(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadKeys(%s): %v, want an error with %q", filepath.Base(tc.path), err, tc.want)
		}
	}
	if _, err := LoadSigningKey(kf.pub); err == nil || !strings.Contains(err.Error(), "want one private key") {
		t.Errorf("LoadSigningKey of a public key: %v, want it refused", err)
	}
	if _, err := LoadKeys(kf.priv); err != nil {
		t.Errorf("LoadKeys of a private key: %v, want it to verify too", err)
	}
}

// A token file is read again when it changes, so that a sidecar can renew
// the token under a running client; a file caught empty keeps the token
// before it.
func TestTokenFileFollowsTheFile(t *testing.T) {
	setRecheck(t, 0)
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first\n")
	src, err := TokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ content, want string }{
		{"first\n", "first"}, {"second", "second"}, {"", "second"}, {"third\n", "third"},
	} {
		write(tc.content)
		if got, err := src.Token(); err != nil || got != tc.want {
			t.Fatalf("with %q in the file: Token() = %q, %v; want %q", tc.content, got, err, tc.want)
		}
	}
	write("")
	if _, err := TokenFile(path); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("TokenFile of an empty file: %v, want it refused", err)
	}
}

// Once any Verify has seen a rotation remove a key, no Verify that starts
// after it accepts that key's tokens, whichever goroutine makes it: a
// goroutine that read the keys before the change must not cache a token
// of the removed key where the others find it, accepted until the next
// change.
func TestVerifyRotationIsSeenByEveryGoroutine(t *testing.T) {
	setRecheck(t, 0)
	dir := t.TempDir()
	var pubs [2][]byte
	var signers [2]SigningKey
	for i, kf := range []keyFiles{newKeyFiles(t, dir, "a"), newKeyFiles(t, dir, "b")} {
		var err error
		if pubs[i], err = os.ReadFile(kf.pub); err != nil {
			t.Fatal(err)
		}
		signers[i] = signer(t, kf.priv)
	}
	trust := filepath.Join(dir, "trusted.pub")
	if err := os.WriteFile(trust, pubs[0], 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := LoadKeys(trust)
	if err != nil {
		t.Fatal(err)
	}
	// Each goroutine verifies tokens not seen before (a new subject each),
	// so that each Verify checks a signature with the keys it read rather
	// than finding the token cached.
	var minted atomic.Int64
	fresh := func(s SigningKey) (string, error) {
		c := claims(Read, "", time.Hour)
		c.Subject = fmt.Sprintf("s%d", minted.Add(1))
		return s.Mint(c)
	}
	const goroutines, rounds, after = 8, 100, 20
	for round := range rounds {
		// Each round trusts the other key only, so the key trusted
		// before is removed: its tokens must be refused from the moment
		// one Verify refuses them.
		removed := signers[round%2]
		var seen atomic.Bool
		var late, failed atomic.Int64
		accepted := make([][]string, goroutines) // per goroutine, the tokens it saw accepted.
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < after; {
					tok, err := fresh(removed)
					if err != nil {
						failed.Add(1)
						return
					}
					wasSeen := seen.Load()
					if _, err := keys.Verify(tok); err == nil {
						accepted[g] = append(accepted[g], tok)
						if wasSeen {
							late.Add(1)
						}
					}
					if wasSeen {
						n++
					}
				}
			}()
		}
		if err := os.WriteFile(trust, pubs[(round+1)%2], 0o600); err != nil {
			t.Fatal(err)
		}
		probe, err := fresh(removed)
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := keys.Verify(probe); err != nil {
				break
			}
		}
		seen.Store(true)
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Fatalf("round %d: %d goroutines failed to mint a token", round, n)
		}
		if n := late.Load(); n != 0 {
			t.Fatalf("round %d: %d Verify calls accepted a removed key's token after the rotation was seen", round, n)
		}
		for _, toks := range accepted {
			for _, tok := range toks {
				if _, err := keys.Verify(tok); err == nil {
					t.Fatalf("round %d: a removed key's token, verified during the rotation, is still accepted after it", round)
				}
			}
		}
	}
}
