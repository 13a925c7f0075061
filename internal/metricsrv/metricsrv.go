// Package metricsrv serves the process's Prometheus metrics over HTTP, at
// /metrics, for the servers' --metrics flags.
package metricsrv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve serves the default registry's metrics at http://addr/metrics until
// the returned function is called; an empty addr serves nothing. flag names
// the setting in errors.
func Serve(flag, addr string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("serving metrics", "addr", addr, "err", err)
		}
	}()
	slog.Info("serving metrics", "url", "http://"+lis.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		<-done
	}, nil
}
