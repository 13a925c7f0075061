package console

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/fleet"
	"github.com/quire-dev/quire/protocol"
)

// historyLen is how many samples each series keeps: five minutes, at
// one a second.
const historyLen = 300

// maxSampled bounds the journals, and the shards, sampled each interval:
// beyond it the console shows specs and assignments, without heads or lag.
const maxSampled = 1000

// sampleParallelism bounds the RPCs in flight while sampling.
const sampleParallelism = 8

// maxFailovers is how many recent failovers the console remembers.
const maxFailovers = 50

type point struct {
	t time.Time
	v int64
}

// history is a series of samples, oldest first.
type history struct{ p []point }

func (h *history) add(t time.Time, v int64) {
	if len(h.p) == historyLen {
		h.p = append(h.p[:0], h.p[1:]...)
	}
	h.p = append(h.p, point{t, v})
}

// rate is the series' change per second over the last window.
func (h *history) rate(window time.Duration) float64 {
	if len(h.p) < 2 {
		return 0
	}
	last := h.p[len(h.p)-1]
	first := last
	for i := len(h.p) - 2; i >= 0 && last.t.Sub(h.p[i].t) <= window; i-- {
		first = h.p[i]
	}
	if d := last.t.Sub(first.t).Seconds(); d > 0 && last.v >= first.v {
		return float64(last.v-first.v) / d
	}
	return 0
}

// reached is the earliest time the series was at v or beyond it: when
// a journal's write head passed an offset. ok is false if it was beyond v
// all along the history.
func (h *history) reached(v int64) (t time.Time, ok bool) {
	for i := len(h.p) - 1; i >= 0; i-- {
		if h.p[i].v < v {
			if i == len(h.p)-1 {
				return h.p[i].t, true // Not yet: as of the last sample.
			}
			return h.p[i+1].t, true
		}
	}
	return h.p[0].t, false // Before the history began.
}

// series returns m's history of key, adding an empty one if it has none.
func series(m map[string]*history, key string) *history {
	h := m[key]
	if h == nil {
		h = new(history)
		m[key] = h
	}
	return h
}

// shardSample is what a shard's primary last said.
type shardSample struct {
	readThrough, writeHeads map[string]int64
	txns                    int64 // committed by this primary
	err                     string
}

// sampling says what one sample covers. The RPCs (write heads, the
// shards' status, fragments) are made only while someone looks: every
// broker serves a console, and a fleet no one watches should not pay
// for them.
type sampling struct {
	rpcs      bool // write heads and shards' status
	etcd      bool // etcd members' health
	persisted bool // how far each journal is persisted
}

// etcdMember is an etcd member and its health.
type etcdMember struct {
	Name      string `json:"name"`
	Endpoint  string `json:"endpoint"`
	Leader    bool   `json:"leader"`
	Healthy   bool   `json:"healthy"`
	Error     string `json:"error,omitempty"`
	DBSize    int64  `json:"dbSize"`
	Revision  int64  `json:"revision"`
	RaftIndex uint64 `json:"raftIndex"`
}

// failover is a change of an item's primary.
type failover struct {
	Time  time.Time `json:"time"`
	Root  string    `json:"root"`
	Item  string    `json:"item"`
	From  string    `json:"from"`
	To    string    `json:"to"`
	Shard bool      `json:"shard"`
}

// sampler holds what the console samples: write heads, shard offsets,
// etcd's health, cut reports, and the primaries it saw.
type sampler struct {
	cfg Config

	mu        sync.Mutex
	at        time.Time
	heads     map[string]*history // by journal
	reads     map[string]*history // by root and shard: the read-through offsets' sum
	txns      map[string]*history // by root and shard: the primary's commits
	persisted map[string]int64    // by journal: the end of its persisted content
	rounds    int                 // samples, for tests
	rpcRounds int                 // samples that made RPCs
	shards    map[string]shardSample
	totals    map[string]*history // "append ROOT": the sum of write heads; "lag ROOT"
	etcd      []etcdMember
	cuts      map[string]map[string][]string // by brokers' root: reporter → unreached
	primaries map[string]string              // by root and item
	failovers []failover

	connMu sync.Mutex
	conns  map[string]*grpc.ClientConn // by endpoint
}

