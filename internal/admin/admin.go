package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure an admin endpoint.
type Options struct {
	// Ready reports readiness: nil when the process is ready, else why it
	// is not. Nil means always ready.
	Ready func() error
	// Pprof serves /debug/pprof/.
	Pprof bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Server is a running admin endpoint.
type Server struct {
	// Addr is the address it listens on (its port resolved).
	Addr    string
	hs      *http.Server
	done    chan struct{}
	api     *slot
	console *slot
}

// slot serves what is mounted there, once something is: the endpoint
// serves health before the server behind the API and the console exists.
type slot struct {
	h      atomic.Pointer[http.Handler]
	code   int    // answered while nothing is mounted
	absent string // the JSON error then
}

func (sl *slot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := sl.h.Load()
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(sl.code)
		fmt.Fprintf(w, "{\"error\": %q}\n", sl.absent)
		return
	}
	(*h).ServeHTTP(w, r)
}

// MountAPI serves h at /v1/: the HTTP gateway. A nil Server mounts
// nothing.
func (s *Server) MountAPI(h http.Handler) {
	if s != nil {
		s.api.h.Store(&h)
	}
}

// MountConsole serves h at / (but for the admin endpoint's own paths and
// /v1/): the web console. A nil Server mounts nothing.
func (s *Server) MountConsole(h http.Handler) {
	if s != nil {
		s.console.h.Store(&h)
	}
}

// Serve listens on addr and serves the admin endpoint until Close. flag
// names the setting in errors ("--admin").
func Serve(flag, addr string, opts Options) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{Addr: lis.Addr().String(), done: make(chan struct{}),
		api:     &slot{code: http.StatusServiceUnavailable, absent: "the server is starting: its HTTP API is not served yet"},
		console: &slot{code: http.StatusNotFound, absent: "no console here: this endpoint serves /metrics, /healthz, /readyz and /v1/ (see docs/console.md)"}}
	mux := Handler(opts).(*http.ServeMux)
	mux.Handle("/v1/", s.api)
	mux.Handle("/", s.console)
	s.hs = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serving the admin endpoint", "addr", s.Addr, "err", err)
		}
	}()
	log.Info("admin endpoint serving", "url", "http://"+s.Addr+"/", "pprof", opts.Pprof)
	return s, nil
}

// Close stops serving, waiting a few seconds for requests in flight. A nil
// Server closes nothing.
func (s *Server) Close() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.hs.Shutdown(ctx); err != nil {
		s.hs.Close()
	}
	<-s.done
}

// Handler is the admin endpoint's handler, for servers that mount it
// themselves.
func Handler(opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if opts.Ready != nil {
			if err := opts.Ready(); err != nil {
				reply(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
				return
			}
		}
		reply(w, http.StatusOK, "ready")
	})
	if opts.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func reply(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}
