package fragment

// The S3 integration suite runs the Store conformance suite, and more,
// against a real S3-compatible server: SeaweedFS's `weed mini`, started by
// the test in a temporary directory on free loopback ports and stopped at
// its end. Build weed with .ci/build-weed; the suite skips without it.

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

	"github.com/minio/minio-go/v7"

	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/weedtest"
)

// The weed server of internal/weedtest, by this file's names.
const (
	weedSecretKey = weedtest.SecretKey
	weedBucket    = weedtest.Bucket
)

func startWeed(t *testing.T) string { return weedtest.Start(t) }

func weedClient(t *testing.T, endpoint string) *minio.Client { return weedtest.Client(t, endpoint) }

func setWeedCredentials(t *testing.T, secret string) { weedtest.SetCredentials(t, secret) }

// newS3Harness opens the S3 store at prefix of weed's bucket.
func newS3Harness(t *testing.T, endpoint, prefix string) storeHarness {
	storeURL := fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true&region=us-east-1", weedBucket, prefix, endpoint)
	s, err := Open(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	if s.URL() != storeURL {
		t.Errorf("URL() = %q, want %q", s.URL(), storeURL)
	}
	client := weedClient(t, endpoint)
	ctx := context.Background()
	return storeHarness{
		store: s,
		putRaw: func(t *testing.T, name string, data []byte) {
			_, err := client.PutObject(ctx, weedBucket, prefix+name, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
			if err != nil {
				t.Fatalf("putting %s: %v", name, err)
			}
		},
		objects: func(t *testing.T) []string {
			var out []string
			for obj := range client.ListObjects(ctx, weedBucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
				if obj.Err != nil {
					t.Fatalf("listing: %v", obj.Err)
				}
				out = append(out, strings.TrimPrefix(obj.Key, prefix))
			}
			return out
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

func TestS3Integration(t *testing.T) {
	endpoint := startWeed(t)
	setWeedCredentials(t, weedSecretKey)

	t.Run("Store", func(t *testing.T) {
		testStore(t, newS3Harness(t, endpoint, ""))
	})

	t.Run("StoreUnderPrefix", func(t *testing.T) {
		testStore(t, newS3Harness(t, endpoint, "deep/prefix/"))
	})

	t.Run("Probe", func(t *testing.T) {
		testProbe(t, newS3Harness(t, endpoint, "probed/"))
	})

	t.Run("PrefixesAreSeparate", func(t *testing.T) {
		a := newS3Harness(t, endpoint, "sep-a/")
		b := newS3Harness(t, endpoint, "sep-b/")
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
		// Listing of a prefix's parent does not see into it.
		root := newS3Harness(t, endpoint, "")
		if l := listAll(t, root.store, "sep-a"); len(l) != 0 {
			t.Errorf("List(sep-a) in the bucket's root = %v", names(l))
		}
	})

	t.Run("SignedURLExpires", func(t *testing.T) {
		h := newS3Harness(t, endpoint, "")
		content := testContent(100, 2)
		f := fragmentOf("expiry", 0, content, None)
		persist(t, h.store, f, content)
		ctx := context.Background()
		for _, ttl := range []time.Duration{0, time.Millisecond, 8 * 24 * time.Hour} {
			if _, err := h.store.SignURL(ctx, f, ttl); err == nil {
				t.Errorf("SignURL with ttl %v succeeded", ttl)
			}
		}
		signed, err := h.store.SignURL(ctx, f, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Wait out the signature's second of validity.
		expired := time.NewTimer(2100 * time.Millisecond)
		<-expired.C
		resp, err := http.Get(signed)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("GET of an expired signed URL: %s", resp.Status)
		}
	})

	t.Run("WrongCredentials", func(t *testing.T) {
		setWeedCredentials(t, "not-the-secret")
		h := newS3Harness(t, endpoint, "")
		content := testContent(100, 3)
		f := fragmentOf("denied", 0, content, None)
		err := h.store.Persist(context.Background(), f, bytes.NewReader(content))
		if err == nil {
			t.Fatal("Persist with a wrong secret key succeeded")
		}
		t.Logf("Persist with a wrong secret key: %v", err)
		if err := h.store.List(context.Background(), "denied", func(Fragment) error { return nil }); err == nil {
			t.Error("List with a wrong secret key succeeded")
		}
		if res := Probe(context.Background(), h.store, "test"); res.OK() || res.Failed != ProbeWrite || len(res.Passed) != 0 {
			t.Errorf("Probe with a wrong secret key = %+v, want a failed write and nothing passed", res)
		} else {
			t.Logf("Probe with a wrong secret key: %v", res.Err)
		}
	})

	t.Run("MissingBucket", func(t *testing.T) {
		s, err := Open(context.Background(), fmt.Sprintf("s3://no-such-bucket/?endpoint=%s&insecure=true&region=us-east-1", endpoint))
		if err != nil {
			t.Fatal(err)
		}
		err = s.List(context.Background(), "j", func(Fragment) error { return nil })
		if err == nil || !strings.Contains(err.Error(), "bucket") {
			t.Errorf("List in a missing bucket = %v", err)
		}
		_, err = s.Open(context.Background(), fragmentOf("j", 0, nil, None))
		if err == nil {
			t.Error("Open in a missing bucket succeeded")
		}
	})

	t.Run("ServerDown", func(t *testing.T) {
		// A port with nothing listening: errors, not hangs.
		down := fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
		s, err := Open(context.Background(), "s3://"+weedBucket+"/?endpoint="+down+"&insecure=true&region=us-east-1")
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
