package consumer

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/protocol"
)

// A lease renewed every third of its TTL passes; one that fell below what
// renewal keeps, by a second's margin, or expired, does not; short TTLs
// pass until they expire.
func TestLeaseRenewing(t *testing.T) {
	for _, tc := range []struct {
		granted, remaining int64
		want               bool
	}{
		{8, 8, true}, {8, 4, true}, {8, 3, true}, {8, 2, false}, {8, 0, false}, {8, -1, false},
		{10, 5, true}, {10, 4, false},
		{30, 18, true}, {30, 17, false},
		{3, 0, true}, {3, -1, false},
		{2, 0, true}, {1, 0, true}, {1, -1, false},
	} {
		if got := (leaseTTL{tc.granted, tc.remaining}).renewing(); got != tc.want {
			t.Errorf("granted %ds, %ds left: renewing %v, want %v", tc.granted, tc.remaining, got, tc.want)
		}
	}
}

// Liveness asks etcd of each assignment's lease: a fresh lease is live, a
// revoked one expiring (expired), and an assignment whose member has no
// key is gone.
func TestLivenessOfAssignments(t *testing.T) {
	etcd, _ := etcdtest.Client(t)
	ctx := context.Background()
	grant := func() int64 {
		resp, err := etcd.Grant(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		return int64(resp.ID)
	}
	live, revoked, orphan := grant(), grant(), grant()
	if _, err := etcd.Revoke(ctx, clientv3.LeaseID(revoked)); err != nil {
		t.Fatal(err)
	}
	as := []allocator.AssignmentKV{
		{KV: &mvccpb.KeyValue{Key: []byte("live"), Lease: live}},
		{KV: &mvccpb.KeyValue{Key: []byte("revoked"), Lease: revoked}},
		{KV: &mvccpb.KeyValue{Key: []byte("orphan"), Lease: orphan}, Member: -1},
		{KV: &mvccpb.KeyValue{Key: []byte("leaseless")}},
	}
	got := liveness(ctx, etcd, as)
	for key, want := range map[string]protocol.ProcessLiveness{
		"live": protocol.ProcessLiveness_LIVE, "revoked": protocol.ProcessLiveness_LEASE_EXPIRING,
		"orphan": protocol.ProcessLiveness_MEMBER_GONE, "leaseless": protocol.ProcessLiveness_LIVENESS_UNKNOWN,
	} {
		if got[key].code != want {
			t.Errorf("%s: %s, want %s", key, got[key].code, want)
		}
	}
	if r := got["revoked"].remaining; r == nil || *r != -1 {
		t.Errorf("revoked lease: remaining %v, want -1", r)
	}
	if r := got["live"].remaining; r == nil || *r < 29 {
		t.Errorf("fresh lease of 30s: remaining %v", r)
	}
}
