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
// reports choose for long enough that every report of the cut is in
// (cutGrace) resigns, and its journals move to brokers that reach each
// other.
//
// The set is chosen greedily, the broker with the most cuts first: a
// broker that nobody reaches (hung, or behind a firewall, but keeping its
// lease) is cut from all the others, and is chosen alone; of two brokers
// cut only from each other, the one with the greater name is chosen.
// Nobody else resigns for them, even if the chosen broker does not act (a
// hung process cannot): resigning others would not heal the cut.
//
// A broker that resigns for a cut leaves a Resignation behind, under a
// lease of its own that outlives its membership (resignedTTL): the cut
// reports that chose it go with its member lease, and without them a
// broker whose links fail one at a time would be judged pair by pair,
// each time against a new peer, and a majority could resign for the one
// at fault. Each resignation counts as a cut against the brokers it names
// when the next cut is judged. So does it against the broker that a
// one-way cut hides (its peers cannot reach it, it reaches them): it
// rejoins, is cut again, and the broker that cannot reach it is chosen
// the second time, and waits to reach it before it rejoins.
//
// A report alone can choose wrongly: of a broker that nobody reaches, the
// first report in makes a pair with it, and the reporter goes if its name
// is the greater. So brokers also report the peers they have not reached
// for half their timeout (suspected), and a broker resigns only if the
// reports choose it both as they are and as they would be were every
// suspicion a cut (chosen): the reports still to come are announced before
// the choice is made. A suspicion ends, within half a timeout, as a cut
// or as a peer reached again, so it delays a choice but never blocks it.
//
// With fewer than three brokers announced there is no telling which side
// of a cut is at fault, and nobody resigns.

// CutsPrefix is the prefix, beneath the brokers' root, of the cut reports:
// CutsPrefix + ZONE#SUFFIX holds the JSON of a CutReport, and
// CutsPrefix + ResignedPrefix + ZONE#SUFFIX that of a Resignation.
const CutsPrefix = "cuts/"

// ResignedPrefix is the prefix, beneath CutsPrefix, of resignations.
// (Brokers from before resignations take one for an empty cut report of a
// broker that is not a member, which counts for nothing.)
const ResignedPrefix = "resigned/"

// CutReport is what a broker reports of the peers it cannot reach. Each
// broker writes one, empty if it reaches every peer, to publish its
// isolation timeout.
type CutReport struct {
	// Unreached names the peers (ZONE#SUFFIX) the broker has not reached
	// for its isolation timeout, sorted.
	Unreached []string `json:"unreached"`
	// Suspected names the peers (ZONE#SUFFIX) the broker has not reached
	// for half its isolation timeout, but not yet the whole, sorted: the
	// cuts it may report next.
	Suspected []string `json:"suspected,omitempty"`
	// IsolationTimeoutMs is the reporting broker's isolation timeout, in
	// milliseconds; zero if unknown (a broker from before it).
	IsolationTimeoutMs int64 `json:"isolationTimeoutMs,omitempty"`
}

// Resignation is what a broker that resigned for a cut leaves behind.
type Resignation struct {
	// CutFrom names the brokers (ZONE#SUFFIX) that the reports had it cut
	// from when it resigned, sorted.
	CutFrom []string `json:"cutFrom"`
}

// cut is a decoded cut report, as the brokers' keyspace holds it.
type cut struct {
	reporter string // ZONE#SUFFIX
	CutReport
}

// resignation is a decoded Resignation, as the brokers' keyspace holds it.
type resignation struct {
	broker string // ZONE#SUFFIX
	Resignation
}

// resignedTTL is how long a broker's resignation outlives it, for its
// isolation timeout: long enough to span a restart, the wait to rejoin,
// and the next cut's timeout.
func resignedTTL(timeout time.Duration) time.Duration { return 10 * timeout }

