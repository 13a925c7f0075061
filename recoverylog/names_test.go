package recoverylog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// stallingFS is a file system whose removal or creation (op) of the file
// named stall waits until release is closed, as an unlink of a large file
// or a create behind a busy file-system journal can take tens of
// milliseconds.
type stallingFS struct {
	vfs.FS
	op, stall string
	stalled   chan struct{} // Closed once the stalling call has begun.
	release   chan struct{}
}

func (fs *stallingFS) wait(op, name string) {
	if op == fs.op && filepath.Base(name) == fs.stall {
		close(fs.stalled)
		<-fs.release
	}
}

func (fs *stallingFS) Remove(name string) error {
	fs.wait("remove", name)
	return fs.FS.Remove(name)
}

func (fs *stallingFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	fs.wait("create", name)
	return fs.FS.Create(name, category)
}

// While the file system takes its time to remove or create one file,
// writes to open files and their syncs go on: Pebble's background removal
// of an obsolete file, or creation of a compaction's output, does not hold
// up the commits to its write-ahead log. The log then holds both.
func TestSlowNameChangesDoNotHoldUpSyncs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(rec *Recorder, path string) error
		// played says whether the stalled file exists once played.
		played bool
	}{
		{"remove", func(rec *Recorder, path string) error { return rec.Remove(path) }, false},
		{"create", func(rec *Recorder, path string) error { return writeFile(rec, path, "slow", false) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			journal := "recovery/slow-" + tc.name
			cl := cluster(t, journal)
			dir := t.TempDir()
			fs := &stallingFS{FS: vfs.Default, op: tc.name, stall: "slow", stalled: make(chan struct{}), release: make(chan struct{})}
			rec, err := NewRecorder(testContext(t), RecorderConfig{Client: cl, Journal: journal, Author: "r1", Dir: dir, Base: fs})
			if err != nil {
				t.Fatal(err)
			}
			slow := filepath.Join(dir, "slow")
			fast, err := rec.Create(filepath.Join(dir, "fast"), vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			defer fast.Close()
			if tc.name == "remove" {
				if err := writeFile(rec, slow, "slow", true); err != nil {
					t.Fatal(err)
				}
			}

			var wg sync.WaitGroup
			var changeErr error
			wg.Go(func() { changeErr = tc.change(rec, slow) })
			defer func() {
				select {
				case <-fs.release:
				default:
					close(fs.release)
				}
				wg.Wait()
			}()
			<-fs.stalled

			// With the change stalled: a write and its sync, which would
			// wait for the change if it held the recorder's lock.
			synced := make(chan error, 1)
			wg.Go(func() {
				if _, err := fast.Write([]byte("fast")); err != nil {
					synced <- err
					return
				}
				synced <- fast.Sync()
			})
			select {
			case err := <-synced:
				if err != nil {
					t.Fatal(err)
				}
			case <-testContext(t).Done():
				t.Fatal("the sync of another file waited for the stalled change")
			}
			close(fs.release)
			wg.Wait()
			if changeErr != nil {
				t.Fatal(changeErr)
			}
			if err := rec.Sync(); err != nil {
				t.Fatal(err)
			}

			played, _ := play(t, cl, journal)
			if got, err := os.ReadFile(filepath.Join(played, "fast")); err != nil || string(got) != "fast" {
				t.Errorf("played fast: %q, %v; want %q", got, err, "fast")
			}
			_, err = os.Stat(filepath.Join(played, "slow"))
			if exists := err == nil; exists != tc.played {
				t.Errorf("played slow exists: %v (%v); want %v", exists, err, tc.played)
			}
		})
	}
}

// A write-ahead log that Pebble recycles is the old file renamed and
// written over locally, and a new file in the log: the played file holds
// what was written to it and nothing of the old one, and the old name is
// gone. A file still open for writing is not reused: what its writer
// writes after goes nowhere that a player sees, and the new file starts
// empty locally too.
func TestReuseForWrite(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(map[bool]string{false: "closed", true: "open"}[open], func(t *testing.T) {
			journal := fmt.Sprintf("recovery/reuse-%v", open)
			cl := cluster(t, journal)
			dir := t.TempDir()
			rec := newRecorder(t, cl, journal, dir, "r1", nil)
			old, recycled := filepath.Join(dir, "000001.log"), filepath.Join(dir, "000002.log")
			var w vfs.File
			if open {
				var err error
				if w, err = rec.Create(old, vfs.WriteCategoryUnspecified); err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if _, err := w.Write([]byte("old")); err != nil {
					t.Fatal(err)
				}
			} else if err := writeFile(rec, old, "the old log, longer than the new one", true); err != nil {
				t.Fatal(err)
			}
			f, err := rec.ReuseForWrite(old, recycled, vfs.WriteCategoryUnspecified)
			if err != nil {
				t.Fatal(err)
			}
			if open {
				if _, err := w.Write([]byte(" and more")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.Write([]byte("new log")); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if err := rec.Err(); err != nil {
				t.Fatal(err)
			}

			// Reused, the local file may hold stale bytes past what was
			// written; created anew, it holds only that.
			local, err := os.ReadFile(recycled)
			if err != nil || !strings.HasPrefix(string(local), "new log") || open && string(local) != "new log" {
				t.Errorf("local %s: %q, %v; want %q (and nothing more if not reused)", recycled, local, err, "new log")
			}
			if _, err := os.Stat(old); !os.IsNotExist(err) {
				t.Errorf("local %s after its reuse: %v; want it gone", old, err)
			}
			played, _ := play(t, cl, journal)
			if got, err := os.ReadFile(filepath.Join(played, "000002.log")); err != nil || string(got) != "new log" {
				t.Errorf("played 000002.log: %q, %v; want %q", got, err, "new log")
			}
			if _, err := os.Stat(filepath.Join(played, "000001.log")); !os.IsNotExist(err) {
				t.Errorf("played 000001.log: %v; want it gone", err)
			}
		})
	}
}
