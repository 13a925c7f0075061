package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Names of a JSONFile store's files in its directory.
const (
	// JSONFileName is the committed document.
	JSONFileName = "state.json"
	// JSONTempName is the document being committed; it replaces
	// JSONFileName by a rename, and one left by a crash is removed on
	// open.
	JSONTempName = "state.json.tmp"
)

// JSONFile is a store for small state: the application's state is a Go
// value, State, that it reads and writes as it likes, and each
// StartCommit writes the whole of it, with the checkpoint, as one JSON
// document (jsonDocument). The document is written to a temporary file,
// synced, and renamed over the committed one, and the directory is synced:
// a crash at any point leaves either the old document or the new one. So
// every commit costs the whole state's size: use it for state of a few
// MiB at most, and Pebble beyond.
//
// Its file operations go through a vfs.FS and are only those that a
// recoverylog.Recorder records (create, appending writes, sync, rename,
// remove): in production fs is the shard's Recorder, and a commit is in
// the recovery log when StartCommit returns.
//
// Changes to State take effect in memory at once and are durable only once
// committed; Close discards the uncommitted ones, as does a crash.
type JSONFile[T any] struct {
	// State is the application's state: the committed one after
	// OpenJSONFile, the zero T for a new store (an empty map, if T is a
	// map type), then as the application changes it.
	State T

	fs  vfs.FS
	dir string
	cp  []byte // JSON of the committed checkpoint; nil if none.
	// err is sticky: set when a commit failed midway and what is on disk
	// is unknown to the store, or on Close.
	err error
}

var _ Store = (*JSONFile[map[string]int])(nil)

