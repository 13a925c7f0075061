package rpcmetrics

import (
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// buckets of grpc_server_handling_seconds: from the sub-millisecond
// appends of a local broker to the minutes of a blocking read.
var buckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60, 300}

var server = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(buckets)))

func init() { prometheus.MustRegister(server) }

// ServerOptions are the interceptors that count and time a server's RPCs.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(server.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(server.StreamServerInterceptor()),
	}
}

// Register presets the metrics of every method gs serves to zero, so that
// a method's series exist before its first call (rates and alerts need
// them). Call it once the services are registered.
func Register(gs *grpc.Server) { server.InitializeMetrics(gs) }
