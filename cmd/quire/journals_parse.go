package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/quire-dev/quire/protocol"
)

// Parsers of what the multi-journal commands take from outside: times,
// offsets files and the fields of records. Each has a fuzz target.

// parseTimeFlag parses a --from or --to value: an RFC 3339 time, or a
// positive duration, meaning that long before now.
func parseTimeFlag(flag, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("%s %q: want a positive duration (that long ago), or an RFC 3339 time", flag, s)
		}
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want an RFC 3339 time (2025-05-01T12:00:00Z) or a duration before now (90m, 1h)", flag, s)
}

// parseOffsets parses an offsets file: one JSON object from journal names
// to offsets, {"a/b": 120, "a/c": 0}. Each name must be valid and given
// once, each offset a non-negative integer; nothing may follow the object.
func parseOffsets(data []byte) (map[string]int64, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	const want = `want a JSON object of journal names to offsets, {"a/b": 120}`
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", want, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%s, not %v", want, tok)
	}
	out := make(map[string]int64)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", want, err)
		}
		name, ok := tok.(string)
		if !ok { // The decoder allows only strings here; be sure.
			return nil, fmt.Errorf("%s: key %v is not a string", want, tok)
		}
		if err := protocol.ValidateJournalName(name); err != nil {
			return nil, fmt.Errorf("journal %q: %w", name, err)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("journal %q is given twice", name)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("journal %q: %w", name, err)
		}
		num, ok := tok.(json.Number)
		if !ok {
			return nil, fmt.Errorf("journal %q: offset %v is not a number", name, tok)
		}
		off, err := strconv.ParseInt(num.String(), 10, 64)
		if err != nil || off < 0 {
			return nil, fmt.Errorf("journal %q: offset %s: want a non-negative integer", name, num)
		}
		out[name] = off
	}
	if _, err := dec.Token(); err != nil { // The closing brace.
		return nil, fmt.Errorf("%s: %w", want, err)
	}
	if tok, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: found %v after the object", want, tokOrErr(tok, err))
	}
	return out, nil
}

func tokOrErr(tok json.Token, err error) any {
	if err != nil {
		return err
	}
	return tok
}

// formatOffsets is the offsets file of offsets, names sorted, one a line.
func formatOffsets(offsets map[string]int64) []byte {
	names := make([]string, 0, len(offsets))
	for n := range offsets {
		names = append(names, n)
	}
	sort.Strings(names)
	var b bytes.Buffer
	b.WriteString("{")
	for i, n := range names {
		if i > 0 {
			b.WriteString(",")
		}
		q, _ := json.Marshal(n) // A string always marshals.
		fmt.Fprintf(&b, "\n  %s: %d", q, offsets[n])
	}
	if len(names) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// readOffsetsFile reads and parses the --offsets file.
func readOffsetsFile(path string) (map[string]int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--offsets: %w", err)
	}
	offsets, err := parseOffsets(data)
	if err != nil {
		return nil, usagef("--offsets %s: %w", path, err)
	}
	return offsets, nil
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory, synced and renamed over path: a reader of path (or a
// crash) sees the old content or the new, never a part.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// recordKey is the key of a record (a line, with or without its newline)
// for --mapping: the line without its newline if field is empty, else
// the value of the record's top-level JSON field: a string's text, or any
// other value's JSON as written.
func recordKey(line []byte, field string) ([]byte, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if field == "" {
		return line, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object (--key-field %q needs one): %w", field, err)
	}
	raw, ok := obj[field]
	if !ok {
		return nil, fmt.Errorf("has no field %q", field)
	}
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("field %q: %w", field, err)
		}
		return []byte(s), nil
	}
	return raw, nil
}

// hashPick is the index, among n journals sorted by name, of the journal
// of key in --mapping hash: FNV-1a (32 bits) of key, modulo n. It is
// stable for as long as the selected journals are the same.
func hashPick(key []byte, n int) int {
	h := fnv.New32a()
	h.Write(key)
	return int(h.Sum32() % uint32(n))
}

// recordMapper chooses the journal of each record of `journals append -l`.
type recordMapper struct {
	mapping, field string
	journals       []string        // Selected, sorted by name.
	selected       map[string]bool // The same, as a set.
}

func newRecordMapper(mapping, field string, journals []string) *recordMapper {
	sorted := append([]string(nil), journals...)
	sort.Strings(sorted)
	m := &recordMapper{mapping: mapping, field: field, journals: sorted, selected: make(map[string]bool)}
	for _, j := range sorted {
		m.selected[j] = true
	}
	return m
}

// errUnmapped is wrapped by errors of records that map to no journal.
var errUnmapped = errors.New("record maps to no selected journal")

// journalOf returns the journal of record line.
func (m *recordMapper) journalOf(line []byte) (string, error) {
	key, err := recordKey(line, m.field)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errUnmapped, err)
	}
	if m.mapping == "field" {
		name := string(key)
		if !m.selected[name] {
			return "", fmt.Errorf("%w: field %q names journal %q, which the selector does not select", errUnmapped, m.field, name)
		}
		return name, nil
	}
	if len(m.journals) == 0 {
		return "", fmt.Errorf("%w: no journals are selected", errUnmapped)
	}
	return m.journals[hashPick(key, len(m.journals))], nil
}
