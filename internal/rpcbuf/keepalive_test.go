package rpcbuf_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/internal/faultnet"
	"github.com/quire-dev/quire/internal/rpcbuf"
)

// serveHealth serves the gRPC health service with opts and returns the
// address of a proxy to it through sw.
func serveHealth(t *testing.T, sw *faultnet.Switch, opts ...grpc.ServerOption) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return sw.Proxy(t, lis.Addr().String())
}

// watch dials addr with opts and opens a health Watch stream, which
// stays open with nothing to send once it has had its first answer.
func watch(t *testing.T, addr string, opts ...grpc.DialOption) healthpb.Health_WatchClient {
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	return stream
}

// A call waiting on a server whose network drops every packet (its
// connection stays open) fails, as Unavailable, once the client's
// keepalive goes unanswered: without keepalives it would wait for as long
// as the connection carries nothing, which is forever.
func TestKeepaliveFailsCallsToAVanishedServer(t *testing.T) {
	t.Parallel()
	var sw faultnet.Switch
	stream := watch(t, serveHealth(t, &sw, rpcbuf.ServerOptions()...), rpcbuf.DialOptions()...)
	sw.Blackhole()
	start := time.Now()
	ended := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		ended <- err
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("the waiting call ended with %v, want Unavailable", err)
		}
		t.Logf("the call failed %s after the blackhole", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(3 * (rpcbuf.KeepaliveTime + rpcbuf.KeepaliveTimeout)):
		t.Fatal("a call to a server behind a blackhole still waits")
	}
}

// A server ends the calls of a client whose network drops every packet
// (a client that froze, here one without keepalives of its own) once its
// own keepalive goes unanswered, releasing what they hold.
func TestKeepaliveEndsCallsOfAVanishedClient(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{})
	watching := grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		err := handler(srv, ss)
		close(ended)
		return err
	})
	var sw faultnet.Switch
	watch(t, serveHealth(t, &sw, append(rpcbuf.ServerOptions(), watching)...))
	sw.Blackhole()
	start := time.Now()
	select {
	case <-ended:
		t.Logf("the server ended the call %s after the blackhole", time.Since(start).Round(100*time.Millisecond))
	case <-time.After(3 * (rpcbuf.KeepaliveTime + rpcbuf.KeepaliveTimeout)):
		t.Fatal("the server still serves a call of a client behind a blackhole")
	}
}
