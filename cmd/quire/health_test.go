package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quire-dev/quire/internal/admin"
)

// quire health exits 0 while the endpoint says ready, 1 while it says
// not (or does not answer), and 2 on a URL that is not one, printing
// nothing to stdout then.
func TestHealth(t *testing.T) {
	var ready atomic.Bool
	srv, err := admin.Serve("--admin", "127.0.0.1:0", admin.Options{Ready: func() error {
		if !ready.Load() {
			return errors.New("draining: handing its items to other members")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()

	ready.Store(true)
	for _, args := range [][]string{{srv.Addr}, {"http://" + srv.Addr}, {"http://" + srv.Addr + "/healthz"}} {
		if r := quire(ctx, nil, append([]string{"health"}, args...)...); r.err != nil || r.stdout == "" {
			t.Errorf("health %v while ready: %v, stdout %q", args, r.err, r.stdout)
		}
	}
	t.Setenv("QUIRE_ADMIN", srv.Addr)
	if r := quire(ctx, nil, "health"); r.err != nil || strings.TrimSpace(r.stdout) != "ready" {
		t.Errorf("health of $QUIRE_ADMIN: %v, stdout %q", r.err, r.stdout)
	}

	ready.Store(false)
	r := quire(ctx, nil, "health", srv.Addr)
	var u usageError
	if r.err == nil || errors.As(r.err, &u) || !strings.Contains(r.err.Error(), "draining") || r.stdout != "" {
		t.Errorf("health while draining: %v, stdout %q; want exit 1 saying why", r.err, r.stdout)
	}
	if r := quire(ctx, nil, "health", srv.Addr+"/healthz"); r.err == nil {
		t.Error("health of HOST:PORT/healthz accepted: HOST:PORT is for /readyz; a path needs a URL")
	}
	if r := quire(ctx, nil, "health", "http://"+srv.Addr+"/healthz"); r.err != nil {
		t.Errorf("liveness while draining: %v", r.err)
	}

	for _, bad := range []string{"ftp://x/", "http:///readyz", "no-port", ""} {
		r := quire(ctx, nil, "health", bad)
		if !errors.As(r.err, &u) || r.stdout != "" {
			t.Errorf("health %q: %v, stdout %q; want a usage error", bad, r.err, r.stdout)
		}
	}
}

func FuzzHealthURL(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7704", "http://h:1/readyz", "https://h/", "h", "http://[::1]:80", ":80", "http://%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := healthURL(s)
		if err != nil {
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path == "" {
			t.Fatalf("healthURL(%q) = %v: want an http(s) URL with a host and a path", s, u)
		}
	})
}
