package rpcmetrics

import (
	"context"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// A server with the options counts each RPC by method and code, and has
// the series of its methods before their first call.
func TestServerMetrics(t *testing.T) {
	gs := grpc.NewServer(ServerOptions()...)
	hs := health.NewServer()
	hs.SetServingStatus("up", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	Register(gs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })

	handled := func(code string) float64 {
		v, _ := value(t, "grpc_server_handled_total", map[string]string{"grpc_method": "Check", "grpc_code": code})
		return v
	}
	okBefore, notFoundBefore := handled("OK"), handled("NotFound")
	if _, ok := value(t, "grpc_server_started_total", map[string]string{"grpc_method": "Watch"}); !ok {
		t.Error("no series of the Watch method before any call")
	}

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "up"}); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "missing"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service: %v", err)
	}
	if d := handled("OK") - okBefore; d != 1 {
		t.Errorf("grpc_server_handled_total of OK checks rose by %v, want 1", d)
	}
	if d := handled("NotFound") - notFoundBefore; d != 1 {
		t.Errorf("grpc_server_handled_total of NotFound checks rose by %v, want 1", d)
	}
}

// value sums the default registry's counters of name whose labels
// include want; ok is whether there is any.
func value(t *testing.T, name string, want map[string]string) (v float64, ok bool) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			n := 0
			for _, l := range m.GetLabel() {
				if want[l.GetName()] == l.GetValue() {
					n++
				}
			}
			if n == len(want) {
				v, ok = v+m.GetCounter().GetValue(), true
			}
		}
	}
	return v, ok
}
