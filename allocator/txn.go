package allocator

import (
	"context"
	"fmt"

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
	txnCmps []clientv3.Cmp
	txnOps  []clientv3.Op
	seen    map[string]bool

	// Transactions ready to commit, in order.
	txns []pendingTxn
}

type pendingTxn struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
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
	b.seen = make(map[string]bool)
	for _, c := range b.common {
		b.seen[cmpKey(c)] = true
	}
}

// If adds compares to the current group.
func (b *batch) If(cmps ...clientv3.Cmp) { b.cmps = append(b.cmps, cmps...) }

// Then adds operations to the current group.
func (b *batch) Then(ops ...clientv3.Op) { b.ops = append(b.ops, ops...) }

// Checkpoint closes the current group, starting a new transaction first if
// the group does not fit in the current one.
func (b *batch) Checkpoint() error {
	defer func() { b.cmps, b.ops = b.cmps[:0], b.ops[:0] }()
	if len(b.ops) == 0 {
		return nil
	}
	if fresh := b.newCmps(); len(b.txnCmps)+len(fresh) > b.max || len(b.txnOps)+len(b.ops) > b.max {
		if len(b.txnOps) == 0 {
			return fmt.Errorf("a group of %d compares and %d operations exceeds the %d allowed in one etcd transaction (raise --max-txn-ops)",
				len(b.common)+len(fresh), len(b.ops), b.max)
		}
		b.flush()
	}
	for _, c := range b.cmps {
		if k := cmpKey(c); !b.seen[k] {
			b.seen[k] = true
			b.txnCmps = append(b.txnCmps, c)
		}
	}
	b.txnOps = append(b.txnOps, b.ops...)
	return nil
}

// newCmps are the group's compares not yet in the current transaction.
func (b *batch) newCmps() []clientv3.Cmp {
	var out []clientv3.Cmp
	seen := make(map[string]bool)
	for _, c := range b.cmps {
		if k := cmpKey(c); !b.seen[k] && !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	return out
}

func (b *batch) flush() {
	if len(b.txnOps) != 0 {
		b.txns = append(b.txns, pendingTxn{cmps: b.txnCmps, ops: b.txnOps})
	}
	b.reset()
}

// Commit flushes and commits the transactions in order, stopping at the
// first whose compares fail. It returns the number of transactions that
// succeeded and the revision of the last one attempted (0 if none).
func (b *batch) Commit(ctx context.Context) (committed int, rev int64, err error) {
	b.flush()
	for _, t := range b.txns {
		resp, err := b.client.Txn(ctx).If(t.cmps...).Then(t.ops...).Commit()
		if err != nil {
			return committed, rev, fmt.Errorf("committing allocator transaction of %d operations: %w", len(t.ops), err)
		}
		rev = resp.Header.Revision
		if !resp.Succeeded {
			return committed, rev, nil
		}
		committed++
	}
	return committed, rev, nil
}

// Txns is the number of transactions built so far.
func (b *batch) Txns() int { return len(b.txns) }

// cmpKey identifies a compare: its key, target, operator and operand.
func cmpKey(c clientv3.Cmp) string {
	p := c.GetCompare()
	return fmt.Sprintf("%s\x00%d\x00%d\x00%d\x00%d\x00%d\x00%d\x00%s",
		p.Key, p.Target, p.Result, p.GetModRevision(), p.GetCreateRevision(), p.GetVersion(), p.GetLease(), p.GetValue())
}
