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
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/quire-dev/quire/internal/freeport"
)

const (
	weedAccessKey = "quireaccess"
	weedSecretKey = "quire-secret-0123456789"
	weedBucket    = "quire-test"
)

// weedBinary returns the path of the weed binary: $QUIRE_WEED, else
// ${QUIRE_CACHE:-$HOME/.cache/quire}/bin/weed, or "" if there is none.
func weedBinary() string {
	if p := os.Getenv("QUIRE_WEED"); p != "" {
		return p
	}
	cache := os.Getenv("QUIRE_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache", "quire")
	}
	p := filepath.Join(cache, "bin", "weed")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// startWeed starts `weed mini` with an S3 gateway whose one identity has
// the weedAccessKey and weedSecretKey, and bucket weedBucket. It returns
// the S3 endpoint (host:port) once the gateway answers, and stops weed
// when the test ends.
func startWeed(t *testing.T) string {
	bin := weedBinary()
	if bin == "" {
		t.Skip("no weed binary: run .ci/build-weed (or set QUIRE_WEED) to run the S3 integration suite against SeaweedFS")
	}
	// A short directory: weed puts unix sockets in it.
	dir, err := os.MkdirTemp("", "weed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	config := fmt.Sprintf(`{"identities":[{"name":"quire","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		weedAccessKey, weedSecretKey)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := make([]int, 10)
	for i := range p {
		p[i] = freeport.Port(t)
	}
	endpoint := fmt.Sprintf("127.0.0.1:%d", p[0])
	args := []string{
		"-logdir=" + dir,
		"mini",
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
		"-dir=" + filepath.Join(dir, "data"),
		"-s3.config=" + filepath.Join(dir, "s3.json"),
		"-bucket=" + weedBucket,
		"-s3.port=" + strconv.Itoa(p[0]), "-s3.port.grpc=" + strconv.Itoa(p[1]),
		"-master.port=" + strconv.Itoa(p[2]), "-master.port.grpc=" + strconv.Itoa(p[3]),
		"-volume.port=" + strconv.Itoa(p[4]), "-volume.port.grpc=" + strconv.Itoa(p[5]),
		"-filer.port=" + strconv.Itoa(p[6]), "-filer.port.grpc=" + strconv.Itoa(p[7]),
		"-admin.port=" + strconv.Itoa(p[8]), "-admin.port.grpc=" + strconv.Itoa(p[9]),
		"-admin.ui=false", "-admin.port.legacy=0",
		"-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
	}
	logPath := filepath.Join(dir, "weed.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close() // The child has its own descriptor.
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Its own process group, to stop it whole.
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	logTail := func() string {
		b, _ := os.ReadFile(logPath)
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return string(b)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			t.Logf("weed did not stop within 20s of SIGTERM; killing it")
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("weed's log ends:\n%s", logTail())
		}
	})

	// Ready when an authenticated request finds the bucket.
	client := weedClient(t, endpoint)
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, err := client.BucketExists(ctx, weedBucket)
		cancel()
		if ok {
			t.Logf("weed mini serves S3 at %s after %v", endpoint, time.Since(start).Round(time.Millisecond))
			return endpoint
		}
		if time.Now().After(deadline) {
			t.Fatalf("weed's S3 gateway at %s is not ready after 90s (last: exists=%v, %v); its log ends:\n%s", endpoint, ok, err, logTail())
		}
		select {
		case <-exited:
			t.Fatalf("weed exited (%v) before its S3 gateway was ready; its log ends:\n%s", waitErr, logTail())
		case <-tick.C:
		}
	}
}

// weedClient returns an S3 client of weed's S3 gateway at endpoint.
func weedClient(t *testing.T, endpoint string) *minio.Client {
	client, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(weedAccessKey, weedSecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		Region:       "us-east-1",
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// setWeedCredentials puts weed's credentials where an S3 store looks.
func setWeedCredentials(t *testing.T, secret string) {
	t.Setenv("AWS_ACCESS_KEY_ID", weedAccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
}

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
