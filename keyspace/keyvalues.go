package keyspace

import (
	"iter"

	"github.com/google/btree"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// KeyValue is a key of the mirror: its raw etcd KeyValue (key, create and
// mod revision, version, lease, value) and its decoded value. It is shared
// by every snapshot that holds the key, and must not be modified.
type KeyValue struct {
	// Raw is the key as etcd returned it.
	Raw *mvccpb.KeyValue
	// Decoded is what the KeySpace's Decoder returned for Raw.
	Decoded any
}

// KeyValues is an immutable set of keys, in key order, or a view of the
// keys of such a set within a range. The zero KeyValues is empty.
//
// It is a copy-on-write B-tree: a change builds a new version that shares
// every node the change does not touch with the version before. A mirror of
// 80,000 keys under a stream of small transactions builds a version per
// transaction; as a sorted slice, each of those copied every key (640 KB),
// and those copies and the collector they kept busy were most of the
// mirror's cost. A version now copies a few nodes per changed key.
type KeyValues struct {
	tree *btree.BTreeG[*KeyValue]
	// lo and hi bound a view to the keys in [lo, hi); nil is unbounded.
	lo, hi *KeyValue
}

// degree is the B-tree's minimum number of children per inner node: a
// change copies about log_degree(n) nodes of up to 2·degree-1 keys each.
const degree = 16

func lessKey(a, b *KeyValue) bool { return string(a.Raw.Key) < string(b.Raw.Key) }

// newTree returns an empty, writable tree.
func newTree() *btree.BTreeG[*KeyValue] { return btree.NewG(degree, lessKey) }

// NewKeyValues returns the KeyValues of kvs, in any order; of two with the
// same key, the later is kept.
func NewKeyValues(kvs ...*KeyValue) KeyValues {
	t := newTree()
	for _, kv := range kvs {
		t.ReplaceOrInsert(kv)
	}
	return KeyValues{tree: t}
}

// probe returns a KeyValue that orders as key does.
func probe(key string) *KeyValue {
	return &KeyValue{Raw: &mvccpb.KeyValue{Key: []byte(key)}}
}

// All returns the keys in order.
func (kvs KeyValues) All() iter.Seq[*KeyValue] {
	return func(yield func(*KeyValue) bool) {
		switch {
		case kvs.tree == nil:
		case kvs.lo == nil && kvs.hi == nil:
			kvs.tree.Ascend(yield)
		case kvs.hi == nil:
			kvs.tree.AscendGreaterOrEqual(kvs.lo, yield)
		case kvs.lo == nil:
			kvs.tree.AscendLessThan(kvs.hi, yield)
		default:
			kvs.tree.AscendRange(kvs.lo, kvs.hi, yield)
		}
	}
}

// Len returns the number of keys. It counts the keys of a view, one by one.
func (kvs KeyValues) Len() int {
	if kvs.tree == nil {
		return 0
	}
	if kvs.lo == nil && kvs.hi == nil {
		return kvs.tree.Len()
	}
	n := 0
	for range kvs.All() {
		n++
	}
	return n
}

// Get returns the value of key, if kvs holds it.
func (kvs KeyValues) Get(key string) (*KeyValue, bool) {
	if kvs.tree == nil || !kvs.within(key) {
		return nil, false
	}
	return kvs.tree.Get(probe(key))
}

// within reports whether key is within the bounds of the view.
func (kvs KeyValues) within(key string) bool {
	return (kvs.lo == nil || string(kvs.lo.Raw.Key) <= key) &&
		(kvs.hi == nil || key < string(kvs.hi.Raw.Key))
}

// Prefixed returns the view of the keys of kvs that begin with prefix.
func (kvs KeyValues) Prefixed(prefix string) KeyValues {
	if end, ok := prefixEnd(prefix); ok {
		return kvs.Range(prefix, end)
	}
	return kvs.Range(prefix, "")
}

// Range returns the view of the keys of kvs in [from, to); to == "" has
// no upper bound. The view is empty if to is not above from.
func (kvs KeyValues) Range(from, to string) KeyValues {
	if kvs.lo != nil && string(kvs.lo.Raw.Key) > from {
		from = string(kvs.lo.Raw.Key)
	}
	if kvs.hi != nil && (to == "" || string(kvs.hi.Raw.Key) < to) {
		to = string(kvs.hi.Raw.Key)
	}
	if kvs.tree == nil || (to != "" && to <= from) {
		return KeyValues{}
	}
	v := KeyValues{tree: kvs.tree}
	if from != "" {
		v.lo = probe(from)
	}
	if to != "" {
		v.hi = probe(to)
	}
	return v
}

// prefixEnd returns the least key above every key that begins with prefix,
// and false if there is none (prefix is empty or all 0xff bytes).
func prefixEnd(prefix string) (string, bool) {
	end := []byte(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return string(end[:i+1]), true
		}
	}
	return "", false
}
