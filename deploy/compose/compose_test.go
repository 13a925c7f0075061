// Package compose_test runs deploy/compose/compose.yaml as a real cluster
// of containers, each with its own address, and checks what users rely
// on there: the CLI and the word count from the host, nothing acknowledged
// lost when a broker or a shard's primary is killed, processing through
// the loss of an etcd member, a rolling restart of every server, and bad
// configuration refused with the flag and value named. It builds the
// images (deploy/images) and needs Docker with docker-compose; without
// them, or with -short, it skips.
package compose_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/examples/wordcount/wordcountpb"
	"github.com/quire-dev/quire/internal/proctest"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/protocol"
)

// The cluster's timing, shorter than compose.yaml's defaults so that the
// test's failovers are quick.
const (
	brokerLease   = 4 * time.Second
	consumerLease = 4 * time.Second
	imageTag      = "compose-test"
)

var (
	brokers   = []string{"broker1", "broker2", "broker3"}
	consumers = []string{"wordcount1", "wordcount2", "wordcount3"}
	etcds     = []string{"etcd1", "etcd2", "etcd3"}
	// addrs are the services' addresses' last octets, as compose.yaml fixes them.
	addrs = map[string]int{"etcd1": 11, "etcd2": 12, "etcd3": 13, "s3": 15,
		"broker1": 21, "broker2": 22, "broker3": 23, "wordcount1": 31, "wordcount2": 32, "wordcount3": 33}
)

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of containers")
	}
	c := up(t, false)
	c.checkBadConfiguration()
	c.checkCLI()
	pub := c.startPublishing()
	c.killJournalPrimary()
	c.killShardPrimary()
	c.killEtcdMember(pub)
	c.rollingRestart()
	c.checkCounts(pub.stop())
}

// The TLS variant (compose.tls.yaml) serves mutual TLS everywhere: the
// host's CLI and clients reach it with the client certificate that
// gencerts made, and are refused without one.
func TestClusterTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of containers")
	}
	c := up(t, true)
	c.checkCLI()
	pub := c.startPublishing()
	for pub.acknowledged() < 200 {
		time.Sleep(50 * time.Millisecond) // Polling the publisher's progress.
	}
	c.checkCounts(pub.stop())
	cmd := exec.Command(filepath.Join(c.bin, "quire"), "journals", "list", "--broker", c.addr("broker1", 7700))
	cmd.Env = append(os.Environ(), "QUIRE_TLS_CA="+filepath.Join(c.tlsDir, "ca.pem"))
	// Refused: how the client hears of it (an alert naming the missing
	// certificate, or a connection closed under it) varies with timing.
	if out, err := cmd.CombinedOutput(); err == nil || strings.Contains(string(out), "ops/check") {
		t.Errorf("quire journals list without a client certificate: %v, %s; want it refused", err, out)
	}
}

// cluster is a compose project of the test's own, on a subnet of its own.
type cluster struct {
	t       *testing.T
	project string
	subnet  string   // the first three octets
	files   []string // compose files
	tlsDir  string   // the certificates, if TLS
	bin     string   // host binaries: quire
	env     []string
	conns   map[string]*grpc.ClientConn
	mu      sync.Mutex
}

// images builds the images once per test binary.
var images struct {
	once sync.Once
	err  error
	out  string
}

func up(t *testing.T, tls bool) *cluster {
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the compose cluster needs Docker with docker-compose", tool)
		}
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("docker does not answer: %v: %s", err, out)
	}
	n := os.Getpid() % 100
	if tls {
		n = (n + 50) % 100
	}
	c := &cluster{t: t, project: fmt.Sprintf("quiretest%d", 100+n), subnet: fmt.Sprintf("10.207.%d", 100+n),
		files: []string{"compose.yaml"}, bin: t.TempDir(), conns: map[string]*grpc.ClientConn{}}
	c.env = append(os.Environ(), "QUIRE_SUBNET="+c.subnet, "QUIRE_TAG="+imageTag,
		"QUIRE_BROKER_LEASE="+brokerLease.String(), "QUIRE_CONSUMER_LEASE="+consumerLease.String())
	c.buildImages()
	c.run("go", "build", "-o", c.bin, "../../cmd/quire")
	if tls {
		c.tlsDir = t.TempDir()
		c.run("go", "run", "./gencerts", "-dir", c.tlsDir, "-subnet", c.subnet)
		c.files = append(c.files, "compose.tls.yaml")
		c.env = append(c.env, "QUIRE_TLS_DIR="+c.tlsDir)
	}
	t.Cleanup(c.down)
	c.compose("up", "-d")
	c.awaitReady(append(append([]string{}, brokers...), consumers...)...)
	c.awaitSetup()
	return c
}

