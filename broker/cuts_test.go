package broker

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/quire-dev/quire/internal/faultnet"
)

func TestResigners(t *testing.T) {
	three := []string{"a", "b", "c"}
	five := []string{"a", "b", "c", "d", "e"}
	for _, tc := range []struct {
		name     string
		members  []string
		cuts     []cut
		resigned []resignation
		want     []string
	}{
		{name: "no reports", members: three},
		{name: "one side reports a pair", members: three, cuts: []cut{report("a", "c")}, want: []string{"c"}},
		{name: "both sides report a pair", members: three, cuts: []cut{report("a", "c"), report("c", "a")}, want: []string{"c"}},
		{name: "the greater name goes, whoever reports", members: three, cuts: []cut{report("c", "b")}, want: []string{"c"}},
		{name: "one that nobody reaches goes alone", members: five,
			cuts: []cut{report("a", "c"), report("b", "c"), report("d", "c"), report("e", "c")}, want: []string{"c"}},
		{name: "a hub of cuts goes, though it does not report", members: five,
			cuts: []cut{report("b", "a"), report("c", "a")}, want: []string{"a"}},
		{name: "two separate cuts", members: five, cuts: []cut{report("a", "b"), report("c", "d")}, want: []string{"b", "d"}},
		{name: "a chain: the middle first, then nothing", members: five,
			cuts: []cut{report("a", "b"), report("b", "c")}, want: []string{"b"}},
		{name: "reports of brokers gone do not count", members: three,
			cuts: []cut{report("x", "a"), report("a", "y")}},
		{name: "a broker does not cut itself", members: three, cuts: []cut{report("a", "a")}},
		{name: "fewer than three brokers: no telling", members: []string{"a", "b"}, cuts: []cut{report("a", "b")}},
		{name: "an empty report (a timeout published) cuts nothing", members: three, cuts: []cut{report("a")}},
		// b resigned for its cut from a; now a is cut from c: a goes, not
		// c, though c's name is greater.
		{name: "a past resignation counts against whom it names", members: []string{"a", "c", "d", "e"},
			cuts: []cut{report("c", "a")}, resigned: []resignation{resigned("b", "a")}, want: []string{"a"}},
		{name: "a past resignation alone resigns nobody", members: three, resigned: []resignation{resigned("x", "a")}},
		{name: "a resignation naming a non-member or itself counts for nothing", members: three,
			cuts: []cut{report("a", "c")}, resigned: []resignation{resigned("c", "c", "y")}, want: []string{"c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resigners(tc.members, tc.cuts, tc.resigned); !slices.Equal(got, tc.want) {
				t.Errorf("resigners(%v, %v) = %v, want %v", tc.members, tc.cuts, got, tc.want)
			}
		})
	}
}

// report is a cut report by reporter of unreached.
func report(reporter string, unreached ...string) cut {
	return cut{reporter, CutReport{Unreached: unreached}}
}

// resigned is a resignation of broker, cut from cutFrom.
func resigned(broker string, cutFrom ...string) resignation {
	return resignation{broker, Resignation{CutFrom: cutFrom}}
}

// Cuts that fail one at a time, each a pair judged alone, with the
// resignations they leave: only the broker at fault and the first peer
// it lost resign, not a majority.
func TestResignersCutsOneAtATime(t *testing.T) {
	members := []string{"a", "b", "c", "d", "e"}
	var gone []resignation
	var out []string
	for _, next := range []string{"b", "c", "d", "e"} {
		if !slices.Contains(members, "a") {
			break
		}
		chosen := resigners(members, []cut{report(next, "a")}, gone)
		for _, b := range chosen {
			if b == "a" {
				gone = append(gone, resigned(b, next))
			} else {
				gone = append(gone, resigned(b, "a"))
			}
		}
		out = append(out, chosen...)
		members = slices.DeleteFunc(members, func(m string) bool { return slices.Contains(chosen, m) })
	}
	if !slices.Equal(out, []string{"b", "a"}) {
		t.Errorf("resigned in turn: %v, want [b a] (b for its lone cut from a; then a, cut twice)", out)
	}
}

// A one-way cut: b cannot reach c, c reaches b. c (the greater name)
// resigns, restarts reaching everyone, rejoins, and b reports it again:
// the second time, b goes (and, unable to reach c, waits before it
// rejoins), rather than c going again and again.
func TestResignersOneWayCut(t *testing.T) {
	members := []string{"a", "b", "c"}
	if got := resigners(members, []cut{report("b", "c")}, nil); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("first cut: %v resign, want [c]", got)
	}
	if got := resigners(members, []cut{report("b", "c")}, []resignation{resigned("c", "b")}); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after c rejoined and is cut again: %v resign, want [b]", got)
	}
}

