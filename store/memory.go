package store

import "context"

// Memory is a store whose state is a Go map, State, that the application
// reads and writes as it likes, and whose checkpoint is kept in memory.
// Nothing of it survives the process: a shard resumed elsewhere (or after
// a restart) starts from an empty map and the zero Checkpoint, that is,
// from the sources' beginnings (or their minimum offsets). Use it for
// stateless applications, and in tests.
//
// Changes to State take effect at once; StartCommit only records the
// checkpoint (a copy: the caller may reuse cp).
type Memory[K comparable, V any] struct {
	State map[K]V

	cp     []byte // JSON of the committed checkpoint; nil if none.
	closed bool
}

var _ Store = (*Memory[string, int])(nil)

// NewMemory returns an empty Memory store.
func NewMemory[K comparable, V any]() *Memory[K, V] {
	return &Memory[K, V]{State: map[K]V{}}
}

// RestoreCheckpoint returns the last checkpoint committed by StartCommit,
// or the zero Checkpoint.
func (m *Memory[K, V]) RestoreCheckpoint(ctx context.Context) (Checkpoint, error) {
	if m.closed {
		return Checkpoint{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Checkpoint{}, err
	}
	if m.cp == nil {
		return Checkpoint{}, nil
	}
	return unmarshalCheckpoint(m.cp)
}

// StartCommit records cp, refusing it if it is invalid.
func (m *Memory[K, V]) StartCommit(ctx context.Context, cp Checkpoint) error {
	if m.closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := marshalCheckpoint(cp)
	if err != nil {
		return err
	}
	m.cp = b
	return nil
}

// Close drops the store's state.
func (m *Memory[K, V]) Close() error {
	if m.closed {
		return ErrClosed
	}
	m.closed, m.State, m.cp = true, nil, nil
	return nil
}
