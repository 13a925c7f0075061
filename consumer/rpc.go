package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// List lists the shards that a selector selects, with their replicas and
// whether each replica's process is alive (see liveness).
func (s *Server) List(ctx context.Context, req *protocol.ShardListRequest) (*protocol.ShardListResponse, error) {
	if err := s.cfg.Auth.RequireAny(ctx, auth.List, "shard"); err != nil {
		return nil, err
	}
	sel, err := labels.ParseSelector(req.Selector)
	if err != nil {
		return nil, protocol.InvalidArgument(fmt.Errorf("selector: %w", err))
	}
	if err := s.syncKeyspace(ctx); err != nil {
		return nil, err
	}
	state, _ := s.resolver.snapshot()
	var items []allocator.ItemKV
	var assignments []allocator.AssignmentKV
	for _, it := range state.Items {
		set := it.Value.(*ShardSpec).LabelSetWithMeta()
		if sel.Matches(set) && s.cfg.Auth.Allows(ctx, auth.List, set) {
			items = append(items, it)
			assignments = append(assignments, state.ItemAssignments(it.ID)...)
		}
	}
	alive := liveness(ctx, s.cfg.Etcd, assignments)
	out := &protocol.ShardListResponse{Header: s.header()}
	for _, it := range items {
		sh, err := listedShard(state, it, alive)
		if err != nil {
			return nil, err
		}
		out.Shards = append(out.Shards, sh)
	}
	return out, nil
}

// listedShard is a shard as List returns it.
func listedShard(state *allocator.State, it allocator.ItemKV, alive map[string]processLiveness) (*protocol.ShardListResponse_Shard, error) {
	spec := it.Value.(*ShardSpec)
	raw, err := MarshalShardSpec(spec)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encoding shard %s: %v", spec.ID, err)
	}
	sh := &protocol.ShardListResponse_Shard{Spec: raw,
		CreateRevision: it.KV.CreateRevision, ModRevision: it.KV.ModRevision}
	var statuses []Status
	for _, a := range state.ItemAssignments(it.ID) {
		st, l := statusOf(a), alive[string(a.KV.Key)]
		statuses = append(statuses, st)
		sh.Replicas = append(sh.Replicas, &protocol.ShardListResponse_Replica{
			ProcessId: &protocol.ProcessID{Zone: a.Zone, Suffix: a.Suffix}, Endpoint: endpointOf(state, a),
			Slot: int32(a.Slot), Status: &protocol.ReplicaStatus{Code: st.Code, Error: st.Error},
			Liveness: l.code, LeaseRemainingSeconds: l.remaining})
	}
	c := combine(statuses)
	sh.Status = &protocol.ReplicaStatus{Code: c.Code, Error: c.Error}
	return sh, nil
}

// Stat waits until the shard's primary has committed the given read-through
// offsets, and returns its read-through offsets. Any process proxies it to
// the primary.
func (s *Server) Stat(ctx context.Context, req *protocol.ShardStatRequest) (*protocol.ShardStatResponse, error) {
	if err := ValidateShardID(req.Shard); err != nil {
		return nil, protocol.InvalidArgument(fmt.Errorf("shard: %w", err))
	}
	for j, off := range req.ReadThrough {
		if off < 0 {
			return nil, protocol.InvalidArgument(fmt.Errorf("readThrough[%s]: offset %d is negative", j, off))
		}
	}
	if err := s.awaitRevision(ctx, req.Header.GetRevision()); err != nil {
		return nil, err
	}
	if err := s.Require(ctx, auth.Stat, req.Shard); err != nil {
		return nil, err
	}
	res, err := s.Resolve(ctx, req.Shard)
	if st, ok := resolveStatus(err); ok {
		return &protocol.ShardStatResponse{Status: st, Header: res.Header}, nil
	} else if err != nil {
		return nil, err
	}
	res.Done() // Stat reads no store.
	if res.Shard == nil {
		if req.DoNotProxy {
			return &protocol.ShardStatResponse{Status: protocol.Status_NOT_SHARD_PRIMARY, Header: res.Header}, nil
		}
		conn, err := s.Dial(res.Endpoint)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "proxying to the primary of %s: %v", req.Shard, err)
		}
		fwd := &protocol.ShardStatRequest{Shard: req.Shard, ReadThrough: req.ReadThrough,
			Header: s.header(), DoNotProxy: true}
		return protocol.NewShardClient(conn).Stat(auth.ForwardCaller(ctx), fwd)
	}
	r := s.resolver.replica(req.Shard)
	if r == nil {
		return &protocol.ShardStatResponse{Status: protocol.Status_NO_SHARD_PRIMARY, Header: res.Header}, nil
	}
	for j := range req.ReadThrough {
		if !slices.ContainsFunc(res.Shard.spec.Sources, func(src Source) bool { return src.Journal == j }) {
			return nil, protocol.InvalidArgument(fmt.Errorf("readThrough: %s is not a source of shard %s", j, req.Shard))
		}
	}
	resp, err := r.awaitReadThrough(ctx, req.ReadThrough)
	if err != nil {
		return nil, err
	}
	for _, src := range res.Shard.spec.Sources {
		if _, known := resp.WriteHeads[src.Journal]; !known {
			// Nothing read yet (an empty or idle source): ask its head.
			if head, err := s.cfg.Journals.WriteHead(ctx, src.Journal); err == nil {
				resp.WriteHeads[src.Journal] = head
			}
		}
	}
	resp.Status, resp.Header = protocol.Status_OK, s.header()
	return resp, nil
}

