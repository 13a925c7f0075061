package console

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/fleet"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// lagAlert is how far behind its sources a shard may fall, in time,
// before the console alerts.
const lagAlert = 30 * time.Second

// rateWindow is the window over which rates are computed.
const rateWindow = 5 * time.Second

// view is what the console shows: the whole deployment, as of one
// moment. Its JSON is the event stream's data, documented in
// docs/console.md.
type view struct {
	Time      time.Time    `json:"time"`
	Prefix    string       `json:"prefix"`
	Actions   bool         `json:"actions"`
	Selector  string       `json:"selector"`
	Etcd      []etcdMember `json:"etcd"`
	Fleets    []fleetView  `json:"fleets"`
	Alerts    []alert      `json:"alerts"`
	Failovers []failover   `json:"failovers"`
}

type fleetView struct {
	Root     string        `json:"root"`
	Kind     fleet.Kind    `json:"kind"`
	Revision int64         `json:"revision"`
	Leader   string        `json:"leader"`
	Members  []memberView  `json:"members"`
	Journals []journalView `json:"journals,omitempty"` // of brokers, and the items of plain fleets
	Shards   []shardView   `json:"shards,omitempty"`
	// Moving counts the items whose replicas are changing.
	Moving int `json:"moving"`
	// Series is the append rate of a broker fleet's journals (bytes/s),
	// or the total lag of a consumer application's shards (bytes), over
	// the last minutes: [unix ms, value] pairs.
	Series [][2]float64 `json:"series"`
}

type memberView struct {
	Name     string `json:"name"`
	Zone     string `json:"zone"`
	Suffix   string `json:"suffix"`
	Endpoint string `json:"endpoint,omitempty"`
	Limit    int    `json:"limit"`
	Load     int    `json:"load"`
	Exiting  bool   `json:"exiting,omitempty"`
	Leader   bool   `json:"leader,omitempty"`
}

type replicaView struct {
	Member string `json:"member"`
	Zone   string `json:"zone"`
	Slot   int    `json:"slot"`
	Status string `json:"status,omitempty"` // of a shard's replica
	Error  string `json:"error,omitempty"`
	// Gone is set when the member's key is gone: its lease is expiring.
	Gone bool `json:"gone,omitempty"`
}

type journalView struct {
	Name        string        `json:"name"`
	ModRevision int64         `json:"modRevision"`
	Replication int           `json:"replication"`
	Labels      string        `json:"labels"`
	Replicas    []replicaView `json:"replicas"`
	Primary     string        `json:"primary"`
	WriteHead   *int64        `json:"writeHead"` // nil when not sampled
	// Persisted is the end of the journal's content in its store, and
	// Spooled what lies beyond it, only on the brokers; nil until sampled.
	Persisted *int64  `json:"persisted"`
	Spooled   *int64  `json:"spooled"`
	Rate      float64 `json:"rate"`   // bytes/s
	Status    string  `json:"status"` // ok, moving, under-replicated, no primary
}

type shardView struct {
	ID       string        `json:"id"`
	Labels   string        `json:"labels"`
	Sources  []string      `json:"sources"`
	Desired  int           `json:"desired"`
	Replicas []replicaView `json:"replicas"`
	Primary  string        `json:"primary"`
	Status   string        `json:"status"` // the primary's code; FAILED if any replica failed
	Error    string        `json:"error,omitempty"`
	// LagBytes and LagSeconds say how far the primary is behind its
	// sources' write heads; nil when unknown. LagAtLeast marks a lag older
	// than the console's history.
	LagBytes   *int64   `json:"lagBytes"`
	LagSeconds *float64 `json:"lagSeconds"`
	LagAtLeast bool     `json:"lagAtLeast,omitempty"`
	Rate       float64  `json:"rate"`    // bytes/s read from the sources
	TxnRate    float64  `json:"txnRate"` // transactions/s committed
	StatError  string   `json:"statError,omitempty"`
}

type alert struct {
	Level   string `json:"level"` // error or warning
	Root    string `json:"root"`
	Subject string `json:"subject"`
	Text    string `json:"text"`
}

// cachedView is the last view's JSON, by change version and selector.
type cachedView struct {
	mu      sync.Mutex
	version uint64
	json    map[string][]byte
}

// viewJSON is the view through sel, as JSON, built once per change.
func (c *Console) viewJSON(sel string) ([]byte, error) {
	selector, err := labels.ParseSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("selector %q: %w", sel, err)
	}
	c.touch()
	c.changeMu.Lock()
	version := c.version
	c.changeMu.Unlock()
	c.cached.mu.Lock()
	defer c.cached.mu.Unlock()
	if c.cached.version != version || c.cached.json == nil {
		c.cached.version, c.cached.json = version, map[string][]byte{}
	}
	if b, ok := c.cached.json[sel]; ok {
		return b, nil
	}
	v := c.build(selector)
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(c.cached.json) < 16 {
		c.cached.json[sel] = b
	}
	return b, nil
}

