package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/consumer"
	"github.com/quire-dev/quire/internal/etcdtest"
)

// Every command and server that reaches etcd defaults to the one etcd of
// `quire dev`, in one form.
func TestEtcdDefaultIsDevs(t *testing.T) {
	t.Setenv("QUIRE_ETCD", "")
	root := newRootCommand()
	dev, _, err := root.Find([]string{"dev"})
	if err != nil {
		t.Fatal(err)
	}
	want := "http://127.0.0.1:" + dev.Flags().Lookup("etcd-port").DefValue
	if consumer.DefaultEtcd != want {
		t.Errorf("consumer.DefaultEtcd %q, want quire dev's etcd, %q", consumer.DefaultEtcd, want)
	}
	for _, path := range [][]string{{"broker", "serve"}, {"allocator", "member"}, {"allocator", "plan"}, {"console"}} {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := cmd.Flags().Lookup("etcd").DefValue; got != want {
			t.Errorf("quire %s --etcd defaults to %q, want %q", strings.Join(path, " "), got, want)
		}
	}
}

// --etcd takes endpoints with and without a scheme, and refuses others
// as bad input.
func TestEtcdEndpointForms(t *testing.T) {
	etcd, root := etcdtest.Client(t)
	hostPort := strings.TrimPrefix(etcdtest.Shared(t).Endpoint(), "http://")
	for i, endpoint := range []string{hostPort, "http://" + hostPort} {
		suffix := "m" + strconv.Itoa(i)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan result, 1)
		go func() {
			done <- quire(ctx, nil, "allocator", "member", "--etcd", endpoint, "--prefix", root,
				"--zone", "z", "--suffix", suffix, "--log-level", "warn")
		}()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		if err := awaitKey(wctx, etcd, allocator.MemberKey(root, "z", suffix)); err != nil {
			t.Errorf("--etcd %s: the member never announced itself: %v", endpoint, err)
		}
		wcancel()
		cancel()
		<-done
	}
	for _, endpoint := range []string{"etcd", "unix:///run/etcd.sock", "http://etcd", "a:1,,b:2"} {
		r := quire(context.Background(), nil, "allocator", "member", "--etcd", endpoint, "--prefix", root,
			"--zone", "z", "--suffix", "bad")
		if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), "--etcd") || r.stdout != "" {
			t.Errorf("--etcd %q: err %v, stdout %q; want a usage error naming --etcd", endpoint, r.err, r.stdout)
		}
	}
}
