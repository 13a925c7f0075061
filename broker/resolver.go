package broker

import (
	"sync"

	"github.com/quire-dev/quire/allocator"
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

// updateReplicas creates replicas of journals newly assigned here, updates
// the others, and ends those no longer assigned.
func (rs *resolver) updateReplicas() {
	for id, j := range rs.journals {
		if indexOf(j.route, rs.srv.id) < 0 {
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
		if j, ok := rs.journals[id]; !ok || indexOf(j.route, rs.srv.id) < 0 {
			delete(rs.replicas, id)
			rs.srv.wg.Add(1)
			go r.end()
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
// spool, if it holds content, is persisted. Except after the broker gave
// its journals up (it resigned, or its drain timed out): its journals
// moved on without it, perhaps over offsets at the end of its spool where
// an append committed here only as its route changed. At replication 2 or
// more, the spool then stays on disk, as after a crash, for the broker's
// next start to check against the journal's primary (see recoverSpools).
func (r *replica) end() {
	defer r.srv.wg.Done()
	r.cancel()
	<-r.token // Wait for the append or pipeline stream in progress to stop.
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
	if r.srv.gaveUp.Load() && spec.GetReplication() >= 2 {
		s.Close()
		return
	}
	r.handOff(spec, s)
}
