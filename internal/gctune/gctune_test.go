package gctune

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// restore puts the collector back as it was when the test ends.
func restore(t *testing.T) {
	percent, limit := current(), debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

// unset removes names from the environment until the test ends.
func unset(t *testing.T, names ...string) {
	for _, name := range names {
		t.Setenv(name, "") // restores the value when the test ends
		os.Unsetenv(name)
	}
}

// With nothing in the environment, GOGC is Percent under a limit of Ratio
// of the memory there is.
func TestTuneSetsBoth(t *testing.T) {
	restore(t)
	unset(t, "GOGC", "GOMEMLIMIT", "AUTOMEMLIMIT")
	debug.SetMemoryLimit(math.MaxInt64)
	memory, err := memlimit.ApplyFallback(memlimit.FromCgroup, memlimit.FromSystem)()
	if err != nil {
		t.Skipf("this machine's memory is unknown: %v", err)
	}
	got, err := Tune(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := int64(float64(memory) * Ratio)
	if got.Percent != Percent || current() != Percent || got.MemoryLimit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("settings %+v, GOGC %d, limit %d; want GOGC %d under %d (%v of %d)",
			got, current(), debug.SetMemoryLimit(-1), Percent, want, Ratio, memory)
	}
}

// The environment's GOGC and GOMEMLIMIT win.
func TestTuneKeepsTheEnvironments(t *testing.T) {
	restore(t)
	unset(t, "GOMEMLIMIT", "AUTOMEMLIMIT")
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150) // as the runtime would have, at start
	debug.SetMemoryLimit(math.MaxInt64)
	if got, _ := Tune(slog.New(slog.DiscardHandler)); got.Percent != 150 || current() != 150 {
		t.Errorf("with GOGC=150: settings %+v, GOGC %d", got, current())
	}

	unset(t, "GOGC")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(1 << 30)
	if got, _ := Tune(slog.New(slog.DiscardHandler)); got.MemoryLimit != 1<<30 || debug.SetMemoryLimit(-1) != 1<<30 || got.Percent != Percent {
		t.Errorf("with GOMEMLIMIT=1GiB: settings %+v, limit %d; want it kept, and GOGC %d", got, debug.SetMemoryLimit(-1), Percent)
	}
}

// Without a memory limit, GOGC stays as it was: nothing would bound a
// heap four times as large.
func TestTuneWithoutALimit(t *testing.T) {
	restore(t)
	unset(t, "GOGC", "GOMEMLIMIT")
	t.Setenv("AUTOMEMLIMIT", "off")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	if got, _ := Tune(slog.New(slog.DiscardHandler)); got.Percent != 100 || current() != 100 || got.MemoryLimit != math.MaxInt64 {
		t.Errorf("with AUTOMEMLIMIT=off: settings %+v, GOGC %d", got, current())
	}
}

// A bad AUTOMEMLIMIT is refused, naming its value, and changes nothing.
func TestTuneRefusesABadRatio(t *testing.T) {
	restore(t)
	unset(t, "GOGC", "GOMEMLIMIT")
	debug.SetGCPercent(100)
	debug.SetMemoryLimit(math.MaxInt64)
	for _, v := range []string{"", "0", "1.5", "-0.2", "NaN", "half"} {
		t.Setenv("AUTOMEMLIMIT", v)
		_, err := Tune(slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
			t.Errorf("AUTOMEMLIMIT=%q: error %v; want one naming the value", v, err)
		}
		if current() != 100 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
			t.Errorf("AUTOMEMLIMIT=%q: GOGC %d, limit %d; want both unchanged", v, current(), debug.SetMemoryLimit(-1))
		}
	}
}

// The GOGC reported is the one in force, off included.
func TestCurrent(t *testing.T) {
	restore(t)
	for _, p := range []int{-1, 150, 400} {
		debug.SetGCPercent(p)
		if got := current(); got != p {
			t.Errorf("GOGC set to %d: current() = %d", p, got)
		}
	}
}
