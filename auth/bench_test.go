package auth

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkVerify measures what checking a request's token costs a
// server: a token seen before (the common case: a client sends the same
// token with every RPC), and one verified afresh (an Ed25519 or HMAC
// signature check).
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	kf := newKeyFiles(b, dir, "k")
	keys, err := LoadKeys(kf.pub, kf.secret)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name, key string
		cached    bool
	}{
		{"cached", kf.priv, true},
		{"ed25519", kf.priv, false},
		{"hmac", kf.secret, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			k, err := LoadSigningKey(filepath.Clean(tc.key))
			if err != nil {
				b.Fatal(err)
			}
			token, err := k.Mint(claims(Read|Append, "app=orders", time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if !tc.cached {
					keys.mu.Lock()
					clear(keys.verified)
					keys.mu.Unlock()
				}
				if _, err := keys.Verify(token); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
