package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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

// ErrMemberHeld is returned, wrapped, by Announce when the member key is
// held by another process that is alive: two processes must never share a
// member name, since assignments are addressed to names.
var ErrMemberHeld = errors.New("member name is held by another live process")

// holderGrace is how long past the remaining TTL it first saw a holder's
// lease is given to expire before the holder is judged alive: etcd may
// extend leases by about an election timeout when its leader changes.
const holderGrace = 3 * time.Second

// Announce creates key with value under lease. If the key exists under
// another lease — another process announced the same member — Announce
// never overwrites it. If that lease runs out, its process died (or this
// is its restart, within the old lease), and Announce waits until the key
// is deleted with it and then announces. If the lease outlives the time it
// had left when Announce first looked, its holder is renewing it: the name
// is a live process's, and Announce returns ErrMemberHeld, naming it. It
// returns ctx's error if ctx ends first. If the key exists under the same
// lease (an earlier call of this process), it is adopted as is.
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
		if err := awaitHolder(ctx, client, kvs[0], resp.Header.Revision); err != nil {
			return nil, fmt.Errorf("announcing %s: %w", key, err)
		}
	}
}

// awaitHolder returns once holder, a member key of another lease, is
// deleted after revision rev; or ErrMemberHeld once its lease outlives
// what it had left at first sight (plus holderGrace).
func awaitHolder(ctx context.Context, client *clientv3.Client, holder *mvccpb.KeyValue, rev int64) error {
	ctx, cancel := context.WithCancel(ctx)
	deleted := make(chan error, 1)
	go func() { deleted <- waitDeleted(ctx, client, string(holder.Key), rev) }()
	defer func() { cancel(); <-deleted }()

	id := clientv3.LeaseID(holder.Lease)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var expiry time.Time // when the holder's lease runs out, if nobody renews it
	for {
		if ttl, err := client.TimeToLive(ctx, id); err == nil && ttl.TTL >= 0 {
			now := time.Now()
			left := time.Duration(ttl.TTL) * time.Second
			switch {
			case expiry.IsZero():
				expiry = now.Add(left + time.Second) // TTLs are whole seconds, rounded down.
				slog.Warn("member key is held by another process; waiting for its lease to run out (if it is renewed, that process is alive and this one stops)",
					"key", string(holder.Key), "holder", string(holder.Value), "lease", fmt.Sprintf("%x", int64(id)), "left", left)
			case now.After(expiry.Add(holderGrace)):
				return fmt.Errorf("%w: key %s is under lease %x, which its holder keeps renewing (it announced %s); give each process its own zone and suffix, or stop the other one",
					ErrMemberHeld, holder.Key, int64(id), holder.Value)
			}
		}
		select {
		case err := <-deleted:
			deleted <- err // For the deferred receive.
			if err != nil {
				return fmt.Errorf("waiting for the other holder: %w", err)
			}
			return nil
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the other holder: %w", ctx.Err())
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
