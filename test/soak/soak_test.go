package soak

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/examples/streamsum/streamsum"
	"github.com/quire-dev/quire/internal/composetest"
)

var (
	cyclesFlag = flag.Int("soak.cycles", 0, "fault cycles to run (default $QUIRE_SOAK_CYCLES, or 20: the short form that every test run makes)")
	seedFlag   = flag.Uint64("soak.seed", 0, "seed of the faults' schedule (default 16); a run prints its own")
	outFlag    = flag.String("soak.out", "", "directory the run leaves its seed, cycles, logs and history in: a failed run always leaves them (in a new directory in $TMPDIR if this is unset), a passing one only if this is set")
)

// The soak's journals, and their replication.
var journals = []struct {
	name        string
	replication int
}{{"soak/log-1", 3}, {"soak/log-2", 3}, {"soak/log-3", 2}, {"soak/log-4", 2}}

const writersPerJournal = 2

// ciCycles is the number of fault cycles of the short form, which every
// test run makes (.ci/run among them): about 4 minutes on 2 cores.
const ciCycles = 20

// ciSeed is the default seed (any seed's first cycles make every kind of
// fault once).
const ciSeed = 16

// soak is one run: the cluster, the history of its journals, and what
// each fault cycle did.
type soak struct {
	t      *testing.T
	c      *composetest.Cluster
	h      *History
	cycles []cycle
	// acked holds, per journal, the time (History.Now) of its latest
	// acknowledged append.
	acked map[string]*atomic.Int64
	sums  *sums
}

// cycle is one fault made and healed.
type cycle struct {
	fault, target string
	// injected, healed and whole are when the fault began, ended, and
	// the cluster was whole again (History.Now).
	injected, healed, whole int64
}

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of containers through faults for minutes")
	}
	cycles := *cyclesFlag
	if cycles == 0 {
		cycles = ciCycles
		if v := os.Getenv("QUIRE_SOAK_CYCLES"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				t.Fatalf("QUIRE_SOAK_CYCLES=%q: want a positive number of fault cycles", v)
			}
			cycles = n
		}
	}
	seed := *seedFlag
	if seed == 0 {
		// A fixed schedule by default, so that every test run makes the
		// same faults; -soak.seed explores others.
		seed = ciSeed
	}
	t.Logf("soak: seed %d, %d cycles; replay with go test ./test/soak -run Soak -v -soak.seed=%d -soak.cycles=%d", seed, cycles, seed, cycles)
	layer, err := filepath.Abs("soak.compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	c := composetest.Up(t, composetest.Options{Files: []string{layer}, Slot: 25,
		BrokerLease: brokerLease, ConsumerLease: consumerLease})
	s := &soak{t: t, c: c, h: NewHistory(), acked: map[string]*atomic.Int64{}}
	var verdict *Verdict
	t.Cleanup(func() { s.leaveRecord(seed, verdict) }) // Before the cluster goes down.
	s.createJournals()

	s.sums = s.startSums(seed)
	stop := s.startWriting()
	pub := c.StartPublishing()
	rnd := rand.New(rand.NewPCG(seed, 0x50a4))
	// Every kind once, in an order of the seed's, then kinds at random:
	// a short run makes every kind of fault whatever its seed.
	first := rnd.Perm(len(faults))
	for i := range cycles {
		kind := rnd.IntN(len(faults))
		if i < len(first) {
			kind = first[i]
		}
		s.cycle(i, faults[kind], rnd)
	}
	stop()
	words, pubErrs := pub.Stop()
	verdict = s.check()
	sums := s.checkSums(s.sums)
	wrong := s.checkCounts(words, pub.Failed(), len(pubErrs))
	summary := s.summary(seed, verdict, sums, wrong, words, time.Since(began))
	t.Log(summary)
	keepSummary(t, summary)
}

// keepSummary appends the run's summary line to the file
// $QUIRE_SOAK_SUMMARY names, if it does: go test shows a passing test's
// log only with -v, and CI prints the file after the tests.
func keepSummary(t *testing.T, summary string) {
	path := os.Getenv("QUIRE_SOAK_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, summary)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Errorf("keeping the summary in QUIRE_SOAK_SUMMARY=%s: %v", path, err)
	}
}

