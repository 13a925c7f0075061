package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/recoverylog"
)

type counts = map[string]int

func openJSON[T any](t testing.TB, fs vfs.FS, dir string) *JSONFile[T] {
	t.Helper()
	s, err := OpenJSONFile[T](fs, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustCommit(t testing.TB, s Store, cp Checkpoint) {
	t.Helper()
	if err := s.StartCommit(testContext(t), cp); err != nil {
		t.Fatal(err)
	}
}

// readVFS returns the content of name in fs, or nil if it does not exist.
func readVFS(t testing.TB, fs vfs.FS, name string) []byte {
	t.Helper()
	f, err := fs.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeVFS(t testing.TB, fs vfs.FS, name, content string) {
	t.Helper()
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func sameState(t testing.TB, what string, got, want counts) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Fatalf("%s: state %v, want %v", what, got, want)
	}
}

func TestJSONFileCommitAndReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shard", "state")
	s := openJSON[counts](t, vfs.Default, dir)
	sameCheckpoint(t, "new store", restore(t, s), Checkpoint{})
	if s.State == nil || len(s.State) != 0 {
		t.Fatalf("new store's state %#v, want an empty map", s.State)
	}

	s.State["a"], s.State["b"] = 1, 2
	mustCommit(t, s, checkpoint(1))
	sameCheckpoint(t, "after commit 1", restore(t, s), checkpoint(1))
	s.State["b"]++
	delete(s.State, "a")
	mustCommit(t, s, checkpoint(2))
	s.State["lost"] = 9 // Never committed.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	if err := s.StartCommit(testContext(t), checkpoint(3)); !errors.Is(err, ErrClosed) {
		t.Fatalf("StartCommit after Close: %v", err)
	}

	s = openJSON[counts](t, vfs.Default, dir)
	defer s.Close()
	sameCheckpoint(t, "reopened", restore(t, s), checkpoint(2))
	sameState(t, "reopened", s.State, counts{"b": 3})
	if _, err := os.Stat(filepath.Join(dir, JSONTempName)); !os.IsNotExist(err) {
		t.Fatalf("temporary file after commits: %v", err)
	}
}

func TestJSONFileStructState(t *testing.T) {
	type state struct {
		Total int
		Seen  []string
		Last  *message.Checkpoint
	}
	dir := t.TempDir()
	s := openJSON[state](t, vfs.Default, dir)
	s.State.Total = 7
	s.State.Seen = append(s.State.Seen, "x", "y")
	s.State.Last = &message.Checkpoint{Offset: 3, Read: 4}
	mustCommit(t, s, checkpoint(1))

	r := openJSON[state](t, vfs.Default, dir)
	if r.State.Total != 7 || strings.Join(r.State.Seen, ",") != "x,y" || r.State.Last.Offset != 3 || r.State.Last.Read != 4 {
		t.Fatalf("reopened state %+v", r.State)
	}
	sameCheckpoint(t, "reopened", restore(t, r), checkpoint(1))
}

func TestJSONFileRefusesBadCommit(t *testing.T) {
	dir := t.TempDir()
	s := openJSON[map[string]any](t, vfs.Default, dir)
	s.State["a"] = 1.0
	mustCommit(t, s, checkpoint(1))
	committed := readVFS(t, vfs.Default, filepath.Join(dir, JSONFileName))
	s.State["a"] = 2.0

	bad := checkpoint(2)
	bad.Sources["src/a"] = message.Checkpoint{Offset: 10, Read: 5}
	if err := s.StartCommit(testContext(t), bad); err == nil {
		t.Fatal("an invalid checkpoint was committed")
	}
	noIntent := checkpoint(2)
	noIntent.AckIntents[0].Intent = nil
	if err := s.StartCommit(testContext(t), noIntent); err == nil {
		t.Fatal("an empty ack intent was committed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.StartCommit(ctx, checkpoint(2)); !errors.Is(err, context.Canceled) {
		t.Fatalf("commit with a cancelled context: %v", err)
	}
	s.State["nan"] = math.NaN()
	err := s.StartCommit(testContext(t), checkpoint(2))
	if err == nil || !strings.Contains(err.Error(), "does not marshal") {
		t.Fatalf("commit of a state that does not marshal: %v", err)
	}
	delete(s.State, "nan")

	// Nothing was written, and the store has not failed.
	if got := readVFS(t, vfs.Default, filepath.Join(dir, JSONFileName)); !bytes.Equal(got, committed) {
		t.Fatalf("refused commits changed the file:\n%s\nwas\n%s", got, committed)
	}
	if got := readVFS(t, vfs.Default, filepath.Join(dir, JSONTempName)); got != nil {
		t.Fatalf("refused commits left a temporary file: %s", got)
	}
	sameCheckpoint(t, "after refused commits", restore(t, s), checkpoint(1))
	mustCommit(t, s, checkpoint(3))
	r := openJSON[map[string]any](t, vfs.Default, dir)
	sameCheckpoint(t, "reopened", restore(t, r), checkpoint(3))
	if r.State["a"] != 2.0 {
		t.Fatalf("reopened state %v", r.State)
	}
}

func TestJSONFileRemovesLeftoverTemp(t *testing.T) {
	dir := t.TempDir()
	s := openJSON[counts](t, vfs.Default, dir)
	s.State["a"] = 1
	mustCommit(t, s, checkpoint(1))
	// A crash while writing the next commit leaves a partial temporary
	// file, never renamed.
	tmp := filepath.Join(dir, JSONTempName)
	writeVFS(t, vfs.Default, tmp, `{"state":{"a":2},"check`)

	r := openJSON[counts](t, vfs.Default, dir)
	sameCheckpoint(t, "reopened", restore(t, r), checkpoint(1))
	sameState(t, "reopened", r.State, counts{"a": 1})
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("leftover temporary file was not removed: %v", err)
	}
	r.State["a"] = 3
	mustCommit(t, r, checkpoint(2))
	sameState(t, "after commit", openJSON[counts](t, vfs.Default, dir).State, counts{"a": 3})
}