// A broker that nobody reaches: the first report of it in makes a pair
// whose greater name is the reporter's. The reporter is not chosen while
// the others suspect the same broker, their reports still to come.
func TestChosenToResignWaitsForSuspicions(t *testing.T) {
	members := []string{"b1", "b2", "b3"}
	first := []cut{report("b2", "b1"), {"b3", CutReport{Suspected: []string{"b1"}}}}
	if got := resigners(members, first[:1], nil); !slices.Equal(got, []string{"b2"}) {
		t.Fatalf("the first report alone chooses %v, want [b2] (the case this guards)", got)
	}
	if chosenToResign("b2", members, first, nil) {
		t.Errorf("b2 chosen by its own report of b1, while b3 suspects b1 too")
	}
	if chosenToResign("b1", members, first, nil) {
		t.Errorf("b1 chosen before the suspicion is a cut")
	}
	both := []cut{report("b2", "b1"), report("b3", "b1")}
	if !chosenToResign("b1", members, both, nil) || chosenToResign("b2", members, both, nil) {
		t.Errorf("with both reports in, want b1 chosen alone")
	}
	// A suspicion of someone else does not hold a rightful choice back.
	other := []cut{report("b1", "b3"), {"b2", CutReport{Suspected: []string{"b3"}}}}
	if !chosenToResign("b3", members, other, nil) {
		t.Errorf("b3, cut from b1 and suspected by b2, not chosen")
	}
}