func (s *soak) createJournals() {
	var spec strings.Builder
	spec.WriteString("journals:\n")
	for _, j := range journals {
		fmt.Fprintf(&spec, "  - {name: %s, replication: %d}\n", j.name, j.replication)
		s.acked[j.name] = &atomic.Int64{}
	}
	if _, err := s.c.Quire(spec.String(), "journals", "apply", "-f", "-"); err != nil {
		s.t.Fatal(err)
	}
}

// startWriting starts the writers, each appending records to its journal
// one at a time, and a reader of each journal, reading it whole every
// second; it returns a func that stops them and waits.
func (s *soak) startWriting() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	id := 0
	for _, j := range journals {
		for range writersPerJournal {
			id++
			// A client each: a writer's appends are one at a time, so a
			// retry is known committed by its sequence number.
			cl, writer := s.c.Journals(), id
			wg.Go(func() { s.write(cl, writer, j.name, done) })
		}
		id++
		cl, reader := s.c.Journals(), id
		wg.Go(func() { s.read(cl, reader, j.name, done) })
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

func (s *soak) write(cl *client.Client, writer int, journal string, done <-chan struct{}) {
	rnd := rand.New(rand.NewPCG(uint64(writer), 1))
	for seq := 1; ; seq++ {
		select {
		case <-done:
			return
		case <-time.After(time.Duration(rnd.IntN(100)) * time.Millisecond): // Pacing the load.
		}
		data := Record(writer, seq, rnd.IntN(48))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := s.h.Now()
		frag, err := cl.Append(ctx, client.AppendRequest{Journal: journal}, bytes.NewReader(data))
		end := s.h.Now()
		cancel()
		var out AppendOutput
		if err == nil {
			out = AppendOutput{frag.Begin, frag.End}
			s.acked[journal].Store(end)
		}
		s.h.Append(writer, journal, data, start, end, out, err)
	}
}

func (s *soak) read(cl *client.Client, reader int, journal string, done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := s.h.Now()
		content, err := readWhole(ctx, cl, journal)
		end := s.h.Now()
		cancel()
		if err == nil {
			s.h.Read(reader, journal, content, start, end)
		}
	}
}

// cycle makes fault, heals it, and waits until the cluster is whole
// again: every server ready, every etcd member healthy, and every
// journal taking appends.
func (s *soak) cycle(i int, f fault, rnd *rand.Rand) {
	s.t.Helper()
	s.t.Logf("cycle %d: %s", i+1, f.name)
	var cy cycle
	for try := 1; ; try++ {
		// A process the last fault cost its lease (cut from etcd, say)
		// exits once it finds its member key gone, or resigns, possibly
		// after the cluster was whole again: the next fault must not
		// find it restarting; if it does, it is healed and made again.
		s.c.AwaitReady(servers...)
		cy = cycle{fault: f.name, injected: s.h.Now()}
		heal, target, err := f.inject(s, rnd)
		cy.target = target
		cy.healed = s.h.Now()
		if heal != nil {
			err = joinErr(err, heal())
		}
		if err == nil {
			break
		}
		if !errors.Is(err, composetest.ErrNotRunning) || try == 3 {
			s.t.Fatalf("cycle %d, %s of %s: %v", i+1, f.name, target, err)
		}
		s.t.Logf("cycle %d: %s of %s found it restarting; again: %v", i+1, f.name, target, err)
	}
	s.awaitWhole(i, cy)
	cy.whole = s.h.Now()
	s.cycles = append(s.cycles, cy)
	s.t.Logf("cycle %d: %s of %s for %s; whole again %s later", i+1, f.name, cy.target,
		time.Duration(cy.healed-cy.injected).Round(time.Millisecond), time.Duration(cy.whole-cy.healed).Round(time.Millisecond))
}

func joinErr(a, b error) error {
	if a == nil {
		return b
	}
	if b != nil {
		return fmt.Errorf("%w; healing: %v", a, b)
	}
	return a
}