// imageInputs are what the images and the cluster are made of, besides
// the Go packages they build: go test must rerun the test when they change.
var imageInputs = []string{"compose.yaml", "compose.tls.yaml", "s3.json", "s3.env", "gencerts",
	"../images", "../docker", "../docker/quire.Dockerfile", "../docker/wordcount.Dockerfile",
	"../docker/etcd.Dockerfile", "../docker/s3.Dockerfile", "../../.ci/build-weed"}

// buildImages builds the images with deploy/images, tagged imageTag,
// once per test binary.
func (c *cluster) buildImages() {
	if err := proctest.DeclareInputs([]string{"../../cmd/quire", "../../examples/wordcount", "../../internal/cmd/etcd", "./gencerts"},
		imageInputs...); err != nil {
		c.t.Fatal(err)
	}
	images.once.Do(func() {
		start := time.Now()
		cmd := exec.Command("bash", "../images")
		cmd.Env = append(os.Environ(), "VERSION="+imageTag)
		out, err := cmd.CombinedOutput()
		images.out = fmt.Sprintf("images built in %s:\n%s", time.Since(start).Round(time.Second), lastLines(string(out), 4))
		if err != nil {
			images.err = fmt.Errorf("deploy/images: %w\n%s", err, out)
		}
	})
	if images.err != nil {
		c.t.Fatal(images.err)
	}
	c.t.Log(images.out)
}