func TestJSONFileBadFiles(t *testing.T) {
	valid := fmt.Sprintf(`{"state":{"a":1},"checkpoint":%s}`, mustCheckpointJSON(t, checkpoint(1)))
	for _, tc := range []struct{ name, content, want string }{
		{"empty", "", "EOF"},
		{"not json", "{not json", "invalid character"},
		{"truncated", valid[:len(valid)-5], "unexpected EOF"},
		{"trailing data", valid + ` {}`, "data after the object"},
		{"no checkpoint", `{"state":{}}`, `lacks "state" or "checkpoint"`},
		{"no state", `{"checkpoint":{}}`, `lacks "state" or "checkpoint"`},
		{"null checkpoint", `{"state":{},"checkpoint":null}`, `"checkpoint" is null`},
		{"unknown field", `{"state":{},"checkpoint":{},"extra":1}`, `unknown field "extra"`},
		{"array", `[1,2]`, "cannot unmarshal array"},
		{"state of another type", `{"state":"text","checkpoint":{}}`, "does not decode into map[string]int"},
		{"invalid checkpoint", `{"state":{},"checkpoint":{"sources":{"":{}}}}`, "empty journal name"},
		{"checkpoint of another type", `{"state":{},"checkpoint":[]}`, "committed checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			name := filepath.Join(dir, JSONFileName)
			writeVFS(t, vfs.Default, name, tc.content)
			_, err := OpenJSONFile[counts](vfs.Default, dir)
			if err == nil {
				t.Fatalf("opened a store from %q", tc.content)
			}
			if !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name the file %s and %q", err, name, tc.want)
			}
			if got := readVFS(t, vfs.Default, name); string(got) != tc.content {
				t.Fatalf("the bad file was changed to %q", got)
			}
		})
	}
	if _, err := OpenJSONFile[counts](nil, t.TempDir()); err == nil {
		t.Fatal("opened a store without a file system")
	}
	if _, err := OpenJSONFile[counts](vfs.Default, ""); err == nil {
		t.Fatal("opened a store without a directory")
	}
}

func mustCheckpointJSON(t testing.TB, cp Checkpoint) string {
	t.Helper()
	b, err := marshalCheckpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hookFS calls before ahead of each file operation that a commit makes
// (create, write, sync, close, rename, remove, directory sync); an error
// from it fails the operation.
type hookFS struct {
	vfs.FS
	before func(op string) error
}

func (h *hookFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := h.before("create " + filepath.Base(name)); err != nil {
		return nil, err
	}
	f, err := h.FS.Create(name, c)
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, h: h, name: filepath.Base(name)}, nil
}

func (h *hookFS) Rename(oldname, newname string) error {
	if err := h.before("rename " + filepath.Base(oldname)); err != nil {
		return err
	}
	return h.FS.Rename(oldname, newname)
}

func (h *hookFS) Remove(name string) error {
	if err := h.before("remove " + filepath.Base(name)); err != nil {
		return err
	}
	return h.FS.Remove(name)
}

func (h *hookFS) OpenDir(name string) (vfs.File, error) {
	f, err := h.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, h: h, name: "dir"}, nil
}

type hookFile struct {
	vfs.File
	h    *hookFS
	name string
}

