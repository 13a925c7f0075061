package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/quire-dev/quire/examples/streamsum/streamsum"
	"github.com/quire-dev/quire/examples/wordcount/wordcount"
	"github.com/quire-dev/quire/internal/composetest"
)

// The cluster's leases, as the soak runs it, and the brokers' isolation
// timeout (their default: three broker leases).
const (
	brokerLease      = 4 * time.Second
	consumerLease    = 4 * time.Second
	isolationTimeout = 3 * brokerLease
)

// A fault is one kind of trouble the soak makes. inject makes it, on
// targets it picks with rnd, and returns how to heal it, and what it hit.
type fault struct {
	name   string
	inject func(s *soak, rnd *rand.Rand) (heal func() error, target string, err error)
}

// hold sleeps for a duration between least and most, picked with rnd:
// how long a fault lasts.
func hold(rnd *rand.Rand, least, most time.Duration) {
	time.Sleep(least + time.Duration(rnd.Int64N(int64(most-least)+1))) // The fault lasting.
}

// awaitRestart waits until service's container has been restarted since
// it had been restarts times, and runs: a fault that follows must not
// find it between its exit and its restart.
func awaitRestart(s *soak, service string, restarts int) error {
	return composetest.Poll(time.Minute, func() error {
		n, running, err := s.c.Restarts(service)
		switch {
		case err != nil:
			return err
		case n <= restarts:
			return fmt.Errorf("%s has not exited and restarted since it was thawed (%d restarts)", service, n)
		case !running:
			return fmt.Errorf("%s is restarting", service)
		}
		return nil
	})
}

func pick(rnd *rand.Rand, from []string) string { return from[rnd.IntN(len(from))] }

// servers are the brokers and the consumer processes, of both
// applications; consumers are the latter.
var (
	servers   = slices.Concat(composetest.Brokers, consumers)
	consumers = slices.Concat(composetest.Consumers, composetest.StreamSums)
)

// pauseReady freezes service's process once it is ready (it holds a
// lease), and returns its restart count. A process that a fault before
// cost its lease may exit, and be started again, at any time: frozen
// before it took a new lease, it would lose none, and never exit. So the
// count is read before the readiness and again once frozen, and if
// either finds the process gone or replaced, it is thawed and the error
// wraps composetest.ErrNotRunning: the fault is made again.
func pauseReady(s *soak, service string) (int, error) {
	restarts, running, err := s.c.Restarts(service)
	if err != nil {
		return 0, err
	}
	if !running {
		return 0, fmt.Errorf("%s: %w", service, composetest.ErrNotRunning)
	}
	if err := s.c.Ready(service); err != nil {
		return 0, fmt.Errorf("%s is not ready (%v): %w", service, err, composetest.ErrNotRunning)
	}
	if err := s.c.Pause(service); err != nil {
		return 0, err
	}
	n, _, err := s.c.Restarts(service)
	if err == nil && n != restarts {
		err = fmt.Errorf("%s restarted (%d restarts, then %d) before it was frozen: %w", service, restarts, n, composetest.ErrNotRunning)
	}
	if err != nil {
		return 0, joinErr(err, s.c.Unpause(service))
	}
	return restarts, nil
}

