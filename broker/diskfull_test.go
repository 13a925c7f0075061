package broker

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/protocol"
)

// A primary whose disk is full answers appends Unavailable, which clients
// retry, so that an append rides out the full disk and commits once
// space returns, once. (Found by the soak: a shard's recovery log failed
// its recorder, and so the shard, on broker3's full spool disk, as the
// broker answered with code Unknown, which clients do not retry.)
func TestAppendRidesOutAFullDisk(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	c.journal(b, "full/j", 1)
	c.appendRetry(b, "full/j", []byte("a\n"))

	failed := make(chan struct{}, 16)
	full := make(chan struct{})
	spoolWriteHook = func(r *replica) error {
		select {
		case <-full:
			return nil
		default:
		}
		select {
		case failed <- struct{}{}:
		default:
		}
		return fmt.Errorf("writing spool of %s: %w", r.journal, &fs.PathError{Op: "write", Path: "spool", Err: syscall.ENOSPC})
	}
	t.Cleanup(func() { spoolWriteHook = func(*replica) error { return nil } })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: "full/j"}, []byte("refused\n"))
	if code := status.Code(err); err == nil || code != codes.Unavailable {
		t.Fatalf("an append to a full disk: %v, %v; want code Unavailable", resp, err)
	}

	cl, err := client.New(ctx, client.Config{Broker: b.srv.cfg.Endpoint, Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	done := make(chan error, 1)
	go func() {
		_, err := cl.Append(ctx, client.AppendRequest{Journal: "full/j"}, bytes.NewReader([]byte("b\n")))
		done <- err
	}()
	for range 3 { // The client's first attempt, and retries.
		<-failed
	}
	close(full) // Space returns.
	if err := <-done; err != nil {
		t.Fatalf("the append failed: %v; want it retried until space returned", err)
	}
	if got := string(c.readAll(b, "full/j")); got != "a\nb\n" {
		t.Errorf("the journal holds %q, want the append once", got)
	}
}

// A broker whose spool directory cannot be written fails at start, naming
// the directory, rather than announce itself and fail every append.
// (Seen in the soak: a spool tmpfs owned by root, under the image's user,
// left a broker ready that refused every append.)
func TestUnwritableSpoolDirectoryFailsTheStart(t *testing.T) {
	// A directory that lists, and where nobody, root included, may make
	// a file.
	const dir = "/proc/self/fdinfo"
	if _, err := os.ReadDir(dir); err != nil {
		t.Skipf("no %s here: %v", dir, err)
	}
	c := newCluster(t)
	b := c.start("b1", dir)
	var err error
	select {
	case err = <-b.done:
	case <-b.srv.serving:
		t.Fatalf("the broker serves, with spools it cannot write in %s", dir)
	}
	delete(c.brokers, b.name)
	if err == nil || !strings.Contains(err.Error(), "the spool directory "+dir+" cannot be written") {
		t.Fatalf("Run: %v; want an error saying %s cannot be written", err, dir)
	}
}
