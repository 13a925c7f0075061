package etcdclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/coreos/go-semver/semver"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Quire's keyspaces take a requested watch progress notification for proof
// that they hold every event up to its revision. Before etcd 3.4.24 and
// 3.5.8 a requested notification could overtake the events it vouches for
// (etcd-io/etcd#15220), and a keyspace on such a server could miss a write
// for good: a broker's own member key, say, after which it exits thinking
// its lease expired. So servers older than these are refused.
var minVersions = []semver.Version{
	{Major: 3, Minor: 4, Patch: 24},
	{Major: 3, Minor: 5, Patch: 8},
}

// MinVersion is the oldest etcd that Quire runs on, as users read it: the
// 3.4 series from 3.4.24 is accepted too.
const MinVersion = "3.5.8"

// ErrOldServer is returned, wrapped, when an etcd server is older than
// Quire supports.
var ErrOldServer = errors.New("etcd server is too old")

// checkVersion fails if v, an etcd server's version, is one whose watch
// progress notifications cannot be trusted.
func checkVersion(v string) error {
	ver, err := semver.NewVersion(v)
	if err != nil {
		return fmt.Errorf("etcd server version %q does not parse: %w", v, err)
	}
	old := ver.LessThan(minVersions[0])
	for _, min := range minVersions {
		if ver.Major == min.Major && ver.Minor == min.Minor {
			old = ver.LessThan(min)
		}
	}
	if old {
		return fmt.Errorf("%w: version %s, want %s or later (or, in the 3.4 series, %s or later): its watch progress notifications may overtake events (etcd-io/etcd#15220)", ErrOldServer, v, MinVersion, minVersions[0])
	}
	return nil
}

// checkVersions checks the version of every endpoint that answers: in a
// rolling upgrade of etcd, members run different versions, and a client
// may be served by any of them. An endpoint that does not answer is
// skipped; the client reached etcd through another.
func checkVersions(ctx context.Context, c *clientv3.Client, endpoints []string) error {
	answered := 0
	for _, ep := range endpoints {
		st, err := c.Status(ctx, ep)
		if err != nil {
			continue
		}
		answered++
		if err := checkVersion(st.Version); err != nil {
			return fmt.Errorf("etcd %s: %w", ep, err)
		}
	}
	if answered == 0 {
		return fmt.Errorf("etcd %v: no endpoint told its version", endpoints)
	}
	return nil
}