// build builds the view, journals and shards filtered by sel; alerts
// are of the whole deployment.
func (c *Console) build(sel labels.Selector) *view {
	fleets := c.snapshots()
	s := c.sample
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &view{Time: time.Now().UTC(), Prefix: c.cfg.Prefix, Actions: c.cfg.Actions, Selector: sel.String(),
		Etcd: append([]etcdMember{}, s.etcd...), Failovers: append([]failover{}, s.failovers...), Fleets: []fleetView{}, Alerts: []alert{}}
	slices.Reverse(v.Failovers) // Newest first.
	for _, m := range v.Etcd {
		if !m.Healthy {
			v.Alerts = append(v.Alerts, alert{"error", "", "etcd " + m.Name, "unhealthy: " + m.Error})
		}
	}
	for _, f := range fleets {
		fv, alerts := s.fleetView(f, sel)
		v.Fleets = append(v.Fleets, fv)
		v.Alerts = append(v.Alerts, alerts...)
	}
	for _, f := range fleets {
		for reporter, unreached := range s.cuts[f.Root] {
			v.Alerts = append(v.Alerts, alert{"error", f.Root, "broker " + reporter,
				"cannot reach " + strings.Join(unreached, ", ") + ": journals whose routes span the cut refuse appends"})
		}
	}
	sort.SliceStable(v.Alerts, func(i, j int) bool { return v.Alerts[i].Level < v.Alerts[j].Level })
	return v
}

func sortFleets(fs []fleetState) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].Root < fs[j].Root })
}

// fleetView is the view of one fleet, and its alerts. Callers hold s.mu.
func (s *sampler) fleetView(f fleetState, sel labels.Selector) (fleetView, []alert) {
	fv := fleetView{Root: f.Root, Kind: f.Kind, Revision: f.Revision, Members: []memberView{}, Series: [][2]float64{}}
	for i, m := range f.Members {
		mv := memberView{Name: allocator.MemberName(m.Zone, m.Suffix), Zone: m.Zone, Suffix: m.Suffix,
			Endpoint: Endpoint(m.Value), Limit: m.Value.ItemLimit(), Load: f.Load[i], Exiting: m.Value.IsExiting(), Leader: i == f.Leader}
		if mv.Leader {
			fv.Leader = mv.Name
		}
		fv.Members = append(fv.Members, mv)
	}
	var alerts []alert
	for _, it := range f.Items {
		replicas, primary := replicasOf(f, it.ID)
		if len(replicas) != it.Value.DesiredReplication() {
			fv.Moving++
		}
		switch spec := it.Value.(type) {
		case *consumer.ShardSpec:
			sv, a := s.shardView(f.Root, spec, replicas, primary)
			alerts = append(alerts, a...)
			if sel.Matches(spec.LabelSetWithMeta()) {
				fv.Shards = append(fv.Shards, sv)
			}
		default:
			jv, a := s.journalView(f.Root, it, replicas, primary)
			alerts = append(alerts, a...)
			if js, ok := it.Value.(*protocol.JournalSpec); !ok || sel.Matches(js.LabelSetWithMeta()) {
				fv.Journals = append(fv.Journals, jv)
			}
		}
	}
	fv.Series = s.series(f)
	return fv, alerts
}

// replicasOf are an item's replicas in slot order, and its primary.
func replicasOf(f fleetState, id string) ([]replicaView, string) {
	replicas := []replicaView{}
	primary := ""
	for _, a := range f.ItemAssignments(id) {
		r := replicaView{Member: allocator.MemberName(a.Zone, a.Suffix), Zone: a.Zone, Slot: a.Slot, Gone: a.Member < 0}
		if st, ok := a.Value.(consumer.Status); ok {
			r.Status, r.Error = st.Code.String(), st.Error
		}
		if a.Slot == 0 {
			primary = r.Member
		}
		replicas = append(replicas, r)
	}
	sort.SliceStable(replicas, func(i, j int) bool { return replicas[i].Slot < replicas[j].Slot })
	return replicas, primary
}

