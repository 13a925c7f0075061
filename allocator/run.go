package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/quire-dev/quire/keyspace"
)

// MemberConfig configures Run.
type MemberConfig struct {
	Config
	// Root is the fleet's key prefix, ending in '/'.
	Root string
	// Zone and Suffix name the member; Spec is its announced spec.
	Zone, Suffix string
	Spec         MemberSpec
	// LeaseTTL is how long the member's keys outlive a dead process.
	// Zero means 10 seconds.
	LeaseTTL time.Duration
	// Decoders decode the fleet's values; the zero value uses the defaults.
	Decoders Decoders
}

// Run is a fleet member's life: it announces the member under a fresh
// lease, mirrors the fleet and runs Allocate, until one of:
//
//   - drain is closed: it marks the member exiting, waits until the
//     allocator has moved everything off it (never lowering an item's
//     readiness), revokes its lease and returns nil. A server closes drain
//     on SIGTERM.
//   - ctx is done: it returns at once; its lease expires and its items fail
//     over. A server cancels ctx on a second signal.
//
// The KeySpace and Member fields of cfg.Config are set by Run.
func Run(ctx context.Context, drain <-chan struct{}, cfg MemberConfig) error {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	lease, err := cfg.Client.Grant(ctx, int64(cfg.LeaseTTL.Seconds()))
	if err != nil {
		return fmt.Errorf("granting member lease: %w", err)
	}
	keepAlive, err := cfg.Client.KeepAlive(ctx, lease.ID)
	if err != nil {
		return fmt.Errorf("keeping member lease alive: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range keepAlive {
		}
	}()
	key := MemberKey(cfg.Root, cfg.Zone, cfg.Suffix)
	ann, err := Announce(ctx, cfg.Client, key, Encode(cfg.Spec), lease.ID)
	if err != nil {
		return err
	}
	cfg.KeySpace = keyspace.New(cfg.Root, NewDecoder(cfg.Root, cfg.Decoders))
	if err := cfg.KeySpace.Load(ctx, cfg.Client, 0); err != nil {
		return fmt.Errorf("loading fleet %s: %w", cfg.Root, err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		cfg.KeySpace.Watch(ctx, cfg.Client)
	}()
	cfg.Member = key
	done := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		done <- Allocate(ctx, cfg.Config)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-drain:
	}
	return drainMember(ctx, cfg, ann, done)
}

// drainMember marks the member exiting, waits for its Allocate to return
// once it holds nothing, and revokes its lease.
func drainMember(ctx context.Context, cfg MemberConfig, ann *Announcement, done <-chan error) error {
	spec := cfg.Spec
	spec.Exiting = true
	cfg.Logger.Info("draining: moving items to other members", "member", ann.Key)
	if _, err := ann.Update(ctx, Encode(spec)); err != nil {
		return err
	}
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	revokeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := cfg.Client.Revoke(revokeCtx, ann.Lease); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("revoking member lease: %w", err)
	}
	return nil
}
