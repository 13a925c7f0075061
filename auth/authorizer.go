package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/labels"
)

// An Authorizer enforces tokens in a server: its interceptors verify the
// token each RPC carries, and the server's handlers Require a capability
// over each journal or shard they touch, before any content moves.
//
// The nil *Authorizer allows everything: a server without --auth-keys.
type Authorizer struct {
	keys    *Keys
	rollout bool

	mu       sync.Mutex
	lastOpen map[string]time.Time // when a method last logged a request without a token.
}

// Config configures an Authorizer.
type Config struct {
	// Keys are the files of the keys that verify tokens: Ed25519 public
	// keys, or HMAC secrets.
	Keys []string
	// Rollout accepts requests that carry no token, and logs them, so that
	// a running fleet can turn authorization on before every client has a
	// token. Requests with an invalid token are refused all the same.
	Rollout bool
}

// New returns the Authorizer of cfg, or nil (allowing everything) if cfg
// names no key file.
func New(cfg Config) (*Authorizer, error) {
	if len(cfg.Keys) == 0 {
		if cfg.Rollout {
			return nil, errors.New("auth: rollout mode needs the keys that verify tokens")
		}
		return nil, nil
	}
	keys, err := LoadKeys(cfg.Keys...)
	if err != nil {
		return nil, err
	}
	return &Authorizer{keys: keys, rollout: cfg.Rollout, lastOpen: map[string]time.Time{}}, nil
}

// principal is who made a request, as the interceptors found it.
type principal struct {
	claims   *Claims // nil for a request without a token, accepted in rollout mode.
	token    string
	internal bool // the server's own call, made in-process (see Internal).
}

// Internal returns ctx for a call that a server makes to its own handlers
// in-process, with all rights, on its own behalf rather than its
// caller's: an application's RPC that lists the application's shards to
// find where its answer is, say, whatever the caller may list. Requests
// from the network never carry it.
func Internal(ctx context.Context) context.Context {
	return context.WithValue(ctx, principalKey{}, principal{internal: true})
}

type principalKey struct{}

// ServerOptions are the gRPC server options that verify tokens: none for
// the nil Authorizer.
func (a *Authorizer) ServerOptions() []grpc.ServerOption {
	if a == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(a.unary), grpc.ChainStreamInterceptor(a.stream)}
}

func (a *Authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	ctx, err := a.authenticate(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	return next(ctx, req)
}

func (a *Authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) error {
	ctx, err := a.authenticate(ss.Context(), info.FullMethod)
	if err != nil {
		return err
	}
	return next(srv, &authedStream{ServerStream: ss, ctx: ctx})
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

// authenticate verifies the bearer token of ctx's request, and returns ctx
// carrying who made it. The health service answers without a token, for
// the probes of load balancers and orchestrators.
func (a *Authorizer) authenticate(ctx context.Context, method string) (context.Context, error) {
	if strings.HasPrefix(method, "/grpc.health.v1.Health/") {
		return ctx, nil
	}
	token, err := bearer(ctx)
	switch {
	case err != nil:
		refuse(method, "malformed", err)
		return nil, status.Error(codes.Unauthenticated, err.Error())
	case token == "" && a.rollout:
		a.logOpen(method)
		return context.WithValue(ctx, principalKey{}, principal{}), nil
	case token == "":
		refuse(method, "missing", errors.New("no token"))
		return nil, status.Errorf(codes.Unauthenticated, "%s needs a token (authorization: Bearer TOKEN): give clients --token, QUIRE_TOKEN or --token-file", method)
	}
	c, err := a.keys.Verify(token)
	if err != nil {
		refuse(method, "invalid", err)
		return nil, status.Errorf(codes.Unauthenticated, "%s: %v", method, err)
	}
	return context.WithValue(ctx, principalKey{}, principal{claims: c, token: token}), nil
}

// bearer returns the token of ctx's request, "" if it carries none.
func bearer(ctx context.Context) (string, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization")
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", fmt.Errorf("the request carries %d authorization headers, want one", len(vals))
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return "", errors.New("the authorization header is not \"Bearer TOKEN\"")
	}
	return strings.TrimSpace(token), nil
}

// logOpen logs a request accepted without a token, once a minute per
// method at most: enough to find the clients still to be given tokens.
func (a *Authorizer) logOpen(method string) {
	acceptedOpen.WithLabelValues(method).Inc()
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.lastOpen[method]) < time.Minute {
		return
	}
	a.lastOpen[method] = time.Now()
	slog.Warn("auth: rollout mode accepted a request without a token", "method", method)
}

