package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/quire-dev/quire/protocol"
)

func dyingReplica(r *protocol.ShardListResponse_Replica, l protocol.ProcessLiveness, left *int64) *protocol.ShardListResponse_Replica {
	r.Liveness, r.LeaseRemainingSeconds = l, left
	return r
}

func seconds(n int64) *int64 { return &n }

// The table and the JSON say which replicas' processes are dead or dying,
// and a dying primary is not asked for its lag.
func TestShardsListShowsDeadProcesses(t *testing.T) {
	shards := []listedShard{
		testShard(t, "{id: a/one, sources: [in/a]}",
			dyingReplica(testReplica("za", "c1", 0, protocol.ReplicaCode_PRIMARY, ""), protocol.ProcessLiveness_LEASE_EXPIRING, seconds(3)),
			dyingReplica(testReplica("zb", "c2", 1, protocol.ReplicaCode_STANDBY, ""), protocol.ProcessLiveness_LIVE, seconds(7))),
		testShard(t, "{id: a/two, sources: [in/a]}",
			dyingReplica(testReplica("za", "c1", 0, protocol.ReplicaCode_PRIMARY, ""), protocol.ProcessLiveness_LEASE_EXPIRING, seconds(-1)),
			dyingReplica(testReplica("zb", "c3", 1, protocol.ReplicaCode_STANDBY, ""), protocol.ProcessLiveness_MEMBER_GONE, nil)),
		testShard(t, "{id: a/three, sources: [in/a]}",
			dyingReplica(testReplica("zb", "c3", 0, protocol.ReplicaCode_PRIMARY, ""), protocol.ProcessLiveness_MEMBER_GONE, seconds(2))),
		testShard(t, "{id: a/four, sources: [in/a]}",
			testReplica("zb", "c2", 0, protocol.ReplicaCode_PRIMARY, "")), // Liveness unknown: an older server.
	}
	want := `ID       STATUS   PRIMARY                    REPLICAS                                    LAG
a/one    PRIMARY  za#c1 (lease expiring 3s)  za#c1:PRIMARY(expiring:3s) zb#c2:STANDBY    -
a/two    PRIMARY  za#c1 (lease expired)      za#c1:PRIMARY(expired) zb#c3:STANDBY(gone)  -
a/three  PRIMARY  zb#c3 (member gone)        zb#c3:PRIMARY(gone)                         -
a/four   PRIMARY  zb#c2                      zb#c2:PRIMARY                               -
`
	stats := make([]shardStat, len(shards))
	if got := string(shardsTable(shards, stats)); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	for i, sh := range shards {
		if got := hasServingPrimary(sh); got != (i == 3) {
			t.Errorf("%s: hasServingPrimary %v", sh.spec.ID, got)
		}
	}

	out, err := shardsJSON(shards, stats)
	if err != nil {
		t.Fatal(err)
	}
	var decoded shardsListJSON
	if err := json.Unmarshal(out, &decoded); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	one, two, four := decoded.Shards[0].Replicas, decoded.Shards[1].Replicas, decoded.Shards[3].Replicas
	if one[0].Liveness != "LEASE_EXPIRING" || *one[0].LeaseRemainingSeconds != 3 || one[1].Liveness != "LIVE" ||
		*two[0].LeaseRemainingSeconds != -1 || two[1].Liveness != "MEMBER_GONE" || two[1].LeaseRemainingSeconds != nil ||
		four[0].Liveness != "" || four[0].LeaseRemainingSeconds != nil {
		t.Errorf("json:\n%s", out)
	}
	if strings.Contains(string(out[strings.Index(string(out), `"a/four"`):]), "liveness") {
		t.Errorf("json of a replica of unknown liveness names one:\n%s", out)
	}
}
