package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
	"github.com/quire-dev/quire/internal/freeport"
)

// devProcess is `quire dev` running as a process: the test binary,
// re-executed as quire.
type devProcess struct {
	cmd    *exec.Cmd
	stdout *bytes.Buffer // What it printed up to "ready".
	stderr *bytes.Buffer // Safe to read once it has exited.
	done   chan struct{} // Closed when stdout is drained.
}

// devPorts are the ports of a quire dev: its broker's, etcd's (clients and
// peers), its word-count consumer's and its admin endpoint's.
type devPorts struct{ broker, etcd, peer, consumer, admin int }

func freeDevPorts(t *testing.T) devPorts {
	return devPorts{freeport.Port(t), freeport.Port(t), freeport.Port(t), freeport.Port(t), freeport.Port(t)}
}

func (p devPorts) args() []string {
	return []string{"--port", strconv.Itoa(p.broker), "--etcd-port", strconv.Itoa(p.etcd),
		"--etcd-peer-port", strconv.Itoa(p.peer), "--consumer-port", strconv.Itoa(p.consumer),
		"--admin", "127.0.0.1:" + strconv.Itoa(p.admin)}
}

func (p devPorts) brokerAddr() string   { return "127.0.0.1:" + strconv.Itoa(p.broker) }
func (p devPorts) consumerAddr() string { return "127.0.0.1:" + strconv.Itoa(p.consumer) }

// startDev runs quire dev on dir and ports, with extra flags, until it is
// ready.
func startDev(t *testing.T, dir string, ports devPorts, extra ...string) *devProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], append(append([]string{"dev", "--dir", dir}, ports.args()...), extra...)...)
	cmd.Env = append(os.Environ(), "QUIRE_TEST_RUN_MAIN=1")
	p := &devProcess{cmd: cmd, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	ready := make(chan bool, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if !found {
				p.stdout.WriteString(sc.Text() + "\n")
				if strings.HasPrefix(sc.Text(), "quire dev: ready") {
					found = true
					ready <- true
				}
			}
		}
		if !found {
			ready <- false
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			t.Fatalf("quire dev exited before it was ready: %s\nstderr: %s", p.stdout, p.stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("quire dev not ready after 60s")
	}
	return p
}

// interrupt sends SIGINT, as Ctrl-C does, and returns the exit code.
func (p *devProcess) interrupt(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-p.done
	err := p.cmd.Wait()
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

func TestDev(t *testing.T) {
	dir := t.TempDir()
	ports := freeDevPorts(t)
	addr, caddr := ports.brokerAddr(), ports.consumerAddr()
	dev := startDev(t, dir, ports)
	for _, want := range []string{"broker    " + addr, "QUIRE_BROKER=" + addr, "quire journals apply", dir,
		"consumer  " + caddr, "QUIRE_CONSUMER=" + caddr, "go run ./examples/wordcount publish --broker " + addr,
		"go run ./examples/wordcount query --consumer " + caddr + " a b", "quire shards list --consumer " + caddr,
		"console   http://127.0.0.1:" + strconv.Itoa(ports.admin) + "/"} {
		if !strings.Contains(dev.stdout.String(), want) {
			t.Errorf("quire dev printed %q, which lacks %q", dev.stdout, want)
		}
	}

	content := "hello\x00, dev\nno newline at the end"
	must(t, addr, strings.NewReader("journals: [{name: dev/hello, replication: 1}]\n"), "journals", "apply", "-f", "-")
	must(t, addr, strings.NewReader(content), "journals", "append", "-j", "dev/hello")
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/hello").stdout; got != content {
		t.Fatalf("read %q, want %q", got, content)
	}

	// It is ready, and its metrics are the broker's and the consumer's.
	if r := quire(context.Background(), nil, "health", "127.0.0.1:"+strconv.Itoa(ports.admin)); r.err != nil {
		t.Errorf("quire health of quire dev: %v", r.err)
	}
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(ports.admin) + "/metrics")
	if err != nil {
		t.Fatalf("scraping quire dev's metrics: %v", err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nquire_broker_appends_total ", "\nquire_consumer_txns_total ", "\nquire_recoverylog_appends_total "} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("quire dev's metrics lack %q", want[1:])
		}
	}
	if bytes.Contains(metrics, []byte("\nquire_broker_appends_total 0\n")) {
		t.Error("quire dev's metrics count no broker append after one")
	}
	// Every RPC is counted, by method and code: the appends and reads above,
	// and the word count's shard RPCs before any call.
	for _, want := range []string{`grpc_server_handled_total{grpc_code="OK",grpc_method="Append",grpc_service="quire.protocol.Journal",grpc_type="client_stream"}`,
		`grpc_server_started_total{grpc_method="Stat",grpc_service="quire.protocol.Shard",grpc_type="unary"}`} {
		if !bytes.Contains(metrics, []byte("\n"+want+" ")) {
			t.Errorf("quire dev's metrics lack %s", want)
		}
	}

	// A second quire dev on the same directory fails, and says why.
	_, stderr, code := runBinary(t, append([]string{"dev", "--dir", dir}, freeDevPorts(t).args()...)...)
	if code == 0 || !strings.Contains(stderr, "in use by another quire dev") {
		t.Errorf("second quire dev on %s: exit %d, stderr %q", dir, code, stderr)
	}
	// And on the same ports.
	_, stderr, code = runBinary(t, append([]string{"dev", "--dir", t.TempDir()}, ports.args()...)...)
	if code == 0 || !strings.Contains(stderr, "in use") {
		t.Errorf("second quire dev on the same ports: exit %d, stderr %q", code, stderr)
	}
	// And on the consumer's port only.
	other := freeDevPorts(t)
	other.consumer = ports.consumer
	_, stderr, code = runBinary(t, append([]string{"dev", "--dir", t.TempDir()}, other.args()...)...)
	if code == 0 || !strings.Contains(stderr, "--consumer-port") {
		t.Errorf("second quire dev on the same consumer port: exit %d, stderr %q", code, stderr)
	}

	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("quire dev exited %d on SIGINT, want 0; stderr: %s", code, dev.stderr)
	}

	// Restarted on the same directory, it serves what was written.
	dev = startDev(t, dir, ports)
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/hello").stdout; got != content {
		t.Errorf("after a restart, read %q, want %q", got, content)
	}
	must(t, addr, strings.NewReader("more"), "journals", "append", "-j", "dev/hello")
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/hello").stdout; got != content+"more" {
		t.Errorf("after a restart and an append, read %q", got)
	}
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("restarted quire dev exited %d on SIGINT; stderr: %s", code, dev.stderr)
	}
	if !strings.Contains(dev.stderr.String(), "recovered spool") {
		t.Errorf("the restarted broker did not recover its spool: %s", dev.stderr)
	}
}

