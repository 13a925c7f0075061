package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/keyspace"
)

// A broker that reaches etcd and some of its peers, but not all, is cut
// off from those others: the journals whose routes span the cut refuse
// appends, as their pipelines need every broker of the route, and nothing
// in etcd says so. Each broker therefore reports, under its member lease,
// the peers it has not reached for its isolation timeout (a cut report,
// at CutsPrefix). From the reports of the announced brokers, every broker
// computes the same set of brokers to resign (resigners): removing them
// leaves no two announced brokers cut from each other. A broker that the
// reports choose for half its isolation timeout (every report of the cut
// is in by then) resigns, and its journals move to brokers that reach
// each other.
//
// The set is chosen greedily, the broker with the most cuts first: a
// broker that nobody reaches (hung, or behind a firewall, but keeping its
// lease) is cut from all the others, and is chosen alone; of two brokers
// cut only from each other, the one with the greater name is chosen.
// Nobody else resigns for them, even if the chosen broker does not act (a
// hung process cannot): resigning others would not heal the cut.
//
// With fewer than three brokers announced there is no telling which side
// of a cut is at fault, and nobody resigns.

// CutsPrefix is the prefix, beneath the brokers' root, of the cut reports:
// CutsPrefix + ZONE#SUFFIX holds the JSON of a CutReport.
const CutsPrefix = "cuts/"

// CutReport is what a broker reports of the peers it cannot reach.
type CutReport struct {
	// Unreached names the peers (ZONE#SUFFIX) the broker has not reached
	// for its isolation timeout, sorted.
	Unreached []string `json:"unreached"`
}

// cut is a decoded cut report, as the brokers' keyspace holds it.
type cut struct {
	reporter string // ZONE#SUFFIX
	CutReport
}

// newDecoder decodes the brokers' keyspace: the fleet's keys (Decoders)
// and the cut reports.
func newDecoder(root string) keyspace.Decoder {
	fleet := allocator.NewDecoder(root, Decoders)
	return func(kv *mvccpb.KeyValue) (any, error) {
		name, ok := strings.CutPrefix(string(kv.Key), root+CutsPrefix)
		if !ok {
			return fleet(kv)
		}
		var c cut
		if err := json.Unmarshal(kv.Value, &c.CutReport); err != nil {
			return nil, fmt.Errorf("cut report of %s: %w", name, err)
		}
		c.reporter = name
		return c, nil
	}
}

// resigners returns, sorted, the brokers that resign so that no two of
// members are cut from each other, by the reports of cuts. Reports by or
// of brokers that are not members do not count.
func resigners(members []string, cuts []cut) []string {
	if len(members) < 3 {
		return nil
	}
	member := map[string]bool{}
	for _, m := range members {
		member[m] = true
	}
	edges := map[[2]string]bool{}
	for _, c := range cuts {
		for _, p := range c.Unreached {
			if member[c.reporter] && member[p] && p != c.reporter {
				edges[[2]string{min(c.reporter, p), max(c.reporter, p)}] = true
			}
		}
	}
	var out []string
	for len(edges) != 0 {
		degree := map[string]int{}
		for e := range edges {
			degree[e[0]]++
			degree[e[1]]++
		}
		chosen := ""
		for b, d := range degree {
			if c := cmp.Compare(d, degree[chosen]); c > 0 || c == 0 && b > chosen {
				chosen = b
			}
		}
		out = append(out, chosen)
		for e := range edges {
			if e[0] == chosen || e[1] == chosen {
				delete(edges, e)
			}
		}
	}
	slices.Sort(out)
	return out
}

// cutsOf returns the cut reports of kvs, the brokers' keyspace.
func (s *Server) cutsOf(kvs keyspace.KeyValues) []cut {
	var out []cut
	for _, kv := range kvs.Prefixed(s.cfg.Root + CutsPrefix) {
		if c, ok := kv.Decoded.(cut); ok {
			out = append(out, c)
		}
	}
	return out
}

// reportCuts writes the broker's cut report, unreached, under its member
// lease (so that it goes with the member), or deletes it if unreached is
// empty.
func (s *Server) reportCuts(ctx context.Context, state *allocator.State, unreached []string) error {
	key := s.cfg.Root + CutsPrefix + s.name()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if len(unreached) == 0 {
		_, err := s.cfg.Etcd.Delete(ctx, key)
		return err
	}
	i := slices.IndexFunc(state.Members, func(m allocator.MemberKV) bool { return memberName(m.Member) == s.name() })
	if i < 0 {
		return fmt.Errorf("the broker's member key is not announced (yet)")
	}
	value, err := json.Marshal(CutReport{Unreached: unreached})
	if err != nil {
		return err
	}
	_, err = s.cfg.Etcd.Put(ctx, key, string(value), clientv3.WithLease(clientv3.LeaseID(state.Members[i].KV.Lease)))
	return err
}

// name is the broker's member name, ZONE#SUFFIX.
func (s *Server) name() string { return s.cfg.Zone + "#" + s.cfg.Suffix }

// memberName is the name of m, ZONE#SUFFIX.
func memberName(m allocator.Member) string { return m.Zone + "#" + m.Suffix }
