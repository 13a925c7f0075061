package recoverylog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The writer makes writes and truncates in the order queued, recycles
// the op bodies it is given, and reports the first failure from then on.
func TestDirWriter(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b, c := open("a"), open("b"), open("c")
	w := newDirWriter()
	bodies := map[*byte]bool{} // Those the op reader was given, by first byte.
	var body []byte
	write := func(f *os.File, data string, offset int64, complete bool) {
		t.Helper()
		body = append(body[:0], "header:"+data...)
		bodies[&body[0]] = true
		var err error
		if body, err = w.writeAt(f, 1, body, body[len("header:"):], offset, complete); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		write(a, "aaaa", int64(4*i), false)
		write(b, "bb", int64(2*i), i == 99)
	}
	for i := range 1000 { // Runs of writes that continue each other.
		write(c, fmt.Sprintf("%03d,", i), int64(4*i), false)
	}
	if err := w.truncate(a, 1, 6); err != nil {
		t.Fatal(err)
	}
	write(a, "xyz", 5, true)
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(a.Name()); string(got) != "aaaaaxyz" {
		t.Errorf("a holds %q, want %q", got, "aaaaaxyz")
	}
	if got, _ := os.ReadFile(b.Name()); len(got) != 200 {
		t.Errorf("b holds %d bytes, want 200", len(got))
	}
	var want strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&want, "%03d,", i)
	}
	if got, _ := os.ReadFile(c.Name()); string(got) != want.String() {
		t.Errorf("c holds %.40q..., want %.40q...", got, want.String())
	}
	if len(bodies) > dirWriterBodies {
		t.Errorf("%d bodies came back, more than the %d the writer holds", len(bodies), dirWriterBodies)
	}

	a.Close()
	write(a, "late", 0, false) // Fails in the goroutine.
	err := w.wait()
	if !errors.Is(err, os.ErrClosed) {
		t.Fatalf("writing a closed file: %v, want os.ErrClosed", err)
	}
	if _, err := w.writeAt(b, 1, nil, []byte("x"), 0, false); !errors.Is(err, os.ErrClosed) {
		t.Errorf("a write after the failure: %v, want the failure", err)
	}
	if err := w.close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("close: %v, want the failure", err)
	}
}
