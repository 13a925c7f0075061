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
// Two stores are provided:
//
//   - Pebble: an embedded Pebble database. In production it runs over a
//     recoverylog.Recorder, so that a commit, synced by Pebble, is in the
//     shard's recovery log when StartCommit returns, and the store can be
//     rebuilt on another machine by a recoverylog.Player.
//   - Memory: a Go map and a checkpoint held in memory, for stateless
//     applications and tests. Nothing of it survives the process.
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