func newSampler(cfg Config) *sampler {
	return &sampler{cfg: cfg, heads: map[string]*history{}, reads: map[string]*history{},
		txns: map[string]*history{}, persisted: map[string]int64{}, shards: map[string]shardSample{}, totals: map[string]*history{}, cuts: map[string]map[string][]string{},
		primaries: map[string]string{}, conns: map[string]*grpc.ClientConn{}}
}

func itemKey(root, id string) string { return root + "\x00" + id }

// close closes the connections to consumer processes.
func (s *sampler) close() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}

// minSampleTimeout is the least time a sample is given, however short
// the interval: an RPC slower than a short interval is a busy member,
// not an unhealthy one, and must not show as an alert.
const minSampleTimeout = 2 * time.Second

// take samples the fleets, as far as what says.
func (s *sampler) take(ctx context.Context, fleets []fleetState, what sampling) {
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval, minSampleTimeout))
	defer cancel()
	now := time.Now()
	var heads, persisted map[string]int64
	var stats map[string]shardSample
	var members []etcdMember
	if what.rpcs {
		heads, stats = s.sampleHeads(ctx, fleets), s.sampleShards(ctx, fleets)
	}
	if what.persisted {
		persisted = s.samplePersisted(ctx, fleets)
	}
	if what.etcd {
		members = s.sampleEtcd(ctx)
	}
	cuts := s.sampleCuts(ctx, fleets)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.rounds++
	s.notePrimaries(now, fleets)
	s.cuts = cuts
	if what.etcd {
		s.etcd = members
	}
	maps.Copy(s.persisted, persisted)
	if !what.rpcs {
		return
	}
	s.at = now
	s.rpcRounds++
	for name, head := range heads {
		series(s.heads, name).add(now, head)
	}
	for key, st := range stats {
		s.shards[key] = st
		if st.err != "" {
			continue
		}
		series(s.reads, key).add(now, sum(st.readThrough))
		h := series(s.txns, key)
		if n := len(h.p); n > 0 && h.p[n-1].v > st.txns {
			h.p = h.p[:0] // A new primary counts from zero.
		}
		h.add(now, st.txns)
	}
	s.addTotals(now, fleets)
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// sampleHeads reads the write head of every journal of every broker
// fleet (up to maxSampled), sampleParallelism at a time.
func (s *sampler) sampleHeads(ctx context.Context, fleets []fleetState) map[string]int64 {
	out := map[string]int64{}
	if s.cfg.Journals == nil {
		return out
	}
	var mu sync.Mutex
	parallel(s.assignedJournals(fleets), func(name string) {
		if head, err := s.cfg.Journals.WriteHead(ctx, name); err == nil {
			mu.Lock()
			out[name] = head
			mu.Unlock()
		}
	})
	return out
}

// samplePersisted finds how far each assigned journal of every broker
// fleet (up to maxSampled) is persisted: the end of its last fragment in
// a store. It lists from where the last sample found the end, so that a
// journal's old fragments are listed once.
func (s *sampler) samplePersisted(ctx context.Context, fleets []fleetState) map[string]int64 {
	s.mu.Lock()
	from := maps.Clone(s.persisted)
	s.mu.Unlock()
	out := map[string]int64{}
	if s.cfg.Journals == nil {
		return out
	}
	var mu sync.Mutex
	parallel(s.assignedJournals(fleets), func(name string) {
		fs, err := s.cfg.Journals.ListFragments(ctx, &protocol.FragmentsRequest{Journal: name, NextPageToken: from[name]})
		if err != nil {
			return // Unknown for now: the next sample tries again.
		}
		end := from[name]
		for _, f := range fs {
			if f.Fragment.Store != "" {
				end = max(end, f.Fragment.End)
			}
		}
		mu.Lock()
		out[name] = end
		mu.Unlock()
	})
	return out
}

