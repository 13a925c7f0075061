package wordcount

import (
	"context"
	"errors"
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
func Setup(ctx context.Context, cfg SetupConfig) (created []string, err error) {
	if !strings.HasPrefix(cfg.Root, "/") || !strings.HasSuffix(cfg.Root, "/") {
		return nil, fmt.Errorf("wordcount: setup: root %q must begin and end with '/'", cfg.Root)
	}
	journals, shards := Specs(cfg)
	for attempt := 0; ; attempt++ {
		c, err := createJournals(ctx, cfg.Journals, journals)
		created = append(created, c...)
		if errors.Is(err, client.ErrRevisionMismatch) && attempt < 3 {
			continue // Created meanwhile by another: list again.
		} else if err != nil {
			return created, err
		}
		break
	}
	for attempt := 0; ; attempt++ {
		c, retry, err := createShards(ctx, cfg.Shards, shards)
		created = append(created, c...)
		if retry && attempt < 3 {
			continue
		} else if err != nil {
			return created, err
		}
		return created, nil
	}
}

func createJournals(ctx context.Context, c *client.Client, specs []*protocol.JournalSpec) ([]string, error) {
	existing := map[string]bool{}
	for _, sel := range []string{"prefix=wordcount/words/", "prefix=" + RecoveryLogPrefix + "/wordcount/"} {
		js, err := c.ListAll(ctx, sel)
		if err != nil {
			return nil, fmt.Errorf("wordcount: listing journals: %w", err)
		}
		for _, j := range js {
			existing[j.GetSpec().GetName()] = true
		}
	}
	req := &protocol.ApplyRequest{}
	var names []string
	for _, s := range specs {
		if !existing[s.Name] {
			req.Changes = append(req.Changes, &protocol.ApplyRequest_Change{Upsert: s})
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	if _, err := c.Apply(ctx, req); err != nil {
		return nil, fmt.Errorf("wordcount: creating journals %s: %w", strings.Join(names, ", "), err)
	}
	return names, nil
}

func createShards(ctx context.Context, c protocol.ShardClient, specs []*consumer.ShardSpec) (created []string, retry bool, err error) {
	list, err := c.List(ctx, &protocol.ShardListRequest{Selector: "prefix=wordcount/"})
	if err != nil {
		return nil, false, fmt.Errorf("wordcount: listing shards: %w", err)
	}
	existing := map[string]bool{}
	for _, sh := range list.Shards {
		spec, err := consumer.UnmarshalShardSpec(sh.Spec)
		if err != nil {
			return nil, false, fmt.Errorf("wordcount: listing shards: %w", err)
		}
		existing[spec.ID] = true
	}
	req := &protocol.ShardApplyRequest{}
	for _, s := range specs {
		if existing[s.ID] {
			continue
		}
		raw, err := consumer.MarshalShardSpec(s)
		if err != nil {
			return nil, false, err
		}
		req.Changes = append(req.Changes, &protocol.ShardApplyRequest_Change{Upsert: raw}) // Expecting none.
		created = append(created, s.ID)
	}
	if len(created) == 0 {
		return nil, false, nil
	}
	resp, err := c.Apply(ctx, req)
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("wordcount: creating shards: %w", err)
	case resp.Status == protocol.Status_REVISION_MISMATCH:
		return nil, true, errors.New("wordcount: creating shards: created meanwhile by another")
	case resp.Status != protocol.Status_OK:
		return nil, false, fmt.Errorf("wordcount: creating shards: %s", resp.Status)
	}
	return created, false, nil
}
