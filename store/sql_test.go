package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // The "pgx" database/sql driver.

	"github.com/quire-dev/quire/message"
)

// postgresEnv names the variable that holds the DSN of the PostgreSQL
// that the SQL store is tested against (.ci/start-postgres starts one).
const postgresEnv = "QUIRE_POSTGRES"

// postgres returns a connection pool to the test database, or skips the
// test if there is none.
func postgres(t testing.TB) *sql.DB {
	t.Helper()
	dsn := os.Getenv(postgresEnv)
	if dsn == "" {
		t.Skipf("%s is not set: no PostgreSQL to test the SQL store against (.ci/start-postgres starts one)", postgresEnv)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("opening %s: %v", postgresEnv, err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(testContext(t)); err != nil {
		t.Fatalf("connecting to %s: %v", postgresEnv, err)
	}
	return db
}

// tableName returns a table name of the test's own, dropped when the test
// ends, so that runs and tests do not share tables.
func tableName(t testing.TB, db *sql.DB, what string) string {
	t.Helper()
	var r [6]byte
	rand.Read(r[:])
	name := fmt.Sprintf("quire_test_%s_%s", what, hex.EncodeToString(r[:]))
	t.Cleanup(func() {
		if _, err := db.Exec("DROP TABLE IF EXISTS " + name); err != nil {
			t.Errorf("dropping table %s: %v", name, err)
		}
	})
	return name
}

// sqlFixture is a checkpoint table and an application table, kv.
type sqlFixture struct {
	db        *sql.DB
	opts      SQLOptions
	appTable  string
	testingTB testing.TB
}

func newSQLFixture(t testing.TB) *sqlFixture {
	db := postgres(t)
	f := &sqlFixture{db: db, opts: SQLOptions{Table: tableName(t, db, "cp")}, appTable: tableName(t, db, "kv"), testingTB: t}
	if _, err := db.ExecContext(testContext(t), "CREATE TABLE "+f.appTable+" (k TEXT PRIMARY KEY, v TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *sqlFixture) open(shard string) *SQL {
	f.testingTB.Helper()
	s, err := OpenSQL(testContext(f.testingTB), f.db, shard, f.opts)
	if err != nil {
		f.testingTB.Fatal(err)
	}
	return s
}

// put writes k=v in the store's current transaction.
func (f *sqlFixture) put(s *SQL, k, v string) {
	f.testingTB.Helper()
	tx, err := s.Tx(testContext(f.testingTB))
	if err != nil {
		f.testingTB.Fatal(err)
	}
	_, err = tx.ExecContext(testContext(f.testingTB),
		"INSERT INTO "+f.appTable+" (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = $2", k, v)
	if err != nil {
		f.testingTB.Fatal(err)
	}
}

// committed returns the application table's committed content.
func (f *sqlFixture) committed() map[string]string {
	f.testingTB.Helper()
	rows, err := f.db.QueryContext(testContext(f.testingTB), "SELECT k, v FROM "+f.appTable)
	if err != nil {
		f.testingTB.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			f.testingTB.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		f.testingTB.Fatal(err)
	}
	return out
}

func (f *sqlFixture) sameCommitted(what string, want map[string]string) {
	f.testingTB.Helper()
	if got := f.committed(); !maps.Equal(got, want) {
		f.testingTB.Fatalf("%s: committed %v, want %v", what, got, want)
	}
}

func TestSQLCommitAndRestore(t *testing.T) {
	f := newSQLFixture(t)
	s := f.open("shard-a")
	if s.Fence() != 1 {
		t.Fatalf("fence of the first open %d, want 1", s.Fence())
	}
	sameCheckpoint(t, "new store", restore(t, s), Checkpoint{})

	f.put(s, "a", "1")
	f.put(s, "b", "2")
	f.sameCommitted("before the commit", map[string]string{})
	mustCommit(t, s, checkpoint(1))
	f.sameCommitted("after commit 1", map[string]string{"a": "1", "b": "2"})
	sameCheckpoint(t, "after commit 1", restore(t, s), checkpoint(1))

	// A commit without changes still commits its checkpoint.
	mustCommit(t, s, checkpoint(2))
	f.put(s, "b", "3")
	mustCommit(t, s, checkpoint(3))
	f.put(s, "c", "lost") // Never committed.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
	if _, err := s.Tx(testContext(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Tx after Close: %v, want ErrClosed", err)
	}

	r := f.open("shard-a")
	defer r.Close()
	if r.Fence() != 2 {
		t.Fatalf("fence of the second open %d, want 2", r.Fence())
	}
	sameCheckpoint(t, "reopened", restore(t, r), checkpoint(3))
	f.sameCommitted("reopened", map[string]string{"a": "1", "b": "3"})

	// Another shard in the same table has its own row.
	o := f.open("shard-b")
	defer o.Close()
	sameCheckpoint(t, "another shard", restore(t, o), Checkpoint{})
	if o.Fence() != 1 {
		t.Fatalf("fence of another shard %d, want 1", o.Fence())
	}
}

// TestSQLFailedCommitRollsBack fails commits after the application's
// changes: nothing of them is committed, the checkpoint stays, and the
// store has failed.
func TestSQLFailedCommitRollsBack(t *testing.T) {
	t.Run("statement failed in the transaction", func(t *testing.T) {
		f := newSQLFixture(t)
		s := f.open("shard")
		f.put(s, "a", "1")
		mustCommit(t, s, checkpoint(1))

		f.put(s, "a", "2")
		f.put(s, "b", "2")
		tx, _ := s.Tx(testContext(t))
		// PostgreSQL aborts the transaction on a failed statement.
		if _, err := tx.ExecContext(testContext(t), "SELECT 1/0"); err == nil {
			t.Fatal("division by zero did not fail")
		}
		err := s.StartCommit(testContext(t), checkpoint(2))
		if err == nil || errors.Is(err, ErrFenced) {
			t.Fatalf("commit of an aborted transaction: %v", err)
		}
		t.Log(err)
		if err2 := s.StartCommit(testContext(t), checkpoint(3)); err2 != err {
			t.Fatalf("commit after a failed one: %v, want the same error %v", err2, err)
		}
		if _, err2 := s.Tx(testContext(t)); err2 != err {
			t.Fatalf("Tx after a failed commit: %v", err2)
		}
		f.sameCommitted("after the failed commit", map[string]string{"a": "1"})
		r := f.open("shard")
		sameCheckpoint(t, "reopened", restore(t, r), checkpoint(1))
	})

	t.Run("transaction's context done", func(t *testing.T) {
		f := newSQLFixture(t)
		s := f.open("shard")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tx, err := s.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+f.appTable+" (k, v) VALUES ('a', '1')"); err != nil {
			t.Fatal(err)
		}
		cancel() // database/sql rolls the transaction back.
		err = s.StartCommit(testContext(t), checkpoint(1))
		if err == nil {
			t.Fatal("a rolled back transaction was committed")
		}
		t.Log(err)
		f.sameCommitted("after the failed commit", map[string]string{})
		r := f.open("shard")
		sameCheckpoint(t, "reopened", restore(t, r), Checkpoint{})
	})
}

func TestSQLFencing(t *testing.T) {
	f := newSQLFixture(t)
	a := f.open("shard")
	f.put(a, "a", "1")
	mustCommit(t, a, checkpoint(1))

	// a's next transaction is under way when b opens the store.
	f.put(a, "a", "zombie")
	f.put(a, "z", "zombie")
	b := f.open("shard")
	if b.Fence() != a.Fence()+1 {
		t.Fatalf("fences %d then %d", a.Fence(), b.Fence())
	}
	sameCheckpoint(t, "successor", restore(t, b), checkpoint(1))

	err := a.StartCommit(testContext(t), checkpoint(2))
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("commit of the deposed store: %v, want ErrFenced", err)
	}
	t.Log(err)
	if !strings.Contains(err.Error(), fmt.Sprintf("fence %d", a.Fence())) || !strings.Contains(err.Error(), fmt.Sprintf("now %d", b.Fence())) {
		t.Fatalf("error %q does not name both fences", err)
	}
	f.sameCommitted("after the fenced commit", map[string]string{"a": "1"})
	// The deposed store stays fenced, even for a commit without changes.
	if err := a.StartCommit(testContext(t), checkpoint(3)); !errors.Is(err, ErrFenced) {
		t.Fatalf("second commit of the deposed store: %v, want ErrFenced", err)
	}

	f.put(b, "b", "1")
	mustCommit(t, b, checkpoint(4))
	f.sameCommitted("after the successor's commit", map[string]string{"a": "1", "b": "1"})
	r := f.open("shard")
	sameCheckpoint(t, "reopened", restore(t, r), checkpoint(4))

	// A store fenced before its first transaction cannot commit either.
	if err := b.StartCommit(testContext(t), checkpoint(5)); !errors.Is(err, ErrFenced) {
		t.Fatalf("commit of a store fenced before it began: %v, want ErrFenced", err)
	}
}

// TestSQLConcurrentOpens opens one shard's store from many sessions at
// once on a table that does not exist yet: each gets its own fence.
func TestSQLConcurrentOpens(t *testing.T) {
	db := postgres(t)
	opts := SQLOptions{Table: tableName(t, db, "cp")}
	const n = 8
	fences := make(chan int64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			s, err := OpenSQL(testContext(t), db, "shard", opts)
			if err != nil {
				t.Error(err)
				return
			}
			fences <- s.Fence()
		})
	}
	wg.Wait()
	close(fences)
	seen := map[int64]bool{}
	for f := range fences {
		if seen[f] || f < 1 || f > n {
			t.Fatalf("fence %d handed out twice, or out of 1..%d", f, n)
		}
		seen[f] = true
	}
	if len(seen) != n {
		t.Fatalf("%d opens succeeded, want %d", len(seen), n)
	}
}

