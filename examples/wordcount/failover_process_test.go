package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
	"github.com/quire-dev/quire/internal/proctest"
)

// The fleet of TestFailoverAcrossProcesses.
const (
	// leaseTTL is every broker's --lease and every consumer process's
	// --lease-ttl: how long a crashed process's shards wait.
	leaseTTL         = 3 * time.Second
	brokerRoot       = "/quire/brokers/"
	consumerRoot     = "/quire/consumers/wordcount/"
	wordcountPackage = "github.com/quire-dev/quire/examples/wordcount"
	// slowAppend is the longest an append may take while no broker is
	// faulted (none is, in this test).
	slowAppend = time.Second
)

// The word count survives the faults of its processes, as separate
// operating-system processes of the built binaries around a real etcd
// server: kill -9 of a process that is primary of some shard, SIGSTOP of
// one for longer than its lease (then SIGCONT), and SIGTERM (a drain),
// each repeated, while words are published without pause. Every count is
// exactly what was acknowledged, no append is slower than a second, and
// each shard has a primary again within the lease TTL and a second of a
// crash, and within a second of a drain. QUIRE_FAILOVER_ROUNDS=N repeats
// each fault N times (default 2), for docs/benchmarks.md.
func TestFailoverAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet of processes")
	}
	rounds := failoverRounds(t)
	c := startCluster(t)
	pub := c.startPublishing()

	took := map[string][]time.Duration{}
	for r := range rounds {
		for i, k := range faultKinds {
			// Each kind of fault finds each process in turn first.
			took[k.name] = append(took[k.name], c.round(k, r+i, r)...)
		}
	}
	res := pub.stop()
	c.checkCounts(res)
	checkAppends(t, res)
	for _, k := range faultKinds {
		t.Logf("handoff after %-7s %s (bound %s)", k.name+":", summary(took[k.name]), k.bound)
	}
}

func failoverRounds(t *testing.T) int {
	v := os.Getenv("QUIRE_FAILOVER_ROUNDS")
	if v == "" {
		return 2
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("QUIRE_FAILOVER_ROUNDS=%q: want a positive number", v)
	}
	return n
}

// cluster is the fleet: etcd, three brokers in two zones and three
// processes of the word count in two zones.
type cluster struct {
	t         *testing.T
	quire, wc string // the binaries
	etcd      *proctest.EtcdServer
	kv        *clientv3.Client
	brokers   []string // endpoints
	consumers []*consumerProc
	// phase says which fault is under way, for the publisher's reports.
	phase atomic.Pointer[string]
	// failed are the FAILED replicas reported.
	failedMu sync.Mutex
	failed   map[string]bool
}

// consumerProc is a `wordcount serve` process.
type consumerProc struct {
	*proctest.Process
	zone, suffix, addr string
	conn               *grpc.ClientConn
}

func (p *consumerProc) member() string { return p.zone + "#" + p.suffix }

func startCluster(t *testing.T) *cluster {
	bins := proctest.Binaries(t, proctest.Quire, wordcountPackage, proctest.Etcd)
	c := &cluster{t: t, quire: bins[0], wc: bins[1], etcd: proctest.StartEtcd(t), failed: map[string]bool{}}
	c.setPhase("start")
	var err error
	c.kv, err = clientv3.New(clientv3.Config{Endpoints: []string{c.etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.kv.Close() })

	store := "file://" + t.TempDir() + "/"
	for i, zone := range []string{"z1", "z1", "z2"} {
		c.startBroker(fmt.Sprintf("b%d", i+1), zone, store)
	}
	c.awaitMembers(brokerRoot, 3)
	for i, zone := range []string{"z1", "z2", "z1"} {
		c.startConsumer(fmt.Sprintf("c%d", i+1), zone, c.brokers[i])
	}
	c.awaitMembers(consumerRoot, 3)
	c.setup()
	c.awaitSteady()
	return c
}

func (c *cluster) startBroker(name, zone, store string) {
	addr := proctest.Addr(c.t)
	proctest.Start(c.t, name, c.quire, "broker", "serve", "--etcd", c.etcd.Endpoint,
		"--zone", zone, "--suffix", name, "--listen", addr, "--dir", c.t.TempDir(), "--store", store,
		"--lease", leaseTTL.String())
	c.brokers = append(c.brokers, addr)
}

func (c *cluster) startConsumer(name, zone, broker string) {
	p := &consumerProc{zone: zone, suffix: name, addr: proctest.Addr(c.t)}
	p.Process = proctest.Start(c.t, name, c.wc, "serve", "--etcd", c.etcd.Endpoint, "--broker", broker,
		"--zone", zone, "--suffix", name, "--listen", p.addr, "--dir", c.t.TempDir(),
		"--lease-ttl", leaseTTL.String(), "--drain-timeout", "10s")
	var err error
	if p.conn, err = grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { p.conn.Close() })
	c.consumers = append(c.consumers, p)
}

