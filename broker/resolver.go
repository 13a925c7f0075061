package broker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/broker/spool"
	"github.com/quire-dev/quire/keyspace"
	"github.com/quire-dev/quire/protocol"
)

// resolver turns the brokers' keyspace into journal specs and routes, and
// keeps this broker's replicas in step with its assignments.
type resolver struct {
	srv *Server

	mu       sync.RWMutex
	state    *allocator.State
	journals map[string]resolved
	replicas map[string]*replica
	// lease is the member's own lease, once announced (zero before): only
	// assignments under it are this broker's. Until then any assignment
	// of its name is another process's — a live broker of the same name,
	// or the one this process restarts, whose lease has not yet run out —
	// and serving it would open a second spool of the same replica.
	lease clientv3.LeaseID
}

type resolved struct {
	spec  *protocol.JournalSpec
	route *protocol.Route
	item  allocator.ItemKV
}

func newResolver(srv *Server) *resolver {
	return &resolver{srv: srv, journals: map[string]resolved{}, replicas: map[string]*replica{}}
}

// observe is a keyspace observer: called, under the keyspace's lock, with
// each new state of the brokers' keyspace.
func (rs *resolver) observe(kvs keyspace.KeyValues, rev int64) {
	s := allocator.NewState(rs.srv.cfg.Root, kvs, rev)
	journals := make(map[string]resolved, len(s.Items))
	for _, it := range s.Items {
		spec := it.Value.(*protocol.JournalSpec)
		if spec.Name != it.ID {
			rs.srv.log.Warn("journal spec names another journal than its key; ignored", "key", it.ID, "name", spec.Name)
			continue
		}
		journals[it.ID] = resolved{
			spec:  spec,
			route: routeOf(s, s.ItemAssignments(it.ID)),
			item:  it,
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.state != nil && rev < rs.state.Revision {
		return // Run observes a snapshot that a watched change may follow.
	}
	rs.state, rs.journals = s, journals
	rs.updateReplicas()
}

// announced makes the assignments under lease this broker's.
func (rs *resolver) announced(lease clientv3.LeaseID) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.lease = lease
	if rs.state != nil {
		rs.updateReplicas()
	}
}

// holds tells whether journal id is assigned to this broker under its own
// lease. rs.mu is held.
func (rs *resolver) holds(id string) bool {
	if rs.lease == 0 {
		return false
	}
	for _, a := range rs.state.ItemAssignments(id) {
		if a.Zone == rs.srv.id.Zone && a.Suffix == rs.srv.id.Suffix && clientv3.LeaseID(a.KV.Lease) == rs.lease {
			return true
		}
	}
	return false
}

// updateReplicas creates replicas of journals newly assigned here, updates
// the others, and ends those no longer assigned.
func (rs *resolver) updateReplicas() {
	for id, j := range rs.journals {
		if !rs.holds(id) {
			continue
		}
		r, ok := rs.replicas[id]
		if !ok {
			r = newReplica(rs.srv, id)
			rs.replicas[id] = r
			r.update(j.spec, j.route)
			rs.srv.wg.Add(1)
			go r.load()
			continue
		}
		r.update(j.spec, j.route)
	}
	for id, r := range rs.replicas {
		if j, ok := rs.journals[id]; !ok || !rs.holds(id) {
			delete(rs.replicas, id)
			rs.srv.wg.Add(1)
			rs.srv.ending.Add(1)
			go r.end(j.route) // Nil if the journal was deleted.
		}
	}
}

// resolve returns a journal's spec (nil if there is no such journal), its
// route, and this broker's replica of it, if any.
func (rs *resolver) resolve(journal string) (*protocol.JournalSpec, *protocol.Route, *replica) {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	j, ok := rs.journals[journal]
	if !ok {
		return nil, &protocol.Route{Revision: rs.revision()}, nil
	}
	return j.spec, j.route, rs.replicas[journal]
}

// replica returns this broker's replica of journal, if any, and the route.
func (rs *resolver) replica(journal string) (*replica, *protocol.Route) {
	_, route, r := rs.resolve(journal)
	return r, route
}

func (rs *resolver) revision() int64 {
	if rs.state == nil {
		return 0
	}
	return rs.state.Revision
}

// snapshot returns the current state and journals.
func (rs *resolver) snapshot() (*allocator.State, map[string]resolved) {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	return rs.state, rs.journals
}

// end retires a replica no longer assigned here: it stops serving, and its
// spool, if it holds content, is persisted. route is the journal's route
// without this broker (nil if the journal was deleted).
//
// At replication 2 or more, the spool may end in an append that committed
// here only, as the route changed without this broker: the others never
// got it, and write the next append over its offsets. So the spool is
// persisted only if the journal's primary serves no other content over
// its offsets (see diverged); otherwise it is quarantined (the others hold
// every acknowledged byte). After the broker resigned, cut off from its
// peers, the spool stays on disk instead, as after a crash, for its next
// start to check (see recoverSpools).
func (r *replica) end(route *protocol.Route) {
	defer r.srv.wg.Done()
	defer r.srv.ending.Done()
	r.cancel()
	<-r.token // Wait for the append or pipeline stream in progress to stop.
	r.sendAck()
	r.dropPipeline()
	r.mu.Lock()
	s, spec := r.cur, r.spec
	r.mu.Unlock()
	if s == nil {
		return
	}
	s.Rollback()
	if s.End() == s.Begin {
		s.Remove()
		return
	}
	if spec.GetReplication() >= 2 && len(route.GetMembers()) != 0 {
		if r.srv.isolated.Load() {
			s.Close() // It cannot reach the primary to check.
			return
		}
		if why := r.diverged(route, s); why != "" {
			r.srv.quarantineSpool(s, why)
			return
		}
	}
	// Not to this replica's index, which is gone: to the broker's, where a
	// later replica of the journal (re-created, or back here) indexes it,
	// and starts its spool after it rather than over its files.
	r.srv.handOffEnded(r.journal, spec, s)
}

// divergedWindow bounds the end of a spool that diverged compares.
const divergedWindow = 1 << 20

// diverged tells why the spool of a replica that left route must not be
// persisted: the route's primary serves other bytes over its offsets, or
// ends before it (the next append will write there). It is empty when
// the primary serves the same bytes, or none (it expects them from this
// replica, or it is new to the journal and this spool may hold
// acknowledged content it lacks): the spool is persisted then.
func (r *replica) diverged(route *protocol.Route, s *spool.Spool) string {
	ctx, cancel := context.WithTimeout(r.srv.ctx, 10*time.Second) // r.ctx is done.
	defer cancel()
	// Its end is enough: content the others wrote over, or lack, ends it.
	from := max(s.Begin, s.End()-divergedWindow)
	head, err := r.srv.compareWithPrimary(ctx, route, r.journal, from, s.End(), io.NewSectionReader(s, from, s.End()-from))
	switch {
	case errors.Is(err, errDiffers):
		return fmt.Sprintf("the journal's primary %s serves other content: %v", route.Endpoints[0], err)
	case err == nil && head >= 0:
		return fmt.Sprintf("the journal's primary %s ends at offset %d, before the spool's end %d: the rest committed here only",
			route.Endpoints[0], head, s.End())
	}
	return ""
}
