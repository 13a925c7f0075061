// Package signals turns a server process's signals into its two ways of
// stopping: drain (hand work to others, then exit) and exit at once.
package signals

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Drain returns a context and a drain channel driven by signals: the first
// SIGTERM or SIGINT closes drain (the server drains gracefully); a second
// cancels ctx (exit at once). what says, in the log, what draining does.
// stop releases the signals and waits for the watching goroutine.
func Drain(parent context.Context, what string) (ctx context.Context, drain <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	drainCh := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case sig := <-sigs:
			slog.Info("signal received: "+what+"; signal again to exit at once", "signal", sig.String())
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
