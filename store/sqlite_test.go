package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/recoverylog"
)

func openSQLite(t testing.TB, fs vfs.FS, dir string) *SQLite {
	t.Helper()
	return openSQLiteWith(t, fs, dir, SQLiteOptions{})
}

func openSQLiteWith(t testing.TB, fs vfs.FS, dir string, opts SQLiteOptions) *SQLite {
	t.Helper()
	s, err := OpenSQLite(testContext(t), fs, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// exec runs statements in the store's current transaction.
func exec(t testing.TB, s *SQLite, query string, args ...any) {
	t.Helper()
	tx, err := s.Tx(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// kv returns the table kv, as the store's current transaction sees it.
func kv(t testing.TB, s *SQLite) counts {
	t.Helper()
	tx, err := s.Tx(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(`SELECT k, v FROM kv`)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return counts{}
		}
		t.Fatal(err)
	}
	defer rows.Close()
	out := counts{}
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// bump adds n to keys of kv in the current transaction, and to model.
func bump(t testing.TB, s *SQLite, model counts, n int, keys ...string) {
	t.Helper()
	exec(t, s, `CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL)`)
	for _, k := range keys {
		exec(t, s, `INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = v + excluded.v`, k, n)
		model[k] += n
	}
}

func TestSQLiteCommitAndReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shard", "state")
	s := openSQLite(t, vfs.Default, dir)
	sameCheckpoint(t, "new store", restore(t, s), Checkpoint{})
	model := counts{}
	bump(t, s, model, 1, "a", "b")
	mustCommit(t, s, checkpoint(1))
	sameCheckpoint(t, "after commit 1", restore(t, s), checkpoint(1))

	// An invalid checkpoint is refused, and the transaction goes on.
	bump(t, s, model, 2, "b", "c")
	if err := s.StartCommit(testContext(t), Checkpoint{AckIntents: []message.AckIntent{{Journal: "x"}}}); err == nil {
		t.Fatal("committed an invalid checkpoint")
	}
	if got := kv(t, s); !maps.Equal(got, model) {
		t.Fatalf("after a refused commit the transaction sees %v, want %v", got, model)
	}
	mustCommit(t, s, checkpoint(2))

	// WAL mode in exclusive locking mode: no shared-memory file.
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n.Name(), "-shm") {
			t.Errorf("the store made a shared-memory file %s", n.Name())
		}
	}

	// Uncommitted changes are discarded by Close.
	bump(t, s, counts{}, 100, "a")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Tx(testContext(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Tx after Close: %v, want ErrClosed", err)
	}
	r := openSQLite(t, vfs.Default, dir)
	defer r.Close()
	sameCheckpoint(t, "reopened", restore(t, r), checkpoint(2))
	sameState(t, "reopened", kv(t, r), model)
}

func TestSQLiteBadCheckpoint(t *testing.T) {
	dir := t.TempDir()
	s := openSQLite(t, vfs.Default, dir)
	exec(t, s, fmt.Sprintf(`INSERT INTO %s (id, checkpoint) VALUES (1, '{"sources": 7}')`, SQLiteCheckpointTable))
	tx, _ := s.Tx(testContext(t))
	if err := tx.Commit(); err != nil { // Behind the store's back.
		t.Fatal(err)
	}
	s.t.tx = nil
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := OpenSQLite(testContext(t), vfs.Default, dir, SQLiteOptions{})
	if err == nil || !strings.Contains(err.Error(), SQLiteCheckpointTable) {
		t.Fatalf("opening a store with a checkpoint that does not decode: %v", err)
	}
	if _, err := OpenSQLite(testContext(t), nil, dir, SQLiteOptions{}); err == nil {
		t.Fatal("opened a store without a file system")
	}
	if _, err := OpenSQLite(testContext(t), vfs.Default, "", SQLiteOptions{}); err == nil {
		t.Fatal("opened a store without a directory")
	}
}

// playLog plays journal into a new directory, returning it and the
// player's state.
func playLog(t testing.TB, cl *client.Client, journal string) (string, *recoverylog.FSM) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "played")
	pl, err := recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: cl, Journal: journal, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	return dir, pl.FSM()
}