func TestCutGrace(t *testing.T) {
	members := []string{"a", "b", "c"}
	withTimeout := func(reporter string, d time.Duration) cut {
		return cut{reporter, CutReport{IsolationTimeoutMs: d.Milliseconds()}}
	}
	for _, tc := range []struct {
		name string
		own  time.Duration
		cuts []cut
		want time.Duration
	}{
		{"no reports: half its own", 4 * time.Second, nil, 2 * time.Second},
		{"one timeout for all: half of it", 4 * time.Second,
			[]cut{withTimeout("b", 4*time.Second), withTimeout("c", 4*time.Second)}, 2 * time.Second},
		{"a peer's longer timeout: its report comes later", 4 * time.Second,
			[]cut{withTimeout("b", 12*time.Second)}, 8*time.Second + 6*time.Second},
		{"a peer's shorter timeout: the choice may begin earlier", 12 * time.Second,
			[]cut{withTimeout("b", 4*time.Second)}, 8*time.Second + 6*time.Second},
		{"unknown timeouts and non-members do not count", 4 * time.Second,
			[]cut{withTimeout("b", 0), withTimeout("x", time.Minute)}, 2 * time.Second},
	} {
		if got := cutGrace(tc.own, tc.cuts, members); got != tc.want {
			t.Errorf("%s: cutGrace = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestPeerWatch(t *testing.T) {
	t0 := time.Now()
	w := peerWatch{last: t0, since: map[string]time.Time{}}
	w.observe(map[string]bool{"a": true, "b": false, "c": true}, t0)
	w.observe(map[string]bool{"a": true, "b": false, "c": false}, t0.Add(3*time.Second))
	if got := w.report(t0.Add(4*time.Second), 4*time.Second); !slices.Equal(got.Unreached, []string{"b"}) || len(got.Suspected) != 0 {
		t.Errorf("report after 4s = %+v, want b unreached, none suspected (c failed only 1s ago)", got)
	}
	if got := w.report(t0.Add(5*time.Second), 4*time.Second); !slices.Equal(got.Unreached, []string{"b"}) || !slices.Equal(got.Suspected, []string{"c"}) {
		t.Errorf("report after 5s = %+v, want b unreached, c suspected (failing for half the timeout)", got)
	}
	w.observe(map[string]bool{"a": true, "b": true, "c": false}, t0.Add(8*time.Second))
	if got := w.report(t0.Add(8*time.Second), 4*time.Second); !slices.Equal(got.Unreached, []string{"c"}) || len(got.Suspected) != 0 {
		t.Errorf("report after 8s = %+v, want c unreached (b was reached again)", got)
	}
	w.observe(map[string]bool{"a": true, "b": true}, t0.Add(9*time.Second))
	if got := w.report(t0.Add(20*time.Second), 4*time.Second); len(got.Unreached)+len(got.Suspected) != 0 {
		t.Errorf("report = %+v once c is no longer a peer, want none", got)
	}
	if !w.last.Equal(t0.Add(9 * time.Second)) {
		t.Errorf("last reached a peer at %v, want the last round", w.last.Sub(t0))
	}
	w.observe(map[string]bool{"a": false, "b": false}, t0.Add(10*time.Second))
	if !w.last.Equal(t0.Add(9 * time.Second)) {
		t.Errorf("a round reaching no peer moved last to %v", w.last.Sub(t0))
	}
}

func TestAwaited(t *testing.T) {
	reached := map[string]bool{"a": true, "b": false, "c": false}
	cuts := []cut{{"a", CutReport{Unreached: []string{"c"}}}}
	if got := awaited(reached, cuts); !slices.Equal(got, []string{"b"}) {
		t.Errorf("awaited = %v, want [b]: c is cut from a too, so not waited for", got)
	}
	// Reports by the waiting broker itself (its last run's, not yet
	// expired), or by brokers that are not members, are no evidence.
	for _, reporter := range []string{"self", "gone"} {
		cuts := []cut{{reporter, CutReport{Unreached: []string{"b", "c"}}}}
		if got := awaited(reached, cuts); !slices.Equal(got, []string{"b", "c"}) {
			t.Errorf("with a report by %s: awaited = %v, want [b c]", reporter, got)
		}
	}
}

// linked starts brokers b1, b2 and b3 whose connections to each other go
// through links, with a short isolation timeout, and edit (if not nil)
// applied to each config.
func linked(t *testing.T, edit func(name string, cfg *Config)) (*cluster, *faultnet.Links) {
	c := newCluster(t)
	links := &faultnet.Links{}
	for _, name := range []string{"b1", "b2", "b3"} {
		c.startLinked(name, links, "", edit)
	}
	return c, links
}

// startLinked starts broker name (on dir, if not empty) as linked does.
func (c *cluster) startLinked(name string, links *faultnet.Links, dir string, edit func(name string, cfg *Config)) *testBroker {
	sw := &faultnet.Switch{}
	return c.startWith(name, dir, c.etcd, func(cfg *Config) {
		cfg.Endpoint = sw.Proxy(c.t, cfg.Endpoint)
		links.Name(cfg.Endpoint, name)
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(links.Dialer(name, sw.Dial))}
		cfg.LeaseTTL, cfg.IsolationTimeout = shortLease, 4*time.Second
		if edit != nil {
			edit(name, cfg)
		}
	})
}

// Two brokers of three that cannot reach each other, though each reaches
// etcd and the third: the one with the greater name resigns, the journals
// that spanned the cut take appends again, and, restarted while the cut
// lasts, it does not serve until the cut heals.
func TestBrokersCutFromEachOtherOneResigns(t *testing.T) {
	c, links := linked(t, nil)
	b1 := c.brokers["b1"]
	journals := []string{"logs/cut-1", "logs/cut-2", "logs/cut-3", "logs/cut-4"}
	for _, j := range journals {
		c.journal(b1, j, 2)
		c.appendRetry(b1, j, []byte("before\n"))
	}

	links.Cut("b1", "b3")
	b3 := c.brokers["b3"]
	awaitResigned(t, b3, "cut from b1 (the greater name of the two)")
	for _, name := range []string{"b1", "b2"} {
		select {
		case err := <-c.brokers[name].done:
			c.brokers[name].done <- err // For the cleanup's stop.
			t.Fatalf("broker %s stopped: %v; only b3 should resign", name, err)
		default:
		}
	}
	c.stop(b3)
	for _, j := range journals {
		c.appendRetry(b1, j, []byte("after\n"))
		if got := string(c.readAll(c.brokers["b2"], j)); got != "before\nafter\n" {
			t.Errorf("journal %s holds %q, want before and after", j, got)
		}
	}

	edit, checked := checks(nil)
	c.startLinked("b3", links, b3.dir, func(_ string, cfg *Config) { edit(cfg) })
	for range 2 {
		awaitCheck(t, checked, "reaching one of 2 peers", func(c peerCheck) bool { return c.peers == 2 && c.reached })
	}
	c.awaitAnnouncedOnlyAfter(t, "b3", "its cut from b1 heals", func() { links.Heal("b1", "b3") })
}

// A one-way cut: b1 cannot open connections to b3, b3 can to b1. b3, the
// greater name, resigns first; restarted, it reaches both peers and
// rejoins, and b1 reports it again. Its resignation, which outlives it,
// counts against b1, which resigns the second time, and, unable to reach
// b3, does not rejoin until the cut heals: no rejoin and resign loop.
func TestOneWayCutResignsTheBrokerThatCannotReach(t *testing.T) {
	c, links := linked(t, nil)
	links.CutOneWay("b1", "b3")
	b3 := c.brokers["b3"]
	awaitResigned(t, b3, "unreachable from b1 (the greater name of the two)")
	c.stop(b3)
	c.startLinked("b3", links, b3.dir, nil)

	b1 := c.brokers["b1"]
	awaitResigned(t, b1, "unable to reach b3 again, after b3's resignation named it")
	for _, name := range []string{"b2", "b3"} {
		select {
		case err := <-c.brokers[name].done:
			c.brokers[name].done <- err // For the cleanup's stop.
			t.Fatalf("broker %s stopped: %v; b1 should have resigned the second time", name, err)
		default:
		}
	}
	c.stop(b1)
	edit, checked := checks(nil)
	c.startLinked("b1", links, b1.dir, func(_ string, cfg *Config) { edit(cfg) })
	for range 2 {
		awaitCheck(t, checked, "reaching one of 2 peers", func(c peerCheck) bool { return c.peers == 2 && c.reached })
	}
	c.awaitAnnouncedOnlyAfter(t, "b1", "its cut to b3 heals", func() { links.Heal("b1", "b3") })
}

// A broker that nobody reaches, but that keeps its lease and does not
// resign (its isolation check is off here; a hung process is the same),
// is reported cut by every other broker, and is the only one the reports
// choose: the others, each cut from it alone, do not resign.
func TestBrokersCutFromAHungOneStay(t *testing.T) {
	watched := map[string]<-chan peerCheck{}
	hooks := map[string]func(*Config){}
	for _, name := range []string{"b2", "b3"} {
		hooks[name], watched[name] = checks(nil)
	}
	c, links := linked(t, func(name string, cfg *Config) {
		if name == "b1" {
			cfg.IsolationTimeout = -1
		} else {
			hooks[name](cfg)
		}
	})
	for _, ch := range watched {
		awaitCheck(t, ch, "reaching 2 peers", func(c peerCheck) bool { return c.peers == 2 && c.reached })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.etcd.Get(ctx, c.root+CutsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	reports := c.etcd.Watch(ctx, c.root+CutsPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	// b3 has the greatest name: were the cuts judged pair by pair, it
	// would resign for its cut from b1.
	links.Cut("b1", "b2")
	links.Cut("b1", "b3")
	reporters := map[string]bool{}
	for ev := range reports {
		for _, e := range ev.Events {
			var r CutReport
			if e.Type == clientv3.EventTypePut && json.Unmarshal(e.Kv.Value, &r) == nil && len(r.Unreached) != 0 {
				reporters[string(e.Kv.Key)] = true
			}
		}
		if len(reporters) == 2 {
			break
		}
	}
	if len(reporters) != 2 {
		t.Fatalf("within 30s, only %v reported their cut from b1", reporters)
	}
	for _, ch := range watched {
		for range 3 {
			awaitCheck(t, ch, "after the reports", func(peerCheck) bool { return true })
		}
	}
	for _, name := range []string{"b1", "b2", "b3"} {
		select {
		case err := <-c.brokers[name].done:
			c.brokers[name].done <- err // For the cleanup's stop.
			t.Errorf("broker %s stopped: %v; none should resign for a hung peer", name, err)
		default:
		}
	}
}

func TestPeerWatchChosen(t *testing.T) {
	t0 := time.Now()
	var w peerWatch
	for _, step := range []struct {
		at     time.Duration
		chosen bool
		want   bool
	}{
		{0, true, false},
		{time.Second, true, false},
		{2 * time.Second, false, false}, // A later report chose another.
		{3 * time.Second, true, false},
		{4 * time.Second, true, false},
		{5 * time.Second, true, true},
	} {
		if got := w.chosen(step.chosen, t0.Add(step.at), 2*time.Second); got != step.want {
			t.Errorf("at %v, chosen %v: resign %v, want %v", step.at, step.chosen, got, step.want)
		}
	}
}
