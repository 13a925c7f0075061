package main

import (
	"bytes"
	"maps"
	"testing"
	"time"
)

func TestParseOffsets(t *testing.T) {
	got, err := parseOffsets([]byte(` {"a/b": 120, "c": 0} `))
	if err != nil || !maps.Equal(got, map[string]int64{"a/b": 120, "c": 0}) {
		t.Errorf("parseOffsets: %v, %v", got, err)
	}
	for _, bad := range []string{``, `[]`, `{"a": -1}`, `{"a": 1.5}`, `{"a": "1"}`, `{"a": 1, "a": 2}`, `{"a//b": 1}`,
		`{"a": 1} {}`, `{"a": 1`, `{"a": 99999999999999999999}`, `{"a": {}}`} {
		if _, err := parseOffsets([]byte(bad)); err == nil {
			t.Errorf("parseOffsets(%q): no error", bad)
		}
	}
}

func TestParseTimeFlag(t *testing.T) {
	now := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	if got, err := parseTimeFlag("--from", "90m", now); err != nil || !got.Equal(now.Add(-90*time.Minute)) {
		t.Errorf("90m: %v, %v", got, err)
	}
	if got, err := parseTimeFlag("--from", "2025-05-01T10:00:00+02:00", now); err != nil || !got.Equal(now.Add(-4*time.Hour)) {
		t.Errorf("RFC 3339: %v, %v", got, err)
	}
	for _, bad := range []string{"", "0s", "-1h", "yesterday", "2025-05-01"} {
		if _, err := parseTimeFlag("--from", bad, now); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// Offsets files are outside input: parsing never panics, and what parses
// formats to a file that parses back the same.
func FuzzParseOffsets(f *testing.F) {
	for _, s := range []string{`{"a/b": 120, "c": 0}`, `{}`, `{"a": 1, "a": 2}`, `{"a":-0}`, `{"a": 1e3}`, "{\"a\\u002fb\": 7}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		offsets, err := parseOffsets(data)
		if err != nil {
			return
		}
		back, err := parseOffsets(formatOffsets(offsets))
		if err != nil || !maps.Equal(back, offsets) {
			t.Fatalf("%q parses to %v, which formats to %q, which parses to %v (%v)", data, offsets, formatOffsets(offsets), back, err)
		}
	})
}

// --from and --to: never a panic; a time given in RFC 3339 is that time.
func FuzzParseTimeFlag(f *testing.F) {
	for _, s := range []string{"1h", "90m", "2025-05-01T12:00:00Z", "2025-05-01T12:00:00.5+02:00", "-1h", "0", "9999999h"} {
		f.Add(s)
	}
	now := time.Date(2025, 5, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseTimeFlag("--from", s, now)
		if err != nil {
			return
		}
		if want, perr := time.Parse(time.RFC3339Nano, s); perr == nil && !got.Equal(want) {
			t.Fatalf("%q: %v, want %v", s, got, want)
		}
		if _, perr := time.Parse(time.RFC3339Nano, s); perr != nil && !got.Before(now) {
			t.Fatalf("%q, a duration ago, is %v: not before now", s, got)
		}
	})
}

// The record→journal mapping: never a panic; a record maps to one of the
// selected journals, the same one every time.
func FuzzRecordMapping(f *testing.F) {
	for _, s := range []string{`{"user": "u1"}`, `{"to": "map/1"}`, "plain line\n", `{"user": 12}`, `[1]`, `{"user": "\u00e9"}`} {
		f.Add([]byte(s), "user", false)
		f.Add([]byte(s), "to", true)
		f.Add([]byte(s), "", false)
	}
	journals := []string{"map/2", "map/0", "map/1"}
	f.Fuzz(func(t *testing.T, line []byte, field string, byField bool) {
		mapping := "hash"
		if byField {
			if field == "" {
				return // Refused as a flag.
			}
			mapping = "field"
		}
		m := newRecordMapper(mapping, field, journals)
		j, err := m.journalOf(line)
		if err != nil {
			return
		}
		if !m.selected[j] {
			t.Fatalf("%q maps to %q, not a selected journal", line, j)
		}
		if again, err := m.journalOf(bytes.Clone(line)); err != nil || again != j {
			t.Fatalf("%q maps to %q, then to %q (%v)", line, j, again, err)
		}
	})
}
