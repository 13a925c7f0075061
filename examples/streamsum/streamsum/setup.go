package streamsum

import (
	"context"
	"fmt"
	"strings"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// The application's journals and shards.
const (
	// Partitions is the number of chunk journals, and of shards.
	Partitions = 4
	// ChunksSelector selects the chunk journals, and ShardSelector the
	// shards.
	ChunksSelector = "app=streamsum,content=chunks"
	ShardSelector  = "app=streamsum"
	// SumsJournal is where the shards publish the streams' sums.
	SumsJournal = "streamsum/sums"
	// RecoveryLogPrefix prefixes the shards' recovery logs:
	// recovery/streamsum/shard-NNN.
	RecoveryLogPrefix = "recovery"
)

// PartitionName is the name of chunk journal n:
// streamsum/chunks/part-NNN.
func PartitionName(n int) string { return fmt.Sprintf("streamsum/chunks/part-%03d", n) }

// ShardID is the ID of shard n, which reads PartitionName(n):
// streamsum/shard-NNN.
func ShardID(n int) string { return fmt.Sprintf("streamsum/shard-%03d", n) }

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
}

// Specs returns the application's journal specs (chunk journals, the sums
// journal and the recovery logs) and shard specs.
func Specs(cfg SetupConfig) ([]*protocol.JournalSpec, []*consumer.ShardSpec) {
	r := max(cfg.Replication, 1)
	label := func(name, value string) *protocol.Label { return &protocol.Label{Name: name, Value: value} }
	journals := []*protocol.JournalSpec{{Name: SumsJournal, Replication: r,
		Labels: []*protocol.Label{label("app", "streamsum"), label("content", "sums")}}}
	var shards []*consumer.ShardSpec
	for n := range Partitions {
		shard := (&consumer.ShardSpec{
			ID:                ShardID(n),
			Sources:           []consumer.Source{{Journal: PartitionName(n)}},
			RecoveryLogPrefix: RecoveryLogPrefix,
			HintPrefix:        cfg.Root + "hints/",
			HotStandbys:       cfg.HotStandbys,
			Labels:            labels.Set{{Name: "app", Value: "streamsum"}},
		}).WithDefaults()
		shards = append(shards, shard)
		journals = append(journals,
			&protocol.JournalSpec{Name: PartitionName(n), Replication: r,
				Labels: []*protocol.Label{label("app", "streamsum"), label("content", "chunks")}},
			&protocol.JournalSpec{Name: shard.RecoveryLog(), Replication: r,
				Labels: []*protocol.Label{label("recovery-log", "streamsum")}})
	}
	return journals, shards
}

// Setup creates the application's journals and shards (see Specs) that do
// not exist; those that do are left as they are. It returns the names of
// the journals and the IDs of the shards it created.
func Setup(ctx context.Context, cfg SetupConfig) ([]string, error) {
	if !strings.HasPrefix(cfg.Root, "/") || !strings.HasSuffix(cfg.Root, "/") {
		return nil, fmt.Errorf("streamsum: setup: root %q must begin and end with '/'", cfg.Root)
	}
	journals, shards := Specs(cfg)
	created, err := consumer.CreateMissing(ctx, cfg.Journals, cfg.Shards, journals, shards)
	if err != nil {
		return created, fmt.Errorf("streamsum: setup: %w", err)
	}
	return created, nil
}
