package keyspace

import (
	"iter"
	"sort"
	"strings"
	"sync"

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
// A version is a copy-on-write B-tree, which shares every node that its
// change did not touch with the version before; the sorted slice that
// readers iterate and search is built from the tree on first use, once
// per version. A mirror of 80,000 keys under a stream of small
// transactions builds a version per transaction: as sorted slices, each
// would copy every key (640 KB), and those copies and the collector they
// keep busy were most of the mirror's cost. As trees, only versions that
// someone reads pay for a slice.
type KeyValues struct {
	v *version
	// view tells whether [i, j) of v's sorted keys bound this KeyValues;
	// otherwise it holds all of v.
	view bool
	i, j int
}

// version is one version of a mirror.
type version struct {
	tree *btree.BTreeG[*KeyValue] // Never changed once in a version.
	once sync.Once
	flat []*KeyValue // tree's keys in order, once flattened
}

// sorted returns v's keys in order, building the slice on first use.
func (v *version) sorted() []*KeyValue {
	v.once.Do(func() {
		flat := make([]*KeyValue, 0, v.tree.Len())
		v.tree.Ascend(func(kv *KeyValue) bool {
			flat = append(flat, kv)
			return true
		})
		v.flat = flat
	})
	return v.flat
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
	return KeyValues{v: &version{tree: t}}
}

// slice returns the keys of kvs in order. It shares the version's slice,
// which must not be modified.
func (kvs KeyValues) slice() []*KeyValue {
	if kvs.v == nil {
		return nil
	}
	s := kvs.v.sorted()
	if kvs.view {
		return s[kvs.i:kvs.j:kvs.j]
	}
	return s
}

// All returns the keys in order.
func (kvs KeyValues) All() iter.Seq[*KeyValue] {
	return func(yield func(*KeyValue) bool) {
		for _, kv := range kvs.slice() {
			if !yield(kv) {
				return
			}
		}
	}
}

// Len returns the number of keys.
func (kvs KeyValues) Len() int {
	switch {
	case kvs.v == nil:
		return 0
	case kvs.view:
		return kvs.j - kvs.i
	default:
		return kvs.v.tree.Len()
	}
}

// Get returns the value of key, if kvs holds it.
func (kvs KeyValues) Get(key string) (*KeyValue, bool) {
	if kvs.v == nil {
		return nil, false
	}
	if !kvs.view { // The tree answers without building the slice.
		return kvs.v.tree.Get(&KeyValue{Raw: &mvccpb.KeyValue{Key: []byte(key)}})
	}
	s := kvs.slice()
	i := lowerBound(s, key)
	if i < len(s) && string(s[i].Raw.Key) == key {
		return s[i], true
	}
	return nil, false
}

// Prefixed returns the view of the keys of kvs that begin with prefix.
func (kvs KeyValues) Prefixed(prefix string) KeyValues {
	s := kvs.slice()
	from := lowerBound(s, prefix)
	// Keys from `from` on are >= prefix, so those having prefix come first.
	n := sort.Search(len(s)-from, func(i int) bool {
		return !strings.HasPrefix(string(s[from+i].Raw.Key), prefix)
	})
	return kvs.sub(from, from+n)
}

// Range returns the view of the keys of kvs in [from, to); it is empty if
// to is not above from.
func (kvs KeyValues) Range(from, to string) KeyValues {
	if to <= from {
		return KeyValues{}
	}
	s := kvs.slice()
	return kvs.sub(lowerBound(s, from), lowerBound(s, to))
}

// sub returns the view of kvs's keys [i, j), indices of kvs.slice().
func (kvs KeyValues) sub(i, j int) KeyValues {
	if i == j {
		return KeyValues{}
	}
	base := 0
	if kvs.view {
		base = kvs.i
	}
	return KeyValues{v: kvs.v, view: true, i: base + i, j: base + j}
}

// lowerBound returns the index of the first key of s >= key.
func lowerBound(s []*KeyValue, key string) int {
	return sort.Search(len(s), func(i int) bool { return string(s[i].Raw.Key) >= key })
}
