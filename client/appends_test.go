package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
)

// appendsStreams is a client interceptor that counts the Appends streams
// opened and, if lose is set, breaks the first of them at its first answer
// (the answer is lost, as when a connection breaks after the commit). If
// held is set, the first stream's first Send tells held and waits for
// release, as a Send that flow control blocks does.
type appendsStreams struct {
	opened  atomic.Int32
	lose    bool
	held    chan struct{}
	release chan struct{}
}

func (a *appendsStreams) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/Appends") {
		return s, err
	}
	switch first := a.opened.Add(1) == 1; {
	case first && a.lose:
		return answerLost{s}, nil
	case first && a.held != nil:
		return &sendHeld{ClientStream: s, held: a.held, release: a.release}, nil
	}
	return s, nil
}

// sendHeld holds its first Send until release is closed.
type sendHeld struct {
	grpc.ClientStream
	once          sync.Once
	held, release chan struct{}
}

func (s *sendHeld) SendMsg(m any) error {
	s.once.Do(func() {
		close(s.held)
		<-s.release
	})
	return s.ClientStream.SendMsg(m)
}

// routedClient starts a broker serving journal, and returns a client of
// it through streams' interceptor, which has appended "route\n" to the
// journal: until a client knows the route, its appends may go through
// any broker, on Append streams. The context bounds the test.
func routedClient(t *testing.T, journal string, streams *appendsStreams) (context.Context, *client.Client) {
	c := brokertest.New(t)
	b := c.Start("b1")
	c.Journals(c.Client(b), 1, journal)
	cl, err := client.New(context.Background(), client.Config{Broker: b.Endpoint, Backoff: time.Millisecond,
		DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(streams.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := cl.Append(ctx, client.AppendRequest{Journal: journal}, strings.NewReader("route\n")); err != nil {
		t.Fatal(err)
	}
	return ctx, cl
}

// Appends of one message from many goroutines go to the primary on one
// Appends stream, each committed once at its own range.
func TestConcurrentAppendsShareOneStream(t *testing.T) {
	var streams appendsStreams
	ctx, cl := routedClient(t, "streams/j", &streams)

	const writers, each = 16, 50
	var (
		mu     sync.Mutex
		ranges = map[int64]string{0: "route\n"}
		wg     sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				line := fmt.Sprintf("writer %02d append %02d\n", w, i)
				commit, err := cl.Append(ctx, client.AppendRequest{Journal: "streams/j"}, strings.NewReader(line))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ranges[commit.Begin] = line
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := streams.opened.Load(); n != 1 {
		t.Errorf("%d Appends streams opened, want 1", n)
	}
	offsets := slices.Sorted(func(yield func(int64) bool) {
		for o := range ranges {
			if !yield(o) {
				return
			}
		}
	})
	var want strings.Builder
	for _, o := range offsets {
		if int64(want.Len()) != o {
			t.Fatalf("an append at %d, where the ones before end at %d", o, want.Len())
		}
		want.WriteString(ranges[o])
	}
	got, err := io.ReadAll(cl.NewReader(ctx, client.ReadRequest{Journal: "streams/j"}))
	if err != nil || string(got) != want.String() {
		t.Errorf("journal holds %q, %v; want each append once, at its range", got, err)
	}
}

// An append on an Appends stream that commits, but whose answer is lost as
// the stream breaks, is retried and answered with its range, once.
func TestLostAnswerOnAppendsStreamCommitsOnce(t *testing.T) {
	streams := appendsStreams{lose: true}
	ctx, cl := routedClient(t, "streams/lost", &streams)
	commit, err := cl.Append(ctx, client.AppendRequest{Journal: "streams/lost"}, strings.NewReader("exactly once\n"))
	if err != nil {
		t.Fatal(err)
	}
	if commit.Begin != int64(len("route\n")) {
		t.Errorf("committed at %d, want %d", commit.Begin, len("route\n"))
	}
	if n := streams.opened.Load(); n < 1 {
		t.Fatalf("no Appends stream opened: the append did not go on one")
	}
	next, err := cl.Append(ctx, client.AppendRequest{Journal: "streams/lost"}, strings.NewReader("next\n"))
	if err != nil || next.Begin != commit.End {
		t.Fatalf("the next append: %v, %v; want it at %d", next, err, commit.End)
	}
	got, err := io.ReadAll(cl.NewReader(ctx, client.ReadRequest{Journal: "streams/lost"}))
	if err != nil || string(got) != "route\nexactly once\nnext\n" {
		t.Errorf("journal holds %q, %v; want each append once", got, err)
	}
}

// An append waiting to send on the shared stream, behind another whose
// Send is held (as flow control holds it when the broker is behind),
// leaves when its context ends; the held one then commits.
func TestAppendWaitingToSendHonoursItsContext(t *testing.T) {
	streams := appendsStreams{held: make(chan struct{}), release: make(chan struct{})}
	ctx, cl := routedClient(t, "held/j", &streams)

	first := make(chan error, 1)
	go func() {
		_, err := cl.Append(ctx, client.AppendRequest{Journal: "held/j"}, strings.NewReader("held\n"))
		first <- err
	}()
	<-streams.held
	waiting, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		_, err := cl.Append(waiting, client.AppendRequest{Journal: "held/j"}, strings.NewReader("waiting\n"))
		second <- err
	}()
	awaitGoroutines(ctx, t, "client.(*appendStream).append(", 2) // The second waits to send.
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the append waiting to send, its context cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("the append waiting to send did not return once its context was cancelled")
	}
	close(streams.release)
	if err := <-first; err != nil {
		t.Fatalf("the held append: %v", err)
	}
	got, err := io.ReadAll(cl.NewReader(ctx, client.ReadRequest{Journal: "held/j"}))
	if string(got) != "route\nheld\n" {
		t.Errorf("journal holds %q, %v; want route and the held append", got, err)
	}
}

// awaitGoroutines waits until n goroutines have fn on their stacks, or
// ctx ends.
func awaitGoroutines(ctx context.Context, t *testing.T, fn string, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for strings.Count(string(buf[:runtime.Stack(buf, true)]), fn) < n {
		if ctx.Err() != nil {
			t.Fatalf("fewer than %d goroutines in %s", n, fn)
		}
		runtime.Gosched()
	}
}