func resolveStatus(err error) (protocol.Status, bool) {
	switch {
	case errors.Is(err, ErrShardNotFound):
		return protocol.Status_SHARD_NOT_FOUND, true
	case errors.Is(err, ErrNoPrimary):
		return protocol.Status_NO_SHARD_PRIMARY, true
	}
	return 0, false
}

// awaitReadThrough waits until the primary's commits reflect want.
func (r *replica) awaitReadThrough(ctx context.Context, want map[string]int64) (*protocol.ShardStatResponse, error) {
	for {
		r.mu.Lock()
		ok := true
		for j, off := range want {
			ok = ok && r.readThrough[j] >= off
		}
		resp := &protocol.ShardStatResponse{ReadThrough: clone(r.readThrough),
			WriteHeads: clone(r.heads), Transactions: r.txns}
		ch := r.committedCh
		r.mu.Unlock()
		if ok {
			return resp, nil
		}
		select {
		case <-ch:
		case <-r.ctx.Done():
			return nil, status.Errorf(codes.Unavailable, "shard %s: its primary stopped", r.id)
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

func clone(m map[string]int64) map[string]int64 {
	c := make(map[string]int64, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Apply creates, updates and deletes shard specs, in one etcd transaction
// conditioned on each spec's expected mod revision.
func (s *Server) Apply(ctx context.Context, req *protocol.ShardApplyRequest) (*protocol.ShardApplyResponse, error) {
	cmps, ops, err := s.applyOps(req)
	if err != nil {
		return nil, protocol.InvalidArgument(err)
	}
	if err := s.awaitRevision(ctx, 0); err != nil {
		return nil, err
	}
	if err := s.requireApply(ctx, req); err != nil {
		return nil, err
	}
	resp, err := s.cfg.Etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "applying shard specs: %v", err)
	}
	out := &protocol.ShardApplyResponse{Status: protocol.Status_OK, Revision: resp.Header.Revision}
	if !resp.Succeeded {
		out.Status = protocol.Status_REVISION_MISMATCH
	} else if err := s.awaitRevision(ctx, resp.Header.Revision); err != nil {
		return nil, err
	} else {
		out.Warnings = s.applyWarnings(ctx, req)
	}
	out.Header = s.header()
	return out, nil
}

// applyWarnings names the journals that upserted shards read or record
// into and that do not exist. If the journals cannot be listed (the
// process's token may not LIST them), it warns of nothing.
func (s *Server) applyWarnings(ctx context.Context, req *protocol.ShardApplyRequest) []string {
	needed := map[string][]string{} // journal → what needs it
	var names []string
	need := func(journal, what string) {
		if needed[journal] == nil {
			names = append(names, journal)
		}
		needed[journal] = append(needed[journal], what)
	}
	for _, c := range req.Changes {
		spec, err := UnmarshalShardSpec(c.Upsert)
		if len(c.Upsert) == 0 || err != nil {
			continue
		}
		for _, src := range spec.Sources {
			need(src.Journal, "shard "+spec.ID+"'s source")
		}
		if log := spec.RecoveryLog(); log != "" {
			need(log, "shard "+spec.ID+"'s recovery log")
		}
	}
	var out []string
	for chunk := range slices.Chunk(names, 100) {
		listed, err := s.cfg.Journals.ListAll(ctx, "name in ("+strings.Join(chunk, ",")+")")
		if err != nil {
			s.log.Debug("not checking that shards' journals exist", "err", err)
			return nil
		}
		exists := map[string]bool{}
		for _, j := range listed {
			exists[j.GetSpec().GetName()] = true
		}
		for _, j := range chunk {
			if !exists[j] {
				out = append(out, fmt.Sprintf("journal %s does not exist: it is %s", j, strings.Join(needed[j], ", and ")))
			}
		}
	}
	return out
}

// applyOps validates an Apply's changes and returns its transaction.
func (s *Server) applyOps(req *protocol.ShardApplyRequest) ([]clientv3.Cmp, []clientv3.Op, error) {
	if len(req.Changes) == 0 {
		return nil, nil, errors.New("changes: none given")
	}
	if max := s.maxTxnOps(); len(req.Changes) > max {
		return nil, nil, fmt.Errorf("changes: %d exceed the %d that one transaction may hold", len(req.Changes), max)
	}
	seen := map[string]bool{}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for i, c := range req.Changes {
		id, op, err := s.applyOp(c)
		if err != nil {
			return nil, nil, fmt.Errorf("changes[%d]: %w", i, err)
		}
		if seen[id] {
			return nil, nil, fmt.Errorf("changes[%d]: shard %s is changed twice", i, id)
		}
		if c.ExpectModRevision < 0 {
			return nil, nil, fmt.Errorf("changes[%d]: expectModRevision %d is negative", i, c.ExpectModRevision)
		}
		seen[id] = true
		key := allocator.ItemKey(s.cfg.Root, id)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", c.ExpectModRevision))
		ops = append(ops, op)
	}
	return cmps, ops, nil
}

func (s *Server) applyOp(c *protocol.ShardApplyRequest_Change) (string, clientv3.Op, error) {
	switch {
	case (len(c.Upsert) == 0) == (c.Delete == ""):
		return "", clientv3.Op{}, errors.New("exactly one of upsert and delete must be given")
	case c.Delete != "":
		if err := ValidateShardID(c.Delete); err != nil {
			return "", clientv3.Op{}, fmt.Errorf("delete: %w", err)
		}
		return c.Delete, clientv3.OpDelete(allocator.ItemKey(s.cfg.Root, c.Delete)), nil
	}
	spec, err := UnmarshalShardSpec(c.Upsert)
	if err != nil {
		return "", clientv3.Op{}, fmt.Errorf("upsert: %w", err)
	}
	raw, err := MarshalShardSpec(spec)
	if err != nil {
		return "", clientv3.Op{}, fmt.Errorf("upsert: %w", err)
	}
	return spec.ID, clientv3.OpPut(allocator.ItemKey(s.cfg.Root, spec.ID), string(raw)), nil
}

func (s *Server) maxTxnOps() int {
	if s.cfg.MaxTxnOps > 0 {
		return s.cfg.MaxTxnOps
	}
	return allocator.DefaultMaxTxnOps
}

// GetHints returns a shard's stored recovery-log hints, as stored.
func (s *Server) GetHints(ctx context.Context, req *protocol.GetHintsRequest) (*protocol.GetHintsResponse, error) {
	if err := ValidateShardID(req.Shard); err != nil {
		return nil, protocol.InvalidArgument(fmt.Errorf("shard: %w", err))
	}
	if err := s.awaitRevision(ctx, 0); err != nil {
		return nil, err
	}
	if err := s.Require(ctx, auth.Stat, req.Shard); err != nil {
		return nil, err
	}
	state, _ := s.resolver.snapshot()
	i := state.ItemIndex(req.Shard)
	if i < 0 {
		return &protocol.GetHintsResponse{Status: protocol.Status_SHARD_NOT_FOUND, Header: s.header()}, nil
	}
	spec := state.Items[i].Value.(*ShardSpec)
	out := &protocol.GetHintsResponse{Status: protocol.Status_OK, Header: s.header()}
	if spec.HintKey() == "" {
		return out, nil
	}
	keys := []string{spec.HintKey()}
	for n := 1; n <= spec.HintBackupCount(); n++ {
		keys = append(keys, fmt.Sprintf("%s.%d", spec.HintKey(), n))
	}
	for n, key := range keys {
		resp, err := s.cfg.Etcd.Get(ctx, key)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "reading hints of %s: %v", req.Shard, err)
		}
		var v []byte
		if len(resp.Kvs) != 0 {
			v = resp.Kvs[0].Value
		}
		if n == 0 {
			out.Primary = v
		} else {
			out.Backups = append(out.Backups, v)
		}
	}
	return out, nil
}

// Unassign removes shards' assignments (all, or only FAILED ones), so that
// the allocator assigns them afresh.
func (s *Server) Unassign(ctx context.Context, req *protocol.UnassignRequest) (*protocol.UnassignResponse, error) {
	for i, id := range req.Shards {
		if err := ValidateShardID(id); err != nil {
			return nil, protocol.InvalidArgument(fmt.Errorf("shards[%d]: %w", i, err))
		}
	}
	if err := s.awaitRevision(ctx, 0); err != nil {
		return nil, err
	}
	state, _ := s.resolver.snapshot()
	// The caller's rights come first, checked by ID alone for a shard that
	// does not exist: answering SHARD_NOT_FOUND before would tell a token
	// outside a shard's selector whether it exists.
	if len(req.Shards) != 0 {
		for _, id := range req.Shards {
			if err := s.Require(ctx, auth.Unassign, id); err != nil {
				return nil, err
			}
		}
	} else {
		for _, it := range state.Items {
			if err := s.Require(ctx, auth.Unassign, it.ID); err != nil {
				return nil, err
			}
		}
	}
	want := map[string]bool{}
	for _, id := range req.Shards {
		want[id] = true
	}
	// A shard that does not exist (a typo?) fails the whole request, naming
	// it, rather than leaving the others to be unassigned alone.
	for _, it := range state.Items {
		delete(want, it.ID)
	}
	if len(want) != 0 {
		return &protocol.UnassignResponse{Status: protocol.Status_SHARD_NOT_FOUND,
			Shards: slices.Sorted(maps.Keys(want)), Header: s.header()}, nil
	}
	for _, id := range req.Shards {
		want[id] = true
	}
	var shards []string
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for _, it := range state.Items {
		if len(want) != 0 && !want[it.ID] {
			continue
		}
		n := len(ops)
		for _, a := range state.ItemAssignments(it.ID) {
			if req.OnlyFailed && statusOf(a).Code != protocol.ReplicaCode_FAILED {
				continue
			}
			key := string(a.KV.Key)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", a.KV.ModRevision))
			ops = append(ops, clientv3.OpDelete(key))
		}
		if len(ops) > n {
			shards = append(shards, it.ID)
		}
	}
	out := &protocol.UnassignResponse{Status: protocol.Status_OK, Shards: shards}
	if !req.DryRun && len(ops) != 0 {
		resp, err := s.cfg.Etcd.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "unassigning shards: %v", err)
		}
		if !resp.Succeeded {
			out.Status = protocol.Status_REVISION_MISMATCH
		} else if err := s.awaitRevision(ctx, resp.Header.Revision); err != nil {
			return nil, err
		}
	}
	out.Header = s.header()
	return out, nil
}

