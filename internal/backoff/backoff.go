// Package backoff paces Quire's retry loops (the client's, the
// allocator's, keyspaces' watches, brokers' replicas): delays that double
// from a first to a greatest, each jittered by half either way so that
// the many clients a failure makes retry at once spread out, and a wait
// that ends early when its context does. It is cenkalti/backoff's
// ExponentialBackOff, configured once.
package backoff

import (
	"context"
	"time"

	cenkalti "github.com/cenkalti/backoff/v5"
)

// Backoff paces one retry loop. It is not safe for concurrent use: each
// loop has its own.
type Backoff struct {
	exp cenkalti.ExponentialBackOff
}

// New returns a Backoff whose delays double from first to greatest.
func New(first, greatest time.Duration) *Backoff {
	b := &Backoff{exp: cenkalti.ExponentialBackOff{
		InitialInterval:     first,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         max(first, greatest),
	}}
	b.exp.Reset()
	return b
}

// Next returns the next delay.
func (b *Backoff) Next() time.Duration { return b.exp.NextBackOff() }

// Reset starts the delays over from the first, after a success.
func (b *Backoff) Reset() { b.exp.Reset() }

// Wait sleeps for the next delay, or until ctx ends, returning its error
// then.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Sleep sleeps for d, or until ctx ends, returning its error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
