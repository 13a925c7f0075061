package client

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// List returns the journals whose labels (with the meta-labels name and
// prefix) match req.Selector, with their routes, which the client caches.
// It goes to the default broker, and to other known brokers while brokers
// are unreachable, until ctx is done.
func (c *Client) List(ctx context.Context, req *protocol.ListRequest) (*protocol.ListResponse, error) {
	if sel := req.GetSelector(); sel != "" {
		if _, err := labels.ParseSelector(sel); err != nil {
			return nil, fmt.Errorf("client: list: selector: %w", err)
		}
	}
	var resp *protocol.ListResponse
	err := c.call(ctx, callSpec{op: "list", retry: true}, func(ctx context.Context, jc protocol.JournalClient, _ target) (rpcResult, error) {
		var err error
		resp, err = jc.List(ctx, req)
		return rpcResult{resp.GetStatus(), resp.GetHeader()}, err
	})
	if err != nil {
		return nil, err
	}
	for _, j := range resp.GetJournals() {
		c.router.learn(j.GetSpec().GetName(), &protocol.Header{Route: j.GetRoute()})
	}
	return resp, nil
}

// ListAll returns the journals matching selector (see List).
func (c *Client) ListAll(ctx context.Context, selector string) ([]*protocol.ListResponse_Journal, error) {
	resp, err := c.List(ctx, &protocol.ListRequest{Selector: selector})
	if err != nil {
		return nil, err
	}
	return resp.GetJournals(), nil
}