func (f *hookFile) Write(p []byte) (int, error) {
	if err := f.h.before("write " + f.name); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *hookFile) Sync() error {
	if err := f.h.before("sync " + f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *hookFile) Close() error {
	if err := f.h.before("close " + f.name); err != nil {
		f.File.Close()
		return err
	}
	return f.File.Close()
}

// TestJSONFileCrashAtEveryStep crashes a commit before each of its file
// operations (and after the last), keeping all, none or a random part of
// what was not synced: the store must reopen with the state and
// checkpoint of the commit before, or of the one being made, never a mix,
// and with the new one once StartCommit has returned.
func TestJSONFileCrashAtEveryStep(t *testing.T) {
	mem := vfs.NewCrashableMem()
	var crashes []*vfs.MemFS
	var ops []string
	rng := rand.New(rand.NewPCG(1, 2))
	crash := func(op string) error {
		ops = append(ops, op)
		for _, pct := range []int{0, 50, 100} {
			crashes = append(crashes, mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rng}))
		}
		return nil
	}
	fs := &hookFS{FS: mem, before: func(string) error { return nil }}
	const dir = "/shard/state"
	s := openJSON[counts](t, fs, dir)
	before := counts{}
	for txn := 1; txn <= 3; txn++ {
		s.State[fmt.Sprintf("k%d", txn)] = txn
		s.State["total"] += txn
		crashes, ops = nil, nil
		fs.before = crash
		mustCommit(t, s, checkpoint(txn))
		fs.before = func(string) error { return nil }
		if err := crash("after commit"); err != nil {
			t.Fatal(err)
		}
		t.Logf("commit %d: %s", txn, strings.Join(ops, ", "))

		for i, c := range crashes {
			r, err := OpenJSONFile[counts](c, dir)
			if err != nil {
				t.Fatalf("commit %d, crash %d (before %s): %v", txn, i, ops[i/3], err)
			}
			cp := restore(t, r)
			switch {
			case i >= len(crashes)-3:
				sameCheckpoint(t, "crash after the commit returned", cp, checkpoint(txn))
				sameState(t, "crash after the commit returned", r.State, s.State)
			case txn > 1 && (cp.AckIntents == nil || string(cp.AckIntents[0].Intent) != fmt.Sprintf("ack-%d", txn)):
				sameCheckpoint(t, fmt.Sprintf("crash before %s", ops[i/3]), cp, checkpoint(txn-1))
				sameState(t, fmt.Sprintf("crash before %s", ops[i/3]), r.State, before)
			case txn == 1 && cp.Sources == nil:
				sameState(t, fmt.Sprintf("crash before %s", ops[i/3]), r.State, counts{})
			default:
				sameCheckpoint(t, fmt.Sprintf("crash before %s", ops[i/3]), cp, checkpoint(txn))
				sameState(t, fmt.Sprintf("crash before %s", ops[i/3]), r.State, s.State)
			}
		}
		before = maps.Clone(s.State)
	}
}

// TestJSONFileFailedCommitIsSticky fails each file operation of a commit
// in turn: StartCommit fails, as does every later call, and the store
// reopens with the state and checkpoint of one commit or the other.
func TestJSONFileFailedCommitIsSticky(t *testing.T) {
	for _, failing := range []string{
		"create " + JSONTempName, "write " + JSONTempName, "sync " + JSONTempName,
		"close " + JSONTempName, "rename " + JSONTempName, "sync dir",
	} {
		t.Run(failing, func(t *testing.T) {
			injected := errors.New("injected failure")
			fs := &hookFS{FS: vfs.Default, before: func(string) error { return nil }}
			dir := t.TempDir()
			s := openJSON[counts](t, fs, dir)
			s.State["a"] = 1
			mustCommit(t, s, checkpoint(1))

			s.State["a"] = 2
			fs.before = func(op string) error {
				if op == failing {
					return injected
				}
				return nil
			}
			if err := s.StartCommit(testContext(t), checkpoint(2)); !errors.Is(err, injected) {
				t.Fatalf("commit failing at %s: %v", failing, err)
			}
			fs.before = func(string) error { return nil }
			if err := s.StartCommit(testContext(t), checkpoint(3)); !errors.Is(err, injected) {
				t.Fatalf("commit after a failed one: %v", err)
			}
			if _, err := s.RestoreCheckpoint(testContext(t)); !errors.Is(err, injected) {
				t.Fatalf("RestoreCheckpoint after a failed commit: %v", err)
			}

			r := openJSON[counts](t, vfs.Default, dir)
			cp := restore(t, r)
			if failing == "sync dir" { // Renamed, so committed here.
				sameCheckpoint(t, "reopened", cp, checkpoint(2))
				sameState(t, "reopened", r.State, counts{"a": 2})
			} else {
				sameCheckpoint(t, "reopened", cp, checkpoint(1))
				sameState(t, "reopened", r.State, counts{"a": 1})
			}
			if _, err := os.Stat(filepath.Join(dir, JSONTempName)); !os.IsNotExist(err) {
				t.Fatalf("temporary file after reopening: %v", err)
			}
		})
	}
}

