package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/labels"
)

func newAuthCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "auth",
		Short: "Make the keys and tokens of authorization",
		Long: `Brokers and consumer processes given --auth-keys refuse requests that do
not carry a token signed by one of those keys and granting the
capability the request needs over the journals or shards it touches.

  quire auth keygen fleet          writes fleet.key (private: keep it where
                                   tokens are minted) and fleet.pub (give
                                   it to servers: --auth-keys fleet.pub)
  quire auth token --key fleet.key --cap READ,APPEND -l app=orders \
      --ttl 24h --subject orders-writer
                                   prints a token; clients send it with
                                   --token, QUIRE_TOKEN or --token-file

See docs/security.md.`,
	}
	cmd.AddCommand(newAuthKeygenCommand(), newAuthTokenCommand())
	return cmd
}

func newAuthKeygenCommand() *cobra.Command {
	var hmac, force bool
	cmd := &cobra.Command{
		Use:   "keygen PREFIX",
		Short: "Write a new key pair: PREFIX.key and PREFIX.pub",
		Long: `Write a new Ed25519 key pair as PEM: PREFIX.key, the private key that
signs tokens, readable only by its owner, and PREFIX.pub, the public key
that servers verify tokens with. Servers that hold only public keys can
verify tokens but not mint them.

With --hmac, write PREFIX.secret instead: a shared secret (HS256) that both
signs and verifies, so that every server holding it could mint tokens.

Existing files are not overwritten unless --force is given.`,
		Args: exactArgs(1, "PREFIX"),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := keygen(args[0], hmac)
			if err != nil {
				return err
			}
			for _, f := range files {
				if !force {
					if _, err := os.Stat(f.path); err == nil {
						return usagef("%s exists: give --force to overwrite it", f.path)
					}
				}
			}
			if err := writeKeyFiles(files); err != nil {
				return err
			}
			for _, f := range files {
				fmt.Fprintln(cmd.OutOrStdout(), f.path)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&hmac, "hmac", false, "write an HMAC secret, PREFIX.secret, instead of an Ed25519 pair")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing files")
	return cmd
}

type keyFile struct {
	path string
	data []byte
	mode os.FileMode
}

// writeKeyFiles writes files, or none of them: if one fails, those
// written before it are removed, so that no private key is left without
// the public key that goes with it. The one that failed is removed too if
// it is a file (written in part); anything else at its path (a directory,
// say) is not this command's to remove.
func writeKeyFiles(files []keyFile) error {
	for i, f := range files {
		err := os.WriteFile(f.path, f.data, f.mode)
		if err == nil {
			err = os.Chmod(f.path, f.mode) // WriteFile keeps an existing file's mode.
		}
		if err == nil {
			continue
		}
		err = fmt.Errorf("writing %s: %w", f.path, err)
		remove := files[:i]
		if fi, statErr := os.Lstat(f.path); statErr == nil && fi.Mode().IsRegular() {
			remove = files[:i+1]
		}
		for _, w := range remove {
			if rmErr := os.Remove(w.path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
				err = fmt.Errorf("%w; removing %s as well failed: %v", err, w.path, rmErr)
			}
		}
		return err
	}
	return nil
}

func keygen(prefix string, hmac bool) ([]keyFile, error) {
	if prefix == "" {
		return nil, usagef("PREFIX is empty: give a path prefix such as keys/fleet")
	}
	if hmac {
		secret, err := auth.GenerateSecret()
		if err != nil {
			return nil, err
		}
		return []keyFile{{prefix + ".secret", secret, 0o600}}, nil
	}
	priv, pub, err := auth.GenerateEd25519()
	if err != nil {
		return nil, err
	}
	return []keyFile{{prefix + ".key", priv, 0o600}, {prefix + ".pub", pub, 0o644}}, nil
}

// tokenFlags are the flags of `quire auth token`.
type tokenFlags struct {
	key, caps, selector, subject string
	ttl                          time.Duration
}

func newAuthTokenCommand() *cobra.Command {
	var f tokenFlags
	cmd := &cobra.Command{
		Use:   "token --key FILE --cap CAPS --subject NAME [-l SELECTOR] [--ttl D]",
		Short: "Print a token signed by a key",
		Long: `Print a token (a JWT) signed by --key (PREFIX.key, or an HMAC secret),
granting --cap over the journals or shards that -l selects, to --subject,
for --ttl from now.

Capabilities, comma-separated:
  LIST       list journals or shards, and their specs
  READ       read journals, and list their fragments
  APPEND     append to journals
  APPLY      create, change and delete journal or shard specs
  REPLICATE  replicate journals: the brokers' own tokens hold it
  STAT       ask shards for their status and recovery-log hints
  UNASSIGN   unassign shards
  APP16 to APP31  an application's own

The selector matches labels and the meta-labels name (id, for shards) and
prefix: "-l prefix=orders/" bounds the token to names beginning orders/.
Without -l, the token holds its capabilities over everything.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			claims, key, err := f.parse(time.Now())
			if err != nil {
				return err
			}
			token, err := key.Mint(claims)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.key, "key", "", "file of the signing key: PREFIX.key of 'quire auth keygen', or an HMAC secret")
	fl.StringVar(&f.caps, "cap", "", "capabilities granted, comma-separated: LIST, READ, APPEND, APPLY, REPLICATE, STAT, UNASSIGN, APP16…APP31")
	fl.StringVarP(&f.selector, "selector", "l", "", "label selector of the journals or shards the token applies to (default: all)")
	fl.StringVar(&f.subject, "subject", "", "who the token is for, as logs and audit name it")
	fl.DurationVar(&f.ttl, "ttl", 24*time.Hour, "how long the token is valid")
	return cmd
}

// parse checks the flags and returns the claims they make and the key
// that signs them.
func (f tokenFlags) parse(now time.Time) (auth.Claims, auth.SigningKey, error) {
	var none auth.Claims
	switch {
	case f.key == "":
		return none, auth.SigningKey{}, usagef("--key is missing: give the signing key's file (PREFIX.key of 'quire auth keygen')")
	case f.caps == "":
		return none, auth.SigningKey{}, usagef("--cap is missing: give capabilities such as READ,APPEND")
	case f.subject == "":
		return none, auth.SigningKey{}, usagef("--subject is missing: name who the token is for, such as orders-writer")
	case f.ttl <= 0:
		return none, auth.SigningKey{}, usagef("--ttl %s: want a positive duration", f.ttl)
	}
	caps, err := auth.ParseCapability(f.caps)
	if err != nil {
		return none, auth.SigningKey{}, usagef("--cap: %w", err)
	}
	sel, err := labels.ParseSelector(f.selector)
	if err != nil {
		return none, auth.SigningKey{}, usagef("-l: %w", err)
	}
	key, err := auth.LoadSigningKey(f.key)
	if err != nil {
		return none, auth.SigningKey{}, usagef("--key: %w", err)
	}
	return auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: f.subject, IssuedAt: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(f.ttl))},
		Capability: caps, Selector: sel,
	}, key, nil
}

// exactArgs accepts n arguments, named by names for the error that refuses
// any other number.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s: got %d arguments", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}
