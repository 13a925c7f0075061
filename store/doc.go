// Package store holds a consumer shard's state stores: the state an
// application builds from the messages it reads, together with the shard's
// Checkpoint, committed atomically (DESIGN.md invariant 5: state and offsets
// commit together).
//
// A transaction of a shard writes the application's changes into its store,
// then calls StartCommit with the checkpoint of the messages it consumed:
// the source journals' read checkpoints (offsets and producer states) and
// the acknowledgement intents the transaction must write once committed.
// When StartCommit returns nil, the changes and the checkpoint are durable
// together; when it fails, neither is. A shard resumed anywhere calls
// RestoreCheckpoint, re-writes the returned acknowledgement intents
// (completing or rolling back an interrupted commit), and continues reading
// each source from its checkpoint.
//
// # Stores
//
// Five stores are provided (docs/stores.md compares them):
//
//   - Pebble: an embedded Pebble database, for state of any size. In
//     production it runs over a recoverylog.Recorder, so that a commit,
//     synced by Pebble, is in the shard's recovery log when StartCommit
//     returns, and the store can be rebuilt on another machine by a
//     recoverylog.Player.
//   - JSONFile: a Go value of the application's (a map, a struct) that
//     each commit writes whole, with the checkpoint, as one JSON document:
//     to a temporary file, synced, renamed over the committed one, and the
//     directory synced. Its file operations are those a
//     recoverylog.Recorder records, so it is recorded and played like
//     Pebble. For small state (a few MiB at most): each commit costs the
//     whole state's size.
//   - SQLite: an embedded SQLite database (the pure-Go
//     github.com/ncruces/go-sqlite3). The application makes its changes
//     in the *sql.Tx that the store hands out, and StartCommit writes the
//     checkpoint in the same transaction and commits it. Its files go
//     through a vfs.FS, in production a recoverylog.Recorder, which
//     records SQLite's writes in place: it is recorded and played like
//     Pebble.
//   - SQL: a database reached through database/sql (tested against
//     PostgreSQL). The application makes its changes in the *sql.Tx that
//     the store hands out, and StartCommit writes the checkpoint in the
//     same transaction and commits it. The database is durable on its
//     own, so the shard needs no recovery log; a fence per shard keeps a
//     deposed primary from committing (ErrFenced).
//   - Memory: a Go map and a checkpoint held in memory, for stateless
//     applications and tests. Nothing of it survives the process.
//
// Pebble, JSONFile and SQLite fail for good when a commit fails midway
// (every later call returns the error; the shard is recovered to know
// what was committed); SQL does too once its transaction was used. A commit refused
// before anything was written (an invalid checkpoint, a done context, for
// JSONFile a state that does not marshal) leaves the store as it was.
//
// # The SQL store's table
//
// OpenSQL creates its checkpoint table (DefaultSQLTable, or
// SQLOptions.Table) if it does not exist, with SQLTableDDL:
//
//	CREATE TABLE IF NOT EXISTS quire_checkpoints (
//		shard      TEXT PRIMARY KEY,
//		fence      BIGINT NOT NULL,
//		checkpoint TEXT
//	)
//
// A role that may not create tables (PostgreSQL requires the CREATE
// privilege on the schema even when the table exists) sets
// SQLOptions.TableExists, the table having been created by one that may;
// checkpoint may then also be JSONB. The role needs SELECT, INSERT and
// UPDATE on it. Each OpenSQL increments its shard's fence:
//
//	INSERT INTO quire_checkpoints AS c (shard, fence) VALUES ($1, 1)
//	ON CONFLICT (shard) DO UPDATE SET fence = c.fence + 1
//	RETURNING fence, checkpoint
//
// and each commit, in the application's transaction, writes the
// checkpoint only where the fence is still its own:
//
//	UPDATE quire_checkpoints SET checkpoint = $3 WHERE shard = $1 AND fence = $2
//
// If that updates no row, a successor has opened the store: the
// transaction is rolled back and StartCommit fails with ErrFenced.
//
// A store serves one shard's transactions, one at a time: it is not safe
// for concurrent use.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/quire-dev/quire/message"
)

// Checkpoint is what a shard resumes from.
type Checkpoint struct {
	// Sources holds, per source journal, the message reader's checkpoint.
	Sources map[string]message.Checkpoint `json:"sources"`
	// AckIntents are the acknowledgement intents of the last committed
	// transaction: written after the commit, and re-written by a
	// successor that resumes from this checkpoint.
	AckIntents []message.AckIntent `json:"ackIntents"`
}

// Validate tells whether cp could be committed: every source is named and
// has a valid checkpoint (message.Checkpoint.Validate), and every
// acknowledgement intent names its journal and has content. Its error names
// what is wrong.
func (cp Checkpoint) Validate() error {
	for j, src := range cp.Sources {
		if j == "" {
			return errors.New("store: checkpoint: a source has an empty journal name")
		}
		if err := src.Validate(); err != nil {
			return fmt.Errorf("store: checkpoint: source %q: %w", j, err)
		}
	}
	for i, ai := range cp.AckIntents {
		if ai.Journal == "" {
			return fmt.Errorf("store: checkpoint: ack intent %d has an empty journal name", i)
		}
		if len(ai.Intent) == 0 {
			return fmt.Errorf("store: checkpoint: ack intent %d (journal %q) is empty", i, ai.Journal)
		}
	}
	return nil
}

// marshalCheckpoint validates cp and returns its JSON form.
func marshalCheckpoint(cp Checkpoint) ([]byte, error) {
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return nil, fmt.Errorf("store: checkpoint: %w", err)
	}
	return b, nil
}

// unmarshalCheckpoint decodes and validates a committed checkpoint.
func unmarshalCheckpoint(b []byte) (Checkpoint, error) {
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return Checkpoint{}, fmt.Errorf("store: committed checkpoint: %w", err)
	}
	if err := cp.Validate(); err != nil {
		return Checkpoint{}, fmt.Errorf("store: committed checkpoint is invalid: %w", err)
	}
	return cp, nil
}

// Store is implemented by every store.
type Store interface {
	// RestoreCheckpoint returns the last committed checkpoint: the zero
	// Checkpoint for a new store.
	RestoreCheckpoint(ctx context.Context) (Checkpoint, error)
	// StartCommit durably commits the application's pending changes
	// together with cp, and returns when they are durable. If it fails,
	// neither the changes nor cp are committed by it; an invalid cp
	// (Checkpoint.Validate) is refused before anything is written.
	StartCommit(ctx context.Context, cp Checkpoint) error
	// Close releases the store. Pending changes are discarded.
	Close() error
}

// ErrClosed is returned by the methods of a closed store.
var ErrClosed = errors.New("store: closed")
