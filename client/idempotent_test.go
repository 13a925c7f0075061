package client_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
)

// loseAnswers is a client interceptor that lets the first n Append
// streams run to their commit, then loses the broker's answer, as a
// connection that breaks after the commit message was sent does.
func loseAnswers(n int32) grpc.StreamClientInterceptor {
	var lost atomic.Int32
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !strings.HasSuffix(method, "/Append") || lost.Add(1) > n {
			return s, err
		}
		return answerLost{s}, nil
	}
}

type answerLost struct{ grpc.ClientStream }

func (s answerLost) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	return status.Error(codes.Unavailable, "test: the connection broke before the answer arrived")
}

// An append whose attempts commit but whose answers are lost is retried,
// and the retry is answered with the range of the attempt that committed:
// the content is in the journal once, where Append says.
func TestRetryOfACommittedAppendCommitsNothing(t *testing.T) {
	c := brokertest.New(t)
	b := c.Start("b1")
	c.Journals(c.Client(b), 1, "once/j")
	cl, err := client.New(context.Background(), client.Config{Broker: b.Endpoint,
		Backoff: time.Millisecond, DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(loseAnswers(2))}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	commit, err := cl.Append(ctx, client.AppendRequest{Journal: "once/j"}, strings.NewReader("exactly once\n"))
	if err != nil {
		t.Fatal(err)
	}
	if commit.Begin != 0 || commit.End != int64(len("exactly once\n")) {
		t.Errorf("committed [%d, %d), want [0, %d)", commit.Begin, commit.End, len("exactly once\n"))
	}
	next, err := cl.Append(ctx, client.AppendRequest{Journal: "once/j"}, strings.NewReader("next\n"))
	if err != nil || next.Begin != commit.End {
		t.Fatalf("the next append: %v, %v; want it at %d", next, err, commit.End)
	}
	got, err := io.ReadAll(cl.NewReader(ctx, client.ReadRequest{Journal: "once/j"}))
	if err != nil || string(got) != "exactly once\nnext\n" {
		t.Errorf("journal holds %q, %v; want each append once", got, err)
	}
}

// holdFirstAnswer is a client interceptor that lets the first Append
// stream commit, then holds the broker's answer until release is closed
// and loses it: the append is retried only after whatever the test does
// meanwhile. held is closed once the answer has arrived.
func holdFirstAnswer(held, release chan struct{}) grpc.StreamClientInterceptor {
	var streams atomic.Int32
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
		streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || !strings.HasSuffix(method, "/Append") || streams.Add(1) > 1 {
			return s, err
		}
		return answerHeld{s, held, release}, nil
	}
}

type answerHeld struct {
	grpc.ClientStream
	held, release chan struct{}
}

func (s answerHeld) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	close(s.held)
	<-s.release
	return status.Error(codes.Unavailable, "test: the connection broke before the answer arrived")
}

// Two appends of one client in flight to one journal: the first commits
// but its answer is lost until the second has committed too. Its retry is
// still answered with its range: the two went under different writer
// names, whereas the journal holds only the greatest sequence number of
// each name.
func TestConcurrentAppendsRetryOnce(t *testing.T) {
	c := brokertest.New(t)
	b := c.Start("b1")
	c.Journals(c.Client(b), 1, "once/concurrent")
	held, release := make(chan struct{}), make(chan struct{})
	cl, err := client.New(context.Background(), client.Config{Broker: b.Endpoint,
		Backoff: time.Millisecond, DialOptions: []grpc.DialOption{grpc.WithStreamInterceptor(holdFirstAnswer(held, release))}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	type result struct {
		begin, end int64
		err        error
	}
	first := make(chan result, 1)
	go func() {
		commit, err := cl.Append(ctx, client.AppendRequest{Journal: "once/concurrent"}, strings.NewReader("first\n"))
		if err != nil {
			first <- result{err: err}
			return
		}
		first <- result{commit.Begin, commit.End, nil}
	}()
	select {
	case <-held:
	case r := <-first:
		t.Fatalf("the first append ended before its answer was held: %+v", r)
	}
	second, err := cl.Append(ctx, client.AppendRequest{Journal: "once/concurrent"}, strings.NewReader("second\n"))
	if err != nil || second.Begin != int64(len("first\n")) {
		t.Fatalf("the second append: %v, %v; want it after the first", second, err)
	}
	close(release)
	r := <-first
	if r.err != nil || r.begin != 0 || r.end != int64(len("first\n")) {
		t.Fatalf("the first append: %+v; want [0, %d), answered by its retry", r, len("first\n"))
	}
	got, err := io.ReadAll(cl.NewReader(ctx, client.ReadRequest{Journal: "once/concurrent"}))
	if err != nil || string(got) != "first\nsecond\n" {
		t.Errorf("journal holds %q, %v; want each append once", got, err)
	}
}
