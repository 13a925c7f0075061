package consumer_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/logtest"
	"github.com/quire-dev/quire/protocol"
)

// A process whose first broker is down serves through the next one, and
// says that it waits for the first, rather than sitting in BACKFILL in
// silence.
func TestProcessServesThroughTheNextBroker(t *testing.T) {
	bc := brokertest.New(t)
	b := bc.Start("b1")
	dead := "127.0.0.1:" + strconv.Itoa(freeport.Port(t)) // Nothing listens there.
	var log logtest.Log
	journals, err := client.New(context.Background(), client.Config{Broker: dead + "," + b.Endpoint,
		Logger: log.Logger(slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { journals.Close() })
	root := strings.TrimSuffix(bc.Root, "/") + "-turns/"
	c := &cluster{t: t, brokers: bc, journals: bc.Client(b), root: root,
		fleet: consumertest.New(t, bc.Etcd, journals, root, counter{})}
	c.fleet.Start("c1", "za")
	c.applyR(1, c.shardSpec("turns/shard-0", 0, "turns/in-0"))
	c.awaitStatus("turns/shard-0", protocol.ReplicaCode_PRIMARY)

	if !strings.Contains(log.String(), `"broker":"`+dead+`"`) {
		t.Errorf("the process's log does not name the unreachable broker %s: %s", dead, log.String())
	}
}
