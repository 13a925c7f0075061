package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/console"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/gateway"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/consumertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/message"
)

// consoleCluster is 3 brokers and 2 processes of a counting
// application, and a console of them served with the HTTP gateway.
type consoleCluster struct {
	bc      *brokertest.Cluster
	fleet   *consumertest.Fleet
	cl      *client.Client
	root    string // the application's
	url     string
	browser context.Context
	shots   []string // directories screenshots go to
	loaded  bool
}

func startConsoleCluster(t *testing.T) *consoleCluster {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("no chromium to test the console in (.ci/run installs Debian's chromium)")
	}
	bc := brokertest.New(t)
	for _, b := range []string{"b1", "b2", "b3"} {
		bc.Start(b)
	}
	cl := bc.Client(bc.Brokers["b1"])
	root := strings.TrimSuffix(bc.Root, "/") + "-consumers/"
	fleet := consumertest.New(t, bc.Etcd, cl, root, consumertest.Counter{})
	fleet.Configure = func(cfg *consumer.Config) { cfg.HintInterval = 100 * time.Millisecond }
	fleet.Start("c1", "za")
	fleet.Start("c2", "zb")
	must(t, bc.Brokers["b1"].Endpoint, strings.NewReader(shardsTestJournals+"  - {name: console/hello, replication: 2, labels: {app: hello}}\n"), "journals", "apply", "-f", "-")
	sc := &shardsCluster{t: t, consumer: fleet.Procs["c1"].Endpoint}
	sc.must(strings.NewReader(shardsTestFile(root, 1)), "apply", "-f", "-")

	con := console.New(console.Config{Etcd: bc.Etcd, Prefix: parentPrefix(bc.Root), Journals: cl, Actions: true,
		Interval: 250 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); con.Run(ctx) }()
	mux := http.NewServeMux()
	mux.Handle("/v1/", gateway.New(gateway.Config{Journals: cl}))
	mux.Handle("/", con)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	c := &consoleCluster{bc: bc, fleet: fleet, cl: cl, root: root, url: srv.URL, browser: bctx, shots: []string{t.TempDir()}}
	if dir := os.Getenv("QUIRE_SCREENSHOTS"); dir != "" {
		c.shots = append(c.shots, dir) // make docs-screenshots writes them to docs/images
	}
	return c
}

// open shows the console's page at hash: the first loads the console,
// the others change the location's hash, as its links do (a navigation
// within the page has no load event to wait for).
func (c *consoleCluster) open(t *testing.T, hash string) {
	t.Helper()
	var err error
	if !c.loaded {
		err = chromedp.Do(c.browser, chromedp.Navigate(c.url+"/"+hash))
		c.loaded = err == nil
	} else {
		_, err = chromedp.Run(c.browser, chromedp.Evaluate[string](fmt.Sprintf(`location.hash = %q`, hash)))
	}
	if err != nil {
		t.Fatalf("opening %s: %v", hash, err)
	}
}

// await waits until the JavaScript expression is true in the page.
func (c *consoleCluster) await(t *testing.T, what, expr string, within time.Duration) {
	t.Helper()
	if _, err := chromedp.Run(c.browser, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(within),
		chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		page, _ := chromedp.Run(c.browser, chromedp.Evaluate[string](`document.getElementById('main').innerText`))
		t.Fatalf("waiting for %s (%s): %v\nthe page shows:\n%s", what, expr, err, page)
	}
}

