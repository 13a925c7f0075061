// Package authflag holds the authorization flags that Quire's commands
// share: a client's token (--token, --token-file), and a server's keys
// (--auth-keys, --auth-rollout) with its own token.
package authflag

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/auth"
)

// Client is a client's token: given as text, or in a file read again when
// it changes. The zero Client sends no token.
type Client struct {
	Token, TokenFile string
}

// AddFlags adds --token and --token-file, defaulting to QUIRE_TOKEN and
// QUIRE_TOKEN_FILE; who names what sends the token ("the broker", say).
func (c *Client) AddFlags(fl *pflag.FlagSet, who string) {
	fl.StringVar(&c.Token, "token", os.Getenv("QUIRE_TOKEN"),
		fmt.Sprintf("token %s sends with its requests, as minted by 'quire auth token' (env QUIRE_TOKEN)", who))
	fl.StringVar(&c.TokenFile, "token-file", os.Getenv("QUIRE_TOKEN_FILE"),
		fmt.Sprintf("file holding the token %s sends, read again when it changes (env QUIRE_TOKEN_FILE)", who))
}

// Validate checks that at most one of the token and its file is given,
// and that the file holds a token.
func (c Client) Validate() error {
	_, err := c.Source()
	return err
}

// Source returns the token's source, nil if none is given.
func (c Client) Source() (auth.TokenSource, error) {
	switch {
	case c.Token != "" && c.TokenFile != "":
		return nil, errors.New("--token and --token-file are both given (or QUIRE_TOKEN and QUIRE_TOKEN_FILE): give one")
	case strings.ContainsAny(strings.TrimSpace(c.Token), " \t\r\n"):
		return nil, errors.New("--token holds white space: give one token, as 'quire auth token' prints it")
	case c.Token != "":
		return auth.StaticToken(strings.TrimSpace(c.Token)), nil
	case c.TokenFile != "":
		src, err := auth.TokenFile(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		return src, nil
	}
	return nil, nil
}

// DialOptions are the dial options that send the token, none without one.
func (c Client) DialOptions() ([]grpc.DialOption, error) {
	src, err := c.Source()
	if err != nil {
		return nil, err
	}
	return auth.DialOptions(src), nil
}

// Server is a server's authorization: the keys that verify its callers'
// tokens, and its own token, for the servers it calls.
type Server struct {
	Keys    []string
	Rollout bool
	Client
	who string // as AddFlags was told, for the warning of Options.
}

// AddFlags adds --auth-keys, --auth-rollout, --token and --token-file;
// who names the server ("the broker").
func (s *Server) AddFlags(fl *pflag.FlagSet, who string) {
	var keys []string
	if v := os.Getenv("QUIRE_AUTH_KEYS"); v != "" {
		keys = strings.Split(v, ",")
	}
	s.who = who
	fl.StringSliceVar(&s.Keys, "auth-keys", keys,
		fmt.Sprintf("comma-separated files of the keys that verify tokens (Ed25519 public keys, or HMAC secrets), read again when they change; with them, %s refuses requests without a valid token (env QUIRE_AUTH_KEYS)", who))
	fl.BoolVar(&s.Rollout, "auth-rollout", os.Getenv("QUIRE_AUTH_ROLLOUT") == "true",
		"with --auth-keys, accept requests that carry no token, and log them: to turn authorization on in a running fleet (env QUIRE_AUTH_ROLLOUT=true)")
	s.Client.AddFlags(fl, who)
}

// Validate checks the flags go together and their files load.
func (s Server) Validate() error {
	if _, err := s.Authorizer(); err != nil {
		return err
	}
	return s.Client.Validate()
}

// Authorizer returns the server's Authorizer: nil, checking nothing,
// without --auth-keys.
func (s Server) Authorizer() (*auth.Authorizer, error) {
	if s.Rollout && len(s.Keys) == 0 {
		return nil, errors.New("--auth-rollout needs --auth-keys: the keys that verify the tokens it still checks")
	}
	a, err := auth.New(auth.Config{Keys: s.Keys, Rollout: s.Rollout})
	if err != nil {
		return nil, fmt.Errorf("--auth-keys: %w", err)
	}
	return a, nil
}

// Options are the server's Authorizer, the gRPC server options that
// check tokens with it, and the dial options that send the server's own
// token: nil and none without --auth-keys and --token.
//
// A server given --auth-keys but no token of its own is warned, not
// refused: its own calls (brokers' replication and spool recovery, a
// consumer process's reads of its sources and appends to its recovery
// logs) fail Unauthenticated at servers that check tokens, but a lone
// broker at replication 1, a fleet in rollout mode, or a consumer process
// whose brokers check no token, runs fine without one.
func (s Server) Options() (*auth.Authorizer, []grpc.ServerOption, []grpc.DialOption, error) {
	a, err := s.Authorizer()
	if err != nil {
		return nil, nil, nil, err
	}
	src, err := s.Source()
	if err != nil {
		return nil, nil, nil, err
	}
	if a != nil && src == nil {
		who := s.who
		if who == "" {
			who = "the server"
		}
		slog.Warn("auth: --auth-keys without --token or --token-file: " + who + " checks its callers' tokens but sends none of its own, " +
			"so its calls to servers that check tokens (replication and spool recovery between brokers; a consumer's reads of its sources, " +
			"appends to its recovery logs and acknowledgements) fail Unauthenticated: give it a token ('quire auth token')")
	}
	return a, a.ServerOptions(), auth.DialOptions(src), nil
}
