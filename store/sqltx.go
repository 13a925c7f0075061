package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// sqlTx is what the stores over database/sql (SQL and SQLite) share: the
// transaction the application writes in, begun when first asked for and
// committed together with the checkpoint, and the failure that sticks
// once a commit failed after its transaction was used (its changes are
// rolled back, or their fate is unknown) or the store was closed.
type sqlTx struct {
	db   *sql.DB
	opts *sql.TxOptions
	name string  // Names the store in errors.
	cp   []byte  // JSON of the committed checkpoint; nil if none.
	tx   *sql.Tx // The current transaction; nil until Tx or StartCommit.
	err  error
}

// begin returns the current transaction, beginning it with ctx if there
// is none.
func (t *sqlTx) begin(ctx context.Context) (*sql.Tx, error) {
	if t.err != nil {
		return nil, t.err
	}
	if t.tx != nil {
		return t.tx, nil
	}
	tx, err := t.db.BeginTx(ctx, t.opts)
	if err != nil {
		return nil, fmt.Errorf("store: %s: beginning a transaction: %w", t.name, err)
	}
	t.tx = tx
	return tx, nil
}

// restore returns the committed checkpoint.
func (t *sqlTx) restore(ctx context.Context) (Checkpoint, error) {
	if t.err != nil {
		return Checkpoint{}, t.err
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	if t.cp == nil {
		return Checkpoint{}, nil
	}
	cp, err := unmarshalCheckpoint(t.cp)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("store: %s: %w", t.name, err)
	}
	return cp, nil
}

// commit marshals cp and has write write it into the current transaction
// (begun now if there is none) and commit it. An invalid cp, or a done
// ctx, is refused before anything is written, and the transaction stays
// as it was. If write fails, the failure sticks.
func (t *sqlTx) commit(ctx context.Context, cp Checkpoint, write func(context.Context, *sql.Tx, []byte) error) error {
	if t.err != nil {
		return t.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := marshalCheckpoint(cp)
	if err != nil {
		return err
	}
	tx, err := t.begin(ctx)
	if err != nil {
		return err
	}
	t.tx = nil
	if err := write(ctx, tx, b); err != nil {
		t.err = err
		return err
	}
	t.cp = b
	return nil
}

// close fails the store with ErrClosed and rolls back the current
// transaction, if any. It returns ErrClosed if the store was closed.
func (t *sqlTx) close() error {
	if errors.Is(t.err, ErrClosed) {
		return ErrClosed
	}
	t.err, t.cp = ErrClosed, nil
	tx := t.tx
	t.tx = nil
	if tx == nil {
		return nil
	}
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("store: %s: rolling back the pending transaction: %w", t.name, err)
	}
	return nil
}
