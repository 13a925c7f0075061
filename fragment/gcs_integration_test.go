package fragment

// The GCS integration suite runs the Store conformance suite, and more,
// against a Google Cloud Storage emulator: fake-gcs-server, started by the
// test on a free loopback port and stopped at its end. Build it with
// .ci/build-fake-gcs; the suite skips without it. The emulator checks no
// credentials and no signatures, so what depends on them (a wrong key
// refused, a signed URL that expires) is not tested here.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/gcstest"
)

// gcsClient is a client of the emulator at endpoint.
func gcsClient(t *testing.T, endpoint string) *storage.Client {
	t.Helper()
	client, err := storage.NewClient(context.Background(),
		option.WithEndpoint("http://"+endpoint+"/storage/v1/"), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// newGCSHarness opens the GCS store at prefix of the emulator's bucket.
func newGCSHarness(t *testing.T, endpoint, prefix string) storeHarness {
	storeURL := fmt.Sprintf("gs://%s/%s?endpoint=%s&insecure=true", gcstest.Bucket, prefix, endpoint)
	s, err := Open(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	if s.URL() != storeURL {
		t.Errorf("URL() = %q, want %q", s.URL(), storeURL)
	}
	bucket := gcsClient(t, endpoint).Bucket(gcstest.Bucket)
	ctx := context.Background()
	return storeHarness{
		store: s,
		putRaw: func(t *testing.T, name string, data []byte) {
			w := bucket.Object(prefix + name).NewWriter(ctx)
			if _, err := w.Write(data); err != nil {
				t.Fatalf("putting %s: %v", name, err)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("putting %s: %v", name, err)
			}
		},
		objects: func(t *testing.T) []string {
			var out []string
			it := bucket.Objects(ctx, &storage.Query{Prefix: prefix})
			for {
				obj, err := it.Next()
				if errors.Is(err, iterator.Done) {
					return out
				} else if err != nil {
					t.Fatalf("listing: %v", err)
				}
				out = append(out, strings.TrimPrefix(obj.Name, prefix))
			}
		},
		fetch: func(t *testing.T, rawURL string) []byte {
			if !strings.HasPrefix(rawURL, "http://"+endpoint+"/") {
				t.Fatalf("SignURL gave %q, want a URL of %s", rawURL, endpoint)
			}
			resp, err := http.Get(rawURL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s: %s", rawURL, resp.Status, b)
			}
			return b
		},
	}
}

func TestGCSIntegration(t *testing.T) {
	endpoint := gcstest.Start(t)

	t.Run("Store", func(t *testing.T) {
		testStore(t, newGCSHarness(t, endpoint, ""))
	})

	t.Run("StoreUnderPrefix", func(t *testing.T) {
		testStore(t, newGCSHarness(t, endpoint, "deep/prefix/"))
	})

	t.Run("Probe", func(t *testing.T) {
		testProbe(t, newGCSHarness(t, endpoint, "probed/"))
	})

	t.Run("PrefixesAreSeparate", func(t *testing.T) {
		a := newGCSHarness(t, endpoint, "sep-a/")
		b := newGCSHarness(t, endpoint, "sep-b/")
		content := testContent(1000, 1)
		f := fragmentOf("j", 0, content, Zstd)
		persist(t, a.store, f, content)
		if l := listAll(t, b.store, "j"); len(l) != 0 {
			t.Errorf("store %s lists %v of store %s", b.store.URL(), names(l), a.store.URL())
		}
		listed := listAll(t, a.store, "j")
		if len(listed) != 1 || listed[0].Store != a.store.URL() {
			t.Errorf("List = %+v", listed)
		}
		root := newGCSHarness(t, endpoint, "")
		if l := listAll(t, root.store, "sep-a"); len(l) != 0 {
			t.Errorf("List(sep-a) in the bucket's root = %v", names(l))
		}
	})

	t.Run("ConcurrentPersistsOfOneFragment", func(t *testing.T) {
		// Brokers of one journal persist the same fragment at once: both
		// succeed, and it is stored once.
		h := newGCSHarness(t, endpoint, "twice/")
		content := testContent(50_000, 5)
		f := fragmentOf("j", 0, content, Snappy)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- h.store.Persist(context.Background(), f, bytes.NewReader(content)) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("Persist: %v", err)
			}
		}
		if got := h.objects(t); len(got) != 1 || got[0] != f.Name() {
			t.Errorf("objects %v, want %s alone", got, f.Name())
		}
	})

	t.Run("MissingBucket", func(t *testing.T) {
		s, err := Open(context.Background(), fmt.Sprintf("gs://no-such-bucket/?endpoint=%s&insecure=true", endpoint))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.List(context.Background(), "j", func(Fragment) error { return nil }); err == nil {
			t.Error("List in a missing bucket succeeded")
		}
		if _, err := s.Open(context.Background(), fragmentOf("j", 0, nil, None)); err == nil {
			t.Error("Open in a missing bucket succeeded")
		}
	})

	t.Run("ServerDown", func(t *testing.T) {
		// A port with nothing listening: errors, not hangs.
		down := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
		s, err := Open(context.Background(), "gs://"+gcstest.Bucket+"/?endpoint="+down+"&insecure=true")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		content := testContent(10, 4)
		if err := s.Persist(ctx, fragmentOf("j", 0, content, None), bytes.NewReader(content)); err == nil {
			t.Error("Persist to a server that is down succeeded")
		} else if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Persist to a server that is down took 30s: %v", err)
		}
	})
}