func TestDevFlags(t *testing.T) {
	for _, args := range [][]string{
		{"dev", "--port", "0"},
		{"dev", "--port", "70000"},
		{"dev", "--port", "7800", "--etcd-port", "7800"},
		{"dev", "--consumer-port", "7801", "--etcd-peer-port", "7801"},
		{"dev", "--consumer-port", "0"},
		{"dev", "--dir", ""},
		{"dev", "--metrics", "nowhere"},
	} {
		if r := quire(context.Background(), nil, args...); !errors.As(r.err, new(usageError)) {
			t.Errorf("%v: err %v, want a usage error", args, r.err)
		}
	}
}

// quire dev killed with SIGKILL in the middle of its work, then restarted
// on its directory, loses no acknowledged byte: its broker recovers the
// spool the kill left behind (replication 1: there is no other copy).
func TestDevSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	ports := freeDevPorts(t)
	addr := ports.brokerAddr()
	dev := startDev(t, dir, ports)
	must(t, addr, strings.NewReader("journals: [{name: dev/killed, replication: 1}]\n"), "journals", "apply", "-f", "-")
	var want strings.Builder
	for i := range 20 {
		line := strings.Repeat(strconv.Itoa(i%10), 50) + "\n"
		must(t, addr, strings.NewReader(line), "journals", "append", "-j", "dev/killed")
		want.WriteString(line)
	}
	if err := dev.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dev.done
	dev.cmd.Wait()

	dev = startDev(t, dir, ports)
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/killed").stdout; got != want.String() {
		t.Fatalf("after kill -9 and a restart, read %d bytes, want %d", len(got), want.Len())
	}
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("restarted quire dev exited %d; stderr: %s", code, dev.stderr)
	}
	if !strings.Contains(dev.stderr.String(), "recovered spool") {
		t.Errorf("the restarted broker did not recover its spool: %s", dev.stderr)
	}
}

