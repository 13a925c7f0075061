package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/gateway"
	"github.com/quire-dev/quire/internal/fleet"
	"github.com/quire-dev/quire/protocol"
)

//go:embed ui
var ui embed.FS

// minEventGap is the shortest time between two events of a stream: a
// busy fleet changes many times a second, and a person reads slower.
const minEventGap = 250 * time.Millisecond

// maxSpec bounds the body of an apply.
const maxSpec = 1 << 20

func (c *Console) routes() *http.ServeMux {
	static, _ := fs.Sub(ui, "ui")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /console/ui/", http.StripPrefix("/console/ui/", http.FileServerFS(static)))
	mux.HandleFunc("GET /console/api/view", c.serveView)
	mux.HandleFunc("GET /console/api/events", c.serveEvents)
	mux.HandleFunc("GET /console/api/series", c.serveSeries)
	mux.HandleFunc("GET /console/api/plan", c.servePlan)
	protect := http.NewCrossOriginProtection()
	mux.Handle("POST /console/api/unassign", protect.Handler(c.action(c.unassign)))
	mux.Handle("POST /console/api/apply", protect.Handler(c.action(c.apply)))
	mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		gateway.WriteError(w, http.StatusNotFound, fmt.Errorf("no console endpoint %s %s (see docs/console.md)", r.Method, r.URL.Path))
	})
	return mux
}

