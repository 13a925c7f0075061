package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/protocol"
)

// list answers the journals that ?selector matches, with their specs and
// routes.
func (g *Gateway) list(w http.ResponseWriter, r *http.Request) {
	ctx, err := CallerContext(r)
	if err != nil {
		WriteError(w, http.StatusUnauthorized, err)
		return
	}
	sel, err := selectorParam(r)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err)
		return
	}
	js, err := g.cfg.Journals.ListAll(ctx, sel)
	if err != nil {
		WriteError(w, StatusOf(err), err)
		return
	}
	writeJSON(w, &protocol.ListResponse{Status: protocol.Status_OK, Journals: js})
}

// spec answers a journal's spec.
func (g *Gateway) spec(w http.ResponseWriter, r *http.Request) {
	ctx, name, ok := begin(w, r)
	if !ok {
		return
	}
	js, err := g.cfg.Journals.ListAll(ctx, protocol.LabelName+"="+name)
	if err != nil {
		WriteError(w, StatusOf(err), err)
		return
	}
	for _, j := range js {
		if j.GetSpec().GetName() == name {
			writeJSON(w, j.Spec)
			return
		}
	}
	WriteError(w, http.StatusNotFound, fmt.Errorf("journal %q not found", name))
}

// fragments answers a journal's fragments, with signed URLs valid for
// ?signature=DURATION if given.
func (g *Gateway) fragments(w http.ResponseWriter, r *http.Request) {
	ctx, name, ok := begin(w, r)
	if !ok {
		return
	}
	req := &protocol.FragmentsRequest{Journal: name}
	if v := r.URL.Query().Get("signature"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			WriteError(w, http.StatusBadRequest, fmt.Errorf("signature=%q: want a positive duration such as 1h", v))
			return
		}
		req.SignatureTtl = durationpb.New(d)
	}
	fs, err := g.cfg.Journals.ListFragments(ctx, req)
	if err != nil {
		WriteError(w, StatusOf(err), err)
		return
	}
	writeJSON(w, &protocol.FragmentsResponse{Status: protocol.Status_OK, Fragments: fs})
}

// errNoShards answers the shard endpoints of a server that serves none.
var errNoShards = errors.New("this server reaches no consumer application: its shard endpoints are served by quire dev and by consumer processes")

// listShards answers the shards that ?selector matches, with their
// replicas' status.
func (g *Gateway) listShards(w http.ResponseWriter, r *http.Request) {
	if g.cfg.Shards == nil {
		WriteError(w, http.StatusNotFound, errNoShards)
		return
	}
	ctx, err := CallerContext(r)
	if err != nil {
		WriteError(w, http.StatusUnauthorized, err)
		return
	}
	sel, err := selectorParam(r)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err)
		return
	}
	resp, err := g.cfg.Shards.List(ctx, &protocol.ShardListRequest{Selector: sel})
	if err != nil {
		WriteError(w, StatusOf(err), err)
		return
	}
	out := struct {
		Shards []map[string]json.RawMessage `json:"shards"`
	}{Shards: []map[string]json.RawMessage{}}
	for _, sh := range resp.Shards {
		m, err := shardJSON(sh)
		if err != nil {
			WriteError(w, http.StatusInternalServerError, err)
			return
		}
		out.Shards = append(out.Shards, m)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// shardJSON is a listed shard as JSON, its spec (JSON bytes on the wire)
// an object rather than base64.
func shardJSON(sh *protocol.ShardListResponse_Shard) (map[string]json.RawMessage, error) {
	spec := sh.Spec
	bare := proto.CloneOf(sh)
	bare.Spec = nil
	data, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(bare)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if json.Valid(spec) {
		m["spec"] = json.RawMessage(spec)
	}
	return m, nil
}

// statShard answers GET /v1/shards/ID/stat: the shard's read-through
// offsets and its sources' write heads.
func (g *Gateway) statShard(w http.ResponseWriter, r *http.Request) {
	if g.cfg.Shards == nil {
		WriteError(w, http.StatusNotFound, errNoShards)
		return
	}
	id, ok := strings.CutSuffix(r.PathValue("id"), "/stat")
	if !ok || id == "" {
		WriteError(w, http.StatusNotFound, fmt.Errorf("no endpoint GET %s: want /v1/shards/ID/stat", r.URL.Path))
		return
	}
	ctx, err := CallerContext(r)
	if err != nil {
		WriteError(w, http.StatusUnauthorized, err)
		return
	}
	resp, err := g.cfg.Shards.Stat(ctx, &protocol.ShardStatRequest{Shard: id})
	switch {
	case err != nil:
		WriteError(w, StatusOf(err), err)
	case resp.Status == protocol.Status_SHARD_NOT_FOUND:
		WriteError(w, http.StatusNotFound, fmt.Errorf("shard %q not found", id))
	case resp.Status != protocol.Status_OK:
		WriteError(w, http.StatusServiceUnavailable, fmt.Errorf("shard %q: %s", id, resp.Status))
	default:
		writeJSON(w, resp)
	}
}
