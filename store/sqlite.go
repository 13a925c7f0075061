package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"
	sqlitevfs "github.com/ncruces/go-sqlite3/vfs"

	"github.com/quire-dev/quire/recoverylog"
)

// Names in a SQLite store's directory and database.
const (
	// SQLiteFileName is the database; SQLite keeps its write-ahead log
	// beside it, in SQLiteFileName + "-wal".
	SQLiteFileName = "state.db"
	// SQLiteCheckpointTable holds the committed checkpoint, in its one
	// row (id 1), as JSON. The application must not write it.
	SQLiteCheckpointTable = "quire_checkpoint"
	// sqliteRewriteSuffix names a rewrite of the database in progress
	// (see SQLiteOptions.RewriteAfter).
	sqliteRewriteSuffix = ".rewrite"
)

// sqlitePragmas configure the store's connection, in this order: the
// exclusive locking mode first, so that WAL mode needs no shared-memory
// index (no -shm file, which would be neither recorded nor needed); each
// commit synced (FULL), so that a commit is in the recovery log when it
// returns; temporary tables and indices in memory.
var sqlitePragmas = []string{
	"PRAGMA locking_mode = EXCLUSIVE",
	"PRAGMA journal_mode = WAL",
	"PRAGMA synchronous = FULL",
	"PRAGMA temp_store = MEMORY",
}

// SQLite is a store in an embedded SQLite database, for state that wants
// SQL without a server. The application makes a transaction's changes
// within the *sql.Tx that Tx returns; StartCommit writes the checkpoint
// into the SQLiteCheckpointTable in that same transaction and commits it,
// so that changes and checkpoint commit together.
//
// The database and its write-ahead log live in the store's directory and
// go through a vfs.FS: in production the shard's recoverylog.Recorder,
// which records SQLite's writes in place as write-at and truncate ops
// (frame version 2 of the log). A commit, synced by SQLite, is then in
// the recovery log when StartCommit returns, and a player rebuilds the
// database anywhere, as it does Pebble's. SQLite is the pure-Go build of
// github.com/ncruces/go-sqlite3 (no cgo).
//
// The store holds one connection, in exclusive locking mode: use the
// database only through Tx. It serves one shard's transactions, one at a
// time, and is not safe for concurrent use.
type SQLite struct {
	fs           vfs.FS
	dir, path    string // The store's directory, and its database.
	rewriteAfter int64
	vfsName      string
	t            sqlTx
}

var _ Store = (*SQLite)(nil)

// DefaultSQLiteRewriteAfter is SQLiteOptions.RewriteAfter's default.
const DefaultSQLiteRewriteAfter = 64 << 20

// SQLiteOptions configures a SQLite store. The zero value is usable.
type SQLiteOptions struct {
	// RewriteAfter bounds the recovery log that a new primary plays. The
	// database file is written in place for as long as it lives, so the
	// log's ops since its creation are all needed to play it. Over a
	// recoverylog.Recorder, once they exceed twice the file's length plus
	// RewriteAfter bytes, the commit that finds it so rewrites the
	// database into a new file (VACUUM INTO, then a rename over the old
	// one): that commit takes longer, by the time it takes to write the
	// database once. Zero means DefaultSQLiteRewriteAfter; negative means
	// never.
	RewriteAfter int64
}

