package etcdclient

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// User is the etcd user a client authenticates as. The zero User
// authenticates as no one: for an etcd without authentication.
type User struct {
	Name string
	// PasswordFile holds the user's password (less a final newline).
	PasswordFile string
}

// AddFlags adds --etcd-user and --etcd-password-file, defaulting to the
// environment variables QUIRE_ETCD_USER and QUIRE_ETCD_PASSWORD_FILE.
func (u *User) AddFlags(fl *pflag.FlagSet) {
	fl.StringVar(&u.Name, "etcd-user", os.Getenv("QUIRE_ETCD_USER"),
		"etcd user to authenticate as, for an etcd with authentication enabled (env QUIRE_ETCD_USER)")
	fl.StringVar(&u.PasswordFile, "etcd-password-file", os.Getenv("QUIRE_ETCD_PASSWORD_FILE"),
		"file holding the password of --etcd-user (env QUIRE_ETCD_PASSWORD_FILE)")
}

// Validate checks that a user comes with a password file that reads, and
// a password file with a user.
func (u User) Validate() error {
	_, err := u.password()
	return err
}

func (u User) password() (string, error) {
	switch {
	case u.Name == "" && u.PasswordFile == "":
		return "", nil
	case u.Name == "":
		return "", fmt.Errorf("--etcd-password-file %s without --etcd-user: give the user it is the password of", u.PasswordFile)
	case u.PasswordFile == "":
		return "", fmt.Errorf("--etcd-user %s without --etcd-password-file: give the file holding its password", u.Name)
	}
	data, err := os.ReadFile(u.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("--etcd-password-file: %w", err)
	}
	pw := strings.TrimRight(string(data), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("--etcd-password-file %s is empty", u.PasswordFile)
	}
	return pw, nil
}

// hint explains an error of authentication, or says nothing.
func (u User) hint(err error) string {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Sprintf(" (etcd refused user %q and its password)", u.Name)
	case errors.Is(err, rpctypes.ErrUserEmpty), errors.Is(err, rpctypes.ErrInvalidAuthToken):
		return " (etcd has authentication enabled: give --etcd-user and --etcd-password-file)"
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Sprintf(" (etcd user %q may not read the prefix: grant its role the prefix)", u.Name)
	}
	return ""
}
