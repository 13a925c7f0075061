package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/recoverylog"
)

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

func testOptions() *pebble.Options {
	return &pebble.Options{Logger: quietLogger{}, MemTableSize: 256 << 10}
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// checkpoint returns a valid checkpoint numbered n.
func checkpoint(n int) Checkpoint {
	var prod message.ProducerID
	prod[0] = byte(n)
	return Checkpoint{
		Sources: map[string]message.Checkpoint{
			"src/a": {Offset: int64(10 * n), Read: int64(10*n + 5), Producers: map[message.ProducerID]message.ProducerState{
				prod: {LastAck: message.Clock(n), Begin: int64(10 * n)}}},
			"src/b": {Offset: int64(n), Read: int64(n), Producers: map[message.ProducerID]message.ProducerState{}},
		},
		AckIntents: []message.AckIntent{{Journal: "out/x", Intent: []byte(fmt.Sprintf("ack-%d", n))}},
	}
}

func openPebble(t testing.TB, dir string, fs vfs.FS) *Pebble {
	t.Helper()
	p, err := OpenPebble(dir, fs, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func restore(t testing.TB, s Store) Checkpoint {
	t.Helper()
	cp, err := s.RestoreCheckpoint(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

func sameCheckpoint(t testing.TB, what string, got, want Checkpoint) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: checkpoint\n got %+v\nwant %+v", what, got, want)
	}
}

// contents returns the application's keys and values in db (reserved keys
// excluded).
func contents(t testing.TB, db *pebble.DB) map[string]string {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	return out
}

func set(t testing.TB, p *Pebble, k, v string) {
	t.Helper()
	if err := p.Batch().Set([]byte(k), []byte(v), nil); err != nil {
		t.Fatal(err)
	}
}

func get(t testing.TB, r pebble.Reader, k string) (string, bool) {
	t.Helper()
	v, closer, err := r.Get([]byte(k))
	if errors.Is(err, pebble.ErrNotFound) {
		return "", false
	} else if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	return string(v), true
}

func TestPebbleCommitAndReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	p := openPebble(t, dir, vfs.Default)
	sameCheckpoint(t, "new store", restore(t, p), Checkpoint{})

	set(t, p, "a", "1")
	set(t, p, "b", "2")
	// The batch's reads see its pending writes; the database does not.
	if v, ok := get(t, p.Batch(), "a"); !ok || v != "1" {
		t.Fatalf("batch read of pending a = %q, %v", v, ok)
	}
	if _, ok := get(t, p.DB(), "a"); ok {
		t.Fatal("database sees an uncommitted write")
	}
	if err := p.StartCommit(testContext(t), checkpoint(1)); err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "after commit 1", restore(t, p), checkpoint(1))

	set(t, p, "b", "3")
	set(t, p, "c", "4")
	if err := p.Batch().Delete([]byte("a"), nil); err != nil {
		t.Fatal(err)
	}
	if err := p.StartCommit(testContext(t), checkpoint(2)); err != nil {
		t.Fatal(err)
	}
	// Uncommitted writes of a third transaction.
	set(t, p, "c", "lost")
	set(t, p, "d", "lost")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}

	p = openPebble(t, dir, vfs.Default)
	defer p.Close()
	sameCheckpoint(t, "reopened", restore(t, p), checkpoint(2))
	want := map[string]string{"b": "3", "c": "4"}
	if got := contents(t, p.DB()); !maps.Equal(got, want) {
		t.Fatalf("reopened state %v, want %v", got, want)
	}
}