func TestSQLRefusesInvalidCheckpoint(t *testing.T) {
	f := newSQLFixture(t)
	s := f.open("shard")
	f.put(s, "a", "1")
	mustCommit(t, s, checkpoint(1))
	f.put(s, "a", "2")

	bad := checkpoint(2)
	bad.Sources["src/a"] = message.Checkpoint{Offset: 10, Read: 5}
	if err := s.StartCommit(testContext(t), bad); err == nil {
		t.Fatal("an invalid checkpoint was committed")
	}
	noJournal := checkpoint(2)
	noJournal.AckIntents[0].Journal = ""
	if err := s.StartCommit(testContext(t), noJournal); err == nil {
		t.Fatal("an ack intent without a journal was committed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.StartCommit(ctx, checkpoint(2)); !errors.Is(err, context.Canceled) {
		t.Fatalf("commit with a cancelled context: %v", err)
	}
	// Nothing was committed, and the transaction still holds its write.
	f.sameCommitted("after refused commits", map[string]string{"a": "1"})
	sameCheckpoint(t, "after refused commits", restore(t, s), checkpoint(1))
	mustCommit(t, s, checkpoint(3))
	f.sameCommitted("after a valid commit", map[string]string{"a": "2"})
	sameCheckpoint(t, "reopened", restore(t, f.open("shard")), checkpoint(3))
}

func TestSQLCorruptCheckpoint(t *testing.T) {
	f := newSQLFixture(t)
	s := f.open("shard")
	mustCommit(t, s, checkpoint(1))
	if _, err := f.db.ExecContext(testContext(t), "UPDATE "+f.opts.Table+" SET checkpoint = '{not json'"); err != nil {
		t.Fatal(err)
	}
	_, err := f.open("shard").RestoreCheckpoint(testContext(t))
	if err == nil || !strings.Contains(err.Error(), `"shard"`) || !strings.Contains(err.Error(), f.opts.Table) {
		t.Fatalf("restore of a corrupt checkpoint: %v", err)
	}
}

func TestSQLTableExists(t *testing.T) {
	db := postgres(t)
	opts := SQLOptions{Table: tableName(t, db, "cp"), TableExists: true}
	if _, err := OpenSQL(testContext(t), db, "shard", opts); err == nil || !strings.Contains(err.Error(), opts.Table) {
		t.Fatalf("open over a missing table that should exist: %v", err)
	}
	if _, err := db.ExecContext(testContext(t), fmt.Sprintf(SQLTableDDL, opts.Table)); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQL(testContext(t), db, "shard", opts)
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, checkpoint(1))
}

