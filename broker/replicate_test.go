package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

func TestAnswerProposal(t *testing.T) {
	regs := labels.Set{{Name: "author", Value: "a"}}
	for _, tc := range []struct {
		omit      bool
		status    protocol.Status
		registers bool
	}{
		{false, protocol.Status_OK, true},
		{true, protocol.Status_OK, false},
		{true, protocol.Status_PROPOSAL_MISMATCH, true}, // The primary synchronizes next.
		{false, protocol.Status_PROPOSAL_MISMATCH, true},
	} {
		resp := answerProposal(&protocol.ReplicateRequest{OmitRegisters: tc.omit}, tc.status, regs, true)
		if got := len(resp.Registers) != 0; got != tc.registers || resp.Status != tc.status || !resp.RegistersKnown {
			t.Errorf("omit %v, %s: answer %v; want registers: %v", tc.omit, tc.status, resp, tc.registers)
		}
	}
}

// The proposals that commit appends ask for no registers in their
// answers; those that build a pipeline, whose answers a primary may adopt
// registers from, do not.
func TestCommitProposalsOmitRegisters(t *testing.T) {
	const journal = "log/omit"
	c := newCluster(t)
	primary, _, _ := c.threeReplicas(journal)
	type seen struct {
		end  int64
		omit bool
	}
	var mu sync.Mutex
	var proposals []seen
	proposalHook = func(r *replica, req *protocol.ReplicateRequest) error {
		if r.journal == journal {
			mu.Lock()
			proposals = append(proposals, seen{req.Proposal.GetEnd(), req.OmitRegisters})
			mu.Unlock()
		}
		return nil
	}
	t.Cleanup(func() { proposalHook = func(*replica, *protocol.ReplicateRequest) error { return nil } })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends := map[int64]bool{}
	for _, data := range []string{"one\n", "two\n"} {
		resp, err := appendOnce(ctx, primary, &protocol.AppendRequest{Journal: journal}, []byte(data))
		if err != nil || resp.Status != protocol.Status_OK {
			t.Fatalf("append %q: %v, %v", data, resp, err)
		}
		ends[resp.Commit.GetEnd()] = true
	}
	mu.Lock()
	defer mu.Unlock()
	commits := 0
	for _, p := range proposals {
		switch {
		case ends[p.end]: // The appends' commits, at each peer.
			commits++
			if !p.omit {
				t.Errorf("the commit to offset %d asks for the peer's registers", p.end)
			}
		case p.omit:
			t.Errorf("a proposal to offset %d, not an append's commit, asks for no registers", p.end)
		}
	}
	if commits != 4 {
		t.Errorf("peers saw %d commit proposals, want 4 (2 appends × 2 peers): %v", commits, proposals)
	}
}
