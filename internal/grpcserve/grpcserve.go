// Package grpcserve runs a Quire server (a broker, a consumer process) and
// its gRPC server together, with the standard gRPC health service.
//
// The health service answers SERVING while the server runs, and
// NOT_SERVING from the moment it starts draining, so that a load balancer
// or an orchestrator's probe stops sending it new work before it exits.
// Clients of Quire route by etcd, not by health; the service is for the
// infrastructure around the processes.
package grpcserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// StopTimeout bounds a graceful stop of the gRPC server: blocking reads
// would otherwise hold it forever.
const StopTimeout = 5 * time.Second

// Run serves gs on lis while run runs, then stops serving: at once if ctx
// is done, after draining if drain is closed (run drains). A failure to
// serve cancels run's context and is returned. Unless gs has a health
// service of its own (registered by an application), Run registers one,
// before serving.
func Run(ctx context.Context, drain <-chan struct{}, gs *grpc.Server, lis net.Listener,
	run func(ctx context.Context, drain <-chan struct{}) error) error {

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	hs := register(gs)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := gs.Serve(lis); err != nil {
			cancel(fmt.Errorf("serving gRPC on %s: %w", lis.Addr(), err))
		}
	}()
	var wg sync.WaitGroup
	if hs != nil && drain != nil {
		wg.Go(func() {
			select {
			case <-drain:
				hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
			case <-ctx.Done():
			}
		})
	}
	err := run(ctx, drain)
	cancel(nil) // Ends the health watcher, if the server stopped on its own.
	wg.Wait()
	if hs != nil {
		hs.Shutdown()
	}
	stop(gs, StopTimeout)
	<-served
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// register registers a health service on gs, SERVING, unless gs has one.
func register(gs *grpc.Server) *health.Server {
	if _, ok := gs.GetServiceInfo()[healthpb.Health_ServiceDesc.ServiceName]; ok {
		return nil
	}
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	return hs
}

// stop stops gs gracefully, or at once after timeout.
func stop(gs *grpc.Server, timeout time.Duration) {
	done := make(chan struct{})
	go func() { defer close(done); gs.GracefulStop() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		gs.Stop()
		<-done
	}
}
