package consumer

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/protocol"
)

// livenessTimeout bounds the lease queries of a List: past it, the
// liveness of the processes not yet answered for is unknown, rather than
// the list late.
const livenessTimeout = time.Second

// leaseTTL is a lease as etcd reports it: its granted TTL and the time
// left, in whole seconds (-1 once expired).
type leaseTTL struct{ granted, remaining int64 }

// leaseTTLs asks etcd for the TTLs of leases, a few at a time, within
// livenessTimeout. Leases it did not answer for are missing.
func leaseTTLs(ctx context.Context, etcd *clientv3.Client, leases []int64) map[int64]leaseTTL {
	ctx, cancel := context.WithTimeout(ctx, livenessTimeout)
	defer cancel()
	var mu sync.Mutex
	out := make(map[int64]leaseTTL, len(leases))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, id := range leases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := etcd.TimeToLive(ctx, clientv3.LeaseID(id))
			if err != nil {
				return
			}
			mu.Lock()
			out[id] = leaseTTL{granted: resp.GrantedTTL, remaining: resp.TTL}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// renewing tells whether a lease's remaining TTL is what renewal keeps.
// etcd's client renews a lease a third of its TTL after the last renewal,
// checking every half second, so a live holder's lease never shows much
// less than two thirds of its TTL. Less than that, by a second's margin
// for latency and pauses, means the holder stopped renewing: it died,
// froze, or lost etcd. Short TTLs leave no margin, and pass as renewed
// until they expire.
func (l leaseTTL) renewing() bool {
	floorMillis := l.granted*1000*2/3 - 500 - 1000
	return l.remaining >= 0 && l.remaining >= floorMillis/1000
}

// processLiveness is whether an assignment's process is alive, and the
// seconds left on its lease (nil if etcd did not say).
type processLiveness struct {
	code      protocol.ProcessLiveness
	remaining *int64
}

// liveness tells, for each of the assignments, whether its process is
// alive, keyed by the assignment's key: one question to etcd per lease
// (per process), so a List of many shards asks only a few.
func liveness(ctx context.Context, etcd *clientv3.Client, as []allocator.AssignmentKV) map[string]processLiveness {
	var leases []int64
	seen := map[int64]bool{}
	for _, a := range as {
		if l := a.KV.Lease; l != 0 && !seen[l] {
			seen[l] = true
			leases = append(leases, l)
		}
	}
	ttls := leaseTTLs(ctx, etcd, leases)
	out := make(map[string]processLiveness, len(as))
	for _, a := range as {
		var l processLiveness
		ttl, known := ttls[a.KV.Lease]
		switch {
		case a.Member < 0:
			l.code = protocol.ProcessLiveness_MEMBER_GONE
		case !known:
			l.code = protocol.ProcessLiveness_LIVENESS_UNKNOWN
		case ttl.renewing():
			l.code = protocol.ProcessLiveness_LIVE
		default:
			l.code = protocol.ProcessLiveness_LEASE_EXPIRING
		}
		if known {
			l.remaining = &ttl.remaining
		}
		out[string(a.KV.Key)] = l
	}
	return out
}