// setup runs `wordcount setup`, again while the processes do not answer
// yet: journals of replication 3, a hot standby per shard.
func (c *cluster) setup() {
	proctest.Await(c.t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := proctest.Run(ctx, c.wc, "setup", "--broker", c.brokers[0], "--consumer", c.consumers[0].addr,
			"--prefix", consumerRoot, "--replication", "3", "--hot-standbys", "1")
		return err
	})
}

func (c *cluster) setPhase(s string) { c.phase.Store(&s) }

// awaitMembers waits for n members of the fleet under root.
func (c *cluster) awaitMembers(root string, n int) {
	proctest.Await(c.t, time.Minute, func() error {
		resp, err := c.kv.Get(context.Background(), root+"members/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count != int64(n) {
			return fmt.Errorf("%d members under %s, want %d", resp.Count, root, n)
		}
		return nil
	})
}

// faultKind is a fault of one process, and how the process is brought
// back, as its supervisor would.
type faultKind struct {
	name string
	// bound is how soon after the fault each shard must have a primary
	// again.
	bound time.Duration
	// inject faults the victim; recover serves it again once the shards
	// have moved (before is the fleet as the fault found it).
	inject  func(c *cluster, v *consumerProc)
	recover func(c *cluster, v *consumerProc, before fleet)
}

var faultKinds = []faultKind{
	// Restarted at once, as a supervisor would: within its old lease.
	{name: "kill -9", bound: leaseTTL + time.Second,
		inject:  func(c *cluster, v *consumerProc) { v.Kill(); v.Restart() },
		recover: func(*cluster, *consumerProc, fleet) {}},
	{name: "SIGSTOP", bound: leaseTTL + time.Second,
		inject:  func(c *cluster, v *consumerProc) { v.Stop() },
		recover: (*cluster).resume},
	{name: "SIGTERM", bound: time.Second,
		inject:  func(c *cluster, v *consumerProc) { v.Term() },
		recover: (*cluster).restartDrained},
}

// round faults a process that is primary of some shard (the first from
// consumers[turn]), and returns how long each of its shards took to have
// a primary again.
func (c *cluster) round(k faultKind, turn, r int) []time.Duration {
	c.t.Helper()
	before := c.awaitSteady()
	v := c.victim(before, turn)
	shards := before.primaryOf(v.member())
	c.setPhase(fmt.Sprintf("%s of %s (round %d)", k.name, v.suffix, r+1))
	start := time.Now()
	k.inject(c, v)
	handoffs := c.awaitHandoff(v, before.members[v.member()], shards, start)
	var out []time.Duration
	var report []string
	for _, sh := range shards {
		h := handoffs[sh]
		if h.took > k.bound {
			c.t.Errorf("%s of %s, round %d: %s had no primary for %s, more than %s", k.name, v.suffix, r+1,
				sh, h.took.Round(time.Millisecond), k.bound)
		}
		out = append(out, h.took)
		report = append(report, fmt.Sprintf("%s to %s in %s", strings.TrimPrefix(sh, "wordcount/"), h.to, h.took.Round(time.Millisecond)))
	}
	c.setPhase(fmt.Sprintf("recovery from %s of %s (round %d)", k.name, v.suffix, r+1))
	k.recover(c, v, before)
	c.t.Logf("%s of %s, round %d: %s", k.name, v.suffix, r+1, strings.Join(report, ", "))
	return out
}

// handoff is a shard's new primary after a fault, and how long after the
// fault it served.
type handoff struct {
	to   string
	took time.Duration
}