func (c *Console) serveView(w http.ResponseWriter, r *http.Request) {
	b, err := c.viewJSON(r.URL.Query().Get("selector"))
	if err != nil {
		gateway.WriteError(w, http.StatusBadRequest, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b)
}

// serveEvents streams the view as server-sent events ("view"), one at
// each change, at most one per minEventGap.
func (c *Console) serveEvents(w http.ResponseWriter, r *http.Request) {
	sel := r.URL.Query().Get("selector")
	if _, err := c.viewJSON(sel); err != nil {
		gateway.WriteError(w, http.StatusBadRequest, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	gap := time.NewTimer(minEventGap)
	defer gap.Stop()
	for {
		changed := c.changes()
		b, err := c.viewJSON(sel)
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(w, "event: view\ndata: %s\n\n", b); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		gap.Reset(minEventGap)
		select {
		case <-r.Context().Done():
			return
		case <-gap.C:
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

func (c *Console) serveSeries(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("journal")
	if err := protocol.ValidateJournalName(name); err != nil {
		gateway.WriteError(w, http.StatusBadRequest, fmt.Errorf("journal %q: %w", name, err))
		return
	}
	c.touch()
	writeJSON(w, map[string]any{"journal": name, "rate": c.journalSeries(name)})
}

// servePlan answers the plan the allocator would make for a fleet now,
// or after a what-if: ?drain=ZONE#SUFFIX, ?add=ZONE#SUFFIX:LIMIT,
// ?replication=ITEM=N, each repeatable — those of quire allocator plan.
func (c *Console) servePlan(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := c.state(q.Get("root"))
	if f == nil {
		gateway.WriteError(w, http.StatusNotFound, fmt.Errorf("root %q: the console watches no fleet there", q.Get("root")))
		return
	}
	what := allocator.WhatIf{Drain: q["drain"], Replication: map[string]int{}}
	for _, a := range q["add"] {
		m, err := allocator.ParseAddedMember(a)
		if err != nil {
			gateway.WriteError(w, http.StatusBadRequest, err)
			return
		}
		what.Add = append(what.Add, m)
	}
	for _, rep := range q["replication"] {
		id, n, err := allocator.ParseReplication(rep)
		if err != nil {
			gateway.WriteError(w, http.StatusBadRequest, err)
			return
		}
		what.Replication[id] = n
	}
	sc := allocator.ScenarioOf(f.State)
	if err := sc.Apply(what); err != nil {
		gateway.WriteError(w, http.StatusBadRequest, err)
		return
	}
	if err := sc.Validate(); err != nil {
		gateway.WriteError(w, http.StatusBadRequest, fmt.Errorf("what if: %w", err))
		return
	}
	writeJSON(w, map[string]any{"root": f.Root, "revision": f.Revision, "plan": allocator.PlanScenario(sc)})
}

// action serves an action, if actions are enabled, with the caller's
// token and never the console's own.
func (c *Console) action(do func(ctx context.Context, r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.cfg.Actions {
			gateway.WriteError(w, http.StatusForbidden, errors.New("the console's actions are disabled (enable them with --console-actions)"))
			return
		}
		ctx, err := gateway.CallerContext(r)
		if err != nil {
			gateway.WriteError(w, http.StatusUnauthorized, err)
			return
		}
		if r.Header.Get("Authorization") == "" {
			ctx = auth.WithToken(ctx, "") // Never the console's own token.
		}
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := do(ctx, r)
		if err != nil {
			code := http.StatusBadRequest
			var se statusError
			if errors.As(err, &se) {
				code = se.code
			} else if !errors.As(err, new(badRequest)) {
				code = gateway.StatusOf(err)
			}
			gateway.WriteError(w, code, err)
			return
		}
		writeJSON(w, out)
	})
}

// badRequest marks an action's error as the request's fault.
type badRequest struct{ error }

func (e badRequest) Unwrap() error { return e.error }

// statusError is an action's error with its HTTP status.
type statusError struct {
	code int
	error
}

func (e statusError) Unwrap() error { return e.error }

// unassign unassigns a FAILED shard (form values root and shard), so
// that the allocator assigns it afresh.
func (c *Console) unassign(ctx context.Context, r *http.Request) (any, error) {
	root, id := r.FormValue("root"), r.FormValue("shard")
	f := c.state(root)
	if f == nil || f.Kind != fleet.Consumers {
		return nil, statusError{http.StatusNotFound, fmt.Errorf("root %q: the console watches no consumer application there", root)}
	}
	if f.ItemIndex(id) < 0 {
		return nil, statusError{http.StatusNotFound, fmt.Errorf("shard %q: no such shard under %s", id, root)}
	}
	shards, err := c.shardClient(f)
	if err != nil {
		return nil, err
	}
	resp, err := shards.Unassign(ctx, &protocol.UnassignRequest{Shards: []string{id}, OnlyFailed: true})
	if err != nil {
		return nil, fmt.Errorf("unassigning shard %s: %w", id, err)
	}
	if resp.Status != protocol.Status_OK {
		return nil, fmt.Errorf("unassigning shard %s: %s", id, resp.Status)
	}
	return map[string]any{"unassigned": resp.Shards}, nil
}

// shardClient is a Shard client of one of f's processes.
func (c *Console) shardClient(f *fleetState) (protocol.ShardClient, error) {
	for _, m := range f.Members {
		if ep := Endpoint(m.Value); ep != "" {
			conn, err := c.sample.dial(ep)
			if err != nil {
				return nil, err
			}
			return protocol.NewShardClient(conn), nil
		}
	}
	return nil, statusError{http.StatusServiceUnavailable, fmt.Errorf("fleet %s has no process to ask", f.Root)}
}

// apply applies an edited journal spec: the body is the spec as JSON
// (protobuf's mapping, as GET /v1/specs/NAME answers it), and
// ?revision= the mod revision it was edited from, so that a spec changed
// meanwhile is not overwritten.
func (c *Console) apply(ctx context.Context, r *http.Request) (any, error) {
	var rev int64
	if _, err := fmt.Sscan(r.URL.Query().Get("revision"), &rev); err != nil || rev <= 0 {
		return nil, badRequest{fmt.Errorf("revision %q: want the spec's mod revision, a positive integer", r.URL.Query().Get("revision"))}
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxSpec))
	if err != nil {
		return nil, statusError{http.StatusRequestEntityTooLarge, fmt.Errorf("reading the spec: %w", err)}
	}
	var spec protocol.JournalSpec
	if err := protojson.Unmarshal(body, &spec); err != nil {
		return nil, badRequest{fmt.Errorf("journal spec: %w", err)}
	}
	if err := spec.Validate(); err != nil {
		return nil, badRequest{fmt.Errorf("journal spec %s: %w", spec.Name, err)}
	}
	if c.cfg.Journals == nil {
		return nil, statusError{http.StatusServiceUnavailable, errors.New("the console has no brokers to apply through")}
	}
	resp, err := c.cfg.Journals.Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{ExpectModRevision: rev, Upsert: &spec}}})
	if err != nil {
		return nil, fmt.Errorf("applying journal %s: %w", spec.Name, err)
	}
	return map[string]any{"journal": spec.Name, "revision": resp.Revision}, nil
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}
