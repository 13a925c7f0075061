package gctune

import (
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

const (
	// Percent is the GOGC a broker sets.
	Percent = 400
	// Ratio is the share of the cgroup's or machine's memory that a
	// broker sets as its soft memory limit.
	Ratio = 0.8
)

// Settings are the collector's settings after Tune.
type Settings struct {
	Percent     int   // GOGC; negative if off
	MemoryLimit int64 // bytes; math.MaxInt64 if none
}

// Tune sets the process's memory limit and GOGC as the package doc says,
// and returns them. It logs to logger why it left either as it was.
func Tune(logger *slog.Logger) Settings {
	limit, err := memlimit.Set(memlimit.WithRatio(Ratio),
		memlimit.WithProvider(memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)))
	if err != nil {
		logger.Warn("memory limit left unset", "err", err)
		limit = debug.SetMemoryLimit(-1)
	}
	percent := current()
	switch {
	case os.Getenv("GOGC") != "":
		// The environment's, which the runtime applied at start.
	case limit == math.MaxInt64:
		logger.Info("GOGC left at Go's default: no memory limit bounds a larger heap")
	default:
		debug.SetGCPercent(Percent)
		percent = Percent
	}
	return Settings{Percent: percent, MemoryLimit: limit}
}

// current is the GOGC in force.
func current() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}
