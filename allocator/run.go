package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	// Encode, if set, encodes the member's spec instead of Spec: owners
	// whose member specs carry more (a broker's endpoint) set it.
	Encode func(exiting bool) string
	// LeaseTTL is how long the member's keys outlive a dead process.
	// Zero means 10 seconds.
	LeaseTTL time.Duration
	// Decoders decode the fleet's values when Run builds the keyspace; the
	// zero value uses the defaults.
	Decoders Decoders
	// Drained, if set, is called once the member holds nothing, before its
	// lease is revoked: a broker persists its spools there.
	Drained func(ctx context.Context) error
	// DrainTimeout bounds how long a drain waits for other members to take
	// the member's items. Once it passes, the member gives up those it
	// still holds, which no other member could take (a fleet of three
	// brokers serving journals of replication 3, say, or of two consumer
	// processes serving shards with a standby), by revoking its lease: they
	// fail over at once, without the wait for the lease to expire that a
	// second signal would cost. Drained is then called and Run returns nil,
	// as after any drain. Zero waits as long as it takes.
	DrainTimeout time.Duration
	// Announced, if set, is called once the member is announced under its
	// own lease and the keyspace reflects it, before it allocates. A
	// server serves the member's assignments only from then on, and only
	// those under ann.Lease: until then, any assignment of the member's
	// name is another process's (a live duplicate, or the process this
	// one restarts, whose lease has not yet run out).
	Announced func(ann *Announcement)
	// Lifecycle, if set, is advanced as Run goes: Announcing as it starts,
	// Serving once announced, Draining as soon as drain is closed. The
	// process sets Starting before and Stopped after.
	Lifecycle *Lifecycle
	// Resign, if set, is a channel whose close makes Run give the member's
	// items up at once: it revokes the member's lease (its assignments go
	// with it, as if it had died, but without waiting for the lease to
	// expire) and returns ErrResigned. A broker that can reach etcd but
	// none of its peers resigns, so that its journals move to brokers that
	// can replicate them.
	Resign <-chan struct{}
}

// ErrResigned is returned by Run once the member resigned (see
// MemberConfig.Resign).
var ErrResigned = errors.New("member resigned: its lease is revoked and its items given up")

// Run is a fleet member's life: it announces the member under a fresh
// lease, mirrors the fleet (unless cfg.KeySpace is set: then the caller has
// loaded it and keeps it watching) and runs Allocate, until one of:
//
//   - drain is closed: it marks the member exiting, waits until the
//     allocator has moved everything off it (never lowering an item's
//     readiness), or for cfg.DrainTimeout, calls Drained, revokes its lease
//     and returns nil. A server closes drain on SIGTERM.
//   - ctx is done: it returns at once; its lease expires and its items fail
//     over. A server cancels ctx on a second signal.
//   - cfg.Resign is closed: it revokes the member's lease at once, without
//     moving its items first, and returns ErrResigned; during a drain
//     too.
//   - Allocate fails, or the member's key disappears: it returns the error.
//
// Run sets cfg.Config's Member (and KeySpace, if unset).
func Run(ctx context.Context, drain <-chan struct{}, cfg MemberConfig) error {
	cfg.defaults()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	cfg.Lifecycle.Advance(Announcing)
	wg.Go(func() {
		select {
		case <-drain: // Not ready from now on, though the drain takes a while.
			cfg.Lifecycle.Advance(Draining)
		case <-ctx.Done():
		}
	})

	ann, err := announce(ctx, &wg, cfg)
	if err != nil {
		return err
	}
	if err := cfg.mirror(ctx, &wg, ann); err != nil {
		return err
	}
	cfg.Member, cfg.Lease = ann.Key, ann.Lease
	if cfg.Announced != nil {
		cfg.Announced(ann)
	}
	cfg.Lifecycle.Advance(Serving)
	done := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		done <- Allocate(ctx, cfg.Config)
	}()
	select {
	case err := <-done:
		return explainGone(ctx, cfg, ann, err)
	case <-ctx.Done():
		return ctx.Err()
	case <-cfg.Resign:
		return resign(ctx, cfg, ann)
	case <-drain:
	}
	return drainMember(ctx, cfg, ann, done)
}

// explainGone adds to an ErrMemberGone why the member's key left: its
// lease ran out or was revoked, or the key was deleted while the lease
// lives, or the keyspace lost sight of a key that etcd still holds.
// Operators act differently on each.
func explainGone(ctx context.Context, cfg MemberConfig, ann *Announcement, err error) error {
	if !errors.Is(err, ErrMemberGone) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ttl, lerr := cfg.Client.TimeToLive(ctx, ann.Lease)
	if lerr != nil {
		return fmt.Errorf("%w (and asking etcd about its lease %x failed: %v)", err, int64(ann.Lease), lerr)
	}
	if ttl.TTL < 0 {
		return fmt.Errorf("%w: its lease %x ran out or was revoked (was the process cut off from etcd, or frozen, for longer than its TTL %s?)", err, int64(ann.Lease), cfg.LeaseTTL)
	}
	resp, gerr := cfg.Client.Get(ctx, ann.Key)
	switch {
	case gerr != nil:
		return fmt.Errorf("%w, though its lease %x lives (and reading the key failed: %v)", err, int64(ann.Lease), gerr)
	case len(resp.Kvs) == 0:
		return fmt.Errorf("%w: it was deleted while its lease %x lives (by an operator, or a program writing under %s)", err, int64(ann.Lease), cfg.Root)
	case clientv3.LeaseID(resp.Kvs[0].Lease) != ann.Lease:
		return fmt.Errorf("%w: it was replaced, under lease %x, while this process's lease %x lives (by an operator, or a program writing under %s)", err, resp.Kvs[0].Lease, int64(ann.Lease), cfg.Root)
	}
	return fmt.Errorf("%w, though etcd holds it: this process's view of etcd missed events (is etcd older than 3.5.8?)", err)
}

