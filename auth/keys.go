package auth

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/golang-jwt/jwt/v5"
)

// Key files hold either PEM blocks or an HMAC secret:
//
//   - "PUBLIC KEY" blocks (PKIX) of Ed25519 keys verify tokens signed with
//     alg EdDSA; servers need only these;
//   - a "PRIVATE KEY" block (PKCS #8) of an Ed25519 key signs tokens, and
//     verifies them too;
//   - any other content is an HMAC secret for alg HS256: the file's bytes,
//     less surrounding white space, at least MinSecretLen of them. A secret
//     both signs and verifies, so every server that holds it can mint
//     tokens.
//
// A verification file may hold several PUBLIC KEY blocks, so that one file
// can carry the old and the new key during a rotation.
const MinSecretLen = 32

// key is one key, as tokens name it.
type key struct {
	alg    string // jwt's name of the signing method: EdDSA or HS256.
	id     string // the kid tokens carry: a fingerprint of the public part.
	verify any    // ed25519.PublicKey or []byte.
	sign   any    // ed25519.PrivateKey or []byte; nil for a public key.
}

func (k key) method() jwt.SigningMethod { return jwt.GetSigningMethod(k.alg) }

func edKey(pub ed25519.PublicKey, priv ed25519.PrivateKey) key {
	k := key{alg: jwt.SigningMethodEdDSA.Alg(), id: fingerprint("ed25519", pub), verify: pub}
	if priv != nil {
		k.sign = priv
	}
	return k
}

func secretKey(secret []byte) key {
	return key{alg: jwt.SigningMethodHS256.Alg(), id: fingerprint("hmac", secret), verify: secret, sign: secret}
}

// fingerprint names a key by the first 8 bytes of a hash of its public
// part: enough to pick among a handful of keys, and it reveals nothing of
// a secret.
func fingerprint(kind string, public []byte) string {
	sum := sha256.Sum256(append([]byte(kind+":"), public...))
	return kind + ":" + hex.EncodeToString(sum[:8])
}

// parseKeys reads the keys of a key file's content.
func parseKeys(data []byte) ([]key, error) {
	trimmed := bytes.TrimSpace(data)
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN")) {
		if len(trimmed) < MinSecretLen {
			return nil, fmt.Errorf("not a PEM key, and too short for an HMAC secret: %d bytes, want at least %d", len(trimmed), MinSecretLen)
		}
		return []key{secretKey(bytes.Clone(trimmed))}, nil
	}
	var keys []key
	for rest := trimmed; len(bytes.TrimSpace(rest)) > 0; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("PEM block %d does not decode", len(keys)+1)
		}
		k, err := pemKey(block)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %w", len(keys)+1, block.Type, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func pemKey(block *pem.Block) (key, error) {
	switch block.Type {
	case "PUBLIC KEY":
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return key{}, err
		}
		ed, ok := pub.(ed25519.PublicKey)
		if !ok {
			return key{}, fmt.Errorf("a %T, want an Ed25519 key", pub)
		}
		return edKey(ed, nil), nil
	case "PRIVATE KEY":
		priv, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return key{}, err
		}
		ed, ok := priv.(ed25519.PrivateKey)
		if !ok {
			return key{}, fmt.Errorf("a %T, want an Ed25519 key", priv)
		}
		return edKey(ed.Public().(ed25519.PublicKey), ed), nil
	}
	return key{}, errors.New("want a PUBLIC KEY or a PRIVATE KEY block")
}

// A SigningKey mints tokens: an Ed25519 private key, or an HMAC secret.
type SigningKey struct{ k key }

// LoadSigningKey reads the signing key in the file at path: a PRIVATE KEY
// block, or an HMAC secret.
func LoadSigningKey(path string) (SigningKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return SigningKey{}, fmt.Errorf("signing key: %w", err)
	}
	keys, err := parseKeys(data)
	switch {
	case err != nil:
		return SigningKey{}, fmt.Errorf("signing key %s: %w", path, err)
	case len(keys) != 1 || keys[0].sign == nil:
		return SigningKey{}, fmt.Errorf("signing key %s: want one private key or one HMAC secret; it holds %d public key(s), which only verify", path, len(keys))
	}
	return SigningKey{keys[0]}, nil
}

// ID is the key's fingerprint, which its tokens carry as their kid.
func (s SigningKey) ID() string { return s.k.id }

// Mint signs c as a token.
func (s SigningKey) Mint(c Claims) (string, error) {
	if s.k.sign == nil {
		return "", errors.New("auth: minting with the zero SigningKey")
	}
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	t := jwt.NewWithClaims(s.k.method(), c)
	t.Header["kid"] = s.k.id
	return t.SignedString(s.k.sign)
}

// GenerateEd25519 returns a new Ed25519 key pair as PEM: the private key
// (PKCS #8) and the public key (PKIX).
func GenerateEd25519() (private, public []byte, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), nil
}

// GenerateSecret returns a new HMAC secret: 32 random bytes in base64, a
// line of text.
func GenerateSecret() ([]byte, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	return []byte(base64.RawURLEncoding.EncodeToString(raw) + "\n"), nil
}
