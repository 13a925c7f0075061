package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// DefaultSQLTable is the checkpoint table of an SQL store whose
// SQLOptions.Table is empty.
const DefaultSQLTable = "quire_checkpoints"

// SQLTableDDL is the definition of an SQL store's checkpoint table, %s
// being its name. OpenSQL creates the table if it does not exist. One row
// per shard: fence counts the opens of the shard's store, and checkpoint
// is the JSON of its committed Checkpoint (NULL until the first commit).
const SQLTableDDL = `CREATE TABLE IF NOT EXISTS %s (
	shard      TEXT PRIMARY KEY,
	fence      BIGINT NOT NULL,
	checkpoint TEXT
)`

// ErrFenced is wrapped by the error of a commit by an SQL store that has
// been fenced: the shard's store was opened again since (by a successor
// primary), so this one may never commit again.
var ErrFenced = errors.New("store: fenced: the shard's store was opened again since")

// SQLOptions configures an SQL store. The zero value is usable.
type SQLOptions struct {
	// Table is the checkpoint table: an SQL identifier, or schema.table,
	// of ASCII letters, digits and underscores, each part at most 63
	// bytes (unquoted, so PostgreSQL folds it to lower case). Empty
	// means DefaultSQLTable.
	Table string
	// TableExists tells OpenSQL not to create the table: it was created
	// (with SQLTableDDL) by a role that may, and the application's may
	// not (PostgreSQL refuses CREATE TABLE IF NOT EXISTS, even of a table
	// that exists, to a role without the CREATE privilege on the schema).
	TableExists bool
	// TxOptions are the options (isolation level) of the transactions
	// that Tx begins; nil means the database's defaults.
	TxOptions *sql.TxOptions
}

// sqlIdentifier matches a table name that is safe to put into a
// statement as it is.
var sqlIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// SQL is a store in a database reached through database/sql. The
// application makes a transaction's changes within the *sql.Tx that Tx
// returns; StartCommit writes the checkpoint into the shard's row of the
// checkpoint table in that same transaction and commits it, so that
// changes and checkpoint commit together.
//
// The database is durable on its own: an SQL store needs no recovery log,
// and a shard resumed anywhere opens the store again. Opening it fences
// the previous one: OpenSQL increments the shard's fence, and each commit
// updates the shard's row only where the fence is still the one this
// store read, so a deposed primary's commit fails with ErrFenced and
// rolls back.
//
// The statements use $n placeholders, INSERT ... ON CONFLICT and
// RETURNING: they are PostgreSQL's, and the store is tested against
// PostgreSQL only.
type SQL struct {
	t     sqlTx
	shard string
	table string
	fence int64
}

var _ Store = (*SQL)(nil)

