package recoverylog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// StoreHints keeps hints in etcd at key, and rotates the hints it replaces
// into backups at key.1 … key.N (key.1 the newest), in one transaction:
// if the latest hints turn out unusable (their log content was lost), a
// player falls back to an older one. backups ≤ 0 keeps none.
func StoreHints(ctx context.Context, c *clientv3.Client, key string, h *Hints, backups int) error {
	raw, err := MarshalHints(h)
	if err != nil {
		return err
	}
	keys := hintKeys(key, backups)
	resp, err := c.Txn(ctx).Then(getAll(keys)...).Commit()
	if err != nil {
		return fmt.Errorf("reading hints at %s: %w", key, err)
	}
	var cmps []clientv3.Cmp
	ops := []clientv3.Op{clientv3.OpPut(key, string(raw))}
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().Kvs
		var mod int64
		if len(kvs) == 1 {
			mod = kvs[0].ModRevision
			if i+1 < len(keys) {
				ops = append(ops, clientv3.OpPut(keys[i+1], string(kvs[0].Value)))
			}
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(keys[i]), "=", mod))
	}
	put, err := c.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("storing hints at %s: %w", key, err)
	}
	if !put.Succeeded {
		return fmt.Errorf("storing hints at %s: %w", key, ErrHintsRaced)
	}
	return nil
}

// ErrHintsRaced is returned by StoreHints when another writer changed the
// hints between its read and its write.
var ErrHintsRaced = errors.New("hints changed concurrently")

// LoadHints returns the hints at key and its backups, newest first, leaving
// out those absent or undecodable (which it logs).
func LoadHints(ctx context.Context, c *clientv3.Client, key string, backups int) ([]*Hints, error) {
	keys := hintKeys(key, backups)
	resp, err := c.Txn(ctx).Then(getAll(keys)...).Commit()
	if err != nil {
		return nil, fmt.Errorf("loading hints at %s: %w", key, err)
	}
	var out []*Hints
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) != 1 {
			continue
		}
		h, err := UnmarshalHints(kvs[0].Value)
		if err != nil {
			slog.Warn("skipping undecodable recovery-log hints", "key", keys[i], "err", err)
			continue
		}
		out = append(out, h)
	}
	return out, nil
}

func hintKeys(key string, backups int) []string {
	keys := []string{key}
	for i := 1; i <= backups; i++ {
		keys = append(keys, key+"."+strconv.Itoa(i))
	}
	return keys
}

func getAll(keys []string) []clientv3.Op {
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(k)
	}
	return ops
}

// PlayFirst plays the log into cfg.Dir from the first of candidates (hints,
// newest first, as LoadHints returns them; a nil entry plays from the
// log's start) that plays: a candidate whose log content is gone, or whose
// playback fails otherwise, is logged and the next one is tried, in the
// directory emptied of what the failed one played. cfg.Dir must not exist
// or be empty, as for NewPlayer: PlayFirst never removes what it did not
// play. It returns the player that succeeded.
func PlayFirst(ctx context.Context, cfg PlayerConfig, candidates []*Hints) (*Player, error) {
	var errs []error
	for i, h := range candidates {
		if i > 0 {
			if err := os.RemoveAll(cfg.Dir); err != nil {
				return nil, fmt.Errorf("emptying %s for playback: %w", cfg.Dir, err)
			}
		}
		c := cfg
		c.Hints = h
		p, err := NewPlayer(c)
		if err == nil {
			err = p.Play(ctx)
		}
		if err == nil {
			return p, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		slog.Warn("recovery-log playback failed; trying older hints", "candidate", i, "err", err)
		errs = append(errs, fmt.Errorf("candidate %d: %w", i, err))
	}
	return nil, fmt.Errorf("no hints played: %w", errors.Join(errs...))
}
