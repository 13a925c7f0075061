package allocator

import (
	"errors"
	"sync/atomic"
)

// Phase is where a member's process is in its life, as a readiness probe
// reports it. A process moves through the phases in order, and may skip
// some (a drain before the announcement, say), but never goes back.
type Phase int32

const (
	// Starting: the process loads its view of etcd and recovers what it
	// left on disk.
	Starting Phase = iota
	// Announcing: Run waits to hold the member key under its own lease.
	Announcing
	// Serving: announced; the process serves its assignments. The only
	// phase in which it is ready.
	Serving
	// Draining: handing its items to other members before it exits.
	Draining
	// Stopped: Run returned.
	Stopped
)

var phaseNames = [...]string{"starting", "announcing", "serving", "draining", "stopped"}

func (p Phase) String() string {
	if p < 0 || int(p) >= len(phaseNames) {
		return "unknown"
	}
	return phaseNames[p]
}

// Why a process is not ready, by phase.
var notReady = map[Phase]error{
	Starting:   errors.New("starting: loading its view of etcd"),
	Announcing: errors.New("announcing: waiting to hold its member key under its own lease"),
	Draining:   errors.New("draining: handing its items to other members"),
	Stopped:    errors.New("stopped"),
}

// Lifecycle is a process's current Phase, safe for concurrent use. Its
// zero value is Starting. Run advances the Lifecycle of its MemberConfig;
// the process sets Stopped once it stops.
type Lifecycle struct{ phase atomic.Int32 }

// Phase returns the current phase.
func (l *Lifecycle) Phase() Phase { return Phase(l.phase.Load()) }

// Advance moves to phase p, unless the lifecycle is already past it.
func (l *Lifecycle) Advance(p Phase) {
	for {
		cur := l.phase.Load()
		if Phase(cur) >= p || l.phase.CompareAndSwap(cur, int32(p)) {
			return
		}
	}
}

// Ready returns nil while serving, and otherwise why the process is not
// ready.
func (l *Lifecycle) Ready() error {
	return notReady[l.Phase()]
}
