// Package etcdclient connects Quire's servers and commands to etcd, the
// coordination store, in plaintext or over TLS, as an etcd user if etcd
// has authentication enabled.
package etcdclient

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/internal/tlsconfig"
)

// Dial connects to etcd at endpoints (comma-separated URLs; https ones
// need files' CA, or the system's roots, to trust etcd, and its
// certificate if etcd asks clients for one), and checks within timeout
// that etcd answers, by counting the keys under prefix, and that every
// endpoint that answers runs a version Quire supports (see MinVersion).
//
// With user's name, the client authenticates to etcd as that user: with
// etcd's authentication enabled, each fleet's user holds a role limited
// to the fleet's prefix.
func Dial(ctx context.Context, endpoints string, files tlsconfig.Files, user User, prefix string, timeout time.Duration) (*clientv3.Client, error) {
	tls, err := files.Client()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	password, err := user.password()
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, e := range strings.Split(endpoints, ",") {
		eps = append(eps, strings.TrimSpace(e))
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: timeout, Logger: zap.NewNop(), TLS: tls,
		Username: user.Name, Password: password,
		// Keepalives, so that a watch on an etcd member whose machine froze
		// or whose network drops packets fails over to another member, as
		// Quire's own connections do (see rpcbuf.KeepaliveTime). Only on
		// connections with streams: etcd's servers refuse pings on idle
		// ones by default (--grpc-keepalive-min-time, no pings without
		// streams), and close the connection with too_many_pings.
		DialKeepAliveTime: rpcbuf.KeepaliveTime, DialKeepAliveTimeout: rpcbuf.KeepaliveTimeout})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %s%s: %w", endpoints, user.hint(err), err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if _, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		c.Close()
		return nil, fmt.Errorf("etcd %s does not answer%s: %w", endpoints, user.hint(err), err)
	}
	if err := checkVersions(ctx, c, eps); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