// A recorded SQLite store is played back elsewhere with its committed
// state and checkpoint; a new primary continues from the player's
// directory, and the deposed one can no longer commit.
func TestSQLiteRecordedAndPlayed(t *testing.T) {
	const journal = "recovery/sqlite"
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "state")
	s := openSQLite(t, newRecorder(t, cl, journal, dir), dir)
	model := counts{}
	for txn := 1; txn <= 20; txn++ {
		keys := make([]string, 40)
		for i := range keys {
			keys[i] = fmt.Sprintf("key-%03d-%s", (txn*37+i*13)%300, strings.Repeat("x", 200))
		}
		bump(t, s, model, txn, keys...)
		mustCommit(t, s, checkpoint(txn))
	}
	bump(t, s, counts{}, 1, "uncommitted")

	played, fsm := playLog(t, cl, journal)
	r := openSQLite(t, vfs.Default, played)
	sameCheckpoint(t, "played", restore(t, r), checkpoint(20))
	sameState(t, "played", kv(t, r), model)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	played, fsm = playLog(t, cl, journal) // r's close checkpointed its copy.
	rec, err := recoverylog.NewRecorder(testContext(t), recoverylog.RecorderConfig{
		Client: cl, Journal: journal, Author: "store-test-2", Dir: played, FSM: fsm})
	if err != nil {
		t.Fatal(err)
	}
	n := openSQLite(t, rec, played)
	bump(t, n, model, 1000, "next")
	mustCommit(t, n, checkpoint(21))
	if err := s.StartCommit(testContext(t), checkpoint(21)); !errors.Is(err, recoverylog.ErrFenced) {
		t.Fatalf("commit of the deposed primary: %v, want recoverylog.ErrFenced", err)
	}
	s.Close()
	if err := n.Close(); err != nil { // Checkpoints the WAL, recorded.
		t.Fatal(err)
	}

	again, _ := playLog(t, cl, journal)
	a := openSQLite(t, vfs.Default, again)
	defer a.Close()
	sameCheckpoint(t, "played again", restore(t, a), checkpoint(21))
	sameState(t, "played again", kv(t, a), model)
}

// TestSQLiteCrashAtEveryStep: a primary's machine that crashes leaves the
// recovery log as it was, a prefix of the recorder's ops. For every prefix
// that ends within a commit (or within the store's Close, which
// checkpoints the WAL into the database), the database played from it
// opens with the state and checkpoint of the commit before or of the one
// being made, never a mix, and with the new one once StartCommit returned.
func TestSQLiteCrashAtEveryStep(t *testing.T) {
	t.Run("in place", func(t *testing.T) { crashAtEveryStep(t, 4, SQLiteOptions{RewriteAfter: -1}) })
	// Every commit rewrites the database: crashes within the rewrite too.
	t.Run("rewritten", func(t *testing.T) { crashAtEveryStep(t, 2, SQLiteOptions{RewriteAfter: 1}) })
}

func crashAtEveryStep(t *testing.T, txns int, opts SQLiteOptions) {
	const journal = "recovery/sqlite-crash"
	c := brokertest.New(t)
	cl := c.Client(c.Start("b1"))
	c.Journals(cl, 1, journal)
	dir := filepath.Join(t.TempDir(), "state")
	rec := newRecorder(t, cl, journal, dir)
	s := openSQLiteWith(t, rec, dir, opts)

	type commit struct {
		begin, end int64 // Log offsets.
		model      counts
	}
	commits := []commit{{end: rec.FSM().Offset, model: counts{}}}
	model := counts{}
	for txn := 1; txn <= txns; txn++ {
		begin := rec.FSM().Offset
		bump(t, s, model, txn, fmt.Sprintf("k%d", txn%3), fmt.Sprintf("k%d", txn%3+1), strings.Repeat("y", 3000*txn))
		mustCommit(t, s, checkpoint(txn))
		commits = append(commits, commit{begin: begin, end: rec.FSM().Offset, model: maps.Clone(model)})
	}
	closeBegin := rec.FSM().Offset
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Sync(); err != nil {
		t.Fatal(err)
	}
	closeEnd := rec.FSM().Offset
	log := readLog(t, cl, journal, closeEnd)

	crashes := 0
	crashAt := func(offset int64, wantTxn int, may int) {
		t.Helper()
		name := fmt.Sprintf("crash/%d", crashes)
		crashes++
		c.Journals(cl, 1, name)
		if _, err := cl.Append(testContext(t), client.AppendRequest{Journal: name}, bytes.NewReader(log[:offset])); err != nil {
			t.Fatal(err)
		}
		played, _ := playLog(t, cl, name)
		r, err := OpenSQLite(testContext(t), vfs.Default, played, SQLiteOptions{})
		if err != nil {
			t.Fatalf("crash at log offset %d: %v", offset, err)
		}
		defer r.Close()
		tx, err := r.Tx(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		var check string
		if err := tx.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
			t.Fatalf("crash at log offset %d: integrity check: %q, %v", offset, check, err)
		}
		got, cp := kv(t, r), restore(t, r)
		txn := wantTxn
		if may != wantTxn && !maps.Equal(got, commits[wantTxn].model) {
			txn = may
		}
		what := fmt.Sprintf("crash at log offset %d (commit %d)", offset, wantTxn)
		sameState(t, what, got, commits[txn].model)
		if txn == 0 {
			sameCheckpoint(t, what, cp, Checkpoint{})
		} else {
			sameCheckpoint(t, what, cp, checkpoint(txn))
		}
	}
	for txn, cm := range commits[1:] {
		for _, off := range frameEnds(t, log, cm.begin, cm.end) {
			if off == cm.end {
				crashAt(off, txn+1, txn+1)
			} else {
				crashAt(off, txn, txn+1)
			}
		}
	}
	for _, off := range frameEnds(t, log, closeBegin, closeEnd) {
		crashAt(off, len(commits)-1, len(commits)-1)
	}
	if crashes < 2*len(commits) {
		t.Fatalf("%d crash points in %d commits and a close: too few to test anything", crashes, len(commits)-1)
	}
	t.Logf("%d crash points played", crashes)
}