// resign revokes the member's lease, and returns ErrResigned, or why the
// lease could not be revoked (it then expires).
func resign(ctx context.Context, cfg MemberConfig, ann *Announcement) error {
	cfg.Logger.Warn("resigning: revoking the member's lease, giving its items up", "member", ann.Key)
	resignations.Inc()
	if err := abandon(ctx, cfg, ann); err != nil {
		return fmt.Errorf("%w, but revoking its lease failed (it expires after %s): %w", ErrResigned, cfg.LeaseTTL, err)
	}
	return ErrResigned
}

// abandon revokes the member's lease while it holds items.
func abandon(ctx context.Context, cfg MemberConfig, ann *Announcement) error {
	revokeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := cfg.Client.Revoke(revokeCtx, ann.Lease)
	return err
}

func (cfg *MemberConfig) defaults() {
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Lifecycle == nil {
		cfg.Lifecycle = new(Lifecycle)
	}
	if cfg.Encode == nil {
		spec := cfg.Spec
		cfg.Encode = func(exiting bool) string {
			spec.Exiting = exiting
			return Encode(spec)
		}
	}
}

// announce grants the member's lease, keeps it alive, and announces the
// member under it.
func announce(ctx context.Context, wg *sync.WaitGroup, cfg MemberConfig) (*Announcement, error) {
	lease, err := cfg.Client.Grant(ctx, int64(cfg.LeaseTTL.Seconds()))
	if err != nil {
		return nil, fmt.Errorf("granting member lease: %w", err)
	}
	keepAlive, err := cfg.Client.KeepAlive(ctx, lease.ID)
	if err != nil {
		return nil, fmt.Errorf("keeping member lease alive: %w", err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range keepAlive {
		}
	}()
	return Announce(ctx, cfg.Client, MemberKey(cfg.Root, cfg.Zone, cfg.Suffix), cfg.Encode(false), lease.ID)
}

// mirror makes sure the keyspace reflects the announcement, building and
// watching one if the caller gave none.
func (cfg *MemberConfig) mirror(ctx context.Context, wg *sync.WaitGroup, ann *Announcement) error {
	if cfg.KeySpace != nil {
		return cfg.KeySpace.WaitForRevision(ctx, ann.Revision)
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
	return nil
}

// drainMember marks the member exiting, waits for its Allocate to return
// once it holds nothing (or gives up what it holds after cfg.DrainTimeout),
// calls Drained, and revokes its lease.
func drainMember(ctx context.Context, cfg MemberConfig, ann *Announcement, done <-chan error) error {
	cfg.Logger.Info("draining: moving items to other members", "member", ann.Key)
	if _, err := ann.Update(ctx, cfg.Encode(true)); err != nil {
		return err
	}
	var timeout <-chan time.Time
	if cfg.DrainTimeout > 0 {
		t := time.NewTimer(cfg.DrainTimeout)
		defer t.Stop()
		timeout = t.C
	}
	revoked := false
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return ctx.Err()
	case <-cfg.Resign:
		// A member told to resign while it drains (a broker cut off from
		// its peers) must not hold its items for the rest of the drain.
		return resign(ctx, cfg, ann)
	case <-timeout:
		if err := giveUp(ctx, cfg, ann, done); err != nil {
			return err
		}
		revoked = true
	}
	if cfg.Drained != nil {
		if err := cfg.Drained(ctx); err != nil {
			return err
		}
	}
	if revoked {
		return nil
	}
	revokeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := cfg.Client.Revoke(revokeCtx, ann.Lease); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("revoking member lease: %w", err)
	}
	return nil
}

// giveUp ends a drain that timed out: it revokes the member's lease, so
// that the items it still holds fail over now, and waits until its
// Allocate has seen its member key go.
func giveUp(ctx context.Context, cfg MemberConfig, ann *Announcement, done <-chan error) error {
	kvs, rev := cfg.KeySpace.Snapshot()
	held := len(NewState(cfg.Root, kvs, rev).MemberAssignments(cfg.Zone, cfg.Suffix))
	cfg.Logger.Warn("drain timed out with items no other member took; giving them up, to fail over now",
		"member", ann.Key, "items", held, "drainTimeout", cfg.DrainTimeout)
	drainsGivenUp.Inc()
	if err := abandon(ctx, cfg, ann); err != nil {
		return fmt.Errorf("drain timed out, and revoking the member's lease failed: %w", err)
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, ErrMemberGone) {
			return err
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
