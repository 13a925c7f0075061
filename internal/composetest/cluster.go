package composetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/proctest"
	"github.com/quire-dev/quire/internal/tlsconfig"
	"github.com/quire-dev/quire/protocol"
)

// ImageTag is the tag of the images the tests build and run.
const ImageTag = "compose-test"

// The cluster's services, as compose.yaml names them.
var (
	Brokers   = []string{"broker1", "broker2", "broker3"}
	Consumers = []string{"wordcount1", "wordcount2", "wordcount3"}
	// StreamSums are the stream-sum processes that the soak's layer adds
	// (test/soak/soak.compose.yaml); compose.yaml has none.
	StreamSums = []string{"streamsum1", "streamsum2"}
	Etcds      = []string{"etcd1", "etcd2", "etcd3"}
	// Zones are the zones of the brokers and consumer processes.
	Zones = map[string]string{"broker1": "zone-a", "broker2": "zone-b", "broker3": "zone-a",
		"wordcount1": "zone-a", "wordcount2": "zone-b", "wordcount3": "zone-a",
		"streamsum1": "zone-a", "streamsum2": "zone-b"}
	// addrs are the services' addresses' last octets, as compose.yaml fixes them.
	addrs = map[string]int{"etcd1": 11, "etcd2": 12, "etcd3": 13, "s3": 15,
		"broker1": 21, "broker2": 22, "broker3": 23, "wordcount1": 31, "wordcount2": 32, "wordcount3": 33,
		"streamsum1": 41, "streamsum2": 42}
)

// Options say which cluster to bring up. The zero value is compose.yaml
// alone, with its own leases.
type Options struct {
	// TLS layers compose.tls.yaml over compose.yaml, with certificates
	// made by gencerts.
	TLS bool
	// Files are more compose files to layer, last, by absolute path.
	Files []string
	// BrokerLease and ConsumerLease, if set, are the leases' TTLs.
	BrokerLease, ConsumerLease time.Duration
	// Slot tells clusters of one test binary apart: each has its own
	// project and subnet, 10.207.(100+(pid+Slot)%100).
	Slot int
}

// Cluster is a compose project of the test's own, on a subnet of its own.
type Cluster struct {
	t       testing.TB
	Project string
	Subnet  string // the first three octets
	Dir     string // deploy/compose
	TLSDir  string // the certificates, if TLS
	Bin     string // the host's binaries: quire
	files   []string
	env     []string
	conns   map[string]*grpc.ClientConn
	mu      sync.Mutex
}

// composeDir is deploy/compose of the checkout this package is in.
func composeDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "compose")
}

// Up brings a cluster up and waits until every broker and consumer
// process is ready and the word count's journals and shards exist. It
// skips the test where Docker or docker-compose is missing. The cluster
// is taken down when the test ends.
func Up(t testing.TB, opts Options) *Cluster {
	t.Helper()
	for _, tool := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the compose cluster needs Docker with docker-compose", tool)
		}
	}
	if out, err := Run(exec.Command("docker", "info"), DockerTimeout, true); err != nil {
		t.Skipf("docker does not answer: %v: %s", err, out)
	}
	n := (os.Getpid() + opts.Slot) % 100
	c := &Cluster{t: t, Project: fmt.Sprintf("%s%d", projectPrefix, 100+n), Subnet: fmt.Sprintf("10.207.%d", 100+n),
		Dir: composeDir(), Bin: t.TempDir(), conns: map[string]*grpc.ClientConn{}}
	c.files = []string{filepath.Join(c.Dir, "compose.yaml")}
	c.env = append(os.Environ(), "QUIRE_SUBNET="+c.Subnet, "QUIRE_TAG="+ImageTag)
	if opts.BrokerLease != 0 {
		c.env = append(c.env, "QUIRE_BROKER_LEASE="+opts.BrokerLease.String())
	}
	if opts.ConsumerLease != 0 {
		c.env = append(c.env, "QUIRE_CONSUMER_LEASE="+opts.ConsumerLease.String())
	}
	BuildImages(t)
	c.Run("go", "build", "-o", c.Bin, filepath.Join(c.Dir, "..", "..", "cmd", "quire"))
	if opts.TLS {
		c.TLSDir = t.TempDir()
		cmd := exec.Command("go", "run", "./gencerts", "-dir", c.TLSDir, "-subnet", c.Subnet)
		cmd.Dir = c.Dir
		if out, err := Run(cmd, BuildTimeout, true); err != nil {
			t.Fatalf("gencerts: %v\n%s", err, out)
		}
		c.files = append(c.files, filepath.Join(c.Dir, "compose.tls.yaml"))
		c.env = append(c.env, "QUIRE_TLS_DIR="+c.TLSDir)
	}
	c.files = append(c.files, opts.Files...)
	removeStale(t)
	if err := claim(c.Project); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.down)
	c.Compose("up", "-d")
	c.AwaitReady(append(append([]string{}, Brokers...), Consumers...)...)
	c.AwaitSetup()
	return c
}