// OpenSQL opens the store of shard shardID in db. It creates the
// checkpoint table if it does not exist (SQLTableDDL), unless
// opts.TableExists; then, in one statement, it increments the shard's
// fence (adding the shard's row if there is none) and reads its committed
// checkpoint. From then on, every store opened earlier for the shard
// fails to commit. db stays the caller's: Close does not close it.
func OpenSQL(ctx context.Context, db *sql.DB, shardID string, opts SQLOptions) (*SQL, error) {
	if err := validateSQLArgs(db, shardID, &opts); err != nil {
		return nil, err
	}
	s := &SQL{t: sqlTx{db: db, opts: opts.TxOptions, name: fmt.Sprintf("SQL shard %q (table %s)", shardID, opts.Table)}, shard: shardID, table: opts.Table}
	if !opts.TableExists {
		if err := s.createTable(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.takeFence(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// validateSQLArgs checks OpenSQL's arguments, and sets opts.Table's
// default.
func validateSQLArgs(db *sql.DB, shardID string, opts *SQLOptions) error {
	if db == nil {
		return errors.New("store: OpenSQL: db is nil")
	}
	// PostgreSQL's TEXT holds neither NUL bytes nor invalid UTF-8.
	if shardID == "" || !utf8.ValidString(shardID) || strings.ContainsRune(shardID, 0) {
		return fmt.Errorf("store: OpenSQL: shard ID %q is not a non-empty UTF-8 string without NUL bytes", shardID)
	}
	if opts.Table == "" {
		opts.Table = DefaultSQLTable
	}
	if !sqlIdentifier.MatchString(opts.Table) {
		return fmt.Errorf("store: OpenSQL: table %q is not an SQL identifier or schema.table of letters, digits and underscores (at most 63 each)", opts.Table)
	}
	return nil
}

// createTable creates the checkpoint table if it does not exist. It tries
// twice: PostgreSQL's CREATE TABLE IF NOT EXISTS can fail when another
// session creates the same table at the same time, and then the second
// try finds it.
func (s *SQL) createTable(ctx context.Context) error {
	var err error
	for range 2 {
		if _, err = s.t.db.ExecContext(ctx, fmt.Sprintf(SQLTableDDL, s.table)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("store: OpenSQL: creating table %s: %w", s.table, err)
}

// takeFence increments the shard's fence and reads its checkpoint.
func (s *SQL) takeFence(ctx context.Context) error {
	q := fmt.Sprintf(`INSERT INTO %s AS c (shard, fence) VALUES ($1, 1)
		ON CONFLICT (shard) DO UPDATE SET fence = c.fence + 1
		RETURNING fence, checkpoint`, s.table)
	var cp sql.NullString
	if err := s.t.db.QueryRowContext(ctx, q, s.shard).Scan(&s.fence, &cp); err != nil {
		return fmt.Errorf("store: OpenSQL: taking the fence of shard %q in table %s: %w", s.shard, s.table, err)
	}
	if cp.Valid {
		s.t.cp = []byte(cp.String)
	}
	return nil
}

// Fence returns the shard's fence that this store holds: the number of
// times the shard's store was opened, this one included.
func (s *SQL) Fence() int64 { return s.fence }

// Tx returns the current transaction, beginning it with ctx if there is
// none: the application makes its changes in it, and StartCommit commits
// it. ctx must stay live until then, as database/sql rolls a transaction
// back when the context it began with is done (StartCommit then fails).
// After each StartCommit, the next call begins a new transaction: call Tx
// again rather than keeping it.
func (s *SQL) Tx(ctx context.Context) (*sql.Tx, error) { return s.t.begin(ctx) }

// RestoreCheckpoint returns the committed checkpoint: the one OpenSQL
// read, or the last one this store committed since (no other store can
// commit for the shard without fencing this one first).
func (s *SQL) RestoreCheckpoint(ctx context.Context) (Checkpoint, error) {
	return s.t.restore(ctx)
}

// StartCommit writes cp into the shard's row, in the current transaction
// (begun now if there is none), if the row still holds this store's fence,
// and commits the transaction. An invalid cp, or a done ctx, is refused
// before anything is written, and the transaction stays as it was. If the
// store has been fenced, the transaction is rolled back and the error
// wraps ErrFenced. If the write or the commit fails otherwise, the
// transaction is rolled back (or, for a failed commit, its outcome is
// unknown). In every one of these cases the store fails: every later call
// returns the error, and the shard must be recovered (the store opened
// again) to go on.
func (s *SQL) StartCommit(ctx context.Context, cp Checkpoint) error {
	return s.t.commit(ctx, cp, s.commit)
}

// commit writes the checkpoint b into the shard's row if it holds this
// store's fence, and commits tx; it rolls tx back if either fails.
func (s *SQL) commit(ctx context.Context, tx *sql.Tx, b []byte) error {
	q := fmt.Sprintf(`UPDATE %s SET checkpoint = $3 WHERE shard = $1 AND fence = $2`, s.table)
	res, err := tx.ExecContext(ctx, q, s.shard, s.fence, string(b))
	if err != nil {
		tx.Rollback()
		return fmt.Errorf("store: SQL shard %q: writing the checkpoint into table %s (rolled back): %w", s.shard, s.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		tx.Rollback()
		return fmt.Errorf("store: SQL shard %q: writing the checkpoint into table %s (rolled back): %w", s.shard, s.table, err)
	}
	switch {
	case n == 0:
		tx.Rollback()
		return fmt.Errorf("store: SQL shard %q: commit with fence %d rolled back: %s: %w", s.shard, s.fence, s.fenceNow(ctx), ErrFenced)
	case n != 1: // The table lacks its primary key.
		tx.Rollback()
		return fmt.Errorf("store: SQL shard %q: the checkpoint's update changed %d rows of table %s, not 1 (rolled back): is shard its primary key?", s.shard, n, s.table)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: SQL shard %q: commit failed, and whether it committed is unknown: %w", s.shard, err)
	}
	return nil
}

// fenceNow describes the shard's row as it is now, for the error of a
// fenced commit.
func (s *SQL) fenceNow(ctx context.Context) string {
	var fence int64
	q := fmt.Sprintf(`SELECT fence FROM %s WHERE shard = $1`, s.table)
	switch err := s.t.db.QueryRowContext(ctx, q, s.shard).Scan(&fence); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Sprintf("the shard's row in table %s is gone", s.table)
	case err != nil:
		return fmt.Sprintf("the shard's fence in table %s is no longer %d (reading it: %v)", s.table, s.fence, err)
	}
	return fmt.Sprintf("the shard's fence in table %s is now %d", s.table, fence)
}

// Close rolls back the current transaction, if any. It does not close the
// database.
func (s *SQL) Close() error { return s.t.close() }
