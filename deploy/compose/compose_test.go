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
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/internal/composetest"
	"github.com/quire-dev/quire/protocol"
)

// The cluster's timing, shorter than compose.yaml's defaults so that the
// test's failovers are quick.
const (
	brokerLease   = 4 * time.Second
	consumerLease = 4 * time.Second
	imageTag      = composetest.ImageTag
)

var (
	brokers   = composetest.Brokers
	consumers = composetest.Consumers
)

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of containers")
	}
	c := up(t, false)
	c.checkBadConfiguration()
	c.checkCLI()
	pub := c.StartPublishing()
	c.killJournalPrimary()
	c.killShardPrimary()
	c.killEtcdMember(pub)
	c.rollingRestart()
	c.checkCounts(c.stopPublishing(pub))
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
	pub := c.StartPublishing()
	for pub.Acknowledged() < 200 {
		time.Sleep(50 * time.Millisecond) // Polling the publisher's progress.
	}
	c.checkCounts(c.stopPublishing(pub))
	cmd := exec.Command(filepath.Join(c.Bin, "quire"), "journals", "list", "--broker", c.Addr("broker1", 7700))
	cmd.Env = append(os.Environ(), "QUIRE_TLS_CA="+filepath.Join(c.TLSDir, "ca.pem"))
	// Refused: how the client hears of it (an alert naming the missing
	// certificate, or a connection closed under it) varies with timing.
	if out, err := composetest.Run(cmd, composetest.DockerTimeout, true); err == nil || strings.Contains(string(out), "ops/check") {
		t.Errorf("quire journals list without a client certificate: %v, %s; want it refused", err, out)
	}
}

// cluster is the compose cluster of a test.
type cluster struct {
	*composetest.Cluster
	t *testing.T
}

func up(t *testing.T, tls bool) *cluster {
	slot := 0
	if tls {
		slot = 50
	}
	return &cluster{composetest.Up(t, composetest.Options{TLS: tls, Slot: slot,
		BrokerLease: brokerLease, ConsumerLease: consumerLease}), t}
}

// checkBadConfiguration: a broker given an unreachable etcd, a malformed
// store URL or a missing bucket exits non-zero, naming the flag and the
// value; one given the name of a live broker is not ready, and exits
// naming the holder.
func (c *cluster) checkBadConfiguration() {
	c.t.Helper()
	network := c.Project + "_quire"
	etcd := "QUIRE_ETCD=http://" + c.Addr("etcd1", 2379)
	creds := []string{"-e", "AWS_ACCESS_KEY_ID=quire-example-key", "-e", "AWS_SECRET_ACCESS_KEY=quire-example-secret-change-me"}
	for _, tc := range []struct {
		env          []string
		args         []string
		code         int
		flag, reason string
	}{
		{[]string{"-e", "QUIRE_ETCD=http://" + c.Subnet + ".99:2379"}, []string{"--store", "file:///var/lib/quire/store/"}, 1, "--etcd", c.Subnet + ".99:2379"},
		{[]string{"-e", etcd}, []string{"--store", "s3:/no-bucket"}, 2, "--store", `"s3:/no-bucket"`},
		{append([]string{"-e", etcd}, creds...), []string{"--store", "s3://missing/x/?endpoint=s3:8333&insecure=true"}, 1, "--store", "bucket"},
	} {
		args := append(append([]string{"run", "--rm", "--network", network}, tc.env...), "quire/quire:"+imageTag)
		cmd := exec.Command("docker", append(append(args, "broker", "serve", "--suffix", "misconfigured"), tc.args...)...)
		out, err := composetest.Run(cmd, composetest.DockerTimeout, true)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != tc.code || !strings.Contains(string(out), tc.flag) ||
			!strings.Contains(strings.ToLower(string(out)), strings.ToLower(tc.reason)) {
			c.t.Errorf("broker serve %v: %v, output %q; want exit %d naming %s and %s", tc.args, err, composetest.LastLines(string(out), 3), tc.code, tc.flag, tc.reason)
		}
	}

	// The name of a live broker: not ready while it waits, then refused.
	args := []string{"run", "-d", "--network", network, "--env-file", "s3.env", "-e", etcd,
		"quire/quire:" + imageTag, "broker", "serve", "--zone", "zone-a", "--suffix", "broker1", "--lease", brokerLease.String()}
	id := strings.TrimSpace(c.Run("docker", args...))
	defer composetest.Docker("rm", "-f", id)
	ip := strings.TrimSpace(c.Run("docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id))
	sawWaiting := false
	c.Await(time.Minute, "the duplicate broker", func() error {
		resp, err := http.Get("http://" + ip + ":7704/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.t.Fatalf("a broker with a live broker's name is ready: %s", body)
			}
			sawWaiting = sawWaiting || strings.Contains(string(body), "announcing")
		}
		out, err := composetest.Docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", id)
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(out)); s != "exited 1" {
			return fmt.Errorf("it is %q", s)
		}
		return nil
	})
	logs, _ := composetest.Run(exec.Command("docker", "logs", id), composetest.DockerTimeout, true)
	if !sawWaiting || !strings.Contains(string(logs), "held by another live process") {
		c.t.Errorf("the duplicate broker: saw /readyz say announcing: %v; its log ends %q", sawWaiting, composetest.LastLines(string(logs), 2))
	}
}

