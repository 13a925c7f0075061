package client

import (
	"strconv"
	"sync"
)

// writers hands each append a writer name that has no other append to
// the same journal in flight, for the whole of the append and its
// retries.
//
// Why: a journal keeps only the greatest sequence number each writer
// committed (see broker.MaxWriters), so a retry is recognized only if no
// later append of its writer to that journal committed in between.
// Appends of one client that are in flight together to one journal (the
// shards of a consumer process publishing to one journal, goroutines
// sharing a client) would otherwise commit again on retry. Each gets a
// name of its own instead: the client's name, then "-N" for the Nth
// concurrent append (the first goes as the client's name alone).
//
// Invariant: a name is held by at most one append per journal at a time.
type writers struct {
	base string
	mu   sync.Mutex
	busy map[string][]bool // journal → which names are held
}

func newWriters(base string) *writers {
	return &writers{base: base, busy: make(map[string][]bool)}
}

// acquire returns the name an append to journal goes under, and the
// function that gives it back once the append is done.
func (w *writers) acquire(journal string) (name string, release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	held := w.busy[journal]
	i := 0
	for i < len(held) && held[i] {
		i++
	}
	if i == len(held) {
		held = append(held, false)
	}
	held[i] = true
	w.busy[journal] = held
	return w.name(i), func() { w.release(journal, i) }
}

func (w *writers) release(journal string, i int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	held := w.busy[journal]
	held[i] = false
	for len(held) > 0 && !held[len(held)-1] {
		held = held[:len(held)-1]
	}
	if len(held) == 0 {
		delete(w.busy, journal) // Bounded by the journals in flight.
		return
	}
	w.busy[journal] = held
}

func (w *writers) name(i int) string {
	if i == 0 {
		return w.base
	}
	return w.base + "-" + strconv.Itoa(i)
}