func (s *soak) awaitWhole(i int, cy cycle) {
	s.t.Helper()
	s.c.AwaitReady(servers...)
	for _, e := range composetest.Etcds {
		s.c.Await(2*time.Minute, "health of "+e, func() error { return etcdHealth(s.c.Addr(e, 2379)) })
	}
	healed := s.h.start.Add(time.Duration(cy.healed))
	s.c.Await(2*time.Minute, fmt.Sprintf("a transaction of stream chunks after cycle %d (%s of %s)", i+1, cy.fault, cy.target), func() error {
		if !s.sums.lastCommit().After(healed) {
			return fmt.Errorf("no transaction committed since the fault was healed")
		}
		return nil
	})
	for _, j := range journals {
		s.c.Await(2*time.Minute, fmt.Sprintf("an append to %s after cycle %d (%s of %s)", j.name, i+1, cy.fault, cy.target), func() error {
			if s.acked[j.name].Load() <= cy.healed {
				return fmt.Errorf("no append acknowledged since the fault was healed")
			}
			return nil
		})
	}
}

func etcdHealth(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd at %s: %s", addr, resp.Status)
	}
	return nil
}

// readWhole reads journal from its first byte to its write head. A gap,
// offsets the journal skips, reads as NUL bytes, which no record holds:
// the checker tells gaps from records by them (see Verdict.Gaps).
func readWhole(ctx context.Context, cl *client.Client, journal string) ([]byte, error) {
	rd := cl.NewReader(ctx, client.ReadRequest{Journal: journal})
	defer rd.Close()
	var out bytes.Buffer
	buf := make([]byte, 64<<10)
	for {
		n, err := rd.Read(buf)
		out.Write(buf[:n])
		var jump *client.OffsetJumpError
		switch {
		case errors.As(err, &jump) && jump.From == int64(out.Len()):
			out.Write(make([]byte, jump.To-jump.From))
		case errors.Is(err, io.EOF):
			return out.Bytes(), nil
		case err != nil:
			return nil, err
		}
	}
}

// check reads every journal whole and checks the history against it.
func (s *soak) check() *Verdict {
	s.t.Helper()
	cl := s.c.Journals()
	final := map[string][]byte{}
	finalRead := s.h.Now()
	for _, j := range journals {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		content, err := readWhole(ctx, cl, j.name)
		cancel()
		if err != nil {
			s.t.Fatalf("reading %s whole: %v", j.name, err)
		}
		final[j.name] = content
	}
	v := s.h.Check(final, finalRead, 5*time.Minute)
	for _, p := range v.Problems {
		s.t.Error(p)
	}
	if v.Linearizable != "Ok" {
		s.t.Errorf("linearizability check: %s", v.Linearizable)
	}
	return v
}

// checkCounts compares the word count's counts with what was
// acknowledged, and returns how many words are counted wrong. Words of
// batches that failed (a full disk fails appends at once) may count or
// not: a count is right from the acknowledged to that plus the failed.
func (s *soak) checkCounts(acked, failed map[string]uint64, failedBatches int) int {
	if failedBatches != 0 {
		s.t.Logf("soak: %d batches of words failed; their words may or may not count", failedBatches)
	}
	counts, err := s.c.Counts()
	if err != nil {
		s.t.Fatal(err)
	}
	wrong := 0
	for _, w := range composetest.Vocabulary {
		if counts[w] < acked[w] || counts[w] > acked[w]+failed[w] {
			wrong++
			s.t.Errorf("count of %s = %d, want %d acknowledged, and at most %d more that failed", w, counts[w], acked[w], failed[w])
		}
	}
	return wrong
}

// unavailable returns, per fault, the longest any journal went without
// an acknowledged append between the fault and the cluster being whole
// again, and the longest without a committed transaction of stream
// chunks.
func (s *soak) unavailable(txns []time.Time) (appends, transactions map[string]time.Duration) {
	acks := s.h.acks()
	var txnAt []int64
	for _, t := range txns {
		txnAt = append(txnAt, int64(t.Sub(s.h.start)))
	}
	appends, transactions = map[string]time.Duration{}, map[string]time.Duration{}
	for _, cy := range s.cycles {
		for _, at := range acks {
			appends[cy.fault] = max(appends[cy.fault], longestGap(at, cy.injected, cy.whole))
		}
		transactions[cy.fault] = max(transactions[cy.fault], longestGap(txnAt, cy.injected, cy.whole))
	}
	return appends, transactions
}