// journalView is the view of a journal (or of a plain fleet's item),
// and its alerts.
func (s *sampler) journalView(root string, it allocator.ItemKV, replicas []replicaView, primary string) (journalView, []alert) {
	jv := journalView{Name: it.ID, ModRevision: it.KV.ModRevision, Replication: it.Value.DesiredReplication(), Replicas: replicas, Primary: primary, Status: "ok"}
	if spec, ok := it.Value.(*protocol.JournalSpec); ok {
		pairs := make([]string, 0, len(spec.Labels))
		for _, l := range spec.Labels {
			pairs = append(pairs, l.Name+"="+l.Value)
		}
		jv.Labels = strings.Join(pairs, ",")
	}
	if h := s.heads[it.ID]; h != nil && len(h.p) > 0 {
		head := h.p[len(h.p)-1].v
		jv.WriteHead, jv.Rate = &head, h.rate(rateWindow)
		if p, ok := s.persisted[it.ID]; ok {
			spooled := max(0, head-p)
			jv.Persisted, jv.Spooled = &p, &spooled
		}
	}
	live := 0
	for _, r := range replicas {
		if !r.Gone {
			live++
		}
	}
	var alerts []alert
	switch {
	case jv.Replication == 0:
		jv.Status = "disabled"
	case primary == "":
		jv.Status = "no primary"
		alerts = append(alerts, alert{"error", root, "journal " + it.ID, "has no primary: its appends wait"})
	case live < jv.Replication:
		jv.Status = "under-replicated"
		alerts = append(alerts, alert{"warning", root, "journal " + it.ID,
			fmt.Sprintf("under-replicated: %d of %d replicas", live, jv.Replication)})
	case len(replicas) != jv.Replication:
		jv.Status = "moving"
	}
	return jv, alerts
}

// shardView is the view of a shard, and its alerts.
func (s *sampler) shardView(root string, spec *consumer.ShardSpec, replicas []replicaView, primary string) (shardView, []alert) {
	sv := shardView{ID: spec.ID, Labels: spec.Labels.String(), Sources: []string{}, Desired: spec.DesiredReplication(),
		Replicas: replicas, Primary: primary, Status: "IDLE"}
	for _, src := range spec.Sources {
		sv.Sources = append(sv.Sources, src.Journal)
	}
	for _, r := range replicas {
		switch {
		case r.Status == protocol.ReplicaCode_FAILED.String():
			sv.Status, sv.Error = r.Status, r.Member+": "+r.Error
		case r.Slot == 0 && sv.Status != protocol.ReplicaCode_FAILED.String():
			sv.Status = r.Status
		}
	}
	key := itemKey(root, spec.ID)
	if st, ok := s.shards[key]; ok && sv.Status == protocol.ReplicaCode_PRIMARY.String() {
		if st.err != "" {
			sv.StatError = st.err
		} else {
			lag := s.lagBytes(key)
			d, atLeast := s.lagTime(key)
			secs := d.Seconds()
			sv.LagBytes, sv.LagSeconds, sv.LagAtLeast = &lag, &secs, atLeast
		}
	}
	if h := s.reads[key]; h != nil {
		sv.Rate = h.rate(rateWindow)
	}
	if h := s.txns[key]; h != nil {
		sv.TxnRate = h.rate(rateWindow)
	}
	subject := "shard " + spec.ID
	var alerts []alert
	switch {
	case sv.Desired == 0:
		sv.Status = "disabled"
	case sv.Status == protocol.ReplicaCode_FAILED.String():
		alerts = append(alerts, alert{"error", root, subject, "FAILED on " + sv.Error})
	case primary == "":
		alerts = append(alerts, alert{"error", root, subject, "has no primary: nothing processes it"})
	case sv.Status != protocol.ReplicaCode_PRIMARY.String():
		alerts = append(alerts, alert{"warning", root, subject, "its primary " + primary + " is " + sv.Status + ": recovering"})
	case sv.LagSeconds != nil && *sv.LagSeconds > lagAlert.Seconds():
		alerts = append(alerts, alert{"warning", root, subject,
			fmt.Sprintf("lagging: %.0f s (%d bytes) behind its sources", *sv.LagSeconds, *sv.LagBytes)})
	}
	return sv, alerts
}

// series is a fleet's chart: its append rate (brokers) or its total lag
// (consumers), over the history.
func (s *sampler) series(f fleetState) [][2]float64 {
	out := [][2]float64{}
	switch f.Kind {
	case fleet.Brokers:
		return rates(s.totals["append "+f.Root])
	case fleet.Consumers:
		if h := s.totals["lag "+f.Root]; h != nil {
			for _, p := range h.p {
				out = append(out, [2]float64{float64(p.t.UnixMilli()), float64(p.v)})
			}
		}
	}
	return out
}

// journalSeries is a journal's append rate over the history.
func (c *Console) journalSeries(name string) [][2]float64 {
	s := c.sample
	s.mu.Lock()
	defer s.mu.Unlock()
	return rates(s.heads[name])
}

// rates are the rates of change between h's samples, per second.
func rates(h *history) [][2]float64 {
	out := [][2]float64{}
	if h == nil {
		return out
	}
	for i := 1; i < len(h.p); i++ {
		d := h.p[i].t.Sub(h.p[i-1].t).Seconds()
		rate := 0.0
		if dv := h.p[i].v - h.p[i-1].v; d > 0 && dv > 0 {
			rate = float64(dv) / d
		}
		out = append(out, [2]float64{float64(h.p[i].t.UnixMilli()), rate})
	}
	return out
}
