package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// MaxAppend bounds the body of an append: the gateway holds it whole, so
// that a retried append sends the same bytes, and appends it at once.
const MaxAppend = 64 << 20

// DefaultTimeout bounds how long an append, or a read's start, waits for
// the journal's primary: longer than a failover, shorter than most HTTP
// clients wait.
const DefaultTimeout = 30 * time.Second

// Config configures a Gateway.
type Config struct {
	// Journals is the client the gateway reads and appends through,
	// dialled with auth.CallerDialOptions: its calls carry the token of
	// the HTTP request they serve, and no token of their own.
	Journals *client.Client
	// Shards, if set, serves the shard endpoints, through a consumer
	// process.
	Shards protocol.ShardClient
	// Timeout bounds an append, and a read until its first content (or
	// the write head, for a read that does not block). Zero means
	// DefaultTimeout.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Gateway is the HTTP gateway's handler.
type Gateway struct {
	cfg Config
	mux *http.ServeMux
}

// New returns the gateway of cfg.
func New(cfg Config) *Gateway {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	g := &Gateway{cfg: cfg, mux: http.NewServeMux()}
	g.mux.HandleFunc("GET /v1/journals/{name...}", g.read)
	g.mux.HandleFunc("POST /v1/journals/{name...}", g.append)
	g.mux.HandleFunc("GET /v1/journals", g.list)
	g.mux.HandleFunc("GET /v1/specs/{name...}", g.spec)
	g.mux.HandleFunc("GET /v1/fragments/{name...}", g.fragments)
	g.mux.HandleFunc("GET /v1/shards", g.listShards)
	g.mux.HandleFunc("GET /v1/shards/{id...}", g.statShard)
	g.mux.HandleFunc("/v1/", g.noEndpoint)
	return g
}

// noEndpoint answers a request that no endpoint serves: 405, with the
// methods that are served there in Allow, if its path is an endpoint's;
// 404 otherwise.
func (g *Gateway) noEndpoint(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost} {
		if _, pattern := g.mux.Handler(&http.Request{Method: m, URL: r.URL, Host: r.Host}); pattern != "/v1/" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		WriteError(w, http.StatusNotFound, fmt.Errorf("no endpoint %s %s (see docs/http.md)", r.Method, r.URL.Path))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	WriteError(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: this endpoint takes %s (see docs/http.md)",
		r.Method, r.URL.Path, strings.Join(allow, ", ")))
}

// ServeHTTP serves the /v1/ endpoints.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// CallerContext is r's context, carrying r's bearer token (if any) to the
// brokers instead of the gateway's own.
func CallerContext(r *http.Request) (context.Context, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return r.Context(), nil
	}
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return nil, errors.New(`the Authorization header is not "Bearer TOKEN"`)
	}
	return auth.WithToken(r.Context(), strings.TrimSpace(token)), nil
}

// journalName is the request's journal, checked.
func journalName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if err := protocol.ValidateJournalName(name); err != nil {
		return "", fmt.Errorf("journal name %q: %w", name, err)
	}
	return name, nil
}

// begin checks what every endpoint checks: the journal's name, and the
// caller's token header.
func begin(w http.ResponseWriter, r *http.Request) (context.Context, string, bool) {
	ctx, err := CallerContext(r)
	if err != nil {
		WriteError(w, http.StatusUnauthorized, err)
		return nil, "", false
	}
	name, err := journalName(r)
	if err != nil {
		WriteError(w, http.StatusBadRequest, err)
		return nil, "", false
	}
	return ctx, name, true
}

// StatusOf maps an error of the client to the HTTP status it means.
func StatusOf(err error) int {
	switch {
	case errors.Is(err, client.ErrJournalNotFound):
		return http.StatusNotFound
	case errors.Is(err, client.ErrNoPrimary), errors.Is(err, client.ErrInsufficientReplicas):
		return http.StatusServiceUnavailable
	case errors.Is(err, client.ErrOffsetNotYetAvailable):
		return http.StatusRequestedRangeNotSatisfiable
	case errors.Is(err, client.ErrNotAllowed):
		return http.StatusForbidden
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	switch status.Code(err) {
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.Unavailable, codes.DeadlineExceeded:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// WriteError answers code with a JSON body naming what was wrong.
func WriteError(w http.ResponseWriter, code int, err error) {
	msg := err.Error()
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		msg = s.Message()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// writeJSON answers a protocol message as JSON, with protobuf's JSON
// mapping (so numbers of 64 bits are strings, as in every proto3 JSON).
func writeJSON(w http.ResponseWriter, m proto.Message) {
	data, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		WriteError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(data)
	w.Write([]byte("\n"))
}

// intParam parses query parameter key as an integer of at least min, or
// returns def if it is absent.
func intParam(r *http.Request, key string, def, min int64) (int64, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < min {
		return 0, fmt.Errorf("%s=%q: want an integer of at least %d", key, v, min)
	}
	return n, nil
}

func boolParam(r *http.Request, key string) (bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", key, v)
	}
	return b, nil
}

func selectorParam(r *http.Request) (string, error) {
	sel := r.URL.Query().Get("selector")
	if _, err := labels.ParseSelector(sel); err != nil {
		return "", err
	}
	return sel, nil
}

// append appends the request's body to the journal, as one append, and
// answers the committed range.
func (g *Gateway) append(w http.ResponseWriter, r *http.Request) {
	ctx, name, ok := begin(w, r)
	if !ok {
		return
	}
	framing := r.URL.Query().Get("framing")
	if framing != "" && framing != "lines" && framing != "none" {
		WriteError(w, http.StatusBadRequest, fmt.Errorf("framing=%q: want lines or none", framing))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxAppend))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		WriteError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("the body is over %d bytes, the most one append through the gateway may hold", MaxAppend))
		return
	case err != nil:
		WriteError(w, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err))
		return
	case len(body) == 0:
		WriteError(w, http.StatusBadRequest, errors.New("the body is empty: nothing to append"))
		return
	case framing == "lines" && body[len(body)-1] != '\n':
		WriteError(w, http.StatusBadRequest, errors.New("framing=lines: the body's last line has no newline"))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	defer cancel()
	f, err := g.cfg.Journals.Append(ctx, client.AppendRequest{Journal: name}, bytes.NewReader(body))
	if errors.Is(err, context.DeadlineExceeded) {
		WriteError(w, http.StatusServiceUnavailable, fmt.Errorf("no broker took the append within %s: %w", g.cfg.Timeout, err))
		return
	} else if err != nil {
		WriteError(w, StatusOf(err), err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(appended{Journal: name, Begin: f.GetBegin(), End: f.GetEnd()})
}

// appended is an append's answer: the range of the journal its content
// took. Offsets are strings, as in the protobuf JSON of the other answers.
type appended struct {
	Journal string `json:"journal"`
	Begin   int64  `json:"begin,string"`
	End     int64  `json:"end,string"`
}
