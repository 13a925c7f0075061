package authflag

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/internal/logtest"
)

// A server given keys to check tokens with but no token of its own starts
// (a lone broker needs none), with a warning that names what will fail.
func TestKeysWithoutATokenWarn(t *testing.T) {
	dir := t.TempDir()
	_, pub, err := auth.GenerateEd25519()
	if err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(dir, "fleet.pub")
	if err := os.WriteFile(keys, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	log := new(logtest.Log)
	prev := slog.Default()
	slog.SetDefault(log.Logger(slog.LevelInfo))
	t.Cleanup(func() { slog.SetDefault(prev) })
	warning := logtest.Record{"level": "WARN"}
	for _, tc := range []struct {
		name string
		args []string
		warn bool
	}{
		{"keys, no token", []string{"--auth-keys", keys}, true},
		{"keys, rollout, no token", []string{"--auth-keys", keys, "--auth-rollout"}, true},
		{"keys and a token", []string{"--auth-keys", keys, "--token", "t.o.k"}, false},
		{"no keys", nil, false},
	} {
		t.Setenv("QUIRE_AUTH_KEYS", "")
		t.Setenv("QUIRE_TOKEN", "")
		t.Setenv("QUIRE_TOKEN_FILE", "")
		var s Server
		fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		s.AddFlags(fl, "the broker")
		if err := fl.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		before := len(log.Records(t, warning))
		if _, _, _, err := s.Options(); err != nil {
			t.Fatalf("%s: Options: %v, want the server to start", tc.name, err)
		}
		records := log.Records(t, warning)[before:]
		switch {
		case !tc.warn && len(records) != 0:
			t.Errorf("%s: warned %v, want no warning", tc.name, records)
		case tc.warn && (len(records) != 1 || !strings.Contains(records[0].Msg(), "the broker checks its callers' tokens but sends none")):
			t.Errorf("%s: warned %v, want one warning that the broker sends no token", tc.name, records)
		}
	}
}
