package wordcount

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// The application's journals and shards.
const (
	// Partitions is the number of word journals, and of shards.
	Partitions = 4
	// Selector selects the word journals (and the shards).
	Selector = "app=wordcount"
	// RecoveryLogPrefix prefixes the shards' recovery logs:
	// recovery/wordcount/shard-NNN.
	RecoveryLogPrefix = "recovery"
)

// PartitionName is the name of word journal n: wordcount/words/part-NNN.
func PartitionName(n int) string { return fmt.Sprintf("wordcount/words/part-%03d", n) }

// ShardID is the ID of shard n, which reads PartitionName(n):
// wordcount/shard-NNN.
func ShardID(n int) string { return fmt.Sprintf("wordcount/shard-%03d", n) }

// SetupConfig configures Setup.
type SetupConfig struct {
	// Journals is a client of the brokers, and Shards of any process of
	// the application.
	Journals *client.Client
	Shards   protocol.ShardClient
	// Root is the application's key prefix in etcd (consumer.Config.Root):
	// the shards' recovery-log hints are stored under Root + "hints/".
	Root string
	// Replication of the journals; zero means 1.
	Replication int32
	// HotStandbys of each shard.
	HotStandbys int
	// MaxTxnDuration of each shard; zero means the default (1s).
	MaxTxnDuration time.Duration
}

// Specs returns the application's journal specs (word journals, labelled
// app=wordcount, and recovery logs, labelled recovery-log=wordcount) and
// shard specs.
func Specs(cfg SetupConfig) ([]*protocol.JournalSpec, []*consumer.ShardSpec) {
	r := cfg.Replication
	if r == 0 {
		r = 1
	}
	var journals []*protocol.JournalSpec
	var shards []*consumer.ShardSpec
	for n := range Partitions {
		shard := &consumer.ShardSpec{
			ID:                ShardID(n),
			Sources:           []consumer.Source{{Journal: PartitionName(n)}},
			RecoveryLogPrefix: RecoveryLogPrefix,
			HintPrefix:        cfg.Root + "hints/",
			HotStandbys:       cfg.HotStandbys,
			MaxTxnDuration:    cfg.MaxTxnDuration,
			Labels:            labels.Set{{Name: "app", Value: "wordcount"}},
		}
		shards = append(shards, shard.WithDefaults())
		journals = append(journals,
			&protocol.JournalSpec{Name: PartitionName(n), Replication: r,
				Labels: []*protocol.Label{{Name: "app", Value: "wordcount"}}},
			&protocol.JournalSpec{Name: shard.RecoveryLog(), Replication: r,
				Labels: []*protocol.Label{{Name: "recovery-log", Value: "wordcount"}}})
	}
	return journals, shards
}

// Setup creates the application's journals and shards (see Specs) that do
// not exist; those that do are left as they are. It returns the names of
// the journals and the IDs of the shards it created.
func Setup(ctx context.Context, cfg SetupConfig) ([]string, error) {
	if !strings.HasPrefix(cfg.Root, "/") || !strings.HasSuffix(cfg.Root, "/") {
		return nil, fmt.Errorf("wordcount: setup: root %q must begin and end with '/'", cfg.Root)
	}
	journals, shards := Specs(cfg)
	created, err := consumer.CreateMissing(ctx, cfg.Journals, cfg.Shards, journals, shards)
	if err != nil {
		return created, fmt.Errorf("wordcount: setup: %w", err)
	}
	return created, nil
}