// OpenSQLite opens (or creates) the SQLite store in dir over fs, creating
// dir if needed, and reads its committed checkpoint. A database whose
// checkpoint does not decode is an error naming it. A rewrite of the
// database that a crash interrupted is removed.
func OpenSQLite(ctx context.Context, fs vfs.FS, dir string, opts SQLiteOptions) (*SQLite, error) {
	if fs == nil {
		return nil, errors.New("store: OpenSQLite: fs is required")
	}
	if dir == "" {
		return nil, errors.New("store: OpenSQLite: dir is required")
	}
	if err := makeDir(fs, dir); err != nil {
		return nil, err
	}
	s := &SQLite{fs: fs, dir: dir, path: fs.PathJoin(dir, SQLiteFileName), rewriteAfter: opts.RewriteAfter,
		vfsName: sqliteVFS{fs}.register(), t: sqlTx{name: "SQLite"}}
	if s.rewriteAfter == 0 {
		s.rewriteAfter = DefaultSQLiteRewriteAfter
	}
	if err := s.removeRewrite(); err != nil {
		sqlitevfs.Unregister(s.vfsName)
		return nil, err
	}
	if err := s.open(); err != nil {
		sqlitevfs.Unregister(s.vfsName)
		return nil, err
	}
	if err := s.load(ctx); err != nil {
		s.close()
		return nil, fmt.Errorf("store: SQLite database %s: %w", s.path, err)
	}
	return s, nil
}

// open opens the database's connection.
func (s *SQLite) open() error {
	name := (&url.URL{Scheme: "file", OmitHost: true, Path: s.path,
		RawQuery: url.Values{"vfs": {s.vfsName}}.Encode()}).String()
	db, err := driver.Open(name, configure)
	if err != nil {
		return fmt.Errorf("store: opening SQLite database %s: %w", s.path, err)
	}
	// One connection, kept: it holds the exclusive lock, and the WAL
	// index in its memory.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s.t.db = db
	return nil
}

// removeRewrite removes a rewrite of the database that a crash left: it
// was never renamed over the database, which is whole without it.
func (s *SQLite) removeRewrite() error {
	tmp := s.path + sqliteRewriteSuffix
	if err := s.fs.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: removing leftover %s: %w", tmp, err)
	}
	return nil
}

