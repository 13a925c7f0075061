package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Leeway is the clock skew allowed between the host that minted a token
// and the server that checks its times.
const Leeway = 10 * time.Second

// maxCached bounds how many verified tokens Keys remembers.
const maxCached = 4096

// Keys verify tokens with the keys in a list of files, each read again
// when it changes (checked at most once a second): a rotation adds the
// new key to a file, then removes the old one, and servers follow without
// a restart.
type Keys struct {
	files []*watched[[]key]

	// mu orders key changes and the cache: a change is read, the keys
	// rebuilt and the cache cleared in one critical section, and a token
	// is cached only under the generation of the keys that verified it.
	// Without it, a Verify that read the keys before a rotation could
	// cache a token of a removed key after another cleared the cache,
	// leaving it accepted until the next change.
	mu       sync.Mutex
	keys     []key              // of every file, as last read; replaced, never changed in place.
	gen      uint64             // counts the changes of keys.
	verified map[string]*Claims // tokens whose signatures checked out with the keys of gen.
}

// LoadKeys reads the keys of the files at paths. Each must hold a key (see
// MinSecretLen for what a key file may hold).
func LoadKeys(paths ...string) (*Keys, error) {
	if len(paths) == 0 {
		return nil, errors.New("auth: no key file")
	}
	k := &Keys{verified: map[string]*Claims{}}
	for _, p := range paths {
		w, err := watch(p, "auth keys", parseKeys)
		if err != nil {
			return nil, err
		}
		k.files = append(k.files, w)
	}
	return k, nil
}

// currentLocked returns the keys of every file and their generation and,
// if any file changed, starts a new generation, dropping the tokens
// verified before. k.mu must be held.
func (k *Keys) currentLocked() ([]key, uint64) {
	changed := k.keys == nil
	values := make([][]key, len(k.files))
	for i, w := range k.files {
		var c bool
		values[i], c = w.get()
		changed = changed || c
	}
	if changed {
		var keys []key
		for _, ks := range values {
			keys = append(keys, ks...)
		}
		k.keys = keys
		k.gen++
		clear(k.verified)
	}
	return k.keys, k.gen
}

// Verify checks token's signature against the keys and its times against
// the clock, and returns its claims. Its errors say what was wrong with
// the token without quoting it.
func (k *Keys) Verify(token string) (*Claims, error) {
	k.mu.Lock()
	keys, gen := k.currentLocked()
	c, ok := k.verified[token]
	k.mu.Unlock()
	if ok {
		return c, checkTimes(c)
	}
	// The signature is checked outside the lock, so that verifications
	// run in parallel; its result is cached only if the keys have not
	// changed meanwhile.
	c, err := parse(token, keys)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	if k.gen == gen {
		if len(k.verified) >= maxCached {
			clear(k.verified)
		}
		k.verified[token] = c
	}
	k.mu.Unlock()
	return c, nil
}

// checkTimes checks again the times of claims verified before.
func checkTimes(c *Claims) error {
	now := time.Now()
	if c.ExpiresAt != nil && now.After(c.ExpiresAt.Add(Leeway)) {
		return fmt.Errorf("the token expired at %s", c.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}

func parse(token string, keys []key) (*Claims, error) {
	var algs []string
	for _, k := range keys {
		if !slices.Contains(algs, k.alg) {
			algs = append(algs, k.alg)
		}
	}
	c := new(Claims)
	t, err := jwt.ParseWithClaims(token, c, keyfunc(keys), jwt.WithValidMethods(algs),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(Leeway))
	if err != nil {
		return nil, explain(err, t, c, algs)
	}
	return c, nil
}

// keyfunc picks the keys that may have signed a token: those of its alg,
// and of its kid if it names one.
func keyfunc(keys []key) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		alg := t.Method.Alg()
		kid, _ := t.Header["kid"].(string)
		var set jwt.VerificationKeySet
		for _, k := range keys {
			if k.alg == alg && (kid == "" || k.id == kid) {
				set.Keys = append(set.Keys, k.verify)
			}
		}
		switch len(set.Keys) {
		case 0:
			return nil, errUnknownKey{alg: alg, kid: kid}
		case 1:
			return set.Keys[0], nil
		}
		return set, nil
	}
}

type errUnknownKey struct{ alg, kid string }

func (e errUnknownKey) Error() string {
	if e.kid == "" {
		return fmt.Sprintf("the token is signed (alg %s) by no key this server trusts", e.alg)
	}
	return fmt.Sprintf("the token is signed (alg %s) by a key this server does not trust (kid %q)", e.alg, e.kid)
}

// explain turns the JWT library's error into one that says what was wrong.
func explain(err error, t *jwt.Token, c *Claims, algs []string) error {
	var unknown errUnknownKey
	switch {
	case errors.As(err, &unknown):
		return unknown
	case errors.Is(err, jwt.ErrTokenMalformed):
		return fmt.Errorf("the token is malformed: %s", detail(err, jwt.ErrTokenMalformed))
	case errors.Is(err, jwt.ErrTokenExpired):
		return fmt.Errorf("the token expired at %s", c.ExpiresAt.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return fmt.Errorf("the token is not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return fmt.Errorf("the token is issued in the future, at %s", c.IssuedAt.UTC().Format(time.RFC3339))
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return errors.New("the token has no expiry (claim exp)")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid) && t != nil && t.Header != nil:
		if alg, _ := t.Header["alg"].(string); !slices.Contains(algs, alg) {
			return fmt.Errorf("the token's alg %q is not accepted here (want %s)", alg, strings.Join(algs, " or "))
		}
		return errors.New("the token's signature does not verify: it was altered, or signed by another key")
	case errors.Is(err, jwt.ErrTokenInvalidClaims):
		return fmt.Errorf("the token's claims are invalid: %s", detail(err, jwt.ErrTokenInvalidClaims))
	}
	return fmt.Errorf("the token does not verify: %w", err)
}

// detail is the JWT library's err less the text of its kind.
func detail(err, kind error) string {
	return strings.TrimPrefix(strings.TrimPrefix(err.Error(), kind.Error()), ": ")
}
