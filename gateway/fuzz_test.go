package gateway

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzReadRequest feeds the read endpoint's query any text: it is refused
// with an error or makes a read that a broker would accept, never a
// panic.
func FuzzReadRequest(f *testing.F) {
	for _, q := range []string{"", "offset=-1&block=true", "offset=5&end=9", "offset=x", "end=-3", "block=maybe", "offset=9223372036854775807&end=1"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest("GET", "/v1/journals/a/b", nil)
		r.URL.RawQuery = query
		req, err := readRequest(r, "a/b")
		if err != nil {
			return
		}
		if req.Offset < -1 || req.EndOffset < 0 || (req.EndOffset != 0 && req.Offset >= 0 && req.EndOffset <= req.Offset) {
			t.Fatalf("query %q made the read %+v", query, req)
		}
	})
}

// FuzzBearer feeds the Authorization header any text: a token, an error,
// or nothing, never a panic.
func FuzzBearer(f *testing.F) {
	for _, h := range []string{"", "Bearer abc", "bearer  x ", "Basic abc", "Bearer", "Bearer "} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("GET", "/v1/journals", nil)
		r.Header["Authorization"] = []string{header}
		_, err := CallerContext(r)
		scheme, token, _ := strings.Cut(header, " ")
		wellFormed := strings.EqualFold(scheme, "bearer") && strings.TrimSpace(token) != ""
		if header != "" && (err == nil) != wellFormed {
			t.Fatalf("header %q: %v, want accepted %v", header, err, wellFormed)
		}
	})
}