// checkCLI: the host's quire CLI applies a journal, appends to it and
// reads it back byte for byte, through the cluster.
func (c *cluster) checkCLI() {
	c.t.Helper()
	if _, err := c.Quire("journals: [{name: ops/check, replication: 3}]\n", "journals", "apply", "-f", "-"); err != nil {
		c.t.Fatal(err)
	}
	content := "binary \x00\xff content\nand a last line without a newline"
	if _, err := c.Quire(content, "journals", "append", "-j", "ops/check"); err != nil {
		c.t.Fatal(err)
	}
	got, err := c.Quire("", "journals", "read", "-j", "ops/check")
	if err != nil || got != content {
		c.t.Fatalf("read %q, %v; want %q", got, err, content)
	}
	// Every shard gets a primary, once the processes assigned them have
	// played their recovery logs (which may still be going on).
	c.Await(time.Minute, "a primary for every shard", func() error {
		list, err := c.Quire("", "shards", "list")
		if err != nil {
			return err
		}
		n := 0
		for _, line := range strings.Split(list, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] != "ID" && f[1] == "PRIMARY" {
				n++
			}
		}
		if n < wordcount.Partitions {
			return fmt.Errorf("%d of %d shards have a serving primary:\n%s", n, wordcount.Partitions, list)
		}
		return nil
	})
}

// killJournalPrimary kills the container of a journal's primary broker
// while appends go on: every acknowledged append is read back, in order,
// whole. Appends are at least once, so a retried one may appear twice.
func (c *cluster) killJournalPrimary() {
	c.t.Helper()
	const journal = "ops/kill"
	if _, err := c.Quire("journals: [{name: "+journal+", replication: 3}]\n", "journals", "apply", "-f", "-"); err != nil {
		c.t.Fatal(err)
	}
	journals := c.Journals()
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
	if err := c.Kill(victim); err != nil {
		c.t.Fatal(err)
	}
	for stop := n + 40; n < stop; n++ {
		appendRecord(n)
	}
	c.Compose("start", victim)
	c.AwaitReady(victim)
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
// two seconds; the counts are checked at the end. After the lease, etcd
// may expire it up to half a second late, and the revocation, the new
// assignment and the standby's status each take a write to etcd, on a
// machine that may be loaded; the test polls every 100 ms.
func (c *cluster) killShardPrimary() {
	c.t.Helper()
	shard := wordcount.ShardID(0)
	victim := c.shardPrimary(shard)
	killed := time.Now()
	if err := c.Kill(victim); err != nil {
		c.t.Fatal(err)
	}
	var took time.Duration
	c.Await(time.Minute, "a new primary of "+shard, func() error {
		p, err := c.ShardPrimary(shard, victim)
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
	if bound := consumerLease + 2*time.Second; took > bound {
		c.t.Errorf("%s had no primary for %s after its primary's container was killed, want at most %s", shard, took, bound)
	}
	c.Compose("start", victim)
	c.AwaitReady(victim)
}

// shardPrimary is the process (its service) serving shard as its primary.
func (c *cluster) shardPrimary(shard string) string {
	c.t.Helper()
	var p string
	c.Await(time.Minute, "a primary of "+shard, func() (err error) {
		p, err = c.ShardPrimary(shard, "")
		return err
	})
	return p
}

// killEtcdMember kills one etcd member: words are still published and
// counted meanwhile, and the member rejoins once started again.
func (c *cluster) killEtcdMember(pub *composetest.Publisher) {
	c.t.Helper()
	c.Compose("kill", "-s", "SIGKILL", "etcd2")
	before := pub.Acknowledged()
	c.Await(time.Minute, "publishing with etcd2 down", func() error {
		if n := pub.Acknowledged(); n < before+50 {
			return fmt.Errorf("%d words acknowledged since etcd2 went down", n-before)
		}
		return nil
	})
	c.Compose("start", "etcd2")
	c.Await(time.Minute, "etcd2's health", func() error {
		resp, err := http.Get("http://" + c.Addr("etcd2", 2379) + "/health")
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
		c.Compose("restart", "--timeout", "40", s)
		c.AwaitReady(s)
		c.t.Logf("restarted %s: ready again after %s", s, time.Since(start).Round(time.Millisecond))
	}
}

// stopPublishing stops pub, failing the test for each batch that failed.
func (c *cluster) stopPublishing(pub *composetest.Publisher) map[string]uint64 {
	acked, errs := pub.Stop()
	for _, err := range errs {
		c.t.Error(err)
	}
	return acked
}

// checkCounts asks each word's count, through each process in turn: it
// is exactly what was acknowledged.
func (c *cluster) checkCounts(acked map[string]uint64) {
	c.t.Helper()
	counts, err := c.Counts()
	if err != nil {
		c.t.Fatal(err)
	}
	var total uint64
	for _, w := range composetest.Vocabulary {
		if counts[w] != acked[w] {
			c.t.Errorf("count of %s = %d, want %d", w, counts[w], acked[w])
		}
		total += acked[w]
	}
	c.t.Logf("%d words published through every fault, each counted exactly once", total)
}
