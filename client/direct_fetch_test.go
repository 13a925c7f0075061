package client

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/fragment"
)

// Fetching a fragment's URL: a 404 is a missing fragment; errors never
// show a signed URL's signature; a store that failed is held off for a
// while.
func TestDirectFetcher(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bucket/there" {
			io.WriteString(w, "stored bytes")
			return
		}
		http.Error(w, "NoSuchKey", http.StatusNotFound)
	}))
	defer srv.Close()
	d := newDirectFetcher(nil)
	defer d.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	body, err := d.get(ctx, srv.URL+"/bucket/there?X-Amz-Signature=secret")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(body); err != nil || string(b) != "stored bytes" {
		t.Errorf("GET read %q, %v", b, err)
	}
	body.Close()

	_, err = d.get(ctx, srv.URL+"/bucket/gone?X-Amz-Signature=secret")
	if !errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "secret") {
		t.Errorf("GET of a missing object: %v; want an error wrapping fs.ErrNotExist, without the signature", err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := lis.Addr().String()
	lis.Close() // Nothing listens there now.
	_, err = d.get(ctx, "http://"+down+"/bucket/key?X-Amz-Signature=secret")
	if err == nil || errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), down) {
		t.Errorf("GET from a store that is down: %v; want an error naming %s, without the signature", err, down)
	}

	if _, err := d.get(ctx, "file:///no/such/quire/fragment"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file URL of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := d.get(ctx, "ftp://host/x"); err == nil {
		t.Error("an ftp URL was fetched")
	}

	const store = "s3://bucket/?endpoint=host:1"
	if _, ok := d.heldOffUntil(store); ok {
		t.Fatal("a store is held off before anything failed")
	}
	d.holdOff(store)
	if until, ok := d.heldOffUntil(store); !ok || time.Until(until) > StoreHoldOff || time.Until(until) <= 0 {
		t.Errorf("held off until %v (%v), want about %v from now", until, ok, StoreHoldOff)
	}
	d.heldOff[store] = time.Now().Add(-time.Second)
	if _, ok := d.heldOffUntil(store); ok {
		t.Error("a store is still held off after its time")
	}
}

// Closing a fragment being fetched returns even while the store has
// stopped sending: the read ahead of it is cancelled, not waited out.
func TestDirectFetchClosesWhileTheStoreStalls(t *testing.T) {
	content := strings.Repeat("x", 4<<20)
	released := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, content[:1<<20])
		w.(http.Flusher).Flush()
		select { // Stalls until the client gives up, or the test ends.
		case <-r.Context().Done():
		case <-released:
		}
	}))
	defer srv.Close()
	defer close(released)
	d := newDirectFetcher(nil)
	defer d.close()
	f := fragment.Fragment{Journal: "a/journal", Begin: 0, End: int64(len(content)),
		Sum: sha256.Sum256([]byte(content)), Codec: fragment.None}
	rc, err := d.open(context.Background(), f, srv.URL+"/bucket/fragment", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 512<<10)); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- rc.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while the store stalled")
	}
}
