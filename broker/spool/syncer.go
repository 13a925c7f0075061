package spool

import "sync"

// Syncer shares flushes among concurrent callers (group commit): Sync
// returns once a flush that began after the call has completed, and
// callers arriving while a flush runs share the next one. Its zero value
// is ready to use.
type Syncer struct {
	mu      sync.Mutex
	cond    sync.Cond
	running bool
	started uint64 // generation of the last flush begun
	done    uint64 // generation of the last flush completed
	err     error  // of the last flush completed
	waiting int    // callers waiting on cond
	Flushes uint64 // flushes run, for metrics and tests
}

// Sync returns once flush, started after this call, has completed, and its
// error. Concurrent callers pass the same flush.
func (g *Syncer) Sync(flush func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cond.L == nil {
		g.cond.L = &g.mu
	}
	// A flush running now may have begun before our write: wait for the
	// one after it.
	target := g.started + 1
	for g.done < target {
		if g.running {
			g.waiting++
			g.cond.Wait()
			g.waiting--
			continue
		}
		g.running = true
		g.started++
		gen := g.started
		g.mu.Unlock()
		err := flush()
		g.mu.Lock()
		g.running, g.done, g.err = false, gen, err
		g.Flushes++
		g.cond.Broadcast()
	}
	return g.err
}
