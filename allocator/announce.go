package allocator

import (
	"context"
	"fmt"
	"log/slog"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Announcement is a member key held under a lease by this process.
type Announcement struct {
	Key string
	// Revision is the key's create revision: the announcement is ours only
	// while the key still has it.
	Revision int64
	Lease    clientv3.LeaseID
	client   *clientv3.Client
}

// Announce creates key with value under lease. If the key exists under
// another lease — another process announced the same member — Announce
// never overwrites it: it waits until that key is deleted (its process
// exits or its lease expires) and then announces, or returns ctx's error.
// If the key exists under the same lease (an earlier call of this process),
// it is adopted as is.
func Announce(ctx context.Context, client *clientv3.Client, key, value string, lease clientv3.LeaseID) (*Announcement, error) {
	for {
		resp, err := client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, value, clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("announcing %s: %w", key, err)
		}
		if resp.Succeeded {
			return &Announcement{Key: key, Revision: resp.Header.Revision, Lease: lease, client: client}, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue // Deleted since the compare; try again.
		}
		if clientv3.LeaseID(kvs[0].Lease) == lease {
			return &Announcement{Key: key, Revision: kvs[0].CreateRevision, Lease: lease, client: client}, nil
		}
		slog.Warn("member key is held by another process; waiting for it to go",
			"key", key, "lease", fmt.Sprintf("%x", kvs[0].Lease))
		if err := waitDeleted(ctx, client, key, resp.Header.Revision); err != nil {
			return nil, fmt.Errorf("announcing %s: waiting for the other holder: %w", key, err)
		}
	}
}

// waitDeleted returns once key is deleted after revision rev.
func waitDeleted(ctx context.Context, client *clientv3.Client, key string, rev int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for resp := range client.Watch(ctx, key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	return ctx.Err()
}

// Update replaces the announced member's value — its limit, or that it is
// exiting — provided the key is still this announcement's. It returns the
// revision of the change.
func (a *Announcement) Update(ctx context.Context, value string) (int64, error) {
	resp, err := a.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(a.Key), "=", a.Revision)).
		Then(clientv3.OpPut(a.Key, value, clientv3.WithIgnoreLease())).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("updating member %s: %w", a.Key, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("updating member %s: %w", a.Key, ErrMemberGone)
	}
	return resp.Header.Revision, nil
}
