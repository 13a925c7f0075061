package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/protocol"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// served is a console of 3 brokers, run and served over HTTP.
type served struct {
	bc  *brokertest.Cluster
	cl  *client.Client
	con *Console
	url string
}

func serve(t *testing.T, actions bool) *served {
	bc := brokertest.New(t)
	for _, b := range []string{"b1", "b2", "b3"} {
		bc.Start(b)
	}
	cl := bc.Client(bc.Brokers["b1"])
	bc.Journals(cl, 2, "c/a", "c/b", "c/c")
	con := New(Config{Etcd: bc.Etcd, Prefix: bc.Root, Journals: cl, Actions: actions, Interval: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- con.Run(ctx) }()
	srv := httptest.NewServer(con)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	return &served{bc: bc, cl: cl, con: con, url: srv.URL}
}

// events follows the console's event stream, decoding each view.
func (s *served) events(t *testing.T, query string) <-chan view {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/console/api/events"+query, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("events: %s, %s", resp.Status, ct)
	}
	out := make(chan view)
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); resp.Body.Close(); <-done })
	go func() {
		defer close(done)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var v view
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Errorf("an event's view: %v", err)
				return
			}
			select {
			case out <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// await returns the first view of events for which ok holds.
func await(t *testing.T, events <-chan view, what string, ok func(view) bool) view {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case v := <-events:
			if ok(v) {
				return v
			}
		case <-timeout:
			t.Fatalf("no view shows %s", what)
		}
	}
}

func journal(v view, name string) *journalView {
	for _, f := range v.Fleets {
		for i := range f.Journals {
			if f.Journals[i].Name == name {
				return &f.Journals[i]
			}
		}
	}
	return nil
}

// The event stream follows the fleet: journals with their routes, and
// the write head and append rate of an append, filtered by selector.
func TestEventsFollowTheFleet(t *testing.T) {
	s := serve(t, false)
	events := s.events(t, "?selector="+url.QueryEscape("prefix=c/,name!=c/c"))
	v := await(t, events, "the journals and their heads", func(v view) bool {
		j := journal(v, "c/a")
		return j != nil && len(j.Replicas) == 2 && j.WriteHead != nil
	})
	if journal(v, "c/c") != nil || journal(v, "c/b") == nil {
		t.Errorf("the selector shows %+v", v.Fleets)
	}
	if len(v.Fleets) != 1 || len(v.Fleets[0].Members) != 3 || v.Fleets[0].Leader == "" {
		t.Fatalf("fleets %+v, want the 3 brokers with a leader", v.Fleets)
	}
	frag, err := s.cl.Append(context.Background(), client.AppendRequest{Journal: "c/a"}, strings.NewReader(strings.Repeat("x", 4096)))
	if err != nil {
		t.Fatal(err)
	}
	await(t, events, "the append", func(v view) bool {
		j := journal(v, "c/a")
		return j.WriteHead != nil && *j.WriteHead == frag.End && j.Rate > 0
	})
}

// A broker that leaves takes its replicas with it: its journals are
// under-replicated in the alerts until the allocator replaces them, and
// those it was primary of show a failover.
func TestAlertsAndFailovers(t *testing.T) {
	s := serve(t, false)
	events := s.events(t, "")
	v := await(t, events, "every journal's route", func(v view) bool {
		return len(v.Fleets) == 1 && len(v.Fleets[0].Journals) == 3 && v.Fleets[0].Moving == 0 && len(v.Etcd) > 0
	})
	if len(v.Alerts) != 0 || !v.Etcd[0].Healthy {
		t.Fatalf("a healthy fleet has alerts %+v, etcd %+v", v.Alerts, v.Etcd)
	}
	var stopped string
	for _, j := range v.Fleets[0].Journals {
		if j.Name == "c/a" {
			stopped = j.Primary
		}
	}
	_, suffix, _ := allocator.ParseMemberName(stopped)
	s.bc.Stop(s.bc.Brokers[suffix])
	await(t, events, "a failover of c/a", func(v view) bool {
		return slices.ContainsFunc(v.Failovers, func(f failover) bool { return f.Item == "c/a" && f.From == stopped })
	})
	await(t, events, "the journals whole again", func(v view) bool {
		for _, j := range v.Fleets[0].Journals {
			if j.Status != "ok" {
				return false
			}
		}
		return len(v.Alerts) == 0
	})
}

