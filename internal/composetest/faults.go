package composetest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ID is the container of service, or "" if it has none. (It asks docker,
// which answers in milliseconds; docker-compose takes a second or more.)
func (c *Cluster) ID(service string) string {
	out, _ := Docker("ps", "-aq", "--no-trunc",
		"--filter", "label=com.docker.compose.project="+c.Project,
		"--filter", "label=com.docker.compose.service="+service)
	return strings.TrimSpace(string(out))
}

// Pid is the host's process ID of service's container's first process.
func (c *Cluster) Pid(service string) (int, error) {
	id := c.ID(service)
	if id == "" {
		return 0, fmt.Errorf("%s has no container", service)
	}
	out, err := Docker("inspect", "-f", "{{.State.Pid}}", id)
	if err != nil {
		return 0, fmt.Errorf("inspecting %s: %w", service, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || pid == 0 {
		return 0, fmt.Errorf("%s: %w (pid %q)", service, ErrNotRunning, strings.TrimSpace(string(out)))
	}
	return pid, nil
}

// Restarts is how many times Docker has restarted service's container
// (its restart policy, after the process exited), and whether the
// container is running now, its restart done.
func (c *Cluster) Restarts(service string) (int, bool, error) {
	id := c.ID(service)
	if id == "" {
		return 0, false, fmt.Errorf("%s has no container", service)
	}
	out, err := Docker("inspect", "-f", "{{.RestartCount}} {{.State.Running}} {{.State.Restarting}}", id)
	if err != nil {
		return 0, false, fmt.Errorf("inspecting %s: %w", service, err)
	}
	var n int
	var running, restarting bool
	if _, err := fmt.Sscan(string(out), &n, &running, &restarting); err != nil {
		return 0, false, fmt.Errorf("inspecting %s: %q: %w", service, out, err)
	}
	return n, running && !restarting, nil
}

// InNetns runs the host's command name in service's network namespace:
// packet filters and queueing disciplines made there are the
// container's, and go with it.
func (c *Cluster) InNetns(service, name string, args ...string) error {
	pid, err := c.Pid(service)
	if err != nil {
		return err
	}
	return inNetns(pid, service, name, args...)
}

func inNetns(pid int, service, name string, args ...string) error {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(pid), "-n", name}, args...)...)
	if out, err := Run(cmd, DockerTimeout, true); err != nil {
		return fmt.Errorf("in %s's network: %w: %s", service, err, out)
	}
	return nil
}

// Cut drops every packet between service and each of peers (services),
// both ways, until Heal.
func (c *Cluster) Cut(service string, peers ...string) error {
	var rules [][]string
	for _, p := range peers {
		ip := c.IP(p)
		rules = append(rules, []string{"-A", "INPUT", "-s", ip, "-j", "DROP"}, []string{"-A", "OUTPUT", "-d", ip, "-j", "DROP"})
	}
	return c.iptables(service, rules...)
}

// CutOneWay stops service from using the connections it opens to each of
// peers, until Heal, while the connections they open to it work: its
// packets on its own connections to them, and their answers, are dropped.
func (c *Cluster) CutOneWay(service string, peers ...string) error {
	var rules [][]string
	for _, p := range peers {
		ip := c.IP(p)
		rules = append(rules,
			[]string{"-A", "OUTPUT", "-d", ip, "-m", "conntrack", "--ctdir", "ORIGINAL", "-j", "DROP"},
			[]string{"-A", "INPUT", "-s", ip, "-m", "conntrack", "--ctdir", "REPLY", "-j", "DROP"})
	}
	return c.iptables(service, rules...)
}

// Heal removes every cut of service.
func (c *Cluster) Heal(service string) error {
	return c.iptables(service, []string{"-F", "INPUT"}, []string{"-F", "OUTPUT"})
}

// iptables runs iptables with each of rules, in order, in service's
// network namespace, stopping at the first that fails.
func (c *Cluster) iptables(service string, rules ...[]string) error {
	pid, err := c.Pid(service)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if err := inNetns(pid, service, "iptables", append([]string{"-w"}, r...)...); err != nil {
			return err
		}
	}
	return nil
}

// Degrade makes service's link lossy and slow, until Restore: it drops
// each packet in and out with probability loss (a packet filter's random
// match), and shapes what it sends to rate (a token bucket, whose queue
// adds latency). netem would do both, but is not in every kernel.
func (c *Cluster) Degrade(service string, loss float64, rate string) error {
	p := strconv.FormatFloat(loss, 'f', -1, 64)
	drop := func(chain string) []string {
		return []string{"-A", chain, "-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"}
	}
	if err := c.iptables(service, drop("INPUT"), drop("OUTPUT")); err != nil {
		return err
	}
	return c.InNetns(service, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "200ms")
}

// Restore undoes Degrade (and every cut) of service.
func (c *Cluster) Restore(service string) error {
	return errors.Join(c.InNetns(service, "tc", "qdisc", "del", "dev", "eth0", "root"), c.Heal(service))
}

// Kill kills service's container with SIGKILL, at once: docker answers
// in milliseconds, where docker-compose takes a second or more to start,
// which a test timing a failover from the kill would count.
func (c *Cluster) Kill(service string) error {
	return c.docker("kill", service, "--signal", "KILL")
}

// Pause freezes every process of service (docker pause), until Unpause.
// The kernel's freezer fails now and then ("unable to freeze": a task it
// could not stop at once); Pause tries again, for up to 5 s.
func (c *Cluster) Pause(service string) error {
	var err error
	for range 25 {
		if err = c.docker("pause", service); err == nil || !strings.Contains(err.Error(), "unable to freeze") {
			return err
		}
		time.Sleep(200 * time.Millisecond) // Giving the freezer another chance.
	}
	return err
}

// Unpause thaws service.
func (c *Cluster) Unpause(service string) error { return c.docker("unpause", service) }

func (c *Cluster) docker(verb, service string, flags ...string) error {
	id := c.ID(service)
	if id == "" {
		return fmt.Errorf("%s has no container", service)
	}
	args := append(append([]string{verb}, flags...), id)
	if out, err := Run(exec.Command("docker", args...), DockerTimeout, true); err != nil {
		if bytes.Contains(out, []byte("is restarting")) || bytes.Contains(out, []byte("is not running")) {
			return fmt.Errorf("docker %s %s: %w: %s", verb, service, ErrNotRunning, out)
		}
		return fmt.Errorf("%s: %w: %s", service, err, out)
	}
	return nil
}

// ErrNotRunning is wrapped by the error of a fault made on a service
// whose process is not running: it exited (its lease ran out, or it
// resigned) and Docker is restarting it.
var ErrNotRunning = errors.New("not running")

// Fill writes a file at path in service's container until its file
// system is full, and returns the file's path on the host, for Unfill.
func (c *Cluster) Fill(service, path string) (string, error) {
	pid, err := c.Pid(service)
	if err != nil {
		return "", err
	}
	host := filepath.Join("/proc", strconv.Itoa(pid), "root", path)
	f, err := os.Create(host)
	if err != nil {
		return "", fmt.Errorf("filling %s's %s: %w", service, path, err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return host, nil
			}
			return host, fmt.Errorf("filling %s's %s: %w", service, path, err)
		}
	}
}

// Unfill removes a file that Fill wrote.
func Unfill(host string) error {
	if err := os.Remove(host); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", host, err)
	}
	return nil
}