// assignedJournals are the journals of the broker fleets that have
// brokers assigned, up to maxSampled.
func (s *sampler) assignedJournals(fleets []fleetState) []string {
	var names []string
	for _, f := range fleets {
		if f.Kind != fleet.Brokers {
			continue
		}
		for _, it := range f.Items {
			if len(names) < maxSampled && len(f.ItemAssignments(it.ID)) > 0 {
				names = append(names, it.ID)
			}
		}
	}
	return names
}

// parallel calls fn for each of items, sampleParallelism at a time, and
// returns once every call returned.
func parallel[T any](items []T, fn func(T)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, sampleParallelism)
	for _, it := range items {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(it)
		}()
	}
	wg.Wait()
}

// statTarget is a shard and the endpoint of its primary.
type statTarget struct{ key, shard, endpoint string }

// sampleShards asks the primary of every shard (up to maxSampled) for
// its read-through offsets and its sources' write heads.
func (s *sampler) sampleShards(ctx context.Context, fleets []fleetState) map[string]shardSample {
	var targets []statTarget
	for _, f := range fleets {
		if f.Kind != fleet.Consumers {
			continue
		}
		for _, it := range f.Items {
			if len(targets) == maxSampled {
				break
			}
			for _, a := range f.ItemAssignments(it.ID) {
				st, _ := a.Value.(consumer.Status)
				if a.Slot == 0 && st.Code == protocol.ReplicaCode_PRIMARY && a.Member >= 0 {
					if ep := Endpoint(f.Members[a.Member].Value); ep != "" {
						targets = append(targets, statTarget{itemKey(f.Root, it.ID), it.ID, ep})
					}
				}
			}
		}
	}
	clients := map[string]protocol.ShardClient{}
	for _, t := range targets {
		if clients[t.endpoint] == nil {
			if c, err := s.dial(t.endpoint); err == nil {
				clients[t.endpoint] = protocol.NewShardClient(c)
			}
		}
	}
	out := make(map[string]shardSample, len(targets))
	var mu sync.Mutex
	parallel(targets, func(t statTarget) {
		c := clients[t.endpoint]
		if c == nil {
			return
		}
		var smp shardSample
		resp, err := c.Stat(ctx, &protocol.ShardStatRequest{Shard: t.shard})
		switch {
		case err != nil:
			smp.err = err.Error()
		case resp.Status != protocol.Status_OK:
			smp.err = resp.Status.String()
		default:
			smp.readThrough, smp.writeHeads, smp.txns = resp.ReadThrough, resp.WriteHeads, resp.Transactions
		}
		mu.Lock()
		out[t.key] = smp
		mu.Unlock()
	})
	return out
}

// dial returns a connection to a consumer process, kept for later use.
func (s *sampler) dial(endpoint string) (*grpc.ClientConn, error) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if c, ok := s.conns[endpoint]; ok {
		return c, nil
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, s.cfg.DialOptions...)
	c, err := grpc.NewClient(endpoint, opts...)
	if err != nil {
		return nil, err
	}
	s.conns[endpoint] = c
	return c, nil
}

// Endpoint is the endpoint of a broker's or a consumer process's
// member spec.
func Endpoint(v allocator.MemberValue) string {
	switch m := v.(type) {
	case *broker.MemberSpec:
		return m.Endpoint
	case *consumer.MemberSpec:
		return m.Endpoint
	}
	return ""
}

// sampleCuts reads the brokers' cut reports: who cannot reach whom.
func (s *sampler) sampleCuts(ctx context.Context, fleets []fleetState) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for _, f := range fleets {
		if f.Kind != fleet.Brokers {
			continue
		}
		prefix := f.Root + broker.CutsPrefix
		resp, err := s.cfg.Etcd.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			continue
		}
		for _, kv := range resp.Kvs {
			reporter := strings.TrimPrefix(string(kv.Key), prefix)
			var r broker.CutReport
			if strings.HasPrefix(reporter, broker.ResignedPrefix) || json.Unmarshal(kv.Value, &r) != nil || len(r.Unreached) == 0 {
				continue
			}
			if out[f.Root] == nil {
				out[f.Root] = map[string][]string{}
			}
			out[f.Root][reporter] = r.Unreached
		}
	}
	return out
}

