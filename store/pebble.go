package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/quire-dev/quire/recoverylog"
)

// ReservedPrefix begins the keys that a Pebble store keeps for itself; an
// application must not write keys with it, and skips them when it iterates
// over the whole database (they sort before any key not beginning with a
// zero byte).
const ReservedPrefix = "\x00quire/"

// CheckpointKey is the key of the committed Checkpoint (JSON) in a Pebble
// store.
const CheckpointKey = ReservedPrefix + "checkpoint"

// Pebble is a store in an embedded Pebble database. The application writes
// a transaction's changes into Batch, an indexed batch whose reads see its
// pending writes over the database; StartCommit adds the checkpoint to the
// batch and commits it with a sync, so that changes and checkpoint are
// committed in one atomic, durable write, then starts a new batch.
type Pebble struct {
	fs    vfs.FS
	db    *pebble.DB
	batch *pebble.Batch
	// err is sticky: set when a commit failed and the batch's fate is
	// unknown to the store, or on Close.
	err error
}

var _ Store = (*Pebble)(nil)

// OpenPebble opens (or creates) the Pebble database in dir over fs. In
// production fs is the shard's recoverylog.Recorder, recording dir: a
// commit is then in the recovery log when it returns, and OpenPebble also
// applies recoverylog.PebbleOptions. In tests fs may be vfs.Default. opts
// may be nil; OpenPebble does not modify it, and its FS is replaced by fs.
func OpenPebble(dir string, fs vfs.FS, opts *pebble.Options) (*Pebble, error) {
	if fs == nil {
		return nil, errors.New("store: OpenPebble: fs is required")
	}
	if opts == nil {
		opts = &pebble.Options{}
	} else {
		opts = opts.Clone()
	}
	opts.FS = fs
	if _, ok := fs.(*recoverylog.Recorder); ok {
		recoverylog.PebbleOptions(opts)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("store: opening pebble at %s: %w", dir, err)
	}
	return &Pebble{fs: fs, db: db, batch: db.NewIndexedBatch()}, nil
}

// PebbleLogger returns a pebble.Logger that logs to log: Pebble's routine
// messages at debug level, its errors at error level. Fatalf logs, then
// panics: Pebble calls it on a broken invariant and expects it not to
// return.
func PebbleLogger(log *slog.Logger) pebble.Logger { return pebbleLogger{log} }

type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...))
}

// DB returns the database, for reads of committed state. Writes go to
// Batch.
func (p *Pebble) DB() *pebble.DB { return p.db }

// Batch returns the current transaction's batch, into which the
// application writes its changes. Its reads (Get, NewIter) see its pending
// writes over the committed state. It is replaced by a new batch after
// each StartCommit: call Batch again rather than keeping it.
func (p *Pebble) Batch() *pebble.Batch { return p.batch }

// RestoreCheckpoint returns the committed checkpoint, read from the
// database (not from the pending batch).
func (p *Pebble) RestoreCheckpoint(ctx context.Context) (Checkpoint, error) {
	if p.err != nil {
		return Checkpoint{}, p.err
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	v, closer, err := p.db.Get([]byte(CheckpointKey))
	if errors.Is(err, pebble.ErrNotFound) {
		return Checkpoint{}, nil
	} else if err != nil {
		return Checkpoint{}, fmt.Errorf("store: reading checkpoint: %w", err)
	}
	defer closer.Close()
	return unmarshalCheckpoint(v)
}

// StartCommit writes cp under CheckpointKey into the current batch,
// commits the batch with pebble.Sync, and starts a new batch. An invalid
// cp, or a done ctx, is refused before anything is written, and the batch
// stays as it was. If the commit itself fails, the store fails: every
// later call returns that error, and the shard must be recovered (its
// database reopened, or played again from the recovery log) to know what
// was committed.
func (p *Pebble) StartCommit(ctx context.Context, cp Checkpoint) error {
	if p.err != nil {
		return p.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := marshalCheckpoint(cp)
	if err != nil {
		return err
	}
	if err := p.batch.Set([]byte(CheckpointKey), b, nil); err != nil {
		p.err = fmt.Errorf("store: writing checkpoint into batch: %w", err)
		return p.err
	}
	if err := p.batch.Commit(pebble.Sync); err != nil {
		p.err = fmt.Errorf("store: commit: %w", err)
		return p.err
	}
	if err := recorderErr(p.fs); err != nil {
		p.err = fmt.Errorf("store: commit: %w", err)
		return p.err
	}
	old := p.batch
	p.batch = p.db.NewIndexedBatch()
	if err := old.Close(); err != nil {
		return fmt.Errorf("store: closing committed batch: %w", err)
	}
	return nil
}

// recorderErr returns the error of fs if it is a recoverylog.Recorder that
// failed: it lets syncs return (Pebble would crash on a failed one), so a
// commit is durable only if the recorder is sound after its sync.
func recorderErr(fs vfs.FS) error {
	if r, ok := fs.(*recoverylog.Recorder); ok {
		return r.Err()
	}
	return nil
}

// Pipeliner is a Store that can let the next transaction run while a
// commit becomes durable: a consumer's transactions are pipelined over it.
type Pipeliner interface {
	Store
	// CommitAsync commits like StartCommit, but returns once the commit
	// is applied (later reads and writes build on it), with a function
	// that waits until it is durable. The caller calls wait once, and
	// commits nothing else before it returned nil. If wait fails, the
	// commit's durability is unknown and the store has failed.
	CommitAsync(ctx context.Context, cp Checkpoint) (wait func() error, err error)
}

var _ Pipeliner = (*Pebble)(nil)

// CommitAsync implements Pipeliner: the batch is applied to the database
// without waiting for its WAL sync, which wait awaits.
func (p *Pebble) CommitAsync(ctx context.Context, cp Checkpoint) (func() error, error) {
	if p.err != nil {
		return nil, p.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := marshalCheckpoint(cp)
	if err != nil {
		return nil, err
	}
	if err := p.batch.Set([]byte(CheckpointKey), b, nil); err != nil {
		p.err = fmt.Errorf("store: writing checkpoint into batch: %w", err)
		return nil, p.err
	}
	// ApplyNoSyncWait makes the batch visible before its WAL sync, as a
	// synced Apply would too; only the wait is deferred.
	if err := p.db.ApplyNoSyncWait(p.batch, pebble.Sync); err != nil {
		p.err = fmt.Errorf("store: commit: %w", err)
		return nil, p.err
	}
	old := p.batch
	p.batch = p.db.NewIndexedBatch()
	fs := p.fs
	return func() error {
		err := old.SyncWait()
		if err == nil {
			err = recorderErr(fs)
		}
		if cerr := old.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("store: closing committed batch: %w", cerr)
		}
		if err != nil {
			return fmt.Errorf("store: commit: %w", err)
		}
		return nil
	}, nil
}

// Close discards the pending batch and closes the database.
func (p *Pebble) Close() error {
	if errors.Is(p.err, ErrClosed) {
		return ErrClosed
	}
	p.err = ErrClosed
	var errs []error
	if p.batch != nil {
		errs = append(errs, p.batch.Close())
		p.batch = nil
	}
	errs = append(errs, p.db.Close())
	return errors.Join(errs...)
}
