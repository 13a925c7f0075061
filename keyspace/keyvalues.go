package keyspace

import (
	"slices"
	"sort"
	"strings"

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

// KeyValues is sorted by Raw.Key, with no duplicate keys. It holds
// pointers, so that each change applied, which builds a new KeyValues,
// copies one word per key rather than three: in a mirror of 80,000 keys
// under a stream of changes, that copy is most of the mirror's cost.
type KeyValues []*KeyValue

// Search returns the index of key in kvs and true, or, if key is absent, the
// index at which it would be inserted and false.
func (kvs KeyValues) Search(key string) (int, bool) {
	i := kvs.lowerBound(key)
	return i, i < len(kvs) && string(kvs[i].Raw.Key) == key
}

// Prefixed returns the sub-slice of kvs whose keys begin with prefix. It
// shares kvs's backing array; appending to it never overwrites kvs.
func (kvs KeyValues) Prefixed(prefix string) KeyValues {
	from := kvs.lowerBound(prefix)
	rest := kvs[from:]
	// Keys from `from` on are >= prefix, so those having prefix come first.
	n := sort.Search(len(rest), func(i int) bool {
		return !strings.HasPrefix(string(rest[i].Raw.Key), prefix)
	})
	return rest[:n:n]
}

// Range returns the sub-slice of kvs whose keys are in [from, to); it is
// empty if to <= from. It shares kvs's backing array; appending to it never
// overwrites kvs.
func (kvs KeyValues) Range(from, to string) KeyValues {
	if to <= from {
		return nil
	}
	i, j := kvs.lowerBound(from), kvs.lowerBound(to)
	return kvs[i:j:j]
}

// lowerBound returns the index of the first key >= key.
func (kvs KeyValues) lowerBound(key string) int {
	return sort.Search(len(kvs), func(i int) bool { return string(kvs[i].Raw.Key) >= key })
}

// change is the new state of one key within a batch; a nil kv removes the
// key from the mirror.
type change struct {
	key string
	kv  *KeyValue
}

// sortChanges sorts changes by key and keeps only the last change of each
// key, since changes arrive in revision order.
func sortChanges(cs []change) []change {
	slices.SortStableFunc(cs, func(a, b change) int { return strings.Compare(a.key, b.key) })
	out := cs[:0]
	for i, c := range cs {
		if i+1 < len(cs) && cs[i+1].key == c.key {
			continue
		}
		out = append(out, c)
	}
	return out
}

// merge returns a new KeyValues: old with sorted, unique changes applied.
// old is not modified. It costs O(len(old) + len(cs)·log len(old)).
func merge(old KeyValues, cs []change) KeyValues {
	out := make(KeyValues, 0, len(old)+len(cs))
	i := 0
	for _, c := range cs {
		j := i + old[i:].lowerBound(c.key)
		out = append(out, old[i:j]...)
		i = j
		if i < len(old) && string(old[i].Raw.Key) == c.key {
			i++
		}
		if c.kv != nil {
			out = append(out, c.kv)
		}
	}
	return append(out, old[i:]...)
}