// faults are the kinds of fault, each as likely as another.
var faults = []fault{
	{"kill-broker", kill(composetest.Brokers)},
	{"kill-consumer", kill(consumers)},
	{"kill-etcd", kill(composetest.Etcds)},
	{"freeze", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		// Longer than the target's lease: it is presumed gone meanwhile,
		// its lease runs out, and thawed, it finds its member key gone,
		// exits, and is restarted.
		target := pick(rnd, servers)
		restarts, err := pauseReady(s, target)
		if err != nil {
			return nil, target, err
		}
		hold(rnd, brokerLease+2*time.Second, brokerLease+4*time.Second)
		return func() error {
			if err := s.c.Unpause(target); err != nil {
				return err
			}
			return awaitRestart(s, target, restarts)
		}, target, nil
	}},
	{"drain", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		// SIGTERM: it drains, exits and is started again, in the middle of load.
		target := pick(rnd, servers)
		err := s.c.ComposeErr("restart", "--timeout", "40", target)
		return func() error { return nil }, target, err
	}},
	{"cut-broker-from-peers", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		// From its peers, not from etcd: sometimes shorter than the
		// isolation timeout, sometimes longer (it resigns).
		target := pick(rnd, composetest.Brokers)
		err := s.c.Cut(target, others(composetest.Brokers, target)...)
		hold(rnd, 3*time.Second, isolationTimeout+3*time.Second)
		return func() error { return s.c.Heal(target) }, target, err
	}},
	{"cut-primary-from-etcd", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		// A shard's primary from etcd, not from the brokers: it loses
		// its lease, and a standby takes the shard over.
		// A shard of either application.
		shard, via := wordcount.ShardID(rnd.IntN(wordcount.Partitions)), composetest.Consumers
		if rnd.IntN(2) == 1 {
			shard, via = streamsum.ShardID(rnd.IntN(streamsum.Partitions)), composetest.StreamSums
		}
		target, err := s.c.ShardPrimaryVia(via, shard, "")
		if err != nil {
			return nil, shard, err
		}
		err = s.c.Cut(target, composetest.Etcds...)
		hold(rnd, consumerLease+2*time.Second, consumerLease+5*time.Second)
		return func() error { return s.c.Heal(target) }, target + " (primary of " + shard + ")", err
	}},
	{"cut-zones", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		// zone-b from zone-a; both reach etcd.
		var a, b []string
		for _, srv := range servers {
			if composetest.Zones[srv] == "zone-b" {
				b = append(b, srv)
			} else {
				a = append(a, srv)
			}
		}
		var err error
		for _, srv := range b {
			if err = s.c.Cut(srv, a...); err != nil {
				break
			}
		}
		hold(rnd, 3*time.Second, isolationTimeout+3*time.Second)
		return func() error { return healAll(s, b) }, "zone-b from zone-a", err
	}},
	{"cut-one-way", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		// A broker cannot use its connections to another; the other's
		// to it work.
		from := pick(rnd, composetest.Brokers)
		to := pick(rnd, others(composetest.Brokers, from))
		err := s.c.CutOneWay(from, to)
		hold(rnd, 3*time.Second, isolationTimeout+5*time.Second)
		return func() error { return s.c.Heal(from) }, from + " to " + to, err
	}},
	{"lossy-link", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		target := pick(rnd, servers)
		err := s.c.Degrade(target, 0.1, "4mbit")
		hold(rnd, 4*time.Second, 8*time.Second)
		return func() error { return s.c.Restore(target) }, target, err
	}},
	{"disk-full", func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		// broker3's spools are a small tmpfs (soak.compose.yaml).
		file, err := s.c.Fill("broker3", "/var/lib/quire/spools/soak-fill")
		hold(rnd, 3*time.Second, 6*time.Second)
		return func() error { return composetest.Unfill(file) }, "broker3", err
	}},
}

// kill kills one of services with SIGKILL, and starts it again.
func kill(services []string) func(*soak, *rand.Rand) (func() error, string, error) {
	return func(s *soak, rnd *rand.Rand) (func() error, string, error) {
		target := pick(rnd, services)
		if err := s.c.Kill(target); err != nil {
			return nil, target, err
		}
		hold(rnd, 500*time.Millisecond, 3*time.Second)
		return func() error { return s.c.ComposeErr("start", target) }, target, nil
	}
}

func others(all []string, but string) []string {
	return slices.DeleteFunc(slices.Clone(all), func(s string) bool { return s == but })
}

func healAll(s *soak, services []string) error {
	var first error
	for _, srv := range services {
		if err := s.c.Heal(srv); err != nil && first == nil {
			first = err
		}
	}
	return first
}
