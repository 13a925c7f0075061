package consumer

import (
	"context"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/keyspace"
)

// resolver turns the application's keyspace into shards and their
// assignments, and keeps this process's replicas in step with its own
// assignments:
//
//   - a new assignment starts a replica: a standby at a slot > 0, a
//     standby that becomes primary at once at slot 0;
//   - a standby's assignment moved to slot 0 promotes it in place;
//   - a primary whose assignment left slot 0 is never demoted in place:
//     it is stopped, and a fresh standby started;
//   - an assignment gone stops its replica.
type resolver struct {
	srv *Server

	mu       sync.RWMutex
	state    *allocator.State
	changed  chan struct{} // closed and replaced at each new state
	replicas map[string]*replica
	stopped  bool
	empty    chan struct{} // closed when replicas is empty, while draining
	// lease is the process's own member lease, once announced (zero
	// before): only assignments under it are this process's. Until then
	// any assignment of its name is another process's — a live process
	// of the same name, or the one this process restarts, whose lease has
	// not yet run out — and serving it would record under the same
	// author as that process, fencing it, and flip its status keys.
	lease clientv3.LeaseID
}

func newResolver(srv *Server) *resolver {
	return &resolver{srv: srv, replicas: map[string]*replica{}, changed: make(chan struct{})}
}

// observe is a keyspace observer, called with each new state of the
// application's keyspace.
func (rs *resolver) observe(kvs keyspace.KeyValues, rev int64) {
	s := allocator.NewState(rs.srv.cfg.Root, kvs, rev)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.state = s
	close(rs.changed)
	rs.changed = make(chan struct{})
	if !rs.stopped {
		rs.updateReplicas()
	}
}

// announced makes the assignments under lease this process's.
func (rs *resolver) announced(lease clientv3.LeaseID) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lease = lease
	if rs.state != nil && !rs.stopped {
		rs.updateReplicas()
	}
}

// ownLease is the process's member lease, or zero before it announced.
func (rs *resolver) ownLease() clientv3.LeaseID {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	return rs.lease
}

// updateReplicas applies the state's local assignments to the replicas.
// rs.mu is held.
func (rs *resolver) updateReplicas() {
	cfg := rs.srv.cfg
	local := map[string]allocator.AssignmentKV{}
	for _, a := range rs.state.MemberAssignments(cfg.Zone, cfg.Suffix) {
		if _, dup := local[a.Item]; !dup && rs.lease != 0 && clientv3.LeaseID(a.KV.Lease) == rs.lease {
			local[a.Item] = a
		}
	}
	for id, r := range rs.replicas {
		a, ok := local[id]
		if !ok || (r.isPrimary() && a.Slot != 0) {
			delete(rs.replicas, id)
			r.stop()
		}
	}
	for id, a := range local {
		it := rs.state.ItemIndex(id)
		if it < 0 {
			continue // An assignment of a deleted shard: it goes soon.
		}
		spec := rs.state.Items[it].Value.(*ShardSpec)
		if r, ok := rs.replicas[id]; ok && !needsRestart(r.currentSpec(), spec) {
			r.update(spec, a)
			continue
		} else if ok {
			r.stop() // Its sources or recovery log changed: start afresh.
		}
		r := newReplica(rs.srv, spec, a)
		rs.replicas[id] = r
		rs.srv.wg.Add(1)
		go r.run()
	}
	rs.signalEmpty()
}

func (rs *resolver) signalEmpty() {
	if rs.empty != nil && len(rs.replicas) == 0 {
		close(rs.empty)
		rs.empty = nil
	}
}

// awaitNoReplicas waits until the process holds no replica: once drained,
// every replica has been stopped (its goroutine may still be ending).
func (rs *resolver) awaitNoReplicas(ctx context.Context) error {
	rs.mu.Lock()
	if len(rs.replicas) == 0 {
		rs.mu.Unlock()
		return nil
	}
	rs.empty = make(chan struct{})
	ch := rs.empty
	rs.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopAll stops every replica, for good.
func (rs *resolver) stopAll() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.stopped = true
	for id, r := range rs.replicas {
		delete(rs.replicas, id)
		r.stop()
	}
}

// snapshot returns the current state, and a channel closed when it
// changes.
func (rs *resolver) snapshot() (*allocator.State, <-chan struct{}) {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	return rs.state, rs.changed
}

// replica returns this process's replica of shard id, if any.
func (rs *resolver) replica(id string) *replica {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	return rs.replicas[id]
}

// needsRestart tells whether a replica of old must be started afresh to
// serve new: a replica reads the sources and recovery log it started with.
// Other fields (transaction durations, labels, ...) apply as they change.
func needsRestart(old, new *ShardSpec) bool {
	return !slices.Equal(old.Sources, new.Sources) || old.RecoveryLog() != new.RecoveryLog() ||
		old.HintKey() != new.HintKey()
}