func TestPebbleRefusesBadCommit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	p := openPebble(t, dir, vfs.Default)
	set(t, p, "a", "1")
	if err := p.StartCommit(testContext(t), checkpoint(1)); err != nil {
		t.Fatal(err)
	}
	set(t, p, "a", "2")

	bad := checkpoint(2)
	bad.Sources["src/a"] = message.Checkpoint{Offset: 10, Read: 5}
	if err := p.StartCommit(testContext(t), bad); err == nil {
		t.Fatal("an invalid checkpoint was committed")
	}
	noJournal := checkpoint(2)
	noJournal.AckIntents = append(noJournal.AckIntents, message.AckIntent{Intent: []byte("x")})
	if err := p.StartCommit(testContext(t), noJournal); err == nil {
		t.Fatal("an ack intent without a journal was committed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.StartCommit(ctx, checkpoint(2)); !errors.Is(err, context.Canceled) {
		t.Fatalf("commit with a cancelled context: %v", err)
	}
	// Nothing was committed, and the batch still holds its write.
	sameCheckpoint(t, "after refused commits", restore(t, p), checkpoint(1))
	if v, _ := get(t, p.DB(), "a"); v != "1" {
		t.Fatalf("committed a = %q, want 1", v)
	}
	if v, _ := get(t, p.Batch(), "a"); v != "2" {
		t.Fatalf("pending a = %q, want 2", v)
	}
	if err := p.StartCommit(testContext(t), checkpoint(3)); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := p.RestoreCheckpoint(testContext(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("RestoreCheckpoint after Close: %v", err)
	}

	p = openPebble(t, dir, vfs.Default)
	defer p.Close()
	sameCheckpoint(t, "reopened", restore(t, p), checkpoint(3))
	if v, _ := get(t, p.DB(), "a"); v != "2" {
		t.Fatalf("reopened a = %q, want 2", v)
	}
}

func TestPebbleCorruptCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	p := openPebble(t, dir, vfs.Default)
	defer p.Close()
	if err := p.DB().Set([]byte(CheckpointKey), []byte("{not json"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RestoreCheckpoint(testContext(t)); err == nil {
		t.Fatal("a corrupt checkpoint was restored")
	}
}

func TestOpenPebbleKeepsOptions(t *testing.T) {
	opts := testOptions()
	p, err := OpenPebble(filepath.Join(t.TempDir(), "db"), vfs.Default, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if opts.FS != nil {
		t.Fatal("OpenPebble modified the caller's options")
	}
}

// cluster starts one broker and creates the journals.
func cluster(t testing.TB, journals ...string) *client.Client {
	t.Helper()
	c := brokertest.New(t)
	cl := c.Client(c.Start("b1"))
	c.Journals(cl, 1, journals...)
	return cl
}

func newRecorder(t testing.TB, cl *client.Client, journal, dir string) *recoverylog.Recorder {
	t.Helper()
	rec, err := recoverylog.NewRecorder(testContext(t), recoverylog.RecorderConfig{
		Client: cl, Journal: journal, Author: "store-test", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestPebbleRecordedAndPlayed(t *testing.T) {
	const journal = "recovery/store"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "db")
	p := openPebble(t, dir, newRecorder(t, cl, journal, dir))

	model := map[string]string{}
	for txn := 1; txn <= 20; txn++ {
		for i := range 200 {
			k := fmt.Sprintf("key-%04d", (txn*37+i*13)%1000)
			v := fmt.Sprintf("txn-%d-%d-%s", txn, i, make([]byte, 100))
			set(t, p, k, v)
			model[k] = v
		}
		if txn%3 == 0 {
			k := fmt.Sprintf("key-%04d", (txn*37)%1000)
			if err := p.Batch().Delete([]byte(k), nil); err != nil {
				t.Fatal(err)
			}
			delete(model, k)
		}
		if err := p.StartCommit(testContext(t), checkpoint(txn)); err != nil {
			t.Fatal(err)
		}
	}
	set(t, p, "uncommitted", "x")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	played := filepath.Join(t.TempDir(), "played")
	pl, err := recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: cl, Journal: journal, Dir: played})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	q := openPebble(t, played, vfs.Default)
	defer q.Close()
	sameCheckpoint(t, "played", restore(t, q), checkpoint(20))
	if got := contents(t, q.DB()); !maps.Equal(got, model) {
		t.Fatalf("played state has %d keys, want %d (equal: %v)", len(got), len(model), maps.Equal(got, model))
	}
}

// TestPebbleRecordedCommitIsInLog checks that a commit is in the recovery
// log when StartCommit returns, without closing the store: the recorder is
// abandoned (as by a crash) and the log played.
func TestPebbleRecordedCommitIsInLog(t *testing.T) {
	const journal = "recovery/crash"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "db")
	p := openPebble(t, dir, newRecorder(t, cl, journal, dir))
	defer p.Close()
	for txn := 1; txn <= 3; txn++ {
		set(t, p, fmt.Sprintf("k%d", txn), "v")
		if err := p.StartCommit(testContext(t), checkpoint(txn)); err != nil {
			t.Fatal(err)
		}
	}
	set(t, p, "pending", "v")

	played := filepath.Join(t.TempDir(), "played")
	pl, err := recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: cl, Journal: journal, Dir: played})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	q := openPebble(t, played, vfs.Default)
	defer q.Close()
	sameCheckpoint(t, "played", restore(t, q), checkpoint(3))
	want := map[string]string{"k1": "v", "k2": "v", "k3": "v"}
	if got := contents(t, q.DB()); !maps.Equal(got, want) {
		t.Fatalf("played state %v, want %v", got, want)
	}
}

func TestMemory(t *testing.T) {
	m := NewMemory[string, int]()
	sameCheckpoint(t, "new store", restore(t, m), Checkpoint{})
	m.State["a"]++
	cp := checkpoint(1)
	if err := m.StartCommit(testContext(t), cp); err != nil {
		t.Fatal(err)
	}
	cp.AckIntents[0].Intent[0] = 'X' // The store keeps a copy.
	cp.Sources["src/c"] = message.Checkpoint{}
	sameCheckpoint(t, "after commit", restore(t, m), checkpoint(1))

	bad := checkpoint(2)
	bad.Sources[""] = message.Checkpoint{}
	if err := m.StartCommit(testContext(t), bad); err == nil {
		t.Fatal("an invalid checkpoint was committed")
	}
	sameCheckpoint(t, "after refused commit", restore(t, m), checkpoint(1))
	if m.State["a"] != 1 {
		t.Fatalf("state %v", m.State)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.StartCommit(testContext(t), checkpoint(3)); !errors.Is(err, ErrClosed) {
		t.Fatalf("StartCommit after Close: %v", err)
	}
}

func TestPebbleCommitAsync(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	p, err := OpenPebble(dir, vfs.Default, nil)
	if err != nil {
		t.Fatal(err)
	}
	cp := Checkpoint{Sources: map[string]message.Checkpoint{"a/b": {Offset: 10, Read: 10}}}
	if err := p.Batch().Set([]byte("k"), []byte("1"), nil); err != nil {
		t.Fatal(err)
	}
	wait, err := p.CommitAsync(ctx, cp)
	if err != nil {
		t.Fatal(err)
	}
	// The next transaction sees the commit before it is durable.
	v, closer, err := p.Batch().Get([]byte("k"))
	if err != nil || string(v) != "1" {
		t.Fatalf("next batch reads %q, %v; want 1", v, err)
	}
	closer.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p, err = OpenPebble(dir, vfs.Default, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	got, err := p.RestoreCheckpoint(ctx)
	if err != nil || got.Sources["a/b"].Read != 10 {
		t.Fatalf("restored %+v, %v", got, err)
	}
}