// jsonDocument is the content of a JSONFile store's file.
type jsonDocument struct {
	State      json.RawMessage `json:"state"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// OpenJSONFile opens (or creates) the JSONFile store in dir over fs,
// creating dir if needed. It removes a temporary file that a crash left,
// and reads the committed document if there is one; a document that is
// not valid JSON of the expected shape, or whose checkpoint is invalid, is
// an error naming the file.
func OpenJSONFile[T any](fs vfs.FS, dir string) (*JSONFile[T], error) {
	if fs == nil {
		return nil, errors.New("store: OpenJSONFile: fs is required")
	}
	if dir == "" {
		return nil, errors.New("store: OpenJSONFile: dir is required")
	}
	s := &JSONFile[T]{fs: fs, dir: dir}
	if err := makeDir(fs, dir); err != nil {
		return nil, err
	}
	if err := s.removeTemp(); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	makeMap(&s.State)
	return s, nil
}

// makeDir creates a store's directory dir and any missing parents, and
// syncs the parent of each directory it created, so that a commit into it
// survives a crash.
func makeDir(fs vfs.FS, dir string) error {
	var missing []string
	for d := dir; ; {
		if _, err := fs.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("store: directory %s: %w", d, err)
		}
		missing = append(missing, d)
		if parent := fs.PathDir(d); parent != d {
			d = parent
		} else {
			break
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("store: creating directory %s: %w", dir, err)
	}
	for _, d := range missing {
		if err := syncDir(fs, fs.PathDir(d)); err != nil {
			return fmt.Errorf("store: creating directory %s: %w", dir, err)
		}
	}
	return nil
}

// removeTemp removes a temporary file left by a commit that a crash
// interrupted: it was never renamed, so it is not the committed state.
func (s *JSONFile[T]) removeTemp() error {
	tmp := s.fs.PathJoin(s.dir, JSONTempName)
	if err := s.fs.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: removing leftover %s: %w", tmp, err)
	}
	return nil
}

// load reads the committed document, if any, into s.
func (s *JSONFile[T]) load() error {
	name := s.fs.PathJoin(s.dir, JSONFileName)
	f, err := s.fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("store: opening %s: %w", name, err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("store: reading %s: %w", name, err)
	}
	doc, err := decodeDocument(b)
	if err != nil {
		return fmt.Errorf("store: %s: %w", name, err)
	}
	if err := json.Unmarshal(doc.State, &s.State); err != nil {
		return fmt.Errorf("store: %s: state does not decode into %T: %w", name, s.State, err)
	}
	if _, err := unmarshalCheckpoint(doc.Checkpoint); err != nil {
		return fmt.Errorf("store: %s: %w", name, err)
	}
	s.cp = doc.Checkpoint
	return nil
}

// decodeDocument decodes a committed document strictly: one JSON object
// with both fields and no others, and nothing after it. The state's own
// decoding is left to encoding/json's usual rules.
func decodeDocument(b []byte) (jsonDocument, error) {
	var doc jsonDocument
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return doc, fmt.Errorf("not a JSONFile document (%d bytes): %w", len(b), err)
	}
	if dec.More() {
		return doc, fmt.Errorf("not a JSONFile document: data after the object at byte %d", dec.InputOffset())
	}
	if doc.State == nil || doc.Checkpoint == nil {
		return doc, errors.New(`not a JSONFile document: it lacks "state" or "checkpoint"`)
	}
	// A commit always writes a checkpoint object; null would otherwise
	// decode as the zero checkpoint and hide the damage.
	if bytes.Equal(doc.Checkpoint, []byte("null")) {
		return doc, errors.New(`not a JSONFile document: "checkpoint" is null`)
	}
	return doc, nil
}

// makeMap sets *v to an empty map if it is a nil map, so that an
// application whose state is a map can write into it at once.
func makeMap[T any](v *T) {
	rv := reflect.ValueOf(v).Elem()
	if rv.Kind() == reflect.Map && rv.IsNil() {
		rv.Set(reflect.MakeMap(rv.Type()))
	}
}

// RestoreCheckpoint returns the committed checkpoint.
func (s *JSONFile[T]) RestoreCheckpoint(ctx context.Context) (Checkpoint, error) {
	if s.err != nil {
		return Checkpoint{}, s.err
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	if s.cp == nil {
		return Checkpoint{}, nil
	}
	return unmarshalCheckpoint(s.cp)
}

// StartCommit writes State and cp as the committed document and returns
// once it is durable (synced, and renamed into place in a synced
// directory). An invalid cp, a State that does not marshal to JSON, or a
// done ctx is refused before anything is written, and the store stays as
// it was. If writing fails, the store fails: every later call returns
// that error, and the shard must be recovered (the store reopened, or
// played again from the recovery log) to know what was committed.
func (s *JSONFile[T]) StartCommit(ctx context.Context, cp Checkpoint) error {
	if s.err != nil {
		return s.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	cpJSON, err := marshalCheckpoint(cp)
	if err != nil {
		return err
	}
	state, err := json.Marshal(s.State)
	if err != nil {
		return fmt.Errorf("store: JSONFile state %T does not marshal to JSON: %w", s.State, err)
	}
	doc, err := json.Marshal(jsonDocument{State: state, Checkpoint: cpJSON})
	if err != nil {
		return fmt.Errorf("store: marshalling JSONFile document: %w", err)
	}
	if err := s.write(doc); err != nil {
		s.err = fmt.Errorf("store: commit to %s: %w", s.dir, err)
		return s.err
	}
	s.cp = cpJSON
	return nil
}

// write replaces the committed document with doc, durably: in the order
// that leaves either the old document or the new one after a crash.
func (s *JSONFile[T]) write(doc []byte) error {
	tmp := s.fs.PathJoin(s.dir, JSONTempName)
	if err := s.writeTemp(tmp, doc); err != nil {
		return err
	}
	if err := s.fs.Rename(tmp, s.fs.PathJoin(s.dir, JSONFileName)); err != nil {
		return fmt.Errorf("renaming %s: %w", JSONTempName, err)
	}
	// The rename is durable (and in the recovery log) once the directory
	// is synced.
	if err := syncDir(s.fs, s.dir); err != nil {
		return err
	}
	return recorderErr(s.fs)
}

// writeTemp creates tmp (replacing any) with content doc, synced.
func (s *JSONFile[T]) writeTemp(tmp string, doc []byte) error {
	f, err := s.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("creating %s: %w", JSONTempName, err)
	}
	// vfs.File.Write may modify its argument; doc is not used after.
	if _, err := f.Write(doc); err != nil {
		f.Close()
		return fmt.Errorf("writing %d bytes to %s: %w", len(doc), JSONTempName, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", JSONTempName, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", JSONTempName, err)
	}
	return nil
}

// syncDir syncs the directory dir of fs: over a Recorder, this also
// appends the pending ops to the recovery log.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("opening directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("closing directory %s: %w", dir, err)
	}
	return nil
}

// Close discards uncommitted changes to State. The store holds no open
// file between calls, so there is nothing else to release.
func (s *JSONFile[T]) Close() error {
	if errors.Is(s.err, ErrClosed) {
		return ErrClosed
	}
	var zero T
	s.err, s.State, s.cp = ErrClosed, zero, nil
	return nil
}
