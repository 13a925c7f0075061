// Package fleet tells what kind of fleet lives under an etcd prefix —
// the brokers, a consumer application, or a plain allocator fleet — and
// finds the fleets under a prefix, for the tools that look at a whole
// deployment (quire allocator plan, the console) without being told each
// fleet's root.
package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/broker"
	"github.com/quire-dev/quire/consumer"
)

// Kind is the kind of a fleet.
type Kind string

const (
	Brokers   Kind = "brokers"   // journals on brokers
	Consumers Kind = "consumers" // a consumer application's shards on its processes
	Plain     Kind = "plain"     // members of quire allocator member
)

// Decoders are the allocator decoders of a fleet of kind k. Keys of an
// owner's own under its root (cut reports, recovery-log hints) are
// skipped.
func (k Kind) Decoders() allocator.Decoders {
	var d allocator.Decoders
	switch k {
	case Brokers:
		d = broker.Decoders
	case Consumers:
		d = consumer.Decoders
	}
	d.SkipOthers = true
	return d
}

// KindOf tells the kind of the fleet under root by its first item, else
// its first member: an item with a name is a journal, one with an id a
// shard; a fleet without items is the brokers' if its members have
// endpoints. A consumer process's member spec has an endpoint too, so a
// consumer application with no shards reads as brokers: name its kind
// where that matters.
func KindOf(ctx context.Context, etcd *clientv3.Client, root string) (Kind, error) {
	var probe struct {
		Name, ID, Endpoint *string
	}
	for _, under := range []string{allocator.ItemsPrefix, allocator.MembersPrefix} {
		resp, err := etcd.Get(ctx, root+under, clientv3.WithPrefix(), clientv3.WithLimit(1))
		if err != nil {
			return "", fmt.Errorf("reading fleet %s: %w", root, err)
		}
		if len(resp.Kvs) == 1 && json.Unmarshal(resp.Kvs[0].Value, &probe) == nil {
			break
		}
	}
	switch {
	case probe.ID != nil:
		return Consumers, nil
	case probe.Name != nil, probe.Endpoint != nil:
		return Brokers, nil
	}
	return Plain, nil
}

// Found is a fleet that Discover found.
type Found struct {
	Root string
	Kind Kind
}

// Discover finds the fleets whose roots are under prefix: every root R
// such that a key R+"members/…", R+"items/…" or R+"assign/…" exists. It
// reads keys only, and skips the rest of a fleet once it found its root,
// so its cost is a few keys per fleet, not the fleet's size.
func Discover(ctx context.Context, etcd *clientv3.Client, prefix string) ([]Found, error) {
	var found []Found
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := etcd.Get(ctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(),
			clientv3.WithLimit(64), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
		if err != nil {
			return nil, fmt.Errorf("finding fleets under %s: %w", prefix, err)
		}
		next := ""
		for _, kv := range resp.Kvs {
			if root, ok := rootOf(kv.Key, prefix); ok {
				kind, err := KindOf(ctx, etcd, root)
				if err != nil {
					return nil, err
				}
				found = append(found, Found{Root: root, Kind: kind})
				next = clientv3.GetPrefixRangeEnd(root)
				break
			}
		}
		switch {
		case next != "":
			from = next
		case resp.More && len(resp.Kvs) > 0:
			from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		default:
			sort.Slice(found, func(i, j int) bool { return found[i].Root < found[j].Root })
			return found, nil
		}
		if end != "\x00" && from >= end {
			return found, nil
		}
	}
}

// rootOf is the fleet root of key, if key is a fleet's member, item or
// assignment: the key up to the first "/members/", "/items/" or
// "/assign/" at or after prefix's last byte.
func rootOf(key []byte, prefix string) (string, bool) {
	start := max(len(prefix)-1, 0)
	if len(key) < start {
		return "", false
	}
	best := -1
	for _, marker := range []string{allocator.MembersPrefix, allocator.ItemsPrefix, allocator.AssignmentsPrefix} {
		if i := bytes.Index(key[start:], []byte("/"+marker)); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	return string(key[:start+best+1]), true
}
