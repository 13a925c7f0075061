package allocator

import (
	"context"
	"fmt"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/internal/etcdtest"
)

func TestBatchPacksWholeGroupsWithinLimits(t *testing.T) {
	for _, tc := range []struct {
		name          string
		max, groups   int
		cmps, ops     int
		wantTxns      int
		wantErrSubstr string
	}{
		{name: "one txn", max: 128, groups: 10, cmps: 3, ops: 2, wantTxns: 1},
		{name: "ops bound", max: 10, groups: 12, cmps: 1, ops: 3, wantTxns: 4}, // 3 groups of 3 ops per txn
		{name: "cmps bound", max: 10, groups: 9, cmps: 4, ops: 1, wantTxns: 5}, // 1 leader cmp + 2 groups of 4
		{name: "exact fit", max: 9, groups: 4, cmps: 2, ops: 3, wantTxns: 2},   // 3 ops ×3 = 9
		{name: "group too big", max: 4, groups: 1, cmps: 1, ops: 5, wantErrSubstr: "exceeds the 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBatch(nil, tc.max, clientv3.Compare(clientv3.ModRevision("leader"), "=", 1))
			var err error
			for g := 0; g < tc.groups && err == nil; g++ {
				for c := range tc.cmps {
					b.If(clientv3.Compare(clientv3.ModRevision(fmt.Sprintf("g%d-c%d", g, c)), "=", 1))
				}
				for o := range tc.ops {
					b.Then(clientv3.OpDelete(fmt.Sprintf("g%d-o%d", g, o)))
				}
				err = b.Checkpoint(roundStats{})
			}
			if tc.wantErrSubstr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErrSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b.flush()
			if len(b.txns) != tc.wantTxns {
				t.Fatalf("%d transactions, want %d", len(b.txns), tc.wantTxns)
			}
			total := 0
			for i, txn := range b.txns {
				if len(txn.cmps) > tc.max || len(txn.ops) > tc.max {
					t.Errorf("txn %d has %d compares and %d ops, over %d", i, len(txn.cmps), len(txn.ops), tc.max)
				}
				if len(txn.ops)%tc.ops != 0 {
					t.Errorf("txn %d has %d ops: a group of %d was split", i, len(txn.ops), tc.ops)
				}
				if string(txn.cmps[0].KeyBytes()) != "leader" {
					t.Errorf("txn %d does not check the leader key first", i)
				}
				total += len(txn.ops)
			}
			if total != tc.groups*tc.ops {
				t.Errorf("%d ops in all, want %d", total, tc.groups*tc.ops)
			}
		})
	}
}

func TestBatchDedupesSharedCompares(t *testing.T) {
	b := newBatch(nil, 128, clientv3.Compare(clientv3.ModRevision("leader"), "=", 1))
	for g := range 5 {
		b.If(clientv3.Compare(clientv3.ModRevision("member"), "=", 7), clientv3.Compare(clientv3.ModRevision("leader"), "=", 1))
		b.Then(clientv3.OpDelete(fmt.Sprint(g)))
		if err := b.Checkpoint(roundStats{}); err != nil {
			t.Fatal(err)
		}
	}
	b.flush()
	if len(b.txns) != 1 || len(b.txns[0].cmps) != 2 {
		t.Fatalf("got %d txns, first with %d compares; want 1 with 2", len(b.txns), len(b.txns[0].cmps))
	}
}

// A server configured with a small --max-txn-ops accepts the batches built
// for it.
func TestBatchCommitsAgainstServerLimit(t *testing.T) {
	srv, err := etcdtest.Start(t.TempDir(), etcdtest.Options{MaxTxnOps: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	b := newBatch(client, 8)
	for g := range 10 {
		key := fmt.Sprintf("k%02d", g)
		b.If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
		b.Then(clientv3.OpPut(key, "v"), clientv3.OpPut(key+"-2", "v"))
		if err := b.Checkpoint(roundStats{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Commit(ctx, 1)
	committed := res.committed
	if err != nil {
		t.Fatal(err)
	}
	if committed != 3 {
		t.Errorf("committed %d transactions, want 3 (4+4+2 groups)", committed)
	}
	resp, err := client.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 20 {
		t.Errorf("%d keys written, want 20", resp.Count)
	}
	// One more than the server allows is refused by the server: the limit
	// is real.
	ops := make([]clientv3.Op, 9)
	for i := range ops {
		ops[i] = clientv3.OpPut(fmt.Sprint("x", i), "v")
	}
	if _, err := client.Txn(ctx).Then(ops...).Commit(); err == nil {
		t.Fatal("server accepted 9 operations with --max-txn-ops 8")
	}
}