// TestJSONFileRecordedAndPlayed records a store through a Recorder, plays
// the log (without closing anything, as after a crash) into a fresh
// directory and reopens the store there; then records on from the
// player's state, as a new primary would, and plays again.
func TestJSONFileRecordedAndPlayed(t *testing.T) {
	const journal = "recovery/jsonfile"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "state")
	s := openJSON[counts](t, newRecorder(t, cl, journal, dir), dir)
	model := counts{}
	for txn := 1; txn <= 10; txn++ {
		for i := range 50 {
			k := fmt.Sprintf("key-%03d", (txn*37+i*13)%200)
			s.State[k] += txn
			model[k] += txn
		}
		mustCommit(t, s, checkpoint(txn))
	}
	s.State["uncommitted"] = 1

	play := func(what string, fsm **recoverylog.FSM) string {
		t.Helper()
		played := filepath.Join(t.TempDir(), what)
		pl, err := recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: cl, Journal: journal, Dir: played})
		if err != nil {
			t.Fatal(err)
		}
		if err := pl.Play(testContext(t)); err != nil {
			t.Fatal(err)
		}
		*fsm = pl.FSM()
		return played
	}
	var fsm *recoverylog.FSM
	played := play("played", &fsm)
	r := openJSON[counts](t, vfs.Default, played)
	sameCheckpoint(t, "played", restore(t, r), checkpoint(10))
	sameState(t, "played", r.State, model)

	// A new primary records on from the player's directory; the old one
	// is fenced.
	rec, err := recoverylog.NewRecorder(testContext(t), recoverylog.RecorderConfig{
		Client: cl, Journal: journal, Author: "store-test-2", Dir: played, FSM: fsm})
	if err != nil {
		t.Fatal(err)
	}
	n := openJSON[counts](t, rec, played)
	n.State["next"] = 11
	mustCommit(t, n, checkpoint(11))
	if err := s.StartCommit(testContext(t), checkpoint(11)); !errors.Is(err, recoverylog.ErrFenced) {
		t.Fatalf("commit of the deposed primary: %v, want recoverylog.ErrFenced", err)
	}

	again := play("again", &fsm)
	a := openJSON[counts](t, vfs.Default, again)
	model["next"] = 11
	sameCheckpoint(t, "played again", restore(t, a), checkpoint(11))
	sameState(t, "played again", a.State, model)
}

// TestJSONFileRecordedLeftoverTemp records a commit that fails after its
// temporary file was synced (so the file is in the recovery log) but
// before its rename: a new primary, recording on from the played
// directory, removes the file and continues from the commit before.
func TestJSONFileRecordedLeftoverTemp(t *testing.T) {
	const journal = "recovery/jsonfile-leftover"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "state")
	injected := errors.New("injected failure")
	fs := &hookFS{FS: newRecorder(t, cl, journal, dir), before: func(string) error { return nil }}
	s := openJSON[counts](t, fs, dir)
	s.State["a"] = 1
	mustCommit(t, s, checkpoint(1))
	s.State["a"] = 2
	fs.before = func(op string) error {
		if op == "rename "+JSONTempName {
			return injected
		}
		return nil
	}
	if err := s.StartCommit(testContext(t), checkpoint(2)); !errors.Is(err, injected) {
		t.Fatalf("commit failing at its rename: %v", err)
	}

	played := filepath.Join(t.TempDir(), "played")
	pl, err := recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: cl, Journal: journal, Dir: played})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(played, JSONTempName)); err != nil {
		t.Fatalf("the synced temporary file was not played: %v", err)
	}
	rec, err := recoverylog.NewRecorder(testContext(t), recoverylog.RecorderConfig{
		Client: cl, Journal: journal, Author: "store-test-2", Dir: played, FSM: pl.FSM()})
	if err != nil {
		t.Fatal(err)
	}
	n := openJSON[counts](t, rec, played)
	sameCheckpoint(t, "new primary", restore(t, n), checkpoint(1))
	sameState(t, "new primary", n.State, counts{"a": 1})
	n.State["a"] = 3
	mustCommit(t, n, checkpoint(3))

	again := filepath.Join(t.TempDir(), "again")
	pl, err = recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: cl, Journal: journal, Dir: again})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if paths := pl.FSM().Paths(); len(paths) != 1 || paths[0] != JSONFileName {
		t.Fatalf("played files %q, want only %s", paths, JSONFileName)
	}
	a := openJSON[counts](t, vfs.Default, again)
	sameCheckpoint(t, "played again", restore(t, a), checkpoint(3))
	sameState(t, "played again", a.State, counts{"a": 3})
}