// imageInputs are what the images and the cluster are made of, besides
// the Go packages they build: go test must rerun the tests when they change.
var imageInputs = []string{"compose.yaml", "compose.tls.yaml", "s3.json", "s3.env", "gencerts",
	"../images", "../docker", "../docker/quire.Dockerfile", "../docker/wordcount.Dockerfile", "../docker/streamsum.Dockerfile",
	"../docker/etcd.Dockerfile", "../docker/s3.Dockerfile", "../../.ci/build-weed"}

// images holds the outcome of building the images, once per test binary.
var images struct {
	once sync.Once
	err  error
	out  string
}

// BuildImages builds the images with deploy/images, tagged ImageTag, once
// per test binary.
func BuildImages(t testing.TB) {
	t.Helper()
	dir := composeDir()
	abs := func(rel []string) []string {
		out := make([]string, len(rel))
		for i, r := range rel {
			out[i] = filepath.Join(dir, r)
		}
		return out
	}
	pkgs := abs([]string{"../../cmd/quire", "../../examples/wordcount", "../../examples/streamsum", "../../internal/cmd/etcd", "./gencerts"})
	if err := proctest.DeclareInputs(pkgs, abs(imageInputs)...); err != nil {
		t.Fatal(err)
	}
	images.once.Do(func() {
		start := time.Now()
		cmd := exec.Command("bash", filepath.Join(dir, "..", "images"))
		cmd.Env = append(os.Environ(), "VERSION="+ImageTag)
		out, err := Run(cmd, BuildTimeout, true)
		images.out = fmt.Sprintf("images built in %s:\n%s", time.Since(start).Round(time.Second), LastLines(string(out), 4))
		if err != nil {
			images.err = fmt.Errorf("deploy/images: %w\n%s", err, out)
		}
	})
	if images.err != nil {
		t.Fatal(images.err)
	}
	t.Log(images.out)
}

// down removes everything the project made, and checks that nothing is
// left: containers, networks, volumes.
func (c *Cluster) down() {
	if c.t.Failed() {
		c.t.Logf("the cluster's logs end:\n%s", LastLines(c.ComposeOut("logs", "--no-color", "--tail", "30"), 300))
	}
	c.mu.Lock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	// Paused containers do not stop: unpause any a failed test left.
	for _, s := range slices.Concat(Brokers, Consumers, StreamSums, Etcds) {
		if id := c.ID(s); id != "" {
			Docker("unpause", id)
		}
	}
	c.ComposeOut("down", "--volumes", "--remove-orphans", "--timeout", "1")
	os.Remove(ownerFile(c.Project))
	label := "label=com.docker.compose.project=" + c.Project
	for _, kind := range [][]string{{"ps", "-a", "-q"}, {"network", "ls", "-q"}, {"volume", "ls", "-q"}} {
		args := append(kind, "--filter", label)
		if out, err := Docker(args...); err != nil || len(bytes.TrimSpace(out)) != 0 {
			c.t.Errorf("after compose down, docker %s: %q %v", strings.Join(args, " "), out, err)
		}
	}
}