// victim is the first process from consumers[turn] on that is primary of
// some shard.
func (c *cluster) victim(f fleet, turn int) *consumerProc {
	for i := range c.consumers {
		p := c.consumers[(turn+i)%len(c.consumers)]
		if len(f.primaryOf(p.member())) > 0 {
			return p
		}
	}
	c.t.Fatalf("no process is primary of a shard: %s", f)
	return nil
}

// awaitHandoff waits until every shard has a serving primary other than
// the victim (the member under lease), and returns when each of shards
// got one, since start. The victim's member started again under a new
// lease is another process.
func (c *cluster) awaitHandoff(v *consumerProc, lease int64, shards []string, start time.Time) map[string]handoff {
	c.t.Helper()
	took := map[string]handoff{}
	var last fleet
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := proctest.Poll(ctx, func() error {
		f, err := c.fleet(ctx)
		if err != nil {
			return err
		}
		last = f
		now := time.Since(start)
		moved := func(sh string) bool {
			p := f.servedBy(sh)
			return p != "" && (p != v.member() || f.members[p] != lease)
		}
		for _, sh := range shards {
			if _, ok := took[sh]; !ok && moved(sh) {
				took[sh] = handoff{to: f.servedBy(sh), took: now}
			}
		}
		for _, sh := range f.ids() {
			if !moved(sh) {
				return fmt.Errorf("%s is served by %q", sh, f.servedBy(sh))
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatalf("after faulting %s: %v; the fleet: %s", v.suffix, err, last)
	}
	return took
}

// resume continues a process stopped past its lease: it must find that
// its lease expired, and exit (then it is started again) or serve under a
// new lease.
func (c *cluster) resume(v *consumerProc, before fleet) {
	proctest.Await(c.t, 30*time.Second, func() error { // The handoff implies it; a failed one does not.
		if f, err := c.fleet(context.Background()); err != nil || f.members[v.member()] != 0 {
			return fmt.Errorf("%s's member key is still there (%v)", v.suffix, err)
		}
		return nil
	})
	v.Cont()
	start := time.Now()
	proctest.Await(c.t, 15*time.Second, func() error {
		select {
		case <-v.Exited():
			return nil
		default:
		}
		f, err := c.fleet(context.Background())
		if err == nil && f.members[v.member()] != 0 && f.members[v.member()] != before.members[v.member()] {
			return nil
		}
		return fmt.Errorf("%s, continued, neither exited nor joined under a new lease", v.suffix)
	})
	select {
	case <-v.Exited():
		c.t.Logf("%s, continued after its lease expired, exited in %s: %v", v.suffix,
			time.Since(start).Round(time.Millisecond), v.Wait(context.Background()))
		v.Restart()
	default:
	}
}

// restartDrained waits for a drained process to exit, with status 0, and
// starts it again.
func (c *cluster) restartDrained(v *consumerProc, _ fleet) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := v.Wait(ctx); err != nil {
		c.t.Errorf("%s, drained: %v", v.suffix, err)
		v.Kill()
	}
	v.Restart()
}

// awaitSteady waits until every process is a member and every shard has
// its primary and a ready standby, and returns the fleet.
func (c *cluster) awaitSteady() fleet {
	c.t.Helper()
	var f fleet
	proctest.Await(c.t, time.Minute, func() error {
		for _, p := range c.consumers {
			select {
			case <-p.Exited():
				c.t.Fatalf("%s exited: %v", p.suffix, p.Wait(context.Background()))
			default:
			}
		}
		var err error
		if f, err = c.fleet(context.Background()); err != nil {
			return err
		}
		return f.steady(len(c.consumers))
	})
	return f
}

// fleet is the consumer processes' state, from their keys in etcd
// (docs/allocator.md): members and the replicas of each shard.
type fleet struct {
	members map[string]int64 // ZONE#SUFFIX: its lease
	shards  map[string][]replica
}

type replica struct {
	member string
	slot   int
	code   string
	err    string
}

func (c *cluster) fleet(ctx context.Context) (fleet, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := c.kv.Txn(ctx).Then(
		clientv3.OpGet(consumerRoot+"members/", clientv3.WithPrefix()),
		clientv3.OpGet(consumerRoot+"assign/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return fleet{}, fmt.Errorf("reading the fleet from etcd: %w", err)
	}
	f := fleet{members: map[string]int64{}, shards: map[string][]replica{}}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		f.members[strings.TrimPrefix(string(kv.Key), consumerRoot+"members/")] = kv.Lease
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		// ID#ZONE#SUFFIX#SLOT: {"code":"PRIMARY"}, or empty (IDLE).
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), consumerRoot+"assign/"), "#")
		if len(parts) != 4 {
			return fleet{}, fmt.Errorf("assignment key %q", kv.Key)
		}
		r := replica{member: parts[1] + "#" + parts[2], code: "IDLE"}
		r.slot, _ = strconv.Atoi(parts[3])
		if len(kv.Value) > 0 {
			var st struct{ Code, Error string }
			if err := json.Unmarshal(kv.Value, &st); err != nil {
				return fleet{}, fmt.Errorf("assignment %s: %w", kv.Key, err)
			}
			r.code, r.err = st.Code, st.Error
		}
		f.shards[parts[0]] = append(f.shards[parts[0]], r)
	}
	for _, rs := range f.shards {
		slices.SortFunc(rs, func(a, b replica) int { return a.slot - b.slot })
	}
	c.reportFailed(f)
	return f, nil
}

