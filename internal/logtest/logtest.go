// Package logtest keeps what servers log in a test, as JSON records the
// test can read back: tests of what operators see in logs (a failover's
// transitions, an allocator's rounds) read them while servers write.
package logtest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Record is one logged record: its fields, "level" and "msg" among them.
type Record map[string]any

// Msg is the record's message.
func (r Record) Msg() string { s, _ := r["msg"].(string); return s }

// Log is a JSON log safe for concurrent writers. Its zero value is empty.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Logger returns a logger that writes records at level and above to l.
func (l *Log) Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: level}))
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String is everything logged so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Records returns the records logged so far at level info and above,
// with every field in match equal, in order. A line that is not JSON
// fails the test.
func (l *Log) Records(t testing.TB, match Record) []Record {
	t.Helper()
	var out []Record
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["level"] != "DEBUG" && matches(r, match) {
			out = append(out, r)
		}
	}
	return out
}

func matches(r, match Record) bool {
	for k, v := range match {
		if r[k] != v {
			return false
		}
	}
	return true
}
