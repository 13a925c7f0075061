// Package streamsum is an example consumer application that checks
// exactly-once processing end to end, after Gazette's stream-sum.
//
// Producers publish the chunks of many streams, inside transactions
// (Producer), to Partitions journals streamsum/chunks/part-NNN: every
// chunk of a stream to the same journal, numbered from 1, the last one
// marked. Shard streamsum/shard-NNN reads part-NNN and sums each stream in
// a Pebble store, recorded into recovery log
// recovery/streamsum/shard-NNN; on a stream's last chunk it publishes the
// stream's Sum to journal streamsum/sums, within the shard's own
// transaction. Check reads the sums and compares them with what the
// producers had acknowledged: a chunk lost, or applied twice, or out of
// order, shows as a wrong sum or a sum's Problem; a sum published twice
// shows as a duplicate.
//
// The binary is ../ (go run ./examples/streamsum).
package streamsum

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/store"
)

// Chunk is a piece of a stream: its Seq-th value (from 1). The last chunk
// of a stream has Last set.
type Chunk struct {
	UUID   message.UUID `json:"uuid"`
	Stream string       `json:"stream,omitempty"`
	Seq    int          `json:"seq,omitempty"`
	Value  uint64       `json:"value,omitempty"`
	Last   bool         `json:"last,omitempty"`
}

func (c *Chunk) GetUUID() message.UUID                     { return c.UUID }
func (c *Chunk) SetUUID(u message.UUID)                    { c.UUID = u }
func (c *Chunk) NewAcknowledgement(string) message.Message { return &Chunk{} }

// Sum is what a shard publishes once it has consumed a stream's last
// chunk: the sum of its values, and how many chunks it had. A shard that
// consumes a chunk out of order (one missing, or one applied twice)
// publishes a Sum with Problem saying so, at once.
type Sum struct {
	UUID    message.UUID `json:"uuid"`
	Stream  string       `json:"stream,omitempty"`
	Sum     uint64       `json:"sum,omitempty"`
	Chunks  int          `json:"chunks,omitempty"`
	Problem string       `json:"problem,omitempty"`
}

func (s *Sum) GetUUID() message.UUID                     { return s.UUID }
func (s *Sum) SetUUID(u message.UUID)                    { s.UUID = u }
func (s *Sum) NewAcknowledgement(string) message.Message { return &Sum{} }

// App is the stream-sum application: a consumer.Application with a name
// (consumer.Namer).
type App struct{}

// Name is the application's name: its processes' keys are under
// /quire/consumers/streamsum/ by default.
func (App) Name() string { return "streamsum" }

// NewStore opens the shard's Pebble database, recorded into its recovery
// log through shard.FS().
func (App) NewStore(shard *consumer.Shard) (store.Store, error) {
	return store.OpenPebble(shard.Dir(), shard.FS(), &pebble.Options{Logger: store.PebbleLogger(shard.Logger())})
}

// NewMessage returns a Chunk: every source journal holds them.
func (App) NewMessage(string) message.Message { return &Chunk{} }

// Consume adds a chunk to its stream's sum, in the transaction's batch,
// which commits with the shard's checkpoint; and, on the stream's last
// chunk, publishes the Sum, which commits with the same transaction. A
// chunk is so applied exactly once, and a Sum published exactly once,
// however often the shard fails over.
func (App) Consume(shard *consumer.Shard, st store.Store, env consumer.Envelope) error {
	c := env.Message.(*Chunk)
	if c.Stream == "" {
		return nil // An acknowledgement.
	}
	batch := st.(*store.Pebble).Batch()
	s, err := readState(batch, c.Stream)
	if err != nil {
		return err
	}
	var problem string
	if c.Seq != s.next {
		problem = fmt.Sprintf("chunk %d of stream %s at %s:%d, where chunk %d was due", c.Seq, c.Stream, env.Journal, env.Begin, s.next)
	}
	s.next, s.sum = c.Seq+1, s.sum+c.Value
	if problem != "" || c.Last {
		sum := &Sum{Stream: c.Stream, Sum: s.sum, Chunks: c.Seq, Problem: problem}
		if _, err := shard.Publisher().PublishUncommitted(shard.Context(), SumsJournal, sum); err != nil {
			return fmt.Errorf("publishing the sum of stream %s: %w", c.Stream, err)
		}
	}
	if c.Last {
		return batch.Delete(stateKey(c.Stream), nil)
	}
	return batch.Set(stateKey(c.Stream), binary.AppendUvarint(binary.AppendUvarint(nil, uint64(s.next)), s.sum), nil)
}

// FinalizeTxn has nothing to do: Consume wrote everything into the batch.
func (App) FinalizeTxn(*consumer.Shard, store.Store) error { return nil }

// state is a stream's progress: the chunk due next, and the sum so far.
type state struct {
	next int
	sum  uint64
}

func stateKey(stream string) []byte { return []byte("stream/" + stream) }

// readState reads a stream's state from r; a stream not seen yet is due
// its first chunk.
func readState(r pebble.Reader, stream string) (state, error) {
	v, closer, err := r.Get(stateKey(stream))
	if errors.Is(err, pebble.ErrNotFound) {
		return state{next: 1}, nil
	} else if err != nil {
		return state{}, fmt.Errorf("reading the state of stream %s: %w", stream, err)
	}
	defer closer.Close()
	next, n := binary.Uvarint(v)
	sum, m := binary.Uvarint(v[max(n, 0):])
	if n <= 0 || m <= 0 {
		return state{}, fmt.Errorf("the state of stream %s is corrupt: %x", stream, v)
	}
	return state{next: int(next), sum: sum}, nil
}