// reportFailed fails the test, once for each, on FAILED replicas: no
// fault of this test is an error of the application.
func (c *cluster) reportFailed(f fleet) {
	c.failedMu.Lock()
	defer c.failedMu.Unlock()
	for sh, rs := range f.shards {
		for _, r := range rs {
			if key := sh + " " + r.member + " " + r.err; r.code == "FAILED" && !c.failed[key] {
				c.failed[key] = true
				c.t.Errorf("during %s, %s's replica at %s FAILED: %s", *c.phase.Load(), sh, r.member, r.err)
			}
		}
	}
}

func (f fleet) ids() []string {
	var ids []string
	for n := range wordcount.Partitions {
		ids = append(ids, wordcount.ShardID(n))
	}
	return ids
}

// servedBy is the member that serves shard as its primary, or "".
func (f fleet) servedBy(shard string) string {
	rs := f.shards[shard]
	if len(rs) == 0 || rs[0].slot != 0 || rs[0].code != "PRIMARY" || f.members[rs[0].member] == 0 {
		return ""
	}
	return rs[0].member
}

func (f fleet) primaryOf(member string) []string {
	var out []string
	for _, sh := range f.ids() {
		if f.servedBy(sh) == member {
			out = append(out, sh)
		}
	}
	return out
}

// steady tells what is missing for n members, each shard served by its
// primary with a standby ready to take over.
func (f fleet) steady(n int) error {
	if len(f.members) != n {
		return fmt.Errorf("%d members, want %d: %s", len(f.members), n, f)
	}
	for _, sh := range f.ids() {
		rs := f.shards[sh]
		if f.servedBy(sh) == "" || len(rs) != 2 || rs[1].code != "STANDBY" || f.members[rs[1].member] == 0 {
			return fmt.Errorf("%s is not served with a ready standby: %s", sh, f)
		}
	}
	return nil
}

func (f fleet) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "members %v;", slices.Sorted(maps.Keys(f.members)))
	for _, sh := range slices.Sorted(maps.Keys(f.shards)) {
		fmt.Fprintf(&b, " %s:", sh)
		for _, r := range f.shards[sh] {
			fmt.Fprintf(&b, " %d=%s/%s", r.slot, r.member, r.code)
			if r.err != "" {
				fmt.Fprintf(&b, "(%s)", r.err)
			}
		}
	}
	return b.String()
}

// publisher publishes words without pause, in small batches, each
// through wordcount.Publish (which lists the word journals, then appends)
// and each waiting for its acknowledgements, and keeps what was
// acknowledged. Batches take turns among the brokers, as clients that
// each know one broker would.
type publisher struct {
	c       *cluster
	clients []*client.Client
	stopc   chan struct{}
	done    chan struct{}
	res     published // the goroutine's, until done is closed
}

// published is what a publisher did.
type published struct {
	acked     map[string]uint64 // words acknowledged
	uncertain map[string]uint64 // words of failed publishes: counted or not
	batches   []time.Duration   // each batch's publish, to its acknowledgement
	slow      []string          // batches slower than slowAppend, and when
	errs      []error
}

// vocabulary is the words published: enough that every shard counts some.
var vocabulary = func() []string {
	var ws []string
	for i := range 40 {
		ws = append(ws, fmt.Sprintf("w%02d", i))
	}
	return ws
}()