// readLog reads the first n bytes of journal.
func readLog(t testing.TB, cl *client.Client, journal string, n int64) []byte {
	t.Helper()
	rd := cl.NewReader(testContext(t), client.ReadRequest{Journal: journal, EndOffset: n})
	defer rd.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(rd, b); err != nil {
		t.Fatalf("reading %d bytes of %s: %v", n, journal, err)
	}
	return b
}

// frameEnds returns the log offsets in (begin, end] where an op's frame
// ends: none if begin is end.
func frameEnds(t testing.TB, log []byte, begin, end int64) []int64 {
	t.Helper()
	var out []int64
	for off := begin; off < end; {
		_, n, err := recoverylog.DecodeOp(log[off:end])
		if err != nil {
			t.Fatalf("op at log offset %d: %v", off, err)
		}
		off += int64(n)
		out = append(out, off)
	}
	return out
}

// Updates in place grow the log, not the database: the store rewrites the
// database into a new file once the log's ops since its creation pass the
// bound, so a player from hints reads little more than the database.
func TestSQLiteRewriteBoundsReplay(t *testing.T) {
	const journal = "recovery/sqlite-rewrite"
	const after = 256 << 10
	cl := cluster(t, journal)
	dir := filepath.Join(t.TempDir(), "state")
	rec := newRecorder(t, cl, journal, dir)
	s := openSQLiteWith(t, rec, dir, SQLiteOptions{RewriteAfter: after})
	defer s.Close()
	model := counts{}
	path := filepath.Join(dir, SQLiteFileName)
	var created []int64
	for txn := 1; txn <= 60; txn++ {
		keys := make([]string, 50)
		for i := range keys {
			keys[i] = fmt.Sprintf("%03d-%s", i, strings.Repeat("v", 500))
		}
		bump(t, s, model, txn, keys...)
		mustCommit(t, s, checkpoint(txn))
		n, next, ok := rec.Lookup(path)
		if !ok {
			t.Fatalf("commit %d: the recorder has no node at %s", txn, path)
		}
		if since := next - n.FirstOffset; since > 2*n.Length+after {
			t.Fatalf("commit %d: %d bytes of log since the database's creation, bound %d", txn, since, 2*n.Length+after)
		}
		if len(created) == 0 || created[len(created)-1] != n.FirstOffset {
			created = append(created, n.FirstOffset)
		}
	}
	if len(created) < 2 {
		t.Fatalf("the database was never rewritten (created at %v)", created)
	}
	h, err := rec.Hints()
	if err != nil {
		t.Fatal(err)
	}
	js, err := recoverylog.MarshalHints(h)
	if err != nil {
		t.Fatal(err)
	}
	if h, err = recoverylog.UnmarshalHints(js); err != nil {
		t.Fatal(err)
	}
	played := filepath.Join(t.TempDir(), "played")
	pl, err := recoverylog.NewPlayer(recoverylog.PlayerConfig{Client: cl, Journal: journal, Dir: played, Hints: h})
	if err != nil {
		t.Fatal(err)
	}
	if err := pl.Play(testContext(t)); err != nil {
		t.Fatal(err)
	}
	pr := pl.Progress()
	t.Logf("%d rewrites; log of %d bytes, %d read from hints", len(created)-1, pr.Offset, pr.BytesRead)
	if pr.BytesSkipped == 0 {
		t.Errorf("playback from hints read all %d bytes of the log", pr.BytesRead)
	}
	r := openSQLite(t, vfs.Default, played)
	defer r.Close()
	sameCheckpoint(t, "played from hints", restore(t, r), checkpoint(60))
	sameState(t, "played from hints", kv(t, r), model)
}