// wordText returns lines of n words drawn from 50, and their counts.
func wordText(seed, n int) (string, map[string]uint64) {
	counts := map[string]uint64{}
	var b strings.Builder
	x := uint32(seed)
	for i := range n {
		x = x*1664525 + 1013904223
		w := "w" + strconv.Itoa(int(x>>16)%50)
		counts[w]++
		b.WriteString(w)
		if i%10 == 9 {
			b.WriteString("\n")
		} else {
			b.WriteString(" ")
		}
	}
	return b.String(), counts
}

// publishWords publishes text's words to quire dev's word count, as
// `wordcount publish` does.
func publishWords(t *testing.T, ports devPorts, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	journals, err := client.New(ctx, client.Config{Broker: ports.brokerAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer journals.Close()
	if _, err := wordcount.Publish(ctx, journals, wordcount.Selector, strings.NewReader(text)); err != nil {
		t.Fatal(err)
	}
}

// checkWordCounts asks quire dev's word count for the counts of words, as
// `wordcount query` does, and checks them.
func checkWordCounts(t *testing.T, ports devPorts, want map[string]uint64) {
	t.Helper()
	conn, err := grpc.NewClient(ports.consumerAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	words := slices.Sorted(maps.Keys(want))
	resp, err := wordcountpb.NewWordCountClient(conn).Count(ctx, &wordcountpb.CountRequest{Words: words, Sync: true})
	if err != nil {
		t.Fatalf("counting: %v", err)
	}
	for i, c := range resp.Counts {
		if c.Word != words[i] || c.Count != want[words[i]] {
			t.Errorf("count of %s = %s %d, want %d", words[i], c.Word, c.Count, want[words[i]])
		}
	}
}

// quire dev hosts the word count: its journals and shards exist from its
// first start, and killed with SIGKILL while it counts, then restarted,
// it loses no word and counts none twice: its shards' stores are played
// back from their recovery logs (which the broker's spools and fragments
// keep), and resume from their checkpoints.
func TestDevWordCountSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	ports := freeDevPorts(t)
	start := time.Now()
	dev := startDev(t, dir, ports)
	t.Logf("%s: started", time.Since(start))
	list := must(t, ports.brokerAddr(), nil, "journals", "list", "-l", wordcount.Selector).stdout
	for n := range wordcount.Partitions {
		if !strings.Contains(list, wordcount.PartitionName(n)) {
			t.Errorf("quire dev did not create journal %s: %s", wordcount.PartitionName(n), list)
		}
	}
	want := map[string]uint64{}
	add := func(m map[string]uint64) {
		for w, n := range m {
			want[w] += n
		}
	}
	text, counts := wordText(1, 2000)
	publishWords(t, ports, text)
	add(counts)
	checkWordCounts(t, ports, want)
	t.Logf("%s: counted", time.Since(start))

	// Killed while it counts more.
	text, counts = wordText(2, 20000)
	publishWords(t, ports, text)
	add(counts)
	if err := dev.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-dev.done
	dev.cmd.Wait()

	t.Logf("%s: killed", time.Since(start))
	dev = startDev(t, dir, ports)
	t.Logf("%s: restarted", time.Since(start))
	text, counts = wordText(3, 1000)
	publishWords(t, ports, text)
	add(counts)
	checkWordCounts(t, ports, want)
	t.Logf("%s: counted", time.Since(start))
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("restarted quire dev exited %d; stderr: %s", code, dev.stderr)
	}
	for _, msg := range []string{"removed the word-count consumer's member key", "recovery log played"} {
		if !strings.Contains(dev.stderr.String(), msg) {
			t.Errorf("the restarted quire dev did not log %q: %s", msg, dev.stderr)
		}
	}
	if strings.Contains(dev.stderr.String(), "created the word count's") {
		t.Errorf("the restarted quire dev created the word count again: %s", dev.stderr)
	}

	// Stopped by Ctrl-C, then restarted: the same.
	t.Logf("%s: interrupted", time.Since(start))
	dev = startDev(t, dir, ports)
	checkWordCounts(t, ports, want)
	t.Logf("%s: counted", time.Since(start))
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("quire dev exited %d; stderr: %s", code, dev.stderr)
	}
}

