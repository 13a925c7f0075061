package consumer

import (
	"context"
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/recoverylog"
)

// Shard is a primary replica of a shard, as its Application sees it.
type Shard struct {
	ctx       context.Context
	spec      *ShardSpec
	dir       string
	recorder  *recoverylog.Recorder
	publisher *message.Publisher
	journals  *client.Client
	etcd      *clientv3.Client
	log       *slog.Logger
}

// Context is done when the replica ends: the shard moved, failed, or the
// process stops.
func (s *Shard) Context() context.Context { return s.ctx }

// ID is the shard's ID.
func (s *Shard) ID() string { return s.spec.ID }

// Spec is the shard's spec (with defaults applied), as of when the replica
// became primary. Do not modify it.
func (s *Shard) Spec() *ShardSpec { return s.spec }

// Dir is the local directory where the shard's store lives: played from
// the recovery log, and recorded into it through FS.
func (s *Shard) Dir() string { return s.dir }

// FS is the file system of the store's directory: the recovery log's
// recorder, or vfs.Default for a shard without a recovery log.
func (s *Shard) FS() vfs.FS {
	if s.recorder == nil {
		return vfs.Default
	}
	return s.recorder
}

// Recorder is the recovery log's recorder, or nil without a recovery log.
func (s *Shard) Recorder() *recoverylog.Recorder { return s.recorder }

// Publisher publishes the shard's messages. Messages published with
// PublishUncommitted within a transaction commit with it: their
// acknowledgements are part of the transaction's checkpoint, and are
// written once the store commit is durable.
func (s *Shard) Publisher() *message.Publisher { return s.publisher }

// Journals is the client of the brokers.
func (s *Shard) Journals() *client.Client { return s.journals }

// Etcd is the etcd client of the consumer process.
func (s *Shard) Etcd() *clientv3.Client { return s.etcd }

// Logger logs with the shard's ID.
func (s *Shard) Logger() *slog.Logger { return s.log }
