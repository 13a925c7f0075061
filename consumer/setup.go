package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/protocol"
)

// setupAttempts bounds how often CreateMissing lists again after another
// process created some of the same journals or shards meanwhile.
const setupAttempts = 4

// CreateMissing creates those of an application's journals and shards that
// do not exist yet, and leaves those that do as they are, so that every
// process of the application may call it at start. It creates the journals
// first, since a shard's sources and recovery log must exist before it
// runs. It returns the names of the journals and the IDs of the shards it
// created. Where another process creates some of them at the same time,
// it lists again and creates the rest.
func CreateMissing(ctx context.Context, journals *client.Client, shards protocol.ShardClient,
	js []*protocol.JournalSpec, ss []*ShardSpec) ([]string, error) {
	var created []string
	for attempt := 1; ; attempt++ {
		names, err := createJournals(ctx, journals, js)
		created = append(created, names...)
		if err == nil {
			break
		} else if !errors.Is(err, client.ErrRevisionMismatch) || attempt == setupAttempts {
			return created, err
		}
	}
	for attempt := 1; ; attempt++ {
		ids, err := createShards(ctx, shards, ss)
		created = append(created, ids...)
		if err == nil {
			return created, nil
		} else if !errors.Is(err, client.ErrRevisionMismatch) || attempt == setupAttempts {
			return created, err
		}
	}
}

// createJournals creates, in one Apply, the journals of specs that are not
// listed under their parents' prefixes.
func createJournals(ctx context.Context, c *client.Client, specs []*protocol.JournalSpec) ([]string, error) {
	existing := map[string]bool{}
	for _, p := range parents(specs, func(s *protocol.JournalSpec) string { return s.Name }) {
		list, err := c.ListAll(ctx, "prefix="+p)
		if err != nil {
			return nil, fmt.Errorf("listing journals under %s: %w", p, err)
		}
		for _, j := range list {
			existing[j.GetSpec().GetName()] = true
		}
	}
	req := &protocol.ApplyRequest{}
	var names []string
	for _, s := range specs {
		if !existing[s.Name] {
			// A new journal's expected revision is zero: if another
			// process created it since the listing, the Apply fails whole.
			req.Changes = append(req.Changes, &protocol.ApplyRequest_Change{Upsert: s})
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	if _, err := c.Apply(ctx, req); err != nil {
		return nil, fmt.Errorf("creating journals %s: %w", strings.Join(names, ", "), err)
	}
	return names, nil
}

// createShards creates, in one Apply, the shards of specs that are not
// listed under their parents' prefixes.
func createShards(ctx context.Context, c protocol.ShardClient, specs []*ShardSpec) ([]string, error) {
	existing := map[string]bool{}
	for _, p := range parents(specs, func(s *ShardSpec) string { return s.ID }) {
		list, err := c.List(ctx, &protocol.ShardListRequest{Selector: "prefix=" + p})
		if err != nil {
			return nil, fmt.Errorf("listing shards under %s: %w", p, err)
		}
		for _, sh := range list.Shards {
			spec, err := UnmarshalShardSpec(sh.Spec)
			if err != nil {
				return nil, fmt.Errorf("listing shards under %s: %w", p, err)
			}
			existing[spec.ID] = true
		}
	}
	req := &protocol.ShardApplyRequest{}
	var ids []string
	for _, s := range specs {
		if existing[s.ID] {
			continue
		}
		raw, err := MarshalShardSpec(s)
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", s.ID, err)
		}
		req.Changes = append(req.Changes, &protocol.ShardApplyRequest_Change{Upsert: raw})
		ids = append(ids, s.ID)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	resp, err := c.Apply(ctx, req)
	switch {
	case err != nil:
		return nil, fmt.Errorf("creating shards %s: %w", strings.Join(ids, ", "), err)
	case resp.Status == protocol.Status_REVISION_MISMATCH:
		return nil, fmt.Errorf("creating shards %s: some were created meanwhile: %w", strings.Join(ids, ", "), client.ErrRevisionMismatch)
	case resp.Status != protocol.Status_OK:
		return nil, fmt.Errorf("creating shards %s: %s", strings.Join(ids, ", "), resp.Status)
	}
	return ids, nil
}

// parents returns the distinct prefixes, up to and including the last
// '/', of the names of items (the whole name where it has no '/'), sorted.
func parents[T any](items []T, name func(T) string) []string {
	var ps []string
	for _, it := range items {
		n := name(it)
		if i := strings.LastIndexByte(n, '/'); i >= 0 {
			n = n[:i+1]
		}
		ps = append(ps, n)
	}
	slices.Sort(ps)
	return slices.Compact(ps)
}
