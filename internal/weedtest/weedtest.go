// Package weedtest runs a real S3-compatible server for tests: SeaweedFS's
// `weed mini`, started in a temporary directory on free loopback ports and
// stopped when the test ends. Build weed with .ci/build-weed (it lands in
// ${QUIRE_CACHE:-$HOME/.cache/quire}/bin/weed), or name it with
// $QUIRE_WEED; without it, Start skips the test, saying so.
package weedtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/internal/toolbin"
)

// The one identity of the S3 gateway, and its bucket.
const (
	AccessKey = "quireaccess"
	SecretKey = "quire-secret-0123456789"
	Bucket    = "quire-test"
)

// Binary returns the path of the weed binary: $QUIRE_WEED, else
// ${QUIRE_CACHE:-$HOME/.cache/quire}/bin/weed, or "" if there is none.
func Binary() string { return toolbin.Path("QUIRE_WEED", "weed") }

// Start starts `weed mini` with an S3 gateway whose one identity has
// AccessKey and SecretKey, and bucket Bucket. It returns
// the S3 endpoint (host:port) once the gateway answers, and stops weed
// when the test ends.
func Start(t testing.TB) string {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("no weed binary: run .ci/build-weed (or set QUIRE_WEED) to run the tests against SeaweedFS (S3)")
	}
	// A short directory: weed puts unix sockets in it.
	dir, err := os.MkdirTemp("", "weed-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	config := fmt.Sprintf(`{"identities":[{"name":"quire","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		AccessKey, SecretKey)
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
		"-bucket=" + Bucket,
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
	client := Client(t, endpoint)
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, err := client.BucketExists(ctx, Bucket)
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

// Client returns an S3 client of weed's S3 gateway at endpoint.
func Client(t testing.TB, endpoint string) *minio.Client {
	t.Helper()
	client, err := minio.New(endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(AccessKey, SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		Region:       "us-east-1",
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// SetCredentials puts weed's access key, with secret (SecretKey, or a
// wrong one), in the environment, where S3 stores look for credentials.
func SetCredentials(t testing.TB, secret string) {
	t.Setenv("AWS_ACCESS_KEY_ID", AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
}
