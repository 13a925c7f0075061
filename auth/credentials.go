package auth

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quire-dev/quire/labels"
)

// A TokenSource gives the token a client sends with each RPC.
type TokenSource interface {
	Token() (string, error)
}

// StaticToken is a token given once, as by --token or QUIRE_TOKEN.
type StaticToken string

// Token returns t.
func (t StaticToken) Token() (string, error) { return string(t), nil }

// tokenFile is a token read from a file, read again when it changes.
type tokenFile struct{ w *watched[string] }

// TokenFile returns the token held in the file at path (less surrounding
// white space), read again when the file changes, checked at most once a
// second: a sidecar that renews tokens rewrites the file, and clients
// send the new token from then on.
func TokenFile(path string) (TokenSource, error) {
	w, err := watch(path, "token file", parseToken)
	if err != nil {
		return nil, err
	}
	return tokenFile{w}, nil
}

func parseToken(data []byte) (string, error) {
	t := strings.TrimSpace(string(data))
	switch {
	case t == "":
		return "", errors.New("the file is empty")
	case strings.ContainsAny(t, " \t\r\n"):
		return "", errors.New("the file holds more than one token, or white space within one")
	}
	return t, nil
}

func (f tokenFile) Token() (string, error) {
	t, _ := f.w.get()
	return t, nil
}

// DialOptions are the gRPC dial options that send src's token with every
// RPC: none for a nil src.
func DialOptions(src TokenSource) []grpc.DialOption {
	if src == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithPerRPCCredentials(bearerCredentials{src})}
}

// bearerCredentials send a token as "authorization: Bearer TOKEN": the
// token of the caller a call is forwarded for, if it is (see
// ForwardCaller), and otherwise the source's.
type bearerCredentials struct{ src TokenSource }

func (b bearerCredentials) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	token, forwarded := ctx.Value(forwardKey{}).(string)
	if !forwarded && b.src != nil {
		var err error
		if token, err = b.src.Token(); err != nil {
			return nil, err
		}
	}
	if token == "" {
		return nil, nil
	}
	return map[string]string{"authorization": "Bearer " + token}, nil
}

// RequireTransportSecurity is false so that tokens work on the plaintext
// connections of development, too; over a network, use TLS with them.
func (bearerCredentials) RequireTransportSecurity() bool { return false }

var _ credentials.PerRPCCredentials = bearerCredentials{}

type forwardKey struct{}

// ForwardCaller returns ctx for a call that a server makes on behalf of
// the caller of ctx's request (a broker proxying a read or an append to a
// journal's primary): the call carries the caller's token, and not the
// server's own, so that the peer authorizes the caller. A caller without
// a token is forwarded without one, so that a proxy never lends a caller
// its own rights.
func ForwardCaller(ctx context.Context) context.Context {
	p, ok := ctx.Value(principalKey{}).(principal)
	token := p.token
	switch {
	case p.internal:
		return ctx // The server's own call: its own token.
	case !ok:
		// The server does not check tokens: pass on whatever the caller sent.
		token, _ = bearer(ctx)
	}
	return context.WithValue(ctx, forwardKey{}, token)
}

// minted is a TokenSource that mints its own tokens.
type minted struct {
	key     SigningKey
	subject string
	caps    Capability
	sel     labels.Selector
	ttl     time.Duration

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

// Minted returns a TokenSource that mints tokens with key for subject,
// granting caps over what sel matches, each valid for ttl and replaced
// once half of it has passed: the own token of a process that holds the
// signing key, such as quire dev.
func Minted(key SigningKey, subject string, caps Capability, sel labels.Selector, ttl time.Duration) TokenSource {
	return &minted{key: key, subject: subject, caps: caps, sel: sel, ttl: ttl}
}

func (m *minted) Token() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.token != "" && now.Before(m.renewAt) {
		return m.token, nil
	}
	t, err := m.key.Mint(Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: m.subject, IssuedAt: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(m.ttl))},
		Capability: m.caps, Selector: m.sel})
	if err != nil {
		return "", err
	}
	m.token, m.renewAt = t, now.Add(m.ttl/2)
	return t, nil
}

// CallerDialOptions are the dial options of a client that has no token of
// its own and sends, with each call, the token its context carries (see
// WithToken): a gateway's, whose every request brings its caller's.
func CallerDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithPerRPCCredentials(bearerCredentials{})}
}

// WithToken returns ctx for calls that carry token instead of the
// client's own ("" for none): a gateway passing on its HTTP caller's
// bearer token, so that brokers authorize that caller. Only clients
// dialled with DialOptions or CallerDialOptions send it.
func WithToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, forwardKey{}, token)
}
