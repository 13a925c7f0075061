package auth

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// recheck is how often files are read again for a change; a variable, for
// tests.
var recheck = time.Second

// watched is the value parsed from a file, parsed again when the file's
// content changes. A change that does not parse (a file caught half
// written, say) keeps the value before it, and is logged once.
type watched[T any] struct {
	path  string
	parse func([]byte) (T, error)
	what  string // what the file holds, for logs: "keys", "token".

	mu        sync.Mutex
	value     T
	content   []byte // the content value was parsed from.
	failed    []byte // the last content that did not parse.
	checkedAt time.Time
}

func watch[T any](path, what string, parse func([]byte) (T, error)) (*watched[T], error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	v, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, path, err)
	}
	return &watched[T]{path: path, parse: parse, what: what, value: v, content: data, checkedAt: time.Now()}, nil
}

// get returns the value, first reading the file again if it was not read
// for recheck. changed tells whether the value is a new one.
func (w *watched[T]) get() (v T, changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.checkedAt) < recheck {
		return w.value, false
	}
	w.checkedAt = time.Now()
	data, err := os.ReadFile(w.path)
	if err != nil || bytes.Equal(data, w.content) || bytes.Equal(data, w.failed) {
		if err != nil && w.failed == nil {
			w.failed = []byte{}
			slog.Warn("auth: a file no longer reads; still using what it held", "what", w.what, "file", w.path, "err", err)
		}
		return w.value, false
	}
	next, err := w.parse(data)
	if err != nil {
		w.failed = data
		slog.Warn("auth: a changed file does not parse; still using what it held before", "what", w.what, "file", w.path, "err", err)
		return w.value, false
	}
	w.value, w.content, w.failed = next, data, nil
	slog.Info("auth: file reloaded", "what", w.what, "file", w.path)
	return w.value, true
}
