package consumer

import (
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/store"
)

// Application is what a consumer application implements: how a shard
// keeps its state, and what one message does to it. The framework calls a
// shard's methods from one goroutine at a time, in this order:
//
//	NewStore                         once, when the replica becomes primary
//	(BeginTxn) Consume… FinalizeTxn  per transaction, then the commit
//	(FinishedTxn)                    once the commit and its acknowledgements resolved
//
// Different shards call concurrently. An error (or a panic) from any of
// them fails the shard: its status becomes FAILED with the error, and the
// process goes on serving its other shards.
type Application interface {
	// NewStore opens the shard's store. A shard with a recovery log opens
	// it in shard.Dir() over shard.FS(), the recorder of the log (see
	// store.OpenPebble): what it writes is recorded, and is there again
	// when another process becomes primary.
	NewStore(shard *Shard) (store.Store, error)
	// NewMessage returns a new, empty message of the type that journal
	// holds, for a source journal's messages to be decoded into. It is
	// called from the goroutines that decode the sources, several at once
	// (see message.ReaderConfig.Decoders).
	NewMessage(journal string) message.Message
	// Consume applies one committed message to the store, within the
	// current transaction.
	Consume(shard *Shard, st store.Store, env Envelope) error
	// FinalizeTxn ends the current transaction: it writes any state the
	// application kept in memory into the store, and publishes what the
	// transaction produces (shard.Publisher()). The commit follows.
	FinalizeTxn(shard *Shard, st store.Store) error
}

// Envelope is a message with the journal and offsets it was read at.
type Envelope struct {
	Journal string
	message.Delivery
}

// The optional interfaces of an Application.
type (
	// Framer tells the framing of a source journal, and, for the empty
	// journal name, of what the shard's publisher writes; without it,
	// every journal is message.JSONLines.
	Framer interface {
		Framing(journal string) message.Framing
	}
	// TxnBeginner is told when a transaction begins, before its first
	// Consume.
	TxnBeginner interface {
		BeginTxn(shard *Shard, st store.Store) error
	}
	// TxnFinisher is told when a transaction has finished: err is nil
	// once its commit is durable and its acknowledgements written, or
	// the error that failed it (the shard then fails).
	TxnFinisher interface {
		FinishedTxn(shard *Shard, st store.Store, err error)
	}
)

func framingOf(app Application, journal string) message.Framing {
	if f, ok := app.(Framer); ok {
		if fr := f.Framing(journal); fr != nil {
			return fr
		}
	}
	return message.JSONLines
}
