package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// drainSignals turns signals into a server's two ways of stopping: the
// first SIGTERM or SIGINT closes the returned channel (drain gracefully:
// hand work to others, then exit); a second cancels the returned context
// (exit at once). stop releases the signals.
func drainSignals(parent context.Context) (ctx context.Context, drain <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	drainCh := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-sigs:
			slog.Info("signal received: draining; signal again to exit at once", "signal", sig.String())
			close(drainCh)
		case <-ctx.Done():
			return
		}
		select {
		case sig := <-sigs:
			slog.Warn("second signal received: exiting at once", "signal", sig.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, drainCh, func() {
		signal.Stop(sigs)
		cancel()
		<-done
	}
}
