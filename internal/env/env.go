// Package env reads the environment variables that give Quire's flags
// their defaults (QUIRE_BROKER, QUIRE_ETCD, …), so that containers and
// systemd units configure servers without command lines.
package env

import (
	"os"
	"time"
)

// Or is the value of environment variable name, or def if it is unset or
// empty.
func Or(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// Duration is the duration in environment variable name, or zero if it
// is unset. One that does not parse is -1, for the flag's validation to
// refuse with the flag's name.
func Duration(name string) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return -1
	}
	return d
}