// configure applies sqlitePragmas to a new connection, and checks that
// WAL mode took.
func configure(c *sqlite3.Conn) error {
	for _, p := range sqlitePragmas {
		if err := c.Exec(p); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	st, _, err := c.Prepare("PRAGMA journal_mode")
	if err != nil {
		return err
	}
	defer st.Close()
	if !st.Step() {
		return fmt.Errorf("PRAGMA journal_mode returned no row: %w", st.Err())
	}
	if mode := st.ColumnText(0); mode != "wal" {
		return fmt.Errorf("journal mode is %q, not wal", mode)
	}
	return st.Close()
}

// load creates the checkpoint table if it does not exist, and reads the
// committed checkpoint.
func (s *SQLite) load(ctx context.Context) error {
	ddl := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
		id         INTEGER PRIMARY KEY CHECK (id = 1),
		checkpoint TEXT NOT NULL
	)`, SQLiteCheckpointTable)
	if _, err := s.t.db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("creating table %s: %w", SQLiteCheckpointTable, err)
	}
	var b []byte
	q := fmt.Sprintf(`SELECT checkpoint FROM %s WHERE id = 1`, SQLiteCheckpointTable)
	switch err := s.t.db.QueryRowContext(ctx, q).Scan(&b); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("reading table %s: %w", SQLiteCheckpointTable, err)
	}
	if _, err := unmarshalCheckpoint(b); err != nil {
		return fmt.Errorf("table %s: %w", SQLiteCheckpointTable, err)
	}
	s.t.cp = b
	return nil
}

// Tx returns the current transaction, beginning it with ctx if there is
// none: the application makes its changes in it, and StartCommit commits
// it. ctx must stay live until then, as database/sql rolls a transaction
// back when the context it began with is done (StartCommit then fails).
// After each StartCommit, the next call begins a new transaction: call Tx
// again rather than keeping it.
func (s *SQLite) Tx(ctx context.Context) (*sql.Tx, error) { return s.t.begin(ctx) }

// RestoreCheckpoint returns the committed checkpoint: the one OpenSQLite
// read, or the last one this store committed since.
func (s *SQLite) RestoreCheckpoint(ctx context.Context) (Checkpoint, error) {
	return s.t.restore(ctx)
}

// StartCommit writes cp into the checkpoint table, in the current
// transaction (begun now if there is none), and commits the transaction,
// which SQLite syncs. An invalid cp, or a done ctx, is refused before
// anything is written, and the transaction stays as it was. If the write
// or the commit fails, or the recorder under the store failed (a deposed
// primary's is fenced), the store fails: every later call returns the
// error, and the shard must be recovered to know what was committed.
func (s *SQLite) StartCommit(ctx context.Context, cp Checkpoint) error {
	if err := s.t.commit(ctx, cp, s.commit); err != nil {
		return err
	}
	if err := s.maybeRewrite(ctx); err != nil {
		s.t.err = err // Committed, but the database is in an unknown state.
		return err
	}
	return nil
}

// maybeRewrite rewrites the database into a new file if the log's ops
// since the current one's creation exceed the bound of RewriteAfter.
func (s *SQLite) maybeRewrite(ctx context.Context) error {
	rec, ok := s.fs.(*recoverylog.Recorder)
	if !ok || s.rewriteAfter < 0 {
		return nil
	}
	n, next, ok := rec.Lookup(s.path)
	if !ok || next-n.FirstOffset <= 2*n.Length+s.rewriteAfter {
		return nil
	}
	start := time.Now()
	defer func() { sqliteRewriteSeconds.Observe(time.Since(start).Seconds()) }()
	return s.rewrite(ctx)
}

// rewrite writes the database, as of its last commit, into a new file
// (VACUUM INTO) and renames it over the database. A crash at any step
// leaves the database whole: before the rename, the old file (with its
// WAL, until the close checkpoints it) is the database and OpenSQLite
// removes the rewrite; after it, the new file is.
func (s *SQLite) rewrite(ctx context.Context) error {
	tmp := s.path + sqliteRewriteSuffix
	if err := s.removeRewrite(); err != nil {
		return err
	}
	if _, err := s.t.db.ExecContext(ctx, `VACUUM INTO ?`, tmp); err != nil {
		return fmt.Errorf("store: SQLite: rewriting the database into %s: %w", tmp, err)
	}
	if err := s.t.db.Close(); err != nil {
		return fmt.Errorf("store: SQLite: closing the database to rewrite it: %w", err)
	}
	// A WAL left beside the new file would be played into it.
	if err := s.fs.Remove(s.path + "-wal"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: SQLite: removing the WAL to rewrite the database: %w", err)
	}
	if err := s.fs.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("store: SQLite: renaming the rewritten database: %w", err)
	}
	if err := syncDir(s.fs, s.dir); err != nil {
		return fmt.Errorf("store: SQLite: rewriting the database: %w", err)
	}
	if err := recorderErr(s.fs); err != nil {
		return fmt.Errorf("store: SQLite: rewriting the database: %w", err)
	}
	return s.open()
}

// commit writes the checkpoint b and commits tx, rolling it back if the
// write fails.
func (s *SQLite) commit(ctx context.Context, tx *sql.Tx, b []byte) error {
	q := fmt.Sprintf(`INSERT INTO %s (id, checkpoint) VALUES (1, ?)
		ON CONFLICT (id) DO UPDATE SET checkpoint = excluded.checkpoint`, SQLiteCheckpointTable)
	if _, err := tx.ExecContext(ctx, q, string(b)); err != nil {
		tx.Rollback()
		return fmt.Errorf("store: SQLite: writing the checkpoint (rolled back): %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: SQLite: commit failed, and whether it committed is unknown: %w", err)
	}
	if err := recorderErr(s.fs); err != nil {
		return fmt.Errorf("store: SQLite: commit: %w", err)
	}
	return nil
}

// Close rolls back the current transaction, if any, and closes the
// database (SQLite then checkpoints its WAL into the database file).
func (s *SQLite) Close() error {
	err := s.t.close()
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	if cerr := s.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("store: SQLite: closing the database: %w", cerr))
	}
	return err
}

func (s *SQLite) close() error {
	defer sqlitevfs.Unregister(s.vfsName)
	return s.t.db.Close()
}
