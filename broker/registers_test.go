package broker

import (
	"context"
	"testing"
	"time"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// registered appends through b with an author register check, retrying
// while the journal has no primary or its pipeline is being rebuilt, and
// returns the final status.
func (c *cluster) registered(b *testBroker, journal, author string) protocol.Status {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: journal, CheckRegisters: "author=" + author},
			[]byte("by "+author+"\n"))
		if err == nil && resp.Status != protocol.Status_NO_PRIMARY && resp.Status != protocol.Status_INSUFFICIENT_REPLICAS {
			return resp.Status
		}
		if ctx.Err() != nil {
			c.t.Fatalf("append to %s: %v %v", journal, resp, err)
		}
		time.Sleep(20 * time.Millisecond) // The journal is moving.
	}
}

// setAuthor sets the journal's author register through b.
func (c *cluster) setAuthor(b *testBroker, journal, author string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: journal,
		UnionRegisters: []*protocol.Label{{Name: "author", Value: author}}}, []byte("taken\n"))
	if err != nil || resp.Status != protocol.Status_OK {
		c.t.Fatalf("setting the author of %s: %v %v", journal, resp, err)
	}
}

// A broker of a journal of replication 1 that restarts on its disk keeps
// the journal's registers: it recovers them from its spool. (They fence
// recovery logs: lost, the log's recorder would find itself fenced.)
func TestRegistersSurviveRestart(t *testing.T) {
	c := newCluster(t)
	b := c.start("b1", "")
	const journal = "log/registers"
	c.journal(b, journal, 1)
	c.appendRetry(b, journal, []byte("first\n"))
	c.setAuthor(b, journal, "a")
	c.stop(b)
	b = c.start("b1", b.dir)
	if st := c.registered(b, journal, "a"); st != protocol.Status_OK {
		t.Fatalf("an append checking the author register after a restart: %v, want OK", st)
	}
}

// A primary new to a journal, which no proposal reached before it became
// primary (its predecessor vanished as it joined), adopts the registers
// of a peer that knows them, rather than wipe them with its own, empty
// ones; a primary that knows them keeps its own.
func TestAdoptRegisters(t *testing.T) {
	known := &protocol.ReplicateResponse{Status: protocol.Status_PROPOSAL_MISMATCH, RegistersKnown: true,
		Registers: []*protocol.Label{{Name: "author", Value: "a"}}}
	fresh := &protocol.ReplicateResponse{Status: protocol.Status_OK}
	for _, tc := range []struct {
		name        string
		knows       bool
		own         string
		resps       []*protocol.ReplicateResponse
		want        string
		wantChanged bool
	}{
		{"new primary, a peer knows", false, "", []*protocol.ReplicateResponse{fresh, known}, "author:a", true},
		{"new primary, no peer knows", false, "", []*protocol.ReplicateResponse{fresh}, "", false},
		{"new primary, its recovered registers, no peer knows", false, "author:old", []*protocol.ReplicateResponse{fresh}, "author:old", false},
		{"new primary, its recovered registers, a peer knows", false, "author:old", []*protocol.ReplicateResponse{known}, "author:a", true},
		{"primary that knows", true, "author:b", []*protocol.ReplicateResponse{known}, "author:b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReplica(&Server{ctx: context.Background(), log: testLogger}, "log/j")
			r.registersKnown = tc.knows
			if tc.own != "" {
				r.registers = labels.Set{{Name: "author", Value: tc.own[len("author:"):]}}
			}
			changed := r.adoptRegisters(tc.resps)
			got := ""
			if len(r.registers) != 0 {
				got = r.registers[0].Name + ":" + r.registers[0].Value
			}
			if got != tc.want || changed != tc.wantChanged || !r.registersKnown {
				t.Errorf("registers %q, changed %v, known %v; want %q, %v, true", got, changed, r.registersKnown, tc.want, tc.wantChanged)
			}
		})
	}
}