// batchSize is the words of a batch.
const batchSize = 8

func (c *cluster) startPublishing() *publisher {
	p := &publisher{c: c, stopc: make(chan struct{}), done: make(chan struct{}),
		res: published{acked: map[string]uint64{}, uncertain: map[string]uint64{}}}
	for _, b := range c.brokers {
		journals, err := client.New(context.Background(), client.Config{Broker: b})
		if err != nil {
			c.t.Fatal(err)
		}
		p.clients = append(p.clients, journals)
	}
	go func() {
		defer close(p.done)
		p.run()
	}()
	c.t.Cleanup(p.stopped)
	return p
}

func (p *publisher) run() {
	rnd := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-p.stopc:
			return
		case <-tick.C:
		}
		batch := make([]string, batchSize)
		for i := range batch {
			batch[i] = vocabulary[rnd.IntN(len(vocabulary))]
		}
		at := time.Since(start)
		journals := p.clients[n%len(p.clients)]
		took := p.publishBatch(journals, batch)
		p.res.batches = append(p.res.batches, took)
		if took > slowAppend {
			p.res.slow = append(p.res.slow, fmt.Sprintf("%s at %s via %s, during %s", took.Round(time.Millisecond),
				at.Round(time.Millisecond), p.c.brokers[n%len(p.clients)], *p.c.phase.Load()))
		}
	}
}

// publishBatch publishes words, and returns how long it took until they
// were acknowledged. The end of the test does not cut it short.
func (p *publisher) publishBatch(journals *client.Client, words []string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	n, err := wordcount.Publish(ctx, journals, wordcount.Selector, strings.NewReader(strings.Join(words, " ")))
	took := time.Since(start)
	for _, w := range words {
		if err != nil {
			p.res.uncertain[w]++
		} else {
			p.res.acked[w]++
		}
	}
	if err == nil && n != len(words) {
		err = fmt.Errorf("published %d words of %d", n, len(words))
	}
	if err != nil {
		p.res.errs = append(p.res.errs, fmt.Errorf("publishing %v: %w", words, err))
	}
	return took
}

// stop ends the publishing once the batch under way is acknowledged.
func (p *publisher) stop() published {
	p.stopped()
	return p.res
}

func (p *publisher) stopped() {
	select {
	case <-p.stopc:
	default:
		close(p.stopc)
	}
	<-p.done
	for _, c := range p.clients {
		c.Close()
	}
	p.clients = nil
}

// checkCounts asks every word's count, through each process in turn, and
// compares it with what was acknowledged.
func (c *cluster) checkCounts(res published) {
	c.t.Helper()
	c.setPhase("checking counts")
	c.awaitSteady()
	var total, uncertain uint64
	for i, w := range vocabulary {
		got := c.count(c.consumers[i%len(c.consumers)], w)
		want, maybe := res.acked[w], res.uncertain[w]
		if got < want || got > want+maybe {
			c.t.Errorf("count of %s = %d, want %d (%d more appends failed, which may count)", w, got, want, maybe)
		}
		total, uncertain = total+want, uncertain+maybe
	}
	c.t.Logf("%d words published and acknowledged, %d more whose appends failed", total, uncertain)
	for _, err := range res.errs {
		c.t.Errorf("publishing: %v", err)
	}
}

// count asks a process for a word's count, with everything published
// before, waiting while its shard has no primary.
func (c *cluster) count(via *consumerProc, word string) uint64 {
	c.t.Helper()
	var n uint64
	proctest.Await(c.t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := wordcountpb.NewWordCountClient(via.conn).Count(ctx, &wordcountpb.CountRequest{Words: []string{word}, Sync: true})
		if err != nil {
			return fmt.Errorf("counting %s via %s: %w", word, via.suffix, err)
		}
		n = resp.Counts[0].Count
		return nil
	})
	return n
}

// checkAppends reports appends slower than slowAppend: no broker is
// faulted in this test.
func checkAppends(t *testing.T, res published) {
	t.Logf("publish to acknowledgement of %d batches of %d words: %s", len(res.batches), batchSize, summary(res.batches))
	for _, s := range res.slow {
		t.Errorf("an append took %s, with no broker faulted", s)
	}
}

// summary is the p50, p99 and max of ds.
func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", len(s), at(0.50).Round(time.Millisecond),
		at(0.99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
