package admin

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestEndpoints(t *testing.T) {
	var why atomic.Pointer[error]
	notYet := errors.New("announcing: waiting for its member key")
	why.Store(&notYet)
	ready := func() error { return *why.Load() }
	for _, pprof := range []bool{false, true} {
		s, err := Serve("--admin", "127.0.0.1:0", Options{Ready: ready, Pprof: pprof})
		if err != nil {
			t.Fatal(err)
		}
		base := "http://" + s.Addr
		if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
			t.Errorf("/healthz: %d %q", code, body)
		}
		why.Store(&notYet)
		if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, notYet.Error()) {
			t.Errorf("/readyz while not ready: %d %q, want 503 saying why", code, body)
		}
		var none error
		why.Store(&none)
		if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
			t.Errorf("/readyz while ready: %d %q", code, body)
		}
		if code, body := get(t, base+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
			t.Errorf("/metrics: %d, %d bytes", code, len(body))
		}
		want := http.StatusNotFound
		if pprof {
			want = http.StatusOK
		}
		if code, _ := get(t, base+"/debug/pprof/"); code != want {
			t.Errorf("/debug/pprof/ with Pprof %v: %d, want %d", pprof, code, want)
		}
		s.Close()
	}
}

func TestServeBadAddress(t *testing.T) {
	s, err := Serve("--admin", "127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Serve("--admin", s.Addr, Options{}); err == nil || !strings.Contains(err.Error(), "--admin "+s.Addr) {
		t.Errorf("a second server on %s: %v, want an error naming the flag and address", s.Addr, err)
	}
}