// Require fails with PermissionDenied unless ctx's request may do want to
// the shard: checked against its spec's labels, or its ID alone if it has
// no spec, so that a caller learns nothing of shards outside its token's
// selector. Applications' own RPCs, served beside the Shard service, check
// their callers with it too.
func (s *Server) Require(ctx context.Context, want auth.Capability, shard string) error {
	if s.cfg.Auth == nil {
		return nil
	}
	return s.cfg.Auth.Require(ctx, want, "shard", shard, s.shardLabels(shard))
}

// shardLabels are the labels, with meta-labels, of the shard's spec as the
// process knows it, or of its ID alone.
func (s *Server) shardLabels(id string) labels.Set {
	state, _ := s.resolver.snapshot()
	if i := state.ItemIndex(id); i >= 0 {
		return state.Items[i].Value.(*ShardSpec).LabelSetWithMeta()
	}
	return (&ShardSpec{ID: id}).LabelSetWithMeta()
}

// requireApply checks that the request may apply each of its changes: to
// the shard as it is, and to its new spec, so that no one moves a shard
// into or out of a selector that bounds them.
//
// A create (expected mod revision 0) of a shard that does not exist has
// no "as it is" to check: its new spec is all there is, and the
// transaction fails if the shard appears meanwhile. Checking its ID alone
// instead would refuse every token whose selector matches by label. Any
// other change of a shard this process does not know keeps the ID-only
// check, so that it learns nothing of shards outside its selector.
func (s *Server) requireApply(ctx context.Context, req *protocol.ShardApplyRequest) error {
	if s.cfg.Auth == nil {
		return nil
	}
	state, _ := s.resolver.snapshot()
	for _, c := range req.Changes {
		id := c.Delete
		if c.Delete == "" {
			spec, err := UnmarshalShardSpec(c.Upsert)
			if err != nil {
				return protocol.InvalidArgument(err)
			}
			id = spec.ID
			if err := s.cfg.Auth.Require(ctx, auth.Apply, "shard", id, spec.LabelSetWithMeta()); err != nil {
				return err
			}
			if c.ExpectModRevision == 0 && state.ItemIndex(id) < 0 {
				continue
			}
		}
		if err := s.Require(ctx, auth.Apply, id); err != nil {
			return err
		}
	}
	return nil
}