// down removes everything the project made, and checks that nothing is
// left: containers, networks, volumes.
func (c *cluster) down() {
	if c.t.Failed() {
		c.t.Logf("the cluster's logs end:\n%s", lastLines(c.composeOut("logs", "--no-color", "--tail", "30"), 300))
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	c.composeOut("down", "--volumes", "--remove-orphans", "--timeout", "1")
	label := "label=com.docker.compose.project=" + c.project
	for _, kind := range [][]string{{"ps", "-a", "-q"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		args := append(kind, "--filter", label)
		if out, err := exec.Command("docker", args...).Output(); err != nil || len(bytes.TrimSpace(out)) != 0 {
			c.t.Errorf("after compose down, docker %s: %q %v", strings.Join(args, " "), out, err)
		}
	}
}

// compose runs docker-compose on the project, failing the test if it fails.
func (c *cluster) compose(args ...string) string {
	c.t.Helper()
	out, err := c.composeCmd(args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("docker-compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// composeOut runs docker-compose on the project and returns its output,
// whatever it exits with.
func (c *cluster) composeOut(args ...string) string {
	out, err := c.composeCmd(args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s\n(docker-compose %s: %v)", out, strings.Join(args, " "), err)
	}
	return string(out)
}

func (c *cluster) composeCmd(args ...string) *exec.Cmd {
	flags := []string{"-p", c.project}
	for _, f := range c.files {
		flags = append(flags, "-f", f)
	}
	cmd := exec.Command("docker-compose", append(flags, args...)...)
	cmd.Env = c.env
	return cmd
}

// run runs a command, failing the test if it fails.
func (c *cluster) run(name string, args ...string) string {
	c.t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// addr is service's address, at port.
func (c *cluster) addr(service string, port int) string {
	return fmt.Sprintf("%s.%d:%d", c.subnet, addrs[service], port)
}

func (c *cluster) brokerList() string {
	var as []string
	for _, b := range brokers {
		as = append(as, c.addr(b, 7700))
	}
	return strings.Join(as, ",")
}

// ready returns nil once service's admin endpoint says it is ready.
func (c *cluster) ready(service string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	url := "http://" + c.addr(service, 7704) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// awaitReady waits until every one of services is ready.
func (c *cluster) awaitReady(services ...string) {
	c.t.Helper()
	for _, s := range services {
		c.await(3*time.Minute, "readiness of "+s, func() error { return c.ready(s) })
	}
}

// await polls cond until it returns nil, failing the test after timeout.
func (c *cluster) await(timeout time.Duration, what string, cond func() error) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: still %v after %s", what, err, timeout)
		}
		time.Sleep(100 * time.Millisecond) // Polling containers' state.
	}
}

// awaitSetup waits until the setup container created the word count's
// journals and shards and exited 0.
func (c *cluster) awaitSetup() {
	c.t.Helper()
	c.await(2*time.Minute, "the setup container", func() error {
		id := strings.TrimSpace(c.composeOut("ps", "-q", "setup"))
		if id == "" {
			return errors.New("no setup container")
		}
		out, err := exec.Command("docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", id).Output()
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(out)); s != "exited 0" {
			return fmt.Errorf("setup is %q", s)
		}
		return nil
	})
}

// conn is a gRPC connection to addr, closed when the test ends.
func (c *cluster) conn(addr string) *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc
	}
	cc, err := grpc.NewClient(addr, c.dialOptions()...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.conns[addr] = cc
	return cc
}

// journals is a client of the brokers, closed when the test ends.
func (c *cluster) journals() *client.Client {
	c.t.Helper()
	cl, err := client.New(context.Background(), client.Config{Broker: c.brokerList(), DialOptions: c.dialOptions()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// quire runs the host's quire CLI against the cluster with stdin.
func (c *cluster) quire(stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.bin, "quire"), args...)
	cmd.Env = append(os.Environ(), "QUIRE_BROKER="+c.addr("broker1", 7700), "QUIRE_CONSUMER="+c.addr("wordcount1", 7702))
	if c.tlsDir != "" {
		cmd.Env = append(cmd.Env, c.clientTLSEnv()...)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("quire %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), err
}

// clientTLSEnv is the environment of a client with the client certificate.
func (c *cluster) clientTLSEnv() []string {
	return []string{"QUIRE_TLS_CERT=" + filepath.Join(c.tlsDir, "client.pem"),
		"QUIRE_TLS_KEY=" + filepath.Join(c.tlsDir, "client-key.pem"), "QUIRE_TLS_CA=" + filepath.Join(c.tlsDir, "ca.pem")}
}

// dialOptions are the gRPC dial options of the test's clients.
func (c *cluster) dialOptions() []grpc.DialOption {
	c.t.Helper()
	if c.tlsDir == "" {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	files := tlsconfig.Files{Cert: filepath.Join(c.tlsDir, "client.pem"), Key: filepath.Join(c.tlsDir, "client-key.pem"), CA: filepath.Join(c.tlsDir, "ca.pem")}
	opts, err := files.DialOptions()
	if err != nil {
		c.t.Fatal(err)
	}
	return opts
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// checkBadConfiguration: a broker given an unreachable etcd, a malformed
// store URL or a missing bucket exits non-zero, naming the flag and the
// value; one given the name of a live broker is not ready, and exits
// naming the holder.
func (c *cluster) checkBadConfiguration() {
	c.t.Helper()
	network := c.project + "_quire"
	etcd := "QUIRE_ETCD=http://" + c.addr("etcd1", 2379)
	creds := []string{"-e", "AWS_ACCESS_KEY_ID=quire-example-key", "-e", "AWS_SECRET_ACCESS_KEY=quire-example-secret-change-me"}
	for _, tc := range []struct {
		env          []string
		args         []string
		code         int
		flag, reason string
	}{
		{[]string{"-e", "QUIRE_ETCD=http://" + c.subnet + ".99:2379"}, []string{"--store", "file:///var/lib/quire/store/"}, 1, "--etcd", c.subnet + ".99:2379"},
		{[]string{"-e", etcd}, []string{"--store", "s3:/no-bucket"}, 2, "--store", `"s3:/no-bucket"`},
		{append([]string{"-e", etcd}, creds...), []string{"--store", "s3://missing/x/?endpoint=s3:8333&insecure=true"}, 1, "--store", "bucket"},
	} {
		args := append(append([]string{"run", "--rm", "--network", network}, tc.env...), "quire/quire:"+imageTag)
		cmd := exec.Command("docker", append(append(args, "broker", "serve", "--suffix", "misconfigured"), tc.args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tc.code || !strings.Contains(string(out), tc.flag) ||
			!strings.Contains(strings.ToLower(string(out)), strings.ToLower(tc.reason)) {
			c.t.Errorf("broker serve %v: %v, output %q; want exit %d naming %s and %s", tc.args, err, lastLines(string(out), 3), tc.code, tc.flag, tc.reason)
		}
	}

	// The name of a live broker: not ready while it waits, then refused.
	args := []string{"run", "-d", "--network", network, "--env-file", "s3.env", "-e", etcd,
		"quire/quire:" + imageTag, "broker", "serve", "--zone", "zone-a", "--suffix", "broker1", "--lease", brokerLease.String()}
	id := strings.TrimSpace(c.run("docker", args...))
	defer exec.Command("docker", "rm", "-f", id).Run()
	ip := strings.TrimSpace(c.run("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id))
	sawWaiting := false
	c.await(time.Minute, "the duplicate broker", func() error {
		resp, err := http.Get("http://" + ip + ":7704/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.t.Fatalf("a broker with a live broker's name is ready: %s", body)
			}
			sawWaiting = sawWaiting || strings.Contains(string(body), "announcing")
		}
		out, err := exec.Command("docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", id).Output()
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(out)); s != "exited 1" {
			return fmt.Errorf("it is %q", s)
		}
		return nil
	})
	logs, _ := exec.Command("docker", "logs", id).CombinedOutput()
	if !sawWaiting || !strings.Contains(string(logs), "held by another live process") {
		c.t.Errorf("the duplicate broker: saw /readyz say announcing: %v; its log ends %q", sawWaiting, lastLines(string(logs), 2))
	}
}

// checkCLI: the host's quire CLI applies a journal, appends to it and
// reads it back byte for byte, through the cluster.
func (c *cluster) checkCLI() {
	c.t.Helper()
	if _, err := c.quire("journals: [{name: ops/check, replication: 3}]\n", "journals", "apply", "-f", "-"); err != nil {
		c.t.Fatal(err)
	}
	content := "binary \x00\xff content\nand a last line without a newline"
	if _, err := c.quire(content, "journals", "append", "-j", "ops/check"); err != nil {
		c.t.Fatal(err)
	}
	got, err := c.quire("", "journals", "read", "-j", "ops/check")
	if err != nil || got != content {
		c.t.Fatalf("read %q, %v; want %q", got, err, content)
	}
	list, err := c.quire("", "shards", "list")
	if err != nil || strings.Count(list, "PRIMARY") < wordcount.Partitions {
		c.t.Fatalf("shards list: %v\n%s", err, list)
	}
}

// killJournalPrimary kills the container of a journal's primary broker
// while appends go on: every acknowledged append is read back, in order,
// whole. Appends are at least once, so a retried one may appear twice.
func (c *cluster) killJournalPrimary() {
	c.t.Helper()
	const journal = "ops/kill"
	if _, err := c.quire("journals: [{name: "+journal+", replication: 3}]\n", "journals", "apply", "-f", "-"); err != nil {
		c.t.Fatal(err)
	}
	journals := c.journals()
	var acked []int
	var worst time.Duration
	appendRecord := func(n int) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		if _, err := journals.Append(ctx, client.AppendRequest{Journal: journal}, strings.NewReader(fmt.Sprintf("record %06d\n", n))); err != nil {
			c.t.Fatalf("append %d: %v", n, err)
		}
		worst = max(worst, time.Since(start))
		acked = append(acked, n)
	}
	n := 0
	for ; n < 20; n++ {
		appendRecord(n)
	}
	victim := c.journalPrimary(journals, journal)
	c.compose("kill", "-s", "SIGKILL", victim)
	for stop := n + 40; n < stop; n++ {
		appendRecord(n)
	}
	c.compose("start", victim)
	c.awaitReady(victim)
	c.t.Logf("killed %s, the primary of %s: the slowest of %d appends took %s", victim, journal, n, worst.Round(time.Millisecond))
	c.checkRecords(journals, journal, acked)
}

// journalPrimary is the broker (its service) that is journal's primary.
func (c *cluster) journalPrimary(journals *client.Client, journal string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := journals.List(ctx, &protocol.ListRequest{Selector: "name=" + journal})
	if err != nil || len(resp.Journals) != 1 || len(resp.Journals[0].Route.GetMembers()) == 0 {
		c.t.Fatalf("listing %s: %v %v", journal, resp, err)
	}
	return resp.Journals[0].Route.Members[0].Suffix
}

// checkRecords reads journal whole, and checks that it holds every record
// of acked, in order of first appearance, and nothing torn.
func (c *cluster) checkRecords(journals *client.Client, journal string, acked []int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	content, err := io.ReadAll(journals.NewReader(ctx, client.ReadRequest{Journal: journal}))
	if err != nil {
		c.t.Fatalf("reading %s: %v", journal, err)
	}
	seen := map[int]bool{}
	var order []int
	for i, line := range strings.Split(strings.TrimSuffix(string(content), "\n"), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "record %06d", &n); err != nil || len(line) != len("record 000000") {
			c.t.Fatalf("%s line %d is %q: torn or foreign", journal, i+1, line)
		}
		if !seen[n] {
			seen[n] = true
			order = append(order, n)
		}
	}
	if !slices.IsSorted(order) {
		c.t.Errorf("%s holds its records out of order: %v", journal, order)
	}
	for _, n := range acked {
		if !seen[n] {
			c.t.Errorf("acknowledged record %d is not in %s", n, journal)
		}
	}
}

// killShardPrimary kills the container of a shard's primary while words
// are published: a standby takes the shard over within the lease TTL and
// a second; the counts are checked at the end.
func (c *cluster) killShardPrimary() {
	c.t.Helper()
	shard := wordcount.ShardID(0)
	victim := c.shardPrimary(shard)
	killed := time.Now()
	c.compose("kill", "-s", "SIGKILL", victim)
	var took time.Duration
	c.await(time.Minute, "a new primary of "+shard, func() error {
		p, err := c.shardPrimaryVia(shard, victim)
		if err != nil {
			return err
		}
		if p == victim {
			return fmt.Errorf("%s is still %s's primary", victim, shard)
		}
		took = time.Since(killed)
		return nil
	})
	c.t.Logf("killed %s, the primary of %s: a standby served it %s later", victim, shard, took.Round(time.Millisecond))
	if bound := consumerLease + time.Second; took > bound {
		c.t.Errorf("%s had no primary for %s after its primary's container was killed, want at most %s", shard, took, bound)
	}
	c.compose("start", victim)
	c.awaitReady(victim)
}

// shardPrimary is the process (its service) serving shard as its primary.
func (c *cluster) shardPrimary(shard string) string {
	c.t.Helper()
	var p string
	c.await(time.Minute, "a primary of "+shard, func() (err error) {
		p, err = c.shardPrimaryVia(shard, "")
		return err
	})
	return p
}

// shardPrimaryVia is the live process (its service) serving shard as its
// primary, as the first process but avoid that answers sees it.
func (c *cluster) shardPrimaryVia(shard, avoid string) (string, error) {
	var errs []error
	for _, via := range consumers {
		if via == avoid {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := protocol.NewShardClient(c.conn(c.addr(via, 7702))).List(ctx, &protocol.ShardListRequest{Selector: "id=" + shard})
		cancel()
		if err != nil || len(resp.Shards) != 1 {
			errs = append(errs, fmt.Errorf("listing %s via %s: %v %v", shard, via, resp, err))
			continue
		}
		for _, r := range resp.Shards[0].Replicas {
			if r.Slot == 0 && r.Status.GetCode() == protocol.ReplicaCode_PRIMARY && r.GetLiveness() == protocol.ProcessLiveness_LIVE {
				return r.ProcessId.Suffix, nil
			}
		}
		return "", fmt.Errorf("%s has no live primary: %v", shard, resp.Shards[0].Replicas)
	}
	return "", errors.Join(errs...)
}

// killEtcdMember kills one etcd member: words are still published and
// counted meanwhile, and the member rejoins once started again.
func (c *cluster) killEtcdMember(pub *publisher) {
	c.t.Helper()
	c.compose("kill", "-s", "SIGKILL", "etcd2")
	before := pub.acknowledged()
	c.await(time.Minute, "publishing with etcd2 down", func() error {
		if n := pub.acknowledged(); n < before+50 {
			return fmt.Errorf("%d words acknowledged since etcd2 went down", n-before)
		}
		return nil
	})
	c.compose("start", "etcd2")
	c.await(time.Minute, "etcd2's health", func() error {
		resp, err := http.Get("http://" + c.addr("etcd2", 2379) + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd2: %s", resp.Status)
		}
		return nil
	})
}

// rollingRestart restarts every broker, then every consumer process, one
// at a time (each drains on SIGTERM), waiting for each to be ready again.
func (c *cluster) rollingRestart() {
	c.t.Helper()
	for _, s := range append(append([]string{}, brokers...), consumers...) {
		start := time.Now()
		c.compose("restart", "--timeout", "40", s)
		c.awaitReady(s)
		c.t.Logf("restarted %s: ready again after %s", s, time.Since(start).Round(time.Millisecond))
	}
}

// publisher publishes words without pause and counts what was
// acknowledged.
type publisher struct {
	c     *cluster
	stopc chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	acked map[string]uint64
	total int
	errs  []error
}

var vocabulary = func() []string {
	var ws []string
	for i := range 24 {
		ws = append(ws, fmt.Sprintf("w%02d", i))
	}
	return ws
}()

func (c *cluster) startPublishing() *publisher {
	p := &publisher{c: c, stopc: make(chan struct{}), done: make(chan struct{}), acked: map[string]uint64{}}
	journals := c.journals()
	go func() {
		defer close(p.done)
		rnd := rand.New(rand.NewPCG(3, 4))
		for {
			select {
			case <-p.stopc:
				return
			default:
			}
			words := make([]string, 8)
			for i := range words {
				words[i] = vocabulary[rnd.IntN(len(vocabulary))]
			}
			p.publish(journals, words)
		}
	}()
	c.t.Cleanup(func() { p.stop() })
	return p
}

func (p *publisher) publish(journals *client.Client, words []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := wordcount.Publish(ctx, journals, wordcount.Selector, strings.NewReader(strings.Join(words, " ")))
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil && n != len(words) {
		err = fmt.Errorf("published %d words of %d", n, len(words))
	}
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("publishing %v: %w", words, err))
		return
	}
	for _, w := range words {
		p.acked[w]++
	}
	p.total += len(words)
}

func (p *publisher) acknowledged() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// stop ends the publishing once the batch under way is acknowledged, and
// returns what was.
func (p *publisher) stop() map[string]uint64 {
	select {
	case <-p.stopc:
	default:
		close(p.stopc)
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, err := range p.errs {
		p.c.t.Errorf("%v", err)
	}
	p.errs = nil
	return p.acked
}

// checkCounts asks each word's count, through each process in turn: it
// is exactly what was acknowledged.
func (c *cluster) checkCounts(acked map[string]uint64) {
	c.t.Helper()
	var total uint64
	for i, w := range vocabulary {
		via := consumers[i%len(consumers)]
		var got uint64
		c.await(time.Minute, "the count of "+w, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := wordcountpb.NewWordCountClient(c.conn(c.addr(via, 7702))).Count(ctx,
				&wordcountpb.CountRequest{Words: []string{w}, Sync: true})
			if err != nil {
				return err
			}
			got = resp.Counts[0].Count
			return nil
		})
		if got != acked[w] {
			c.t.Errorf("count of %s = %d, want %d", w, got, acked[w])
		}
		total += acked[w]
	}
	c.t.Logf("%d words published through every fault, each counted exactly once", total)
}