// quire dev's default ports must be valid together: the README's first
// command runs it with no flags.
func TestDevDefaultPorts(t *testing.T) {
	flags := newDevCommand().Flags()
	port := func(name string) int {
		p, err := flags.GetInt(name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := devFlags{dir: ".quire", port: port("port"), etcdPort: port("etcd-port"),
		etcdPeerPort: port("etcd-peer-port"), consumerPort: port("consumer-port")}
	if err := f.validate(); err != nil {
		t.Fatalf("quire dev's default flags are refused: %v", err)
	}
	if f.etcdPeerPort != 7703 {
		t.Errorf("default --etcd-peer-port %d, want 7703 (the first after --etcd-port 7701 that --consumer-port 7702 does not take)", f.etcdPeerPort)
	}
	f = devFlags{dir: ".quire", port: 7702, etcdPort: 7701, consumerPort: 7703}
	if err := f.validate(); err != nil || f.etcdPeerPort != 7704 {
		t.Errorf("--port 7702 --etcd-port 7701 --consumer-port 7703: peer port %d (err %v), want 7704", f.etcdPeerPort, err)
	}
}

// `quire journals append` of content in flight while quire dev is killed
// with SIGKILL and restarted, again and again, retries until the broker
// is back and leaves every byte in the journal exactly once: a retry of
// an append that committed just before the kill is answered with its
// range (idempotent appends), not committed again. (Tried as a new user
// would, before appends carried their writer and sequence, this left a
// batch in the journal twice.) Whether a kill lands between a commit and
// its answer is chance, made likely: the journal syncs before it answers,
// and each kill comes as soon as the chunk shows in the journal; the
// content is checked whole either way.
func TestJournalsAppendExactlyOnceAcrossKill9(t *testing.T) {
	dir := t.TempDir()
	ports := freeDevPorts(t)
	addr := ports.brokerAddr()
	dev := startDev(t, dir, ports)
	must(t, addr, strings.NewReader("journals: [{name: dev/retried, replication: 1, fragment: {fsync: true}}]\n"), "journals", "apply", "-f", "-")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	heads, err := client.New(ctx, client.Config{Broker: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer heads.Close()

	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		done <- quire(context.Background(), pr, "journals", "append", "-j", "dev/retried", "--chunk", "4KiB", "--broker", addr)
	}()
	var want bytes.Buffer
	chunk := func(i int) {
		line := fmt.Sprintf("%06d %s\n", i, strings.Repeat("x", 4096-8))
		want.WriteString(line)
		if _, err := pw.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	found := func() float64 { return counterValue(t, "quire_client_appends_found_committed_total") }
	before := found()
	n := 0
	// At least three kills, and more until one caught an append whose
	// answer was in flight (its retry was found committed), so that the
	// test checks the retry and not only the luck of the timing.
	for kill := 0; kill < 3 || (found() == before && kill < 25); kill++ {
		for range 50 {
			chunk(n)
			n++
		}
		// The last chunk committed (or not yet): its answer, which waits
		// for the sync, is likely in flight.
		for {
			head, err := heads.WriteHead(ctx, "dev/retried")
			if err != nil {
				t.Fatal(err)
			}
			if head >= int64(want.Len()) {
				break
			}
		}
		if err := dev.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-dev.done
		dev.cmd.Wait()
		dev = startDev(t, dir, ports)
		t.Logf("kill %d after %d chunks (retries found committed so far: %v)", kill+1, n, found()-before)
	}
	for range 50 {
		chunk(n)
		n++
	}
	pw.Close()
	if r := <-done; r.err != nil {
		t.Fatalf("quire journals append: %v\nstderr: %s", r.err, r.stderr)
	}
	if got := must(t, addr, nil, "journals", "read", "-j", "dev/retried").stdout; got != want.String() {
		t.Errorf("the journal holds %d bytes, want the %d appended, once each", len(got), want.Len())
	}
	if found() == before {
		t.Errorf("no kill caught an append in flight: no retry was found committed")
	}
	if code := dev.interrupt(t); code != 0 {
		t.Fatalf("quire dev exited %d; stderr: %s", code, dev.stderr)
	}
}
