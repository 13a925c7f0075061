package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/admin"
	"github.com/quire-dev/quire/internal/env"
	"github.com/quire-dev/quire/internal/etcdclient"
	"github.com/quire-dev/quire/internal/signals"
	"github.com/quire-dev/quire/internal/tlsconfig"
)

type memberFlags struct {
	etcd, prefix, zone, suffix string
	limit                      int
	leaseTTL                   time.Duration
	etcdTLS                    tlsconfig.Files
	etcdUser                   etcdclient.User
	admin                      admin.Flags
}

func newMemberCommand() *cobra.Command {
	var f memberFlags
	cmd := &cobra.Command{
		Use:   "member --etcd ENDPOINTS --prefix PREFIX --zone ZONE --suffix SUFFIX --limit N",
		Short: "Join a fleet as a member that holds items (its replicas are ready at once)",
		Long: `Join the fleet under --prefix as member ZONE#SUFFIX and take part in
allocation: the oldest member leads, solving and converging assignments.
The member holds items without doing anything with them, which makes it a
way to try the allocator on a live etcd, or to stand in for capacity.

SIGTERM (or Ctrl-C) drains: the member's items move to other members, and
it exits once it holds nothing. A second signal exits at once. --admin
serves /metrics, /healthz and /readyz (ready while the member is
announced and not draining).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runMember(cmd.Context(), f)
		},
	}
	cmd.Flags().StringVar(&f.etcd, "etcd", env.Or("QUIRE_ETCD", defaultEtcd), etcdFlagUsage)
	cmd.Flags().StringVar(&f.prefix, "prefix", "", "the fleet's key prefix, ending in '/'")
	cmd.Flags().StringVar(&f.zone, "zone", "", "the member's zone")
	cmd.Flags().StringVar(&f.suffix, "suffix", "", "the member's name, unique within its zone")
	cmd.Flags().IntVar(&f.limit, "limit", 1000, "most items the member holds")
	cmd.Flags().DurationVar(&f.leaseTTL, "lease", 10*time.Second, "how long the member's keys outlive it if it dies")
	f.etcdTLS.AddFlags(cmd.Flags(), "etcd", "QUIRE_ETCD", "the member's etcd client")
	f.etcdUser.AddFlags(cmd.Flags())
	f.admin.AddFlags(cmd.Flags(), "")
	return cmd
}

func (f memberFlags) validate() error {
	if err := validateEndpoints("--etcd", f.etcd); err != nil {
		return err
	}
	if f.prefix == "" || !strings.HasSuffix(f.prefix, "/") {
		return usagef("--prefix %q: want a key prefix ending in '/'", f.prefix)
	}
	if err := allocator.ValidateToken("--zone", f.zone, false); err != nil {
		return usageError{err}
	}
	if err := allocator.ValidateToken("--suffix", f.suffix, false); err != nil {
		return usageError{err}
	}
	if f.limit < 0 {
		return usagef("--limit %d is negative", f.limit)
	}
	if f.leaseTTL < time.Second {
		return usagef("--lease %s is under one second", f.leaseTTL)
	}
	if err := f.admin.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

func runMember(ctx context.Context, f memberFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	client, err := etcdclient.Dial(ctx, f.etcd, f.etcdTLS, f.etcdUser, f.prefix, 10*time.Second)
	if err != nil {
		return fmt.Errorf("--etcd: %w", err)
	}
	defer client.Close()
	var life allocator.Lifecycle
	adm, err := f.admin.Serve(life.Ready)
	if err != nil {
		return err
	}
	defer adm.Close()
	defer life.Advance(allocator.Stopped)
	ctx, drain, stop := signals.Drain(ctx, "draining")
	defer stop()
	return allocator.Run(ctx, drain, allocator.MemberConfig{
		Config:    allocator.Config{Client: client},
		Root:      f.prefix,
		Zone:      f.zone,
		Suffix:    f.suffix,
		Spec:      allocator.MemberSpec{Limit: f.limit},
		LeaseTTL:  f.leaseTTL,
		Lifecycle: &life,
	})
}
