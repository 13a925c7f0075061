package grpcserve

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func healthOf(t *testing.T, ctx context.Context, addr string) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// awaitStatus waits until the health service answers want, then ends its
// watch (an open watch would hold a graceful stop).
func awaitStatus(t *testing.T, ctx context.Context, hc healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := watch.Recv()
		if err != nil {
			t.Fatalf("watching health for %s: %v", want, err)
		}
		if resp.Status == want {
			return
		}
	}
}

// The health service is SERVING while the server runs, NOT_SERVING once
// it drains, and Run returns what the server's run returns.
func TestHealthFollowsDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lis := listen(t)
	drain, stop := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, drain, grpc.NewServer(), lis, func(ctx context.Context, drain <-chan struct{}) error {
			<-stop
			return errors.New("ran")
		})
	}()
	hc := healthOf(t, ctx, lis.Addr().String())
	awaitStatus(t, ctx, hc, healthpb.HealthCheckResponse_SERVING)
	close(drain)
	awaitStatus(t, ctx, hc, healthpb.HealthCheckResponse_NOT_SERVING)
	close(stop)
	if err := <-done; err == nil || err.Error() != "ran" {
		t.Fatalf("Run returned %v, want the server's error", err)
	}
}

// An application's own health service is kept (registering a second one
// would panic).
func TestApplicationsHealthKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lis := listen(t)
	gs := grpc.NewServer()
	own := health.NewServer()
	own.SetServingStatus("", healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
	healthpb.RegisterHealthServer(gs, own)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, nil, gs, lis, func(ctx context.Context, _ <-chan struct{}) error { <-stop; return nil })
	}()
	awaitStatus(t, ctx, healthOf(t, ctx, lis.Addr().String()), healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A failure to serve cancels the server's context and is returned.
func TestServeFailureStopsTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lis := listen(t)
	lis.Close()
	err := Run(ctx, nil, grpc.NewServer(), lis, func(ctx context.Context, _ <-chan struct{}) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("Run on a closed listener: %v, want the serving error", err)
	}
}
