package gctune

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"

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
// and returns them. It changes nothing and returns an error if
// AUTOMEMLIMIT is neither off nor a share of memory in (0, 1]; it logs
// to logger why it left the limit unset if the memory cannot be learned.
func Tune(logger *slog.Logger) (Settings, error) {
	if err := checkRatio(); err != nil {
		return Settings{}, err
	}
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
	return Settings{Percent: percent, MemoryLimit: limit}, nil
}

// checkRatio checks AUTOMEMLIMIT, which memlimit reads.
func checkRatio() error {
	v, ok := os.LookupEnv("AUTOMEMLIMIT")
	if !ok || v == "off" {
		return nil
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || !(r > 0 && r <= 1) {
		return fmt.Errorf("AUTOMEMLIMIT=%q: want off, or the share of memory to limit the heap to, in (0, 1]", v)
	}
	return nil
}

// current is the GOGC in force.
func current() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100 // Not reported: Go's default.
	}
	return int(int64(s[0].Value.Uint64())) // GOGC=off reads as -1
}
