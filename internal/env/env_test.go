package env

import (
	"testing"
	"time"
)

func TestOr(t *testing.T) {
	t.Setenv("QUIRE_ENV_TEST", "")
	if got := Or("QUIRE_ENV_TEST", "def"); got != "def" {
		t.Errorf("an empty variable gives %q, want the default", got)
	}
	t.Setenv("QUIRE_ENV_TEST", "set")
	if got := Or("QUIRE_ENV_TEST", "def"); got != "set" {
		t.Errorf("a set variable gives %q, want its value", got)
	}
}

func TestDuration(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "90s": 90 * time.Second, "soon": -1} {
		t.Setenv("QUIRE_ENV_TEST", v)
		if got := Duration("QUIRE_ENV_TEST"); got != want {
			t.Errorf("Duration of %q = %v, want %v", v, got, want)
		}
	}
}
