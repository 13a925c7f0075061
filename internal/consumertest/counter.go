package consumertest

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/store"
)

// CountMsg is the message of the Counter application: one occurrence of
// Key.
type CountMsg struct {
	UUID message.UUID `json:"uuid"`
	Key  string       `json:"key,omitempty"`
	// Fail makes Consume fail, for tests of FAILED shards.
	Fail bool `json:"fail,omitempty"`
}

func (m *CountMsg) GetUUID() message.UUID                     { return m.UUID }
func (m *CountMsg) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *CountMsg) NewAcknowledgement(string) message.Message { return &CountMsg{} }

// Counter is a consumer application for tests: it counts messages per
// key, at "count/KEY" (a uvarint) in a recorded Pebble store, reading and
// writing each count in the transaction's batch.
type Counter struct{}

func (Counter) NewStore(sh *consumer.Shard) (store.Store, error) {
	return store.OpenPebble(sh.Dir(), sh.FS(), &pebble.Options{Logger: QuietPebble{}})
}

func (Counter) NewMessage(string) message.Message { return &CountMsg{} }

func (Counter) Consume(sh *consumer.Shard, st store.Store, env consumer.Envelope) error {
	m := env.Message.(*CountMsg)
	if m.Fail {
		return fmt.Errorf("message at %s:%d asks to fail", env.Journal, env.Begin)
	}
	b := st.(*store.Pebble).Batch()
	key := []byte("count/" + m.Key)
	n, err := ReadCount(b, key)
	if err != nil {
		return err
	}
	return b.Set(key, binary.AppendUvarint(nil, n+1), nil)
}

func (Counter) FinalizeTxn(*consumer.Shard, store.Store) error { return nil }

// ReadCount returns the count at key, zero if there is none.
func ReadCount(r pebble.Reader, key []byte) (uint64, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	defer closer.Close()
	n, _ := binary.Uvarint(v)
	return n, nil
}

// QuietPebble is a Pebble logger that drops Pebble's info and errors (a
// test asserts what it needs) and panics on fatal ones, as Pebble's own
// logger would exit.
type QuietPebble struct{}

func (QuietPebble) Infof(string, ...any)      {}
func (QuietPebble) Errorf(string, ...any)     {}
func (QuietPebble) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
