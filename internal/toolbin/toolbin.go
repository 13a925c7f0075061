// Package toolbin finds the binaries of the servers that tests run for
// real (SeaweedFS, fake-gcs-server): built once by the scripts in .ci into
// a cache that later runs reuse.
package toolbin

import (
	"os"
	"path/filepath"
)

// Path returns the binary name: the path in the environment variable env
// if it is set, else ${QUIRE_CACHE:-$HOME/.cache/quire}/bin/name if it
// exists, else "".
func Path(env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	cache := os.Getenv("QUIRE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "quire")
	}
	p := filepath.Join(cache, "bin", name)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}
