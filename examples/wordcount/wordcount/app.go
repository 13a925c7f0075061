// Package wordcount is an example consumer application, written only
// against Quire's public API, as a user would write one: it counts words.
//
// Words are published as messages ({"uuid": …, "word": …}, JSON lines) to
// Partitions journals wordcount/words/part-NNN, labelled app=wordcount,
// each word always to the same journal (message.ModuloMapping on the
// word). Shard wordcount/shard-NNN reads journal part-NNN and counts its
// words in a Pebble store, recorded into recovery log
// recovery/wordcount/shard-NNN. Every process of the application serves
// the WordCount RPC (package wordcountpb), answering a word's count from
// its shard's store, or forwarding the word to the process that is the
// primary of its shard.
//
// The binary is ../ (go run ./examples/wordcount); `quire dev` hosts the
// application too.
package wordcount

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/store"
)

// Word is the application's message: one occurrence of a word.
type Word struct {
	UUID message.UUID `json:"uuid"`
	Word string       `json:"word,omitempty"`
}

func (w *Word) GetUUID() message.UUID                     { return w.UUID }
func (w *Word) SetUUID(u message.UUID)                    { w.UUID = u }
func (w *Word) NewAcknowledgement(string) message.Message { return &Word{} }

// App is the word-count application: a consumer.Application, with a name
// (consumer.Namer) and a gRPC service of its own (consumer.Registerer).
type App struct{}

// Name is the application's name: its processes' keys are under
// /quire/consumers/wordcount/ by default.
func (App) Name() string { return "wordcount" }

// NewStore opens the shard's Pebble database, recorded into its recovery
// log through shard.FS().
func (App) NewStore(shard *consumer.Shard) (store.Store, error) {
	return store.OpenPebble(shard.Dir(), shard.FS(), &pebble.Options{Logger: store.PebbleLogger(shard.Logger())})
}

// NewMessage returns a Word: every source journal holds them.
func (App) NewMessage(string) message.Message { return &Word{} }

// Consume counts one word, reading and writing its count in the
// transaction's batch, whose reads see the transaction's earlier writes.
// The batch commits with the shard's checkpoint, so a word is counted
// exactly once however often the shard fails over.
func (App) Consume(shard *consumer.Shard, st store.Store, env consumer.Envelope) error {
	w := env.Message.(*Word)
	if w.Word == "" {
		return nil
	}
	batch := st.(*store.Pebble).Batch()
	n, err := ReadCount(batch, w.Word)
	if err != nil {
		return err
	}
	return batch.Set(countKey(w.Word), binary.AppendUvarint(nil, n+1), nil)
}

// FinalizeTxn has nothing to do: Consume wrote everything into the batch.
func (App) FinalizeTxn(*consumer.Shard, store.Store) error { return nil }

// Register serves the WordCount RPC in each process.
func (App) Register(gs *grpc.Server, srv *consumer.Server) {
	wordcountpb.RegisterWordCountServer(gs, &service{srv: srv})
}

// countKey is the Pebble key of a word's count; the value is a uvarint.
func countKey(word string) []byte { return []byte("count/" + word) }

// ReadCount reads a word's count from r: a shard's batch, or its
// database.
func ReadCount(r pebble.Reader, word string) (uint64, error) {
	v, closer, err := r.Get(countKey(word))
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("reading the count of %q: %w", word, err)
	}
	defer closer.Close()
	n, size := binary.Uvarint(v)
	if size <= 0 {
		return 0, fmt.Errorf("the count of %q is corrupt: %x", word, v)
	}
	return n, nil
}
