package allocator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultMaxTxnOps is etcd's default --max-txn-ops: the most compares, and
// the most operations, that one transaction may carry.
const DefaultMaxTxnOps = 128

// batch packs checked groups of compares and operations into few etcd
// transactions. A group (closed by checkpoint) is never split across
// transactions, so each group applies atomically or not at all; every
// transaction also carries the batch's common compares (the leader's own
// member key). Compares of the same key and target are carried once per
// transaction.
type batch struct {
	client *clientv3.Client
	max    int
	common []clientv3.Cmp

	// The group being built.
	cmps []clientv3.Cmp
	ops  []clientv3.Op

	// The transaction being filled with whole groups.
	txnCmps  []clientv3.Cmp
	txnOps   []clientv3.Op
	txnStats roundStats
	seen     map[cmpID]bool
	ids      []cmpID // of the group's compares, by index

	// Transactions ready to commit, in order.
	txns []pendingTxn
}

type pendingTxn struct {
	cmps  []clientv3.Cmp
	ops   []clientv3.Op
	stats roundStats // of its groups
}

func newBatch(client *clientv3.Client, max int, common ...clientv3.Cmp) *batch {
	if max <= 0 {
		max = DefaultMaxTxnOps
	}
	b := &batch{client: client, max: max, common: common}
	b.reset()
	return b
}

func (b *batch) reset() {
	b.txnCmps = append([]clientv3.Cmp(nil), b.common...)
	b.txnOps = nil
	b.txnStats = roundStats{}
	if b.seen == nil {
		b.seen = make(map[cmpID]bool)
	}
	clear(b.seen)
	for _, c := range b.common {
		b.seen[idOf(c)] = true
	}
}

// If adds compares to the current group.
func (b *batch) If(cmps ...clientv3.Cmp) { b.cmps = append(b.cmps, cmps...) }

// Then adds operations to the current group.
func (b *batch) Then(ops ...clientv3.Op) { b.ops = append(b.ops, ops...) }

// Checkpoint closes the current group, whose changes st counts, starting a
// new transaction first if the group does not fit in the current one.
func (b *batch) Checkpoint(st roundStats) error {
	defer func() { b.cmps, b.ops = b.cmps[:0], b.ops[:0] }()
	if len(b.ops) == 0 {
		return nil
	}
	b.ids = b.ids[:0]
	for _, c := range b.cmps {
		b.ids = append(b.ids, idOf(c))
	}
	if fresh := b.fresh(); len(b.txnCmps)+fresh > b.max || len(b.txnOps)+len(b.ops) > b.max {
		if len(b.txnOps) == 0 {
			return fmt.Errorf("a group of %d compares and %d operations exceeds the %d allowed in one etcd transaction (raise --max-txn-ops)",
				len(b.common)+fresh, len(b.ops), b.max)
		}
		b.flush()
	}
	for i, c := range b.cmps {
		if id := b.ids[i]; !b.seen[id] {
			b.seen[id] = true
			b.txnCmps = append(b.txnCmps, c)
		}
	}
	b.txnOps = append(b.txnOps, b.ops...)
	b.txnStats.add(st)
	return nil
}

// fresh counts the group's distinct compares not yet in the current
// transaction. A group holds a few compares, so a scan finds repeats.
func (b *batch) fresh() int {
	n := 0
	for i, id := range b.ids {
		if !b.seen[id] && !slices.Contains(b.ids[:i], id) {
			n++
		}
	}
	return n
}

func (b *batch) flush() {
	if len(b.txnOps) != 0 {
		b.txns = append(b.txns, pendingTxn{cmps: b.txnCmps, ops: b.txnOps, stats: b.txnStats})
	}
	b.reset()
}

// commitResult reports the outcome of Commit.
type commitResult struct {
	committed int        // transactions that succeeded
	stats     roundStats // of the groups of those transactions
	rev       int64      // highest revision of the transactions attempted
}

// Commit flushes and commits the transactions, up to parallel at a time
// (their groups are independent, so their order does not matter).
// Transactions whose compares fail change nothing; the caller learns of
// them from committed < Txns().
func (b *batch) Commit(ctx context.Context, parallel int) (commitResult, error) {
	b.flush()
	parallel = max(1, min(parallel, len(b.txns)))
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		res  commitResult
		err  error
		next = make(chan pendingTxn)
	)
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range next {
				resp, txnErr := b.client.Txn(ctx).If(t.cmps...).Then(t.ops...).Commit()
				mu.Lock()
				if txnErr != nil {
					err = cmp.Or(err, fmt.Errorf("committing allocator transaction of %d operations: %w", len(t.ops), txnErr))
				} else {
					res.rev = max(res.rev, resp.Header.Revision)
					if resp.Succeeded {
						res.committed++
						res.stats.add(t.stats)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, t := range b.txns {
		next <- t
	}
	close(next)
	wg.Wait()
	return res, err
}

// Txns is the number of transactions built so far.
func (b *batch) Txns() int { return len(b.txns) }

// cmpID identifies a compare: two compares of the same ID check the same
// thing, so a transaction carries one of them.
type cmpID struct {
	key, rangeEnd, value string
	target               etcdserverpb.Compare_CompareTarget
	result               etcdserverpb.Compare_CompareResult
	operand              int64 // the version, revision or lease compared against
}

func idOf(c clientv3.Cmp) cmpID {
	p := c.GetCompare()
	id := cmpID{key: string(p.Key), rangeEnd: string(p.RangeEnd), value: string(p.GetValue()), target: p.Target, result: p.Result}
	switch p.Target {
	case etcdserverpb.Compare_VERSION:
		id.operand = p.GetVersion()
	case etcdserverpb.Compare_CREATE:
		id.operand = p.GetCreateRevision()
	case etcdserverpb.Compare_MOD:
		id.operand = p.GetModRevision()
	case etcdserverpb.Compare_LEASE:
		id.operand = p.GetLease()
	}
	return id
}