func TestOpenSQLRefusesBadArguments(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none") // Never connected.
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		name, shard, table, want string
		db                       *sql.DB
	}{
		{"nil db", "s", "", "db is nil", nil},
		{"empty shard", "", "", `shard ID ""`, db},
		{"invalid UTF-8 shard", "a\xffb", "", `shard ID "a\xffb"`, db},
		{"NUL in shard", "a\x00b", "", `shard ID "a\x00b"`, db},
		{"injection", "s", "t; DROP TABLE x", `table "t; DROP TABLE x"`, db},
		{"quoted", "s", `"t"`, `table "\"t\""`, db},
		{"three parts", "s", "a.b.c", `table "a.b.c"`, db},
		{"leading digit", "s", "1t", `table "1t"`, db},
		{"too long", "s", strings.Repeat("t", 64), "at most 63", db},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenSQL(testContext(t), tc.db, tc.shard, SQLOptions{Table: tc.table})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenSQL(%q, table %q): %v, want an error naming %s", tc.shard, tc.table, err, tc.want)
			}
		})
	}
}

// TestSQLJSONBColumn runs the store over a checkpoint table whose
// checkpoint column is PostgreSQL's JSONB (which normalizes the JSON).
func TestSQLJSONBColumn(t *testing.T) {
	db := postgres(t)
	opts := SQLOptions{Table: tableName(t, db, "cp"), TableExists: true}
	ddl := strings.Replace(fmt.Sprintf(SQLTableDDL, opts.Table), "checkpoint TEXT", "checkpoint JSONB", 1)
	if _, err := db.ExecContext(testContext(t), ddl); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQL(testContext(t), db, "shard", opts)
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, checkpoint(1))
	r, err := OpenSQL(testContext(t), db, "shard", opts)
	if err != nil {
		t.Fatal(err)
	}
	sameCheckpoint(t, "reopened", restore(t, r), checkpoint(1))
}

