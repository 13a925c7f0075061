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
