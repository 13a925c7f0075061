package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/protocol"
	"github.com/quire-dev/quire/store"
)

// Errors of Resolve.
var (
	ErrShardNotFound = errors.New("consumer: shard not found")
	ErrNoPrimary     = errors.New("consumer: shard has no primary at the moment")
)

// Resolution tells where a shard's primary is.
type Resolution struct {
	// Primary is the primary's process, and Endpoint its Shard service.
	Primary  *protocol.ProcessID
	Endpoint string
	// Shard and Store are set when this process is the primary: its store
	// is restored and it serves. The transaction loop owns Store: read
	// only what the store lets readers share (store.Pebble's DB, which
	// holds committed state). The store stays open until Done is called.
	Shard *Shard
	Store store.Store
	// Done releases the Store: call it once, when finished reading. The
	// replica, if it stops meanwhile, waits for it to close the store.
	Done func()
	// Header is the header of a response about the shard.
	Header *protocol.Header
}

// Resolve returns where shard id's primary is. If it is this process, it
// waits until the primary's store is ready. It fails with errors wrapping
// ErrShardNotFound and ErrNoPrimary.
func (s *Server) Resolve(ctx context.Context, id string) (Resolution, error) {
	if err := s.awaitRevision(ctx, 0); err != nil {
		return Resolution{}, err
	}
	for {
		state, changed := s.resolver.snapshot()
		res, r, err := s.resolveIn(state, id)
		if err != nil || r == nil {
			return res, err
		}
		select {
		case <-r.ready:
			if !r.holdStore() {
				return res, fmt.Errorf("%w: %s: its primary here is stopping", ErrNoPrimary, id)
			}
			r.mu.Lock()
			res.Shard, res.Store = r.shard, r.store
			r.mu.Unlock()
			var once sync.Once
			res.Done = func() { once.Do(r.releaseStore) }
			return res, nil
		case <-r.done:
			r.mu.Lock()
			failed := r.want
			r.mu.Unlock()
			return res, fmt.Errorf("%w: %s: its replica here stopped (%s)", ErrNoPrimary, id, failed)
		case <-changed:
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

// resolveIn resolves shard id in state: its primary, and this process's
// replica of it if it is the primary.
func (s *Server) resolveIn(state *allocator.State, id string) (Resolution, *replica, error) {
	res := Resolution{Header: s.header(), Done: func() {}}
	if state.ItemIndex(id) < 0 {
		return res, nil, fmt.Errorf("%w: %s", ErrShardNotFound, id)
	}
	as := state.ItemAssignments(id)
	if len(as) == 0 || as[0].Slot != 0 || as[0].Member < 0 {
		return res, nil, fmt.Errorf("%w: %s", ErrNoPrimary, id)
	}
	a := as[0]
	res.Primary = &protocol.ProcessID{Zone: a.Zone, Suffix: a.Suffix}
	res.Endpoint = endpointOf(state, a)
	if a.Zone != s.cfg.Zone || a.Suffix != s.cfg.Suffix {
		return res, nil, nil
	}
	if lease := s.resolver.ownLease(); lease == 0 || clientv3.LeaseID(a.KV.Lease) != lease {
		// Another process of this name holds it: a live duplicate, served
		// at its own endpoint, or the process this one restarts.
		if res.Endpoint != s.cfg.Endpoint {
			return res, nil, nil
		}
		return res, nil, fmt.Errorf("%w: %s: assigned to an earlier process of this name, whose lease has not run out", ErrNoPrimary, id)
	}
	r := s.resolver.replica(id)
	if r == nil {
		return res, nil, fmt.Errorf("%w: %s: assigned here, not started yet", ErrNoPrimary, id)
	}
	return res, r, nil
}

func endpointOf(state *allocator.State, a allocator.AssignmentKV) string {
	if a.Member < 0 {
		return ""
	}
	if m, ok := state.Members[a.Member].Value.(*MemberSpec); ok {
		return m.Endpoint
	}
	return ""
}
