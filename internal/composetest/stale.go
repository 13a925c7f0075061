package composetest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// A test binary that dies before its cleanups run (a go test -timeout
// panic, a kill) leaves its cluster behind: containers, networks,
// volumes, and the subnet, which a later cluster of the same slot then
// cannot take. So each cluster records the process that owns it, and Up
// first removes every cluster whose owner is gone.

// projectPrefix begins the name of every cluster's compose project.
const projectPrefix = "quiretest"

// ownerFile records the process that owns project.
func ownerFile(project string) string {
	return filepath.Join(os.TempDir(), "quire-composetest", project)
}

// claim records this process as the owner of project.
func claim(project string) error {
	path := ownerFile(project)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// owned tells whether project's owner is a live process.
func owned(project string) bool {
	raw, err := os.ReadFile(ownerFile(project))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// removeStale removes what the clusters of dead owners left.
func removeStale(t testing.TB) {
	for _, project := range staleProjects() {
		t.Logf("removing cluster %s, left by a test process that is gone", project)
		removeProject(project)
	}
}

// staleProjects lists the clusters' projects that hold anything and whose
// owner is gone.
func staleProjects() []string {
	seen := map[string]bool{}
	var out []string
	for _, kind := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
		args := append(kind, "--filter", "label=com.docker.compose.project", "--format", `{{.Label "com.docker.compose.project"}}`)
		list, err := Docker(args...)
		if err != nil {
			continue
		}
		for _, p := range strings.Fields(string(list)) {
			if strings.HasPrefix(p, projectPrefix) && !seen[p] && !owned(p) {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// removeProject removes project's containers (paused ones too), networks
// and volumes.
func removeProject(project string) {
	label := "label=com.docker.compose.project=" + project
	ids := func(kind ...string) []string {
		out, _ := Docker(append(kind, "-q", "--filter", label)...)
		return strings.Fields(string(bytes.TrimSpace(out)))
	}
	if paused := ids("ps", "--filter", "status=paused"); len(paused) > 0 {
		Docker(append([]string{"unpause"}, paused...)...)
	}
	if c := ids("ps", "-a"); len(c) > 0 {
		Docker(append([]string{"rm", "-f", "-v"}, c...)...)
	}
	if n := ids("network", "ls"); len(n) > 0 {
		Docker(append([]string{"network", "rm"}, n...)...)
	}
	if v := ids("volume", "ls"); len(v) > 0 {
		Docker(append([]string{"volume", "rm", "-f"}, v...)...)
	}
	os.Remove(ownerFile(project))
}