// longestGap is the longest time within [from, to] without one of at
// (sorted), counting from from.
func longestGap(at []int64, from, to int64) time.Duration {
	var gap int64
	prev := from
	for _, t := range at[index(at, from):] {
		if t > to {
			break
		}
		gap, prev = max(gap, t-prev), t
	}
	return time.Duration(max(gap, to-prev))
}

func index(at []int64, t int64) int {
	i, _ := slices.BinarySearch(at, t)
	return i
}

// summary is the run's one line of figures.
func (s *soak) summary(seed uint64, v *Verdict, sums streamsum.Report, wrong int, words map[string]uint64, took time.Duration) string {
	txns := s.sums.committed()
	kinds := map[string]int{}
	for _, cy := range s.cycles {
		kinds[cy.fault]++
	}
	appends, transactions := s.unavailable(txns)
	var byKind, worst []string
	for _, f := range faults {
		if n := kinds[f.name]; n != 0 {
			byKind = append(byKind, fmt.Sprintf("%s=%d", f.name, n))
			worst = append(worst, fmt.Sprintf("%s %s/%s", f.name, appends[f.name].Round(100*time.Millisecond), transactions[f.name].Round(100*time.Millisecond)))
		}
	}
	var total uint64
	for _, n := range words {
		total += n
	}
	return fmt.Sprintf("soak: seed %d; %d fault cycles (%s); %d acknowledged appends checked (%d failed, %d of them found committed), %d reads, %d histories %s; "+
		"lost %d, duplicated %d, moved %d, torn %d; gaps %d (%d bytes); %d transactions (%d failed) of %d streams, %d finished, %d summed right, wrong sums %d, duplicated %d, missing %d, unexpected %d; "+
		"%d words, wrong counts %d; longest unavailable, appends/transactions: %s (broker lease %s, consumer lease %s); took %s",
		seed, len(s.cycles), strings.Join(byKind, " "), v.Appends, v.Unknown, v.UnknownFound, v.Reads, v.Journals, v.Linearizable,
		v.Lost, v.Duplicated, v.Moved, v.Torn, v.Gaps, v.GapBytes, len(txns), s.sums.failed, sums.Streams, sums.Finished, sums.Right,
		sums.Wrong, sums.Duplicated, sums.Missing, sums.Unexpected, total, wrong,
		strings.Join(worst, ", "), brokerLease, consumerLease, took.Round(time.Second))
}

// leaveRecord leaves, for a failed run or one given -soak.out, its seed,
// the cluster's logs and the checked history in a directory that the log
// names.
func (s *soak) leaveRecord(seed uint64, v *Verdict) {
	if !s.t.Failed() && *outFlag == "" {
		return
	}
	dir := *outFlag
	var err error
	if dir == "" {
		dir, err = os.MkdirTemp("", "quire-soak-")
	} else {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		s.t.Logf("soak: no record left: %v", err)
		return
	}
	var cycles strings.Builder
	for i, cy := range s.cycles {
		fmt.Fprintf(&cycles, "%d %s %s %d %d %d\n", i+1, cy.fault, strings.ReplaceAll(cy.target, " ", "_"), cy.injected, cy.healed, cy.whole)
	}
	os.WriteFile(filepath.Join(dir, "seed"), fmt.Appendf(nil, "%d\n", seed), 0o644)
	os.WriteFile(filepath.Join(dir, "cycles"), []byte(cycles.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "cluster.log"), []byte(s.c.ComposeOut("logs", "--no-color", "--timestamps")), 0o644)
	if v == nil { // The run stopped before its check: what was recorded, unchecked.
		if f, err := os.Create(filepath.Join(dir, "history.txt")); err == nil {
			s.h.WriteTo(f)
			f.Close()
		}
	}
	if v != nil {
		if f, err := os.Create(filepath.Join(dir, "history.txt")); err == nil {
			v.WriteTo(f)
			f.Close()
		}
		if err := v.Visualize(filepath.Join(dir, "history.html")); err != nil {
			s.t.Logf("soak: %v", err)
		}
	}
	outcome := "passed"
	if s.t.Failed() {
		outcome = "FAILED"
	}
	s.t.Logf("soak: %s with seed %d; its seed, cycles, the cluster's logs and the history are in %s", outcome, seed, dir)
}