func (c *consoleCluster) eval(t *testing.T, expr string) string {
	t.Helper()
	s, err := chromedp.Run(c.browser, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return s
}

// shot writes a screenshot of the page as NAME.png.
func (c *consoleCluster) shot(t *testing.T, name string) {
	t.Helper()
	png, err := chromedp.Run(c.browser, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	for _, dir := range c.shots {
		if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// rowText is the text of the table row whose attribute attr is value,
// or "" if there is none.
func rowText(attr, value string) string {
	return fmt.Sprintf(`(document.querySelector('tr[%s=%q]') || {innerText: ''}).innerText`, attr, value)
}

// The console in a real browser shows the cluster's real state on each
// page, and follows it live: appends, a killed process's shards taken
// over by their standbys, a FAILED shard among the alerts, and a what-if
// drain listing the moves quire allocator plan prints.
func TestConsoleInABrowser(t *testing.T) {
	c := startConsoleCluster(t)

	// Overview: both fleets, every member.
	c.open(t, "#/")
	for _, root := range []string{c.bc.Root, c.root} {
		c.await(t, "fleet "+root, fmt.Sprintf(`!!document.querySelector('[data-fleet=%q]')`, root), 30*time.Second)
	}
	for _, m := range []string{"zb1#b1", "zb2#b2", "zb3#b3", "za#c1", "zb#c2"} {
		c.await(t, "member "+m, fmt.Sprintf(`!!document.querySelector('tr[data-member=%q]')`, m), 10*time.Second)
	}
	c.await(t, "etcd's health", `!!document.querySelector('#etcd .badge.ok')`, 10*time.Second)

	// Journals, and a journal's page that follows an append.
	c.open(t, "#/journals")
	c.await(t, "the journals", `!!document.querySelector('tr[data-journal="console/hello"] td.head') &&
		document.querySelector('tr[data-journal="console/hello"] td.head').innerText !== '–'`, 30*time.Second)
	c.shot(t, "journals")
	c.open(t, "#/journal/console/hello")
	c.await(t, "the spec", `!!document.getElementById('spec') && document.getElementById('spec').value.includes('"replication": 2')`, 10*time.Second)
	c.await(t, "the tail", `document.getElementById('tail-note').innerText.startsWith('From offset')`, 10*time.Second)
	appended := time.Now()
	frag, err := c.cl.Append(context.Background(), client.AppendRequest{Journal: "console/hello"}, strings.NewReader("hello, console\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.await(t, "the append in the tail", `document.getElementById('tail').innerText.includes('hello, console')`, 5*time.Second)
	c.await(t, "the new write head", fmt.Sprintf(`document.getElementById('journal-head').innerText === '%d'`, frag.End), 5*time.Second)
	t.Logf("the append showed in the tail and the write head %v after it was sent", time.Since(appended).Round(time.Millisecond))
	c.await(t, "what is persisted", `(document.getElementById('persisted') || {innerText: ''}).innerText.startsWith('Persisted through offset')`, 10*time.Second)
	c.shot(t, "journal")

	// Shards: every shard primary; kill the process of shard-0's primary,
	// and its standby takes over.
	c.open(t, "#/shards")
	for _, id := range []string{"counts/shard-0", "counts/shard-1"} {
		c.await(t, id+" primary", fmt.Sprintf(`%s.includes('PRIMARY') && %s.includes('STANDBY')`, rowText("data-shard", id), rowText("data-shard", id)), 30*time.Second)
	}
	c.shot(t, "shards")
	primary := c.eval(t, `document.querySelector('tr[data-shard="counts/shard-0"] td.primary').innerText`)
	_, suffix, err := allocator.ParseMemberName(primary)
	if err != nil {
		t.Fatal(err)
	}
	c.fleet.Kill(c.fleet.Procs[suffix])
	c.await(t, "the standby of counts/shard-0 taking over", fmt.Sprintf(`(() => {
		const r = document.querySelector('tr[data-shard="counts/shard-0"]');
		return r && r.querySelector('td.primary').innerText !== %q && r.querySelector('td.status').innerText === 'PRIMARY';
	})()`, primary), 30*time.Second)

	// Messages to shard-0 show as its new primary's transactions.
	a := c.cl.NewAppender(context.Background(), client.AppenderConfig{})
	defer a.Close()
	pub := message.NewPublisher(a, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now()))
	pubCtx, stopPub := context.WithCancel(context.Background())
	published := make(chan error, 1)
	go func() {
		for pubCtx.Err() == nil {
			h, err := pub.PublishCommitted(pubCtx, "counts/in-0", &consumertest.CountMsg{Key: "y"})
			if err == nil {
				_, err = h.Wait(pubCtx)
			}
			if err != nil && pubCtx.Err() == nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	c.await(t, "shard-0's transactions", `(document.querySelector('tr[data-shard="counts/shard-0"] td.txns') || {innerText: '0'}).innerText !== '0'`, 10*time.Second)
	stopPub()
	if err := <-published; err != nil {
		t.Fatalf("publishing to counts/in-0: %v", err)
	}

	// A message that fails shard-1 makes it FAILED, among the alerts.
	h, err := pub.PublishCommitted(context.Background(), "counts/in-1", &consumertest.CountMsg{Key: "x", Fail: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.open(t, "#/")
	c.await(t, "the FAILED shard's alert", `!!document.querySelector('#alerts li.error[data-subject="shard counts/shard-1"]')`, 30*time.Second)
	c.shot(t, "overview")

	// The console's action unassigns it, from the console's own origin.
	req, _ := http.NewRequest("POST", c.url+"/console/api/unassign", strings.NewReader(url.Values{"root": {c.root}, "shard": {"counts/shard-1"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Unassigned []string }
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if resp.StatusCode != 200 || !slices.Equal(out.Unassigned, []string{"counts/shard-1"}) {
		t.Errorf("unassigning the FAILED shard through the console: %s, %v", resp.Status, out.Unassigned)
	}

	// Allocation: a what-if drain of the busiest broker lists exactly the
	// moves quire allocator plan prints.
	now := awaitConverged(t, c.bc.Root)
	drained := busiest(now)
	want := planMoves(livePlan(t, c.bc.Root, "--drain", drained))
	c.open(t, "#/allocation")
	card := fmt.Sprintf(`document.querySelector('[data-fleet=%q]')`, c.bc.Root)
	c.await(t, "the drain box of "+drained, fmt.Sprintf(`!!%s && !!%s.querySelector('input[value=%q]')`, card, card, drained), 10*time.Second)
	c.eval(t, fmt.Sprintf(`(() => { const f = %s; f.querySelector('input[value=%q]').click(); f.querySelector('button.plan-button').click(); return ''; })()`, card, drained))
	c.await(t, "the plan", fmt.Sprintf(`%s.querySelectorAll('tr.move').length > 0`, card), 10*time.Second)
	got := strings.Fields(c.eval(t, fmt.Sprintf(`Array.from(%s.querySelectorAll('tr.move'), (r) => r.dataset.move.replaceAll(' ', '|')).join(' ')`, card)))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("what-if drain of %s in the console moves\n  %v\nquire allocator plan moves\n  %v", drained, got, want)
	}
	c.shot(t, "allocation")
}

// planMoves are a plan's moves as the console's rows name them, sorted.
func planMoves(p allocator.Plan) []string {
	var out []string
	for _, m := range []struct {
		kind string
		as   []allocator.ScenarioAssignment
	}{{"remove", p.Removed}, {"add", p.Added}} {
		for _, a := range m.as {
			out = append(out, fmt.Sprintf("%s|%s|%d|%s", m.kind, a.Item, a.Slot, allocator.MemberName(a.Zone, a.Suffix)))
		}
	}
	slices.Sort(out)
	return out
}

// quire console refuses bad flags with exit 2, and serves the console
// and the gateway of the fleets it finds in etcd.
func TestConsoleCommand(t *testing.T) {
	for _, args := range [][]string{
		{"console", "--etcd", ""},
		{"console", "--listen", "nohost"},
		{"console", "--broker", "a:b:c"},
	} {
		stdout, stderr, code := runBinary(t, args...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("quire %s: exit %d, stdout %q, stderr %q; want 2, nothing, an error", strings.Join(args, " "), code, stdout, stderr)
		}
	}

	bc := brokertest.New(t)
	bc.Start("b1")
	bc.Journals(bc.Client(bc.Brokers["b1"]), 1, "console/cmd")
	addr := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan result, 1)
	go func() {
		done <- quire(ctx, nil, "console", "--etcd", etcdtest.Shared(t).Endpoint(), "--console-prefix", bc.Root, "--listen", addr)
	}()
	defer func() {
		cancel()
		if r := <-done; r.err != nil {
			t.Errorf("quire console: %v\n%s", r.err, r.stderr)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/console/api/view")
		if err == nil {
			var v struct {
				Fleets []struct {
					Journals []struct{ Name string }
				}
			}
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if len(v.Fleets) == 1 && len(v.Fleets[0].Journals) == 1 && v.Fleets[0].Journals[0].Name == "console/cmd" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("quire console does not show journal console/cmd: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // Polling a server that is starting.
	}
	resp, err := http.Get("http://" + addr + "/v1/specs/console/cmd")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the gateway of quire console: %v %v", resp, err)
	}
	resp.Body.Close()
}