// newDecoder decodes the brokers' keyspace: the fleet's keys (Decoders)
// and the cut reports.
func newDecoder(root string) keyspace.Decoder {
	fleet := allocator.NewDecoder(root, Decoders)
	return func(kv *mvccpb.KeyValue) (any, error) {
		name, ok := strings.CutPrefix(string(kv.Key), root+CutsPrefix)
		if !ok {
			return fleet(kv)
		}
		if broker, ok := strings.CutPrefix(name, ResignedPrefix); ok {
			r := resignation{broker: broker}
			if err := json.Unmarshal(kv.Value, &r.Resignation); err != nil {
				return nil, fmt.Errorf("resignation of %s: %w", broker, err)
			}
			return r, nil
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
// members are cut from each other, by the reports of cuts, each
// resignation counting as one more cut of the members it names (see
// above). Reports by or of brokers that are not members do not count.
func resigners(members []string, cuts []cut, resigned []resignation) []string {
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
	past := map[string]int{}
	for _, r := range resigned {
		for _, p := range r.CutFrom {
			if member[p] && p != r.broker {
				past[p]++
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
		chosen, most := "", 0
		for b, d := range degree {
			if c := cmp.Compare(d+past[b], most); c > 0 || c == 0 && b > chosen {
				chosen, most = b, d+past[b]
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

// chosenToResign tells whether the reports choose name to resign, as they are and
// as they would be were every suspicion a cut (see above).
func chosenToResign(name string, members []string, cuts []cut, resigned []resignation) bool {
	if !slices.Contains(resigners(members, cuts, resigned), name) {
		return false
	}
	projected := make([]cut, len(cuts))
	for i, c := range cuts {
		projected[i] = c
		projected[i].Unreached = append(slices.Clone(c.Unreached), c.Suspected...)
	}
	return slices.Contains(resigners(members, projected, resigned), name)
}

// cutsOf returns the cut reports and the resignations of kvs, the
// brokers' keyspace.
func (s *Server) cutsOf(kvs keyspace.KeyValues) ([]cut, []resignation) {
	var cuts []cut
	var resigned []resignation
	for kv := range kvs.Prefixed(s.cfg.Root + CutsPrefix).All() {
		switch v := kv.Decoded.(type) {
		case cut:
			cuts = append(cuts, v)
		case resignation:
			resigned = append(resigned, v)
		}
	}
	return cuts, resigned
}

// cutGrace is how long the cut reports must choose a broker before it
// resigns: every report of a cut must be in, and brokers report after
// their own isolation timeouts, which members publish in their reports.
// A cut that began at T is reported from T plus the least timeout, and
// fully by T plus the greatest; half the greatest covers the rounds of
// checks and etcd's delays. With one timeout for all, it is half of it.
func cutGrace(own time.Duration, cuts []cut, members []string) time.Duration {
	least, most := own, own
	for _, c := range cuts {
		if t := time.Duration(c.IsolationTimeoutMs) * time.Millisecond; t > 0 && slices.Contains(members, c.reporter) {
			least, most = min(least, t), max(most, t)
		}
	}
	return most - least + most/2
}

// reportCuts writes the broker's cut report (its unreached peers possibly
// none) under its member lease, so that it goes with the member.
func (s *Server) reportCuts(ctx context.Context, state *allocator.State, report CutReport) error {
	key := s.cfg.Root + CutsPrefix + s.name()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	i := slices.IndexFunc(state.Members, func(m allocator.MemberKV) bool { return memberName(m.Member) == s.name() })
	if i < 0 {
		return fmt.Errorf("the broker's member key is not announced (yet)")
	}
	report.IsolationTimeoutMs = s.cfg.isolationTimeout().Milliseconds()
	value, err := json.Marshal(report)
	if err != nil {
		return err
	}
	_, err = s.cfg.Etcd.Put(ctx, key, string(value), clientv3.WithLease(clientv3.LeaseID(state.Members[i].KV.Lease)))
	return err
}

// leaveResignation writes the broker's resignation for a cut from
// cutFrom, under a lease of its own that expires after resignedTTL.
func (s *Server) leaveResignation(ctx context.Context, cutFrom []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	value, err := json.Marshal(Resignation{CutFrom: cutFrom})
	if err != nil {
		return err
	}
	lease, err := s.cfg.Etcd.Grant(ctx, int64(resignedTTL(s.cfg.isolationTimeout()).Seconds()+1))
	if err != nil {
		return err
	}
	_, err = s.cfg.Etcd.Put(ctx, s.cfg.Root+CutsPrefix+ResignedPrefix+s.name(), string(value), clientv3.WithLease(lease.ID))
	return err
}

// name is the broker's member name, ZONE#SUFFIX.
func (s *Server) name() string { return s.cfg.Zone + "#" + s.cfg.Suffix }

// memberName is the name of m, ZONE#SUFFIX.
func memberName(m allocator.Member) string { return m.Zone + "#" + m.Suffix }
