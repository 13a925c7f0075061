package admin

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/quire-dev/quire/internal/hostport"
)

// Flags are a server's admin endpoint flags: --admin HOST:PORT (env
// QUIRE_ADMIN), its older name --metrics (an alias, hidden; env
// QUIRE_METRICS), and --pprof (env QUIRE_PPROF).
type Flags struct {
	Addr    string
	Pprof   bool
	metrics string
	set     *pflag.FlagSet // to tell a given --admin from its default
}

// AddFlags adds the flags to fl; def is --admin's default ("" serves no
// admin endpoint).
func (f *Flags) AddFlags(fl *pflag.FlagSet, def string) {
	f.set = fl
	if v := os.Getenv("QUIRE_ADMIN"); v != "" {
		def = v
	}
	pprofDefault, _ := strconv.ParseBool(os.Getenv("QUIRE_PPROF"))
	fl.StringVar(&f.Addr, "admin", def, "host:port of the HTTP admin endpoint: /metrics, /healthz, /readyz (and /debug/pprof/ with --pprof); empty serves none (env QUIRE_ADMIN)")
	fl.StringVar(&f.metrics, "metrics", os.Getenv("QUIRE_METRICS"), "the older name of --admin")
	fl.MarkHidden("metrics")
	fl.BoolVar(&f.Pprof, "pprof", pprofDefault, "serve Go's profiles at /debug/pprof/ on --admin; they expose the process's internals to whoever reaches it (env QUIRE_PPROF)")
}

// Validate checks the flags, and folds --metrics into Addr.
func (f *Flags) Validate() error {
	if f.metrics != "" {
		if err := hostport.Check("--metrics", f.metrics, 0); err != nil {
			return err
		}
		given := os.Getenv("QUIRE_ADMIN") != "" || (f.set != nil && f.set.Changed("admin"))
		if given && f.Addr != f.metrics {
			return fmt.Errorf("--metrics %q and --admin %q: --metrics is the older name of --admin; give one", f.metrics, f.Addr)
		}
		f.Addr = f.metrics
	}
	if f.Addr == "" {
		if f.Pprof {
			return fmt.Errorf("--pprof without --admin: profiles are served on the admin endpoint")
		}
		return nil
	}
	return hostport.Check("--admin", f.Addr, 0)
}

// Serve serves the admin endpoint that the flags ask for, or nothing (a
// nil Server) if --admin is empty.
func (f *Flags) Serve(ready func() error) (*Server, error) {
	if f.Addr == "" {
		return nil, nil
	}
	return Serve("--admin", f.Addr, Options{Ready: ready, Pprof: f.Pprof})
}

// Check is one server's readiness, named, for All.
type Check struct {
	Name  string
	Ready func() error
}

// All is ready when every one of checks is, and otherwise says why the
// first that is not is not: a process with several servers (quire dev)
// is ready when they all are.
func All(checks ...Check) func() error {
	return func() error {
		for _, c := range checks {
			if err := c.Ready(); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
		}
		return nil
	}
}
