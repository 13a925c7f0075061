package composetest

import (
	"os/exec"
	"strings"
	"testing"
)

// What a cluster whose test process died left behind is removed by the
// next cluster's Up; a live process's cluster is left alone.
func TestRemoveStaleRemovesOnlyWhatDeadOwnersLeft(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Skipf("docker does not answer: %v", err)
	}
	const dead, live = projectPrefix + "-stale-dead", projectPrefix + "-stale-live"
	for _, p := range []string{dead, live} {
		t.Cleanup(func() { removeProject(p) })
		out, err := Run(exec.Command("docker", "network", "create", "--label", "com.docker.compose.project="+p, p+"_net"), DockerTimeout, true)
		if err != nil {
			t.Fatalf("docker network create: %v: %s", err, out)
		}
	}
	if err := claim(live); err != nil {
		t.Fatal(err)
	}
	removeStale(t)
	out, err := Docker("network", "ls", "--format", "{{.Name}}")
	if err != nil {
		t.Fatal(err)
	}
	names := strings.Fields(string(out))
	if contains(names, dead+"_net") {
		t.Errorf("the network of a cluster whose owner is gone is still there")
	}
	if !contains(names, live+"_net") {
		t.Errorf("the network of a cluster whose owner lives was removed")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