// Apply applies changes to journal specs, atomically: all or none. It fails
// with an error wrapping ErrRevisionMismatch if a change's expected mod
// revision did not hold. Apply is not retried: if the broker is
// unreachable the changes may or may not have applied, and the caller
// should List and decide again.
func (c *Client) Apply(ctx context.Context, req *protocol.ApplyRequest) (*protocol.ApplyResponse, error) {
	var resp *protocol.ApplyResponse
	err := c.call(ctx, callSpec{op: "apply"}, func(ctx context.Context, jc protocol.JournalClient, _ target) (rpcResult, error) {
		var err error
		resp, err = jc.Apply(ctx, req)
		c.router.observe(resp.GetRevision())
		return rpcResult{resp.GetStatus(), resp.GetHeader()}, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ListFragmentsPage returns one page of the fragments of req.Journal,
// from a replica of the journal. The next page starts at the response's
// NextPageToken; zero means there is none.
func (c *Client) ListFragmentsPage(ctx context.Context, req *protocol.FragmentsRequest) (*protocol.FragmentsResponse, error) {
	if err := protocol.ValidateJournalName(req.GetJournal()); err != nil {
		return nil, fmt.Errorf("client: list fragments: %w", err)
	}
	var resp *protocol.FragmentsResponse
	spec := callSpec{op: "list fragments", journal: req.GetJournal(), purpose: forRead, retry: true}
	err := c.call(ctx, spec, func(ctx context.Context, jc protocol.JournalClient, t target) (rpcResult, error) {
		r := proto.CloneOf(req)
		r.DoNotProxy = t.doNotProxy
		var err error
		resp, err = jc.ListFragments(ctx, r)
		return rpcResult{resp.GetStatus(), resp.GetHeader()}, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ListFragments returns the fragments of req.Journal, following pages
// from req.NextPageToken until the last.
func (c *Client) ListFragments(ctx context.Context, req *protocol.FragmentsRequest) ([]*protocol.FragmentsResponse_Info, error) {
	r := proto.CloneOf(req)
	var out []*protocol.FragmentsResponse_Info
	for {
		resp, err := c.ListFragmentsPage(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetFragments()...)
		next := resp.GetNextPageToken()
		if next == 0 {
			return out, nil
		}
		if next <= r.GetNextPageToken() {
			return nil, fmt.Errorf("client: list fragments of journal %q: next page token %d does not advance past %d",
				r.GetJournal(), next, r.GetNextPageToken())
		}
		r.NextPageToken = next
	}
}

// callSpec describes a unary call for Client.call.
type callSpec struct {
	op      string
	journal string // If the call is about one journal.
	purpose purpose
	retry   bool // Retry unreachable brokers and transient statuses.
}

type rpcResult struct {
	status protocol.Status
	header *protocol.Header
}

// call makes a unary RPC, choosing the broker as the router does, and
// retrying as spec says until ctx is done. NOT_PRIMARY and NOT_REPLICA are
// followed to the broker they name, always.
func (c *Client) call(ctx context.Context, spec callSpec,
	rpc func(context.Context, protocol.JournalClient, target) (rpcResult, error)) error {

	name := spec.op
	if spec.journal != "" {
		name += fmt.Sprintf(" journal %q", spec.journal)
	}
	avoid := make(map[string]bool)
	bo := c.newBackoff()
	redirects := 0
	for {
		t := c.router.pick(spec.journal, spec.purpose, avoid)
		jc, err := c.journal(t.endpoint)
		if err != nil {
			return fmt.Errorf("client: %s: %w", name, err)
		}
		res, err := rpc(ctx, jc, t)
		var lastErr error
		switch {
		case err != nil && spec.retry && isTransientCode(ctx, err):
			avoid[t.endpoint] = true
			c.router.invalidate(spec.journal, t.endpoint)
			c.warnUnreachable(spec.op, spec.journal, t.endpoint, err)
			lastErr = fmt.Errorf("client: %s via %s: %w", name, t.endpoint, err)
		case err != nil:
			return fmt.Errorf("client: %s via %s: %w", name, t.endpoint, ctxError(ctx, err))
		default:
			c.router.learn(spec.journal, res.header)
			if res.status == protocol.Status_OK {
				return nil
			}
			serr := &StatusError{Op: spec.op, Journal: spec.journal, Status: res.status, Header: res.header}
			redirect := res.status == protocol.Status_NOT_PRIMARY || res.status == protocol.Status_NOT_REPLICA
			if redirect {
				avoid[t.endpoint] = true
				if redirects < maxRedirects {
					redirects++
					continue
				}
			}
			if !redirect && !(spec.retry && isTransientStatus(res.status)) {
				return serr
			}
			lastErr = serr
		}
		redirects = 0
		if werr := bo.Wait(ctx); werr != nil {
			return fmt.Errorf("client: %s: %w (retrying after: %w)", name, werr, lastErr)
		}
	}
}

// StoreHealth asks a broker to check the fragment stores of every broker
// of the fleet (see protocol.StoreHealthRequest): the broker asked passes
// the request on to its peers. It goes to the default broker, and to
// other known brokers while brokers are unreachable, until ctx is done.
func (c *Client) StoreHealth(ctx context.Context, req *protocol.StoreHealthRequest) (*protocol.StoreHealthResponse, error) {
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("client: store health: %w", err)
	}
	var resp *protocol.StoreHealthResponse
	err := c.call(ctx, callSpec{op: "store health", retry: true}, func(ctx context.Context, jc protocol.JournalClient, _ target) (rpcResult, error) {
		var err error
		resp, err = jc.StoreHealth(ctx, req)
		return rpcResult{resp.GetStatus(), resp.GetHeader()}, err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Suspend suspends journal (see protocol.Suspension): its primary
// persists its content and records its write head and registers, and the
// brokers release its replicas. With resume, it resumes the journal
// instead, as its next append would. It returns the journal's suspension
// record as the request left it. It goes to the default broker, which
// passes a suspension on to the journal's primary, and retries while the
// journal has none, until ctx is done.
func (c *Client) Suspend(ctx context.Context, journal string, resume bool) (*protocol.Suspension, error) {
	req := &protocol.SuspendRequest{Journal: journal, Resume: resume}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("client: suspend: %w", err)
	}
	var resp *protocol.SuspendResponse
	err := c.call(ctx, callSpec{op: "suspend", journal: journal, retry: true}, func(ctx context.Context, jc protocol.JournalClient, _ target) (rpcResult, error) {
		var err error
		resp, err = jc.Suspend(ctx, req)
		return rpcResult{resp.GetStatus(), resp.GetHeader()}, err
	})
	if err != nil {
		return nil, err
	}
	return resp.GetSuspension(), nil
}