// sampleEtcd lists etcd's members and asks each for its status.
func (s *sampler) sampleEtcd(ctx context.Context) []etcdMember {
	resp, err := s.cfg.Etcd.MemberList(ctx)
	if err != nil {
		return []etcdMember{{Name: "etcd", Error: err.Error()}}
	}
	out := make([]etcdMember, len(resp.Members))
	parallel(indexes(len(resp.Members)), func(i int) {
		m := resp.Members[i]
		em := etcdMember{Name: m.Name}
		if len(m.ClientURLs) == 0 {
			em.Error = "no client URL (not started yet)"
			out[i] = em
			return
		}
		em.Endpoint = m.ClientURLs[0]
		st, err := s.cfg.Etcd.Status(ctx, em.Endpoint)
		if err != nil {
			em.Error = err.Error()
		} else {
			em.Healthy = len(st.Errors) == 0
			em.Error = strings.Join(st.Errors, "; ")
			em.Leader = st.Leader == m.ID
			em.DBSize, em.RaftIndex = st.DbSize, st.RaftIndex
			if st.Header != nil {
				em.Revision = st.Header.Revision
			}
		}
		out[i] = em
	})
	return out
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// notePrimaries records the items whose primary moved since the last
// sample. An item without a primary keeps its last one, so that an
// outage that ends on another member counts as a failover.
func (s *sampler) notePrimaries(now time.Time, fleets []fleetState) {
	for _, f := range fleets {
		for _, it := range f.Items {
			primary := ""
			for _, a := range f.ItemAssignments(it.ID) {
				if a.Slot == 0 {
					primary = allocator.MemberName(a.Zone, a.Suffix)
				}
			}
			key := itemKey(f.Root, it.ID)
			prev := s.primaries[key]
			if primary == "" || primary == prev {
				continue
			}
			s.primaries[key] = primary
			if prev != "" {
				s.failovers = append(s.failovers, failover{Time: now, Root: f.Root, Item: it.ID,
					From: prev, To: primary, Shard: f.Kind == fleet.Consumers})
				if len(s.failovers) > maxFailovers {
					s.failovers = s.failovers[1:]
				}
			}
		}
	}
}

// addTotals adds a point to each fleet's totals: the sum of its write
// heads (brokers), and of its shards' lag (consumers).
func (s *sampler) addTotals(now time.Time, fleets []fleetState) {
	for _, f := range fleets {
		var key string
		var total int64
		switch f.Kind {
		case fleet.Brokers:
			key = "append " + f.Root
			for _, it := range f.Items {
				if h := s.heads[it.ID]; h != nil && len(h.p) > 0 {
					total += h.p[len(h.p)-1].v
				}
			}
		case fleet.Consumers:
			key = "lag " + f.Root
			for _, it := range f.Items {
				total += s.lagBytes(itemKey(f.Root, it.ID))
			}
		default:
			continue
		}
		series(s.totals, key).add(now, total)
	}
}

// lagBytes is how far a shard's primary is behind its sources' write
// heads, in bytes. Callers hold s.mu.
func (s *sampler) lagBytes(key string) int64 {
	st, ok := s.shards[key]
	if !ok || st.err != "" {
		return 0
	}
	var lag int64
	for j, head := range st.writeHeads {
		if d := head - st.readThrough[j]; d > 0 {
			lag += d
		}
	}
	return lag
}

// lagTime is how long ago the sources' write heads were where the shard
// has read through: zero when it has caught up. atLeast is set when that
// is older than the history. Callers hold s.mu.
func (s *sampler) lagTime(key string) (d time.Duration, atLeast bool) {
	st, ok := s.shards[key]
	if !ok || st.err != "" {
		return 0, false
	}
	for j, head := range st.writeHeads {
		rt := st.readThrough[j]
		h := s.heads[j]
		if rt >= head || h == nil || len(h.p) == 0 {
			continue
		}
		t, ok := h.reached(rt + 1)
		if lag := s.at.Sub(t); lag > d {
			d, atLeast = lag, !ok
		}
	}
	return d, atLeast
}
