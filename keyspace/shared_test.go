package keyspace

import (
	"context"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/internal/etcdtest"
)

// Mirrors of one prefix that watch through one etcd client each see every
// write: a mirror that waits for the revision of its own write holds that
// write. Brokers of a test share a client so; before each mirror had a
// watch stream of its own, a progress notification asked for by one
// mirror could reach another whose watch had not caught up, moving its
// revision past writes it never saw (a broker then found its own member
// key missing and quit).
func TestMirrorsSharingAClientMissNoWrite(t *testing.T) {
	client, root := etcdtest.Client(t)
	const mirrors, rounds = 3, 30
	for round := range rounds {
		prefix := fmt.Sprintf("%sround-%d/", root, round)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		var wg sync.WaitGroup
		errs := make(chan error, mirrors)
		for m := range mirrors {
			wg.Go(func() { errs <- announceAndCheck(ctx, client, prefix, m) })
		}
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// announceAndCheck loads and watches prefix, writes a key of its own,
// waits for its mirror to reach that write's revision and checks that the
// mirror holds the key.
func announceAndCheck(ctx context.Context, client *clientv3.Client, prefix string, m int) error {
	ks := New(prefix, decodeInt)
	if err := ks.Load(ctx, client, 0); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ks.Watch(wctx, client) })
	defer func() { cancel(); wg.Wait() }()
	key := fmt.Sprintf("%smember-%d", prefix, m)
	resp, err := client.Put(ctx, key, "1")
	if err != nil {
		return err
	}
	rev := resp.Header.Revision
	if err := ks.WaitForRevision(ctx, rev); err != nil {
		return fmt.Errorf("mirror %d waiting for revision %d: %w", m, rev, err)
	}
	kvs, at := ks.Snapshot()
	if _, ok := kvs.Get(key); !ok {
		return fmt.Errorf("mirror %d at revision %d lacks its own key %s, written at revision %d (holds %q)", m, at, key, rev, render(prefix, kvs))
	}
	return nil
}