// TestSQLOpenWaitsForACommitUnderWay checks what fencing relies on: a
// commit that has updated the shard's row but not yet committed holds
// the row, so a successor's open waits for it and then sees its
// checkpoint (the commit is not lost, and cannot be fenced after the
// fact).
func TestSQLOpenWaitsForACommitUnderWay(t *testing.T) {
	f := newSQLFixture(t)
	a := f.open("shard")
	// a's commit, stopped between its update and its commit.
	tx, err := f.db.BeginTx(testContext(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.ExecContext(testContext(t), "UPDATE "+f.opts.Table+" SET checkpoint = $3 WHERE shard = $1 AND fence = $2",
		"shard", a.Fence(), mustCheckpointJSON(t, checkpoint(1)))
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("update: %v, %d rows", err, n)
	}

	type result struct {
		s   *SQL
		err error
	}
	opened := make(chan result, 1)
	go func() {
		s, err := OpenSQL(testContext(t), f.db, "shard", f.opts)
		opened <- result{s, err}
	}()
	select {
	case <-opened:
		t.Fatal("the successor opened while a commit held the shard's row")
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-opened
	if r.err != nil {
		t.Fatal(r.err)
	}
	b := r.s
	sameCheckpoint(t, "successor", restore(t, b), checkpoint(1))
	if b.Fence() != a.Fence()+1 {
		t.Fatalf("fences %d then %d", a.Fence(), b.Fence())
	}
}