func get(t *testing.T, u string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// The what-if planner answers the plan of the allocator's solver for the
// fleet as it is, and refuses what it cannot plan.
func TestPlan(t *testing.T) {
	s := serve(t, false)
	events := s.events(t, "")
	await(t, events, "a settled fleet", func(v view) bool { return len(v.Fleets) == 1 && v.Fleets[0].Moving == 0 })
	root := url.QueryEscape(s.bc.Root)
	code, body := get(t, s.url+"/console/api/plan?root="+root+"&drain="+url.QueryEscape("zb1#b1"))
	if code != 200 {
		t.Fatalf("plan: %d %v", code, body)
	}
	plan := body["plan"].(map[string]any)
	for _, a := range plan["removed"].([]any) {
		if m := a.(map[string]any); m["suffix"] != "b1" {
			t.Errorf("a drain of b1 removes %v", m)
		}
	}
	if len(plan["removed"].([]any)) == 0 || len(plan["added"].([]any)) != len(plan["removed"].([]any)) {
		t.Errorf("a drain of b1 moves +%d -%d", len(plan["added"].([]any)), len(plan["removed"].([]any)))
	}
	for _, c := range []struct {
		query string
		code  int
	}{
		{"root=/nowhere/", 404},
		{"root=" + root + "&drain=" + url.QueryEscape("zq#nobody"), 400},
		{"root=" + root + "&add=bad", 400},
		{"root=" + root + "&replication=c/a=x", 400},
		{"root=" + root + "&replication=nosuch=1", 400},
	} {
		if code, body := get(t, s.url+"/console/api/plan?"+c.query); code != c.code || body["error"] == "" {
			t.Errorf("plan?%s: %d %v, want %d with an error", c.query, code, body, c.code)
		}
	}
	if code, body := get(t, s.url+"/console/api/view?selector="+url.QueryEscape("a in (")); code != 400 || body["error"] == nil {
		t.Errorf("a bad selector: %d %v", code, body)
	}
}

// Actions are refused while disabled, and from other sites always; an
// edited spec is applied only over the revision it was edited from.
func TestActions(t *testing.T) {
	post := func(u, body string, h map[string]string) int {
		req, _ := http.NewRequest("POST", u, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	off := serve(t, false)
	if code := post(off.url+"/console/api/apply?revision=1", `{}`, nil); code != 403 {
		t.Errorf("apply with actions disabled: %d, want 403", code)
	}
	s := serve(t, true)
	events := s.events(t, "")
	v := await(t, events, "c/a", func(v view) bool { return journal(v, "c/a") != nil })
	rev := journal(v, "c/a").ModRevision
	spec := `{"name": "c/a", "replication": 3}`
	u := fmt.Sprintf("%s/console/api/apply?revision=%d", s.url, rev)
	if code := post(u, spec, map[string]string{"Sec-Fetch-Site": "cross-site"}); code != 403 {
		t.Errorf("a cross-site apply: %d, want 403", code)
	}
	if code := post(u, `{"name": "c/a", "replication": -1}`, nil); code != 400 {
		t.Errorf("an invalid spec: %d, want 400", code)
	}
	if code := post(u, spec, map[string]string{"Sec-Fetch-Site": "same-origin"}); code != 200 {
		t.Fatalf("apply: %d, want 200", code)
	}
	await(t, events, "c/a at replication 3", func(v view) bool {
		j := journal(v, "c/a")
		return j.Replication == 3 && len(j.Replicas) == 3
	})
	if code := post(u, spec, nil); code == 200 {
		t.Errorf("an apply over a revision that changed since succeeded")
	}
	if code := post(s.url+"/console/api/unassign", "root=/nowhere/&shard=x", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); code != 404 {
		t.Errorf("unassign in no application: %d, want 404", code)
	}
}

func TestHistory(t *testing.T) {
	var h history
	t0 := time.Unix(1000, 0)
	for i := range historyLen + 10 {
		h.add(t0.Add(time.Duration(i)*time.Second), int64(i*100))
	}
	if len(h.p) != historyLen || h.p[0].v != 1000 {
		t.Fatalf("history keeps %d points from %d", len(h.p), h.p[0].v)
	}
	if r := h.rate(5 * time.Second); r != 100 {
		t.Errorf("rate = %v, want 100/s", r)
	}
	last := h.p[len(h.p)-1]
	if at, ok := h.reached(last.v - 250); !ok || !at.Equal(last.t.Add(-2*time.Second)) {
		t.Errorf("reached(%d) = %v %v, want %v", last.v-250, at, ok, last.t.Add(-2*time.Second))
	}
	if _, ok := h.reached(0); ok {
		t.Errorf("an offset before the history is reached within it")
	}
}

// FuzzConsoleRequests sends arbitrary requests to the console's API: it
// answers each with a status, never a panic.
func FuzzConsoleRequests(f *testing.F) {
	for _, s := range []string{"/console/api/plan?root=/x/&drain=a%23b&add=z%23s:3&replication=a=2",
		"/console/api/view?selector=a%20in%20(b", "/console/api/series?journal=a//b", "/console/api/events?selector=!!"} {
		f.Add("GET", s, "")
	}
	f.Add("POST", "/console/api/apply?revision=1", `{"name":"a","replication":1}`)
	f.Add("POST", "/console/api/unassign", "root=/x/&shard=y")
	con := New(Config{Actions: true})
	f.Fuzz(func(t *testing.T, method, target, body string) {
		if strings.Contains(target, "/events") {
			return // A stream: it answers until its client leaves.
		}
		req, err := http.NewRequest(method, "http://console"+target, strings.NewReader(body))
		if err != nil {
			return
		}
		w := httptest.NewRecorder()
		con.ServeHTTP(w, req)
		if w.Code < 200 || w.Code > 599 {
			t.Fatalf("%s %s: status %d", method, target, w.Code)
		}
	})
}

// rounds are the console's samples, and those that made RPCs.
func (s *served) rounds() (all, rpcs int) {
	s.con.sample.mu.Lock()
	defer s.con.sample.mu.Unlock()
	return s.con.sample.rounds, s.con.sample.rpcRounds
}

// awaitChange waits for the console's next change.
func (s *served) awaitChange(t *testing.T) {
	t.Helper()
	select {
	case <-s.con.changes():
	case <-time.After(30 * time.Second):
		t.Fatal("the console did not change in 30 s")
	}
}

// A console no one looks at samples no write heads and no shards; the
// first view wakes it.
func TestIdleConsoleMakesNoRPCs(t *testing.T) {
	s := serve(t, false)
	for all, _ := s.rounds(); all < 3; all, _ = s.rounds() {
		s.awaitChange(t)
	}
	if _, rpcs := s.rounds(); rpcs != 0 {
		t.Fatalf("an idle console sampled with RPCs %d times", rpcs)
	}
	events := s.events(t, "")
	await(t, events, "the write heads", func(v view) bool {
		j := journal(v, "c/a")
		return j != nil && j.WriteHead != nil
	})
}

// A journal with a store shows how much of it is persisted, and how much
// is only spooled on its brokers.
func TestPersistedAndSpooled(t *testing.T) {
	s := serve(t, false)
	s.bc.Apply(s.cl, &protocol.JournalSpec{Name: "c/stored", Replication: 2, Fragment: &protocol.JournalSpec_Fragment{
		Length: 1024, Stores: []string{"file://" + t.TempDir() + "/"}}})
	var end int64
	for range 2 { // The second append rolls the first one's fragment, which is persisted.
		frag, err := s.cl.Append(context.Background(), client.AppendRequest{Journal: "c/stored"}, strings.NewReader(strings.Repeat("x", 4096)))
		if err != nil {
			t.Fatal(err)
		}
		end = frag.End
	}
	events := s.events(t, "")
	v := await(t, events, "the first append persisted", func(v view) bool {
		j := journal(v, "c/stored")
		return j != nil && j.Persisted != nil && *j.Persisted >= 4096 && j.WriteHead != nil && *j.WriteHead == end
	})
	j := journal(v, "c/stored")
	if *j.Spooled != *j.WriteHead-*j.Persisted {
		t.Errorf("spooled %d, want the write head %d less persisted %d", *j.Spooled, *j.WriteHead, *j.Persisted)
	}
	if j := journal(v, "c/a"); j.Persisted == nil || *j.Persisted != 0 {
		t.Errorf("a journal without a store shows %v persisted", j.Persisted)
	}
}

// The console learns of changes through keyspace observers, which run
// under their keyspace's lock while snapshots hold the console's and
// take the keyspaces': a notification must not need the console's lock.
func TestNotifyWithoutTheConsolesLock(t *testing.T) {
	s := serve(t, false)
	s.awaitChange(t) // The fleet is watched.
	s.con.mu.Lock()
	w := s.con.fleets[s.bc.Root]
	resp, err := s.bc.Etcd.Put(context.Background(), s.bc.Root+"items/c/new", `{"name":"c/new","replication":1}`)
	if err != nil || w == nil {
		s.con.mu.Unlock()
		t.Fatalf("watched %v; put: %v", w, err)
	}
	applied := make(chan error, 1)
	go func() { applied <- w.ks.WaitForRevision(context.Background(), resp.Header.Revision) }()
	select {
	case err = <-applied:
		s.con.mu.Unlock()
	case <-time.After(30 * time.Second):
		s.con.mu.Unlock() // Which unblocks the keyspace.
		<-applied
		err = fmt.Errorf("the keyspace did not apply revision %d while the console's lock was held", resp.Header.Revision)
	}
	if err != nil {
		t.Fatal(err)
	}
}
