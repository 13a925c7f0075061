package broker

import (
	"strings"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/protocol"
)

// routeOf resolves a journal's route from its assignments, in slot order:
// the members and their endpoints.
func routeOf(s *allocator.State, as []allocator.AssignmentKV) *protocol.Route {
	r := &protocol.Route{Revision: s.Revision}
	for _, a := range as {
		if a.Member < 0 {
			continue // Its broker is gone; the allocator will remove it.
		}
		spec := s.Members[a.Member].Value.(*MemberSpec)
		r.Members = append(r.Members, &protocol.ProcessID{Zone: a.Zone, Suffix: a.Suffix})
		r.Endpoints = append(r.Endpoints, spec.Endpoint)
	}
	return r
}

// routeText is a route's members as "ZONE#SUFFIX,ZONE#SUFFIX": the value a
// replica's assignment holds once synchronized on the route.
func routeText(r *protocol.Route) string {
	var b strings.Builder
	for i, m := range r.GetMembers() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.Zone)
		b.WriteByte('#')
		b.WriteString(m.Suffix)
	}
	return b.String()
}

// sameRoute tells whether two routes have the same members in the same
// order. Revisions and endpoints do not matter.
func sameRoute(a, b *protocol.Route) bool {
	if len(a.GetMembers()) != len(b.GetMembers()) {
		return false
	}
	for i, m := range a.GetMembers() {
		n := b.GetMembers()[i]
		if m.Zone != n.Zone || m.Suffix != n.Suffix {
			return false
		}
	}
	return true
}

// indexOf is the position of id in r, or -1.
func indexOf(r *protocol.Route, id *protocol.ProcessID) int {
	for i, m := range r.GetMembers() {
		if m.Zone == id.Zone && m.Suffix == id.Suffix {
			return i
		}
	}
	return -1
}

// Ready is the brokers' allocator.ReadyFunc: a replica is ready once its
// assignment holds the journal's current route, which the primary writes
// after synchronizing the route's pipeline.
func Ready(a allocator.AssignmentKV, all []allocator.AssignmentKV) bool {
	var b strings.Builder
	n := 0
	for _, x := range all {
		if x.Member < 0 {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(x.Zone + "#" + x.Suffix)
		n++
	}
	return string(a.KV.Value) == b.String()
}