// Require fails with PermissionDenied unless ctx's request holds want over
// the kind ("journal", "shard") of thing called name, labelled set (with
// its meta-labels). The nil Authorizer requires nothing.
func (a *Authorizer) Require(ctx context.Context, want Capability, kind, name string, set labels.Set) error {
	if a == nil {
		return nil
	}
	p, ok := ctx.Value(principalKey{}).(principal)
	switch {
	case !ok:
		// A handler reached without the interceptors: fail closed.
		return status.Errorf(codes.Unauthenticated, "the server did not authenticate this request to %s %s", kind, name)
	case p.claims == nil:
		return nil // Internal, or rollout mode (logged by authenticate).
	}
	// The token was valid when its stream began; a stream that carries
	// many requests (Appends) may outlive it.
	if err := checkTimes(p.claims); err != nil {
		return status.Errorf(codes.Unauthenticated, "%s %s: %v", kind, name, err)
	}
	switch {
	case !p.claims.Capability.Has(want):
		denyPermission(p.claims, want, kind, name, "capability")
		return status.Errorf(codes.PermissionDenied, "the token of %q lacks %s on %s %s (it holds %s)", p.claims.Subject, want, kind, name, p.claims.Capability)
	case !p.claims.Selector.Matches(set):
		denyPermission(p.claims, want, kind, name, "selector")
		return status.Errorf(codes.PermissionDenied, "%s %s is outside the selector %q of the token of %q", kind, name, p.claims.Selector.String(), p.claims.Subject)
	}
	return nil
}

// Allows tells whether ctx's request holds want over a thing labelled set,
// for a List to answer only what the caller may list. It logs nothing.
func (a *Authorizer) Allows(ctx context.Context, want Capability, set labels.Set) bool {
	if a == nil {
		return true
	}
	p, ok := ctx.Value(principalKey{}).(principal)
	return ok && (p.claims == nil || p.claims.Allows(want, set))
}

// RequireAny fails like Require unless ctx's request holds want over some
// thing: the check of a List before it filters its answer.
func (a *Authorizer) RequireAny(ctx context.Context, want Capability, kind string) error {
	if a == nil {
		return nil
	}
	p, ok := ctx.Value(principalKey{}).(principal)
	switch {
	case !ok:
		return status.Errorf(codes.Unauthenticated, "the server did not authenticate this request to list %ss", kind)
	case p.claims != nil && !p.claims.Capability.Has(want):
		denyPermission(p.claims, want, kind, "", "capability")
		return status.Errorf(codes.PermissionDenied, "the token of %q lacks %s on %ss (it holds %s)", p.claims.Subject, want, kind, p.claims.Capability)
	}
	return nil
}

// CallerToken returns the token of ctx's request, "" if it has none: what
// a server forwards (see Forward) when it passes the request on to a peer,
// so that the peer authorizes the original caller.
func CallerToken(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p.token
}

// refuse counts and logs a request refused for its token: missing,
// malformed or invalid.
func refuse(method, reason string, err error) {
	denied.WithLabelValues("", reason).Inc()
	slog.Warn("auth: request refused", "method", method, "reason", reason, "err", err)
}

// denyPermission counts and logs a request whose token does not grant
// what it asks: the audit trail of who tried what, on what.
func denyPermission(c *Claims, want Capability, kind, name, reason string) {
	denied.WithLabelValues(want.String(), reason).Inc()
	slog.Warn("auth: request denied", "subject", c.Subject, "capability", want.String(),
		"kind", kind, "name", name, "reason", reason)
}