// Compose runs docker-compose on the project, failing the test if it fails.
func (c *Cluster) Compose(args ...string) string {
	c.t.Helper()
	out, err := Run(c.composeCmd(args...), DockerTimeout, true)
	if err != nil {
		c.t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}

// ComposeOut runs docker-compose on the project and returns its output,
// whatever it exits with.
func (c *Cluster) ComposeOut(args ...string) string {
	out, err := Run(c.composeCmd(args...), DockerTimeout, true)
	if err != nil {
		return fmt.Sprintf("%s\n(%v)", out, err)
	}
	return string(out)
}

// ComposeErr runs docker-compose on the project, and returns an error
// with its output if it fails.
func (c *Cluster) ComposeErr(args ...string) error {
	if out, err := Run(c.composeCmd(args...), DockerTimeout, true); err != nil {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func (c *Cluster) composeCmd(args ...string) *exec.Cmd {
	flags := []string{"-p", c.Project}
	for _, f := range c.files {
		flags = append(flags, "-f", f)
	}
	cmd := exec.Command("docker-compose", append(flags, args...)...)
	cmd.Dir = c.Dir
	cmd.Env = c.env
	return cmd
}

// Run runs a command in deploy/compose under BuildTimeout, failing the
// test if it fails.
func (c *Cluster) Run(name string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = c.Dir
	out, err := Run(cmd, BuildTimeout, true)
	if err != nil {
		c.t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}

// Network is the name of the project's Docker network.
func (c *Cluster) Network() string { return c.Project + "_quire" }

// IP is service's address.
func (c *Cluster) IP(service string) string { return fmt.Sprintf("%s.%d", c.Subnet, addrs[service]) }

// Addr is service's address, at port.
func (c *Cluster) Addr(service string, port int) string {
	return fmt.Sprintf("%s:%d", c.IP(service), port)
}

// BrokerList is the brokers' addresses, comma-separated.
func (c *Cluster) BrokerList() string {
	var as []string
	for _, b := range Brokers {
		as = append(as, c.Addr(b, 7700))
	}
	return strings.Join(as, ",")
}

// Ready returns nil once service's admin endpoint says it is ready.
func (c *Cluster) Ready(service string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	url := "http://" + c.Addr(service, 7704) + "/readyz"
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

// AwaitReady waits until every one of services is ready.
func (c *Cluster) AwaitReady(services ...string) {
	c.t.Helper()
	for _, s := range services {
		c.Await(3*time.Minute, "readiness of "+s, func() error { return c.Ready(s) })
	}
}

// Await polls cond until it returns nil, failing the test after timeout.
func (c *Cluster) Await(timeout time.Duration, what string, cond func() error) {
	c.t.Helper()
	if err := Poll(timeout, cond); err != nil {
		c.t.Fatalf("%s: %v", what, err)
	}
}

// Poll polls cond until it returns nil, or returns its last error after
// timeout.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still %w after %s", err, timeout)
		}
		time.Sleep(100 * time.Millisecond) // Polling containers' state.
	}
}

// AwaitSetup waits until the setup container created the word count's
// journals and shards and exited 0.
func (c *Cluster) AwaitSetup() {
	c.t.Helper()
	c.Await(2*time.Minute, "the setup container", func() error {
		id := strings.TrimSpace(c.ComposeOut("ps", "-q", "setup"))
		if id == "" {
			return errors.New("no setup container")
		}
		out, err := Docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", id)
		if err != nil {
			return err
		}
		if s := strings.TrimSpace(string(out)); s != "exited 0" {
			return fmt.Errorf("setup is %q", s)
		}
		return nil
	})
}

// Conn is a gRPC connection to addr, closed when the test ends.
func (c *Cluster) Conn(addr string) *grpc.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc
	}
	cc, err := grpc.NewClient(addr, c.DialOptions()...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.conns[addr] = cc
	return cc
}

// Journals is a client of the brokers, closed when the test ends.
func (c *Cluster) Journals() *client.Client {
	c.t.Helper()
	cl, err := client.New(context.Background(), client.Config{Broker: c.BrokerList(), DialOptions: c.DialOptions()})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Quire runs the host's quire CLI against the cluster with stdin, under
// DockerTimeout, and returns its standard output; see Run.
func (c *Cluster) Quire(stdin string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(c.Bin, "quire"), args...)
	cmd.Env = append(os.Environ(), "QUIRE_BROKER="+c.Addr("broker1", 7700), "QUIRE_CONSUMER="+c.Addr("wordcount1", 7702))
	if c.TLSDir != "" {
		cmd.Env = append(cmd.Env, c.ClientTLSEnv()...)
	}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := Run(cmd, DockerTimeout, false)
	return string(out), err
}

// ClientTLSEnv is the environment of a client with the client certificate.
func (c *Cluster) ClientTLSEnv() []string {
	return []string{"QUIRE_TLS_CERT=" + filepath.Join(c.TLSDir, "client.pem"),
		"QUIRE_TLS_KEY=" + filepath.Join(c.TLSDir, "client-key.pem"), "QUIRE_TLS_CA=" + filepath.Join(c.TLSDir, "ca.pem")}
}

// DialOptions are the gRPC dial options of the test's clients.
func (c *Cluster) DialOptions() []grpc.DialOption {
	c.t.Helper()
	if c.TLSDir == "" {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	files := tlsconfig.Files{Cert: filepath.Join(c.TLSDir, "client.pem"), Key: filepath.Join(c.TLSDir, "client-key.pem"), CA: filepath.Join(c.TLSDir, "ca.pem")}
	opts, err := files.DialOptions()
	if err != nil {
		c.t.Fatal(err)
	}
	return opts
}

// ShardPrimary is the live process (its service) serving shard as its
// primary, as the first process but avoid that answers sees it.
func (c *Cluster) ShardPrimary(shard, avoid string) (string, error) {
	return c.ShardPrimaryVia(Consumers, shard, avoid)
}

// ShardPrimaryVia is ShardPrimary of a shard of another application,
// whose processes are procs.
func (c *Cluster) ShardPrimaryVia(procs []string, shard, avoid string) (string, error) {
	var errs []error
	for _, via := range procs {
		if via == avoid {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := protocol.NewShardClient(c.Conn(c.Addr(via, 7702))).List(ctx, &protocol.ShardListRequest{Selector: "id=" + shard})
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

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
