package recoverylog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/labels"
)

// smallFlights makes the recorder cut its stream into tiny chunks, with
// many appends in flight, for the test.
func smallFlights(t *testing.T, chunk, flights int) {
	oldChunk, oldFlights := chunkMax, maxFlights
	chunkMax, maxFlights = chunk, flights
	t.Cleanup(func() { chunkMax, maxFlights = oldChunk, oldFlights })
}

// scribble writes random pieces to a new file of dir, syncing now and
// then, until it has written size bytes or stop is closed; it returns the
// content written and the first error.
func scribble(fs vfs.FS, dir, name string, seed uint64, size int, stop <-chan struct{}) ([]byte, error) {
	rng := rand.New(rand.NewPCG(seed, seed))
	f, err := fs.Create(filepath.Join(dir, name), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var content []byte
	for len(content) < size {
		select {
		case <-stop:
			return content, nil
		default:
		}
		p := make([]byte, 1+rng.IntN(3000))
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		if _, err := f.Write(p); err != nil {
			return content, err
		}
		content = append(content, p...)
		if rng.IntN(4) == 0 {
			if err := f.SyncData(); err != nil {
				return content, err
			}
		}
		if err := recorderErr(fs); err != nil {
			return content, err
		}
	}
	if err := f.Sync(); err != nil {
		return content, err
	}
	return content, recorderErr(fs)
}

// TestPipelinedAppends records concurrent writers and syncs through many
// small appends in flight at once, some of which reach the broker before
// the ones ahead of them: the log holds every op, in order.
func TestPipelinedAppends(t *testing.T) {
	smallFlights(t, 512, 4)
	const journal = "recovery/pipelined"
	cl := cluster(t, journal)
	dir := t.TempDir()
	rec := newRecorder(t, cl, journal, dir, "pipelined", nil)

	const writers = 6
	contents := make([][]byte, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			contents[i], errs[i] = scribble(rec, dir, fmt.Sprintf("file-%d", i), uint64(i), 100<<10, nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	if err := rec.Sync(); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	stats := rec.stats
	rec.mu.Unlock()
	t.Logf("%d flights, at most %d at once, %d sent again", stats.flights, stats.peak, stats.resent)
	if stats.peak < 2 {
		t.Errorf("at most %d flight at once: the test did not pipeline", stats.peak)
	}

	played, p := play(t, cl, journal)
	if got, want := p.FSM().Offset, rec.FSM().Offset; got != want {
		t.Fatalf("played to offset %d, want %d", got, want)
	}
	for i, want := range contents {
		got, err := os.ReadFile(filepath.Join(played, fmt.Sprintf("file-%d", i)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("played file-%d: %d bytes (%v), want %d bytes as written", i, len(got), err, len(want))
		}
	}
}

// TestFencingWhilePipelined takes over a log while its recorder has
// appends in flight: none of the deposed recorder's appends lands after
// the takeover, and its writers fail with ErrFenced.
func TestFencingWhilePipelined(t *testing.T) {
	smallFlights(t, 512, 4)
	const journal = "recovery/fencing-pipelined"
	cl := cluster(t, journal)
	dirA := t.TempDir()
	a := newRecorder(t, cl, journal, dirA, "recorder-a", nil)

	const writers = 4
	stop := make(chan struct{})
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			_, errs[i] = scribble(a, dirA, fmt.Sprintf("file-%d", i), uint64(i), 1<<30, stop)
		})
	}
	// Let the writers get several flights committed first.
	for deadline := time.Now().Add(30 * time.Second); ; {
		a.mu.Lock()
		landed := a.stats.flights >= 8 && a.committed > 0
		a.mu.Unlock()
		if landed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("recorder A appended nothing in 30s")
		}
		time.Sleep(5 * time.Millisecond) // Polling the recorder's progress.
	}

	// Take over as a successor does, but at whatever offset the log is
	// (a successor plays the log to its head first).
	commit, err := cl.Append(testContext(t), client.AppendRequest{Journal: journal,
		Subtract: labels.Set{{Name: AuthorRegister}}, Union: labels.Set{{Name: AuthorRegister, Value: "recorder-b"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	takeover := commit.GetEnd()
	// A's writers fail, fenced, soon.
	timer := time.AfterFunc(30*time.Second, func() { close(stop) })
	wg.Wait()
	timer.Stop()
	for i, err := range errs {
		if !errors.Is(err, ErrFenced) {
			t.Errorf("A's writer %d: %v, want ErrFenced", i, err)
		}
	}
	if err := writeFile(a, filepath.Join(dirA, "late"), "x", true); !errors.Is(err, ErrFenced) {
		t.Fatalf("A's write after it was fenced: %v, want ErrFenced", err)
	}
	// Nothing of A after the takeover; what it appended before plays.
	ops, offsets := readOps(t, cl, journal)
	if k := len(ops) - 1; k >= 0 && offsets[k] >= takeover {
		t.Fatalf("op at offset %d after the takeover at %d: %v", offsets[k], takeover, &ops[k])
	}
	if _, p := play(t, cl, journal); p.FSM().Offset != takeover {
		t.Fatalf("played to offset %d, want %d", p.FSM().Offset, takeover)
	}
}

// An append that committed although the recorder was told it failed (its
// stream broke as the journal's primary changed, say) is refused when it
// is retried, for its offset: the recorder finds its own bytes there, and
// records on. Bytes of the same length that are not its own still stop it.
func TestRetriedAppendFoundCommitted(t *testing.T) {
	for _, own := range []bool{true, false} {
		t.Run(fmt.Sprintf("own=%v", own), func(t *testing.T) {
			journal := "recovery/found-" + strconv.FormatBool(own)
			cl := cluster(t, journal)
			dir := t.TempDir()
			r := newRecorder(t, cl, journal, dir, "recorder-a", nil)
			if err := writeFile(r, filepath.Join(dir, "one"), "first", true); err != nil {
				t.Fatal(err)
			}
			if err := writeFile(r, filepath.Join(dir, "two"), "pending", false); err != nil {
				t.Fatal(err)
			}
			// What the recorder's next append carries lands first, as an
			// earlier attempt of it would have.
			r.mu.Lock()
			at, data := r.sent, bytes.Join(r.pending, nil)
			r.mu.Unlock()
			if !own {
				data = bytes.Repeat([]byte{'x'}, len(data))
			}
			if _, err := cl.Append(testContext(t), client.AppendRequest{Journal: journal, Offset: &at,
				CheckRegisters: r.check()}, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}

			err := r.Sync()
			if !own {
				if !errors.Is(err, ErrRecorderFailed) || !errors.Is(err, client.ErrWrongAppendOffset) {
					t.Fatalf("sync over foreign bytes: %v, want ErrRecorderFailed and ErrWrongAppendOffset", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("sync of an append found committed: %v", err)
			}
			if err := writeFile(r, filepath.Join(dir, "three"), "after", true); err != nil {
				t.Fatal(err)
			}
			played, p := play(t, cl, journal)
			if got := strings.Join(p.FSM().Paths(), ","); got != "one,three,two" {
				t.Fatalf("played paths %s, want one,three,two", got)
			}
			for name, want := range map[string]string{"one": "first", "two": "pending", "three": "after"} {
				if got, err := os.ReadFile(filepath.Join(played, name)); err != nil || string(got) != want {
					t.Errorf("played %s: %q %v, want %q", name, got, err, want)
				}
			}
		})
	}
}
