package proctest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The project's binaries, as import paths for Binaries.
const (
	Quire = "github.com/quire-dev/quire/cmd/quire"
	Etcd  = "github.com/quire-dev/quire/internal/cmd/etcd"
)

// builds holds, for each package built or being built by this test
// binary, the batch that builds it.
var builds struct {
	mu      sync.Mutex
	dir     string
	batches map[string]*batch
}

// mainRuns is set while Main runs the tests: only then is there someone
// to remove what Binaries built.
var mainRuns atomic.Bool

// A batch is one go build of several packages: one command compiles them
// in parallel and loads their shared dependencies once.
type batch struct {
	once  sync.Once
	pkgs  []string
	paths map[string]string
	err   error
}

// Main runs the package's tests with run (m.Run if run is nil; another
// package's Main, such as etcdtest.Main, otherwise), then removes the
// binaries built: call it from TestMain,
// os.Exit(proctest.Main(m, etcdtest.Main)).
func Main(m *testing.M, run func(*testing.M) int) int {
	if run == nil {
		run = func(m *testing.M) int { return m.Run() }
	}
	mainRuns.Store(true)
	defer mainRuns.Store(false)
	defer removeBinaries()
	return run(m)
}

func removeBinaries() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	builds.dir, builds.batches = "", nil
}

// Binaries returns the paths of the executables of the main packages pkgs
// (import paths, such as Quire and Etcd), building those that this test
// binary has not built yet. Binaries are built with CGO_ENABLED=0 and
// -trimpath, without -race: a race-enabled fleet of processes is several
// times slower, and the race detector already runs in the packages' own
// tests. Two packages must not share a last path element, which names
// their executable.
func Binaries(t testing.TB, pkgs ...string) []string {
	t.Helper()
	if !mainRuns.Load() {
		t.Fatal("proctest: the package's TestMain must run its tests through proctest.Main, which removes the binaries built")
	}
	todo, err := batchesFor(pkgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range todo {
		b.once.Do(func() {
			start := time.Now()
			b.err = b.build()
			t.Logf("proctest: built %v in %s", b.pkgs, time.Since(start).Round(time.Millisecond))
		})
	}
	var paths []string
	for _, pkg := range pkgs {
		b := todo[pkg]
		if b.err != nil {
			t.Fatal(b.err)
		}
		paths = append(paths, b.paths[pkg])
	}
	return paths
}

// batchesFor returns the batch of each of pkgs, adding one for those that
// no batch builds yet.
func batchesFor(pkgs []string) (map[string]*batch, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir == "" {
		dir, err := os.MkdirTemp("", "quire-proctest-")
		if err != nil {
			return nil, fmt.Errorf("proctest: creating the directory of binaries: %w", err)
		}
		builds.dir, builds.batches = dir, map[string]*batch{}
	}
	fresh := &batch{paths: map[string]string{}}
	out := map[string]*batch{}
	for _, pkg := range pkgs {
		b, ok := builds.batches[pkg]
		if !ok {
			b = fresh
			if !slices.Contains(fresh.pkgs, pkg) {
				fresh.pkgs = append(fresh.pkgs, pkg)
				fresh.paths[pkg] = filepath.Join(builds.dir, path.Base(pkg))
			}
			builds.batches[pkg] = b
		}
		out[pkg] = b
	}
	return out, nil
}

// build runs go build, and declares the packages' sources inputs of the
// test.
func (b *batch) build() error {
	dir := filepath.Dir(b.paths[b.pkgs[0]])
	if _, err := goCommand(append([]string{"build", "-trimpath", "-ldflags=-s -w", "-o", dir + string(filepath.Separator)}, b.pkgs...)...); err != nil {
		return err
	}
	return declareSources(b.pkgs)
}

// goCommand runs the go command that go test put first in PATH, as
// Binaries builds: without cgo, so that binaries are static.
func goCommand(args ...string) ([]byte, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("proctest: finding the go command: %w", err)
	}
	cmd := exec.Command(goBin, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("proctest: go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out, nil
}

// DeclareInputs tells go test what a test's result depends on beyond its
// own binary: the sources of the packages pkgs (and their dependencies
// outside the standard library), which the test builds into binaries or
// images, and files (or directories) it hands to other programs. go test
// then caches the result only until one of them changes.
func DeclareInputs(pkgs []string, files ...string) error {
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("declaring the test's input %s: %w", name, err)
		}
		f.Close()
	}
	return declareSources(pkgs)
}

// declareSources opens the directory of every package that pkgs depend
// on, outside the standard library. go test caches a test's result
// until the files it opened change; the binaries' sources are not the
// test binary's, so without this a change to a package that only the
// binaries import (the broker's, say) would leave a stale result cached.
func declareSources(pkgs []string) error {
	out, err := goCommand(append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.Dir}}{{end}}"}, pkgs...)...)
	if err != nil {
		return err
	}
	for _, dir := range strings.Fields(string(out)) {
		if f, err := os.Open(dir); err == nil {
			f.Close()
		}
	}
	return nil
}
