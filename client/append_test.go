package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

func appendString(t *testing.T, cl *Client, journal, content string) *protocol.Fragment {
	t.Helper()
	commit, err := cl.Append(context.Background(), AppendRequest{Journal: journal}, strings.NewReader(content))
	if err != nil {
		t.Fatalf("append %q to %q: %v", content, journal, err)
	}
	return commit
}

func wantCommit(t *testing.T, commit *protocol.Fragment, journal string, begin, end int64) {
	t.Helper()
	if commit.GetJournal() != journal || commit.GetBegin() != begin || commit.GetEnd() != end {
		t.Fatalf("commit = %v, want %s [%d, %d)", commit, journal, begin, end)
	}
}

func TestAppendLearnsRouteFromHeader(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.addJournal("j/one", 1, 2)
	cl := newTestClient(t, c, 0, "")

	wantCommit(t, appendString(t, cl, "j/one", "hello"), "j/one", 0, 5)
	// Without a route, the append went to the default broker, which
	// proxied it; the response header taught the client the route.
	if got := c.brokers[0].appends.Load(); got != 1 {
		t.Fatalf("default broker got %d appends, want 1", got)
	}
	if c.brokers[0].direct.Load() != 0 {
		t.Fatal("the first append, without a route, was not proxied")
	}
	rt := cl.Route("j/one")
	if want := []string{c.brokers[1].endpoint, c.brokers[2].endpoint}; rt == nil || !equalStrings(rt.Endpoints, want) {
		t.Fatalf("route = %v, want endpoints %v", rt, want)
	}
	// Now appends go straight to the primary, which may not proxy them.
	wantCommit(t, appendString(t, cl, "j/one", "world"), "j/one", 5, 10)
	if got, direct := c.brokers[1].appends.Load(), c.brokers[1].direct.Load(); got != 1 || direct != 1 {
		t.Fatalf("primary got %d appends, %d with do_not_proxy, want 1, 1", got, direct)
	}
	if got := string(c.content("j/one")); got != "helloworld" {
		t.Fatalf("content = %q", got)
	}
}

func equalStrings(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

func TestAppendFollowsNotPrimary(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.addJournal("j", 1, 2)
	cl := newTestClient(t, c, 0, "")
	appendString(t, cl, "j", "one,")

	c.setRoute("j", 2, 1) // The primary moves; the client's route is stale.
	wantCommit(t, appendString(t, cl, "j", "two,"), "j", 4, 8)
	if got := c.brokers[1].notPrimary.Load(); got != 1 {
		t.Fatalf("old primary answered NOT_PRIMARY %d times, want 1", got)
	}
	if got, direct := c.brokers[2].appends.Load(), c.brokers[2].direct.Load(); got != 1 || direct != 1 {
		t.Fatalf("new primary got %d appends, %d direct, want 1, 1", got, direct)
	}
	if rt := cl.Route("j"); rt.Endpoints[0] != c.brokers[2].endpoint {
		t.Fatalf("route = %v, want primary %s", rt, c.brokers[2].endpoint)
	}
	if got := len(c.commits("j")); got != 2 {
		t.Fatalf("%d commits, want 2", got)
	}
}

func TestAppendFailsOverUnavailableBroker(t *testing.T) {
	c := newFakeCluster(t, "a", "b", "c")
	c.addJournal("j", 1, 2)
	cl := newTestClient(t, c, 0, "")
	appendString(t, cl, "j", "one,")

	// The primary dies and the journal moves; the client tries the dead
	// primary, then another broker, which proxies to the new primary.
	c.brokers[1].down.Store(true)
	c.setRoute("j", 2)
	wantCommit(t, appendString(t, cl, "j", "two,"), "j", 4, 8)
	if rt := cl.Route("j"); len(rt.Endpoints) != 1 || rt.Endpoints[0] != c.brokers[2].endpoint {
		t.Fatalf("route = %v, want [%s]", rt, c.brokers[2].endpoint)
	}

	// The default broker dies too: the client uses brokers it has seen.
	c.brokers[0].down.Store(true)
	cl.router.invalidate("j", "")
	wantCommit(t, appendString(t, cl, "j", "three"), "j", 8, 13)
	if got := string(c.content("j")); got != "one,two,three" {
		t.Fatalf("content = %q", got)
	}
}

func TestAppendRetriesReplayContent(t *testing.T) {
	content := strings.Repeat("0123456789", 1000) // Several chunks.
	faults := []fault{
		{status: protocol.Status_NO_PRIMARY},
		{status: protocol.Status_INSUFFICIENT_REPLICAS, afterContent: true},
		{code: codes.Unavailable, afterContent: true},
		{code: codes.Unavailable},
		{status: protocol.Status_NO_PRIMARY, afterContent: true},
	}
	readers := map[string]func() io.Reader{
		"seeker":      func() io.Reader { return strings.NewReader(content) },
		"buffered":    func() io.Reader { return onlyReader{strings.NewReader(content)} },
		"seeker@mid":  func() io.Reader { r := strings.NewReader("skip" + content); r.Seek(4, io.SeekStart); return r },
		"short reads": func() io.Reader { return &shortReader{s: content} },
	}
	for name, newReader := range readers {
		t.Run(name, func(t *testing.T) {
			c := newFakeCluster(t, "a", "b")
			c.addJournal("j", 1, 0)
			cl := newTestClient(t, c, 0, "")
			cl.cfg.ChunkSize = 3000
			c.inject("j", faults...)

			commit, err := cl.Append(context.Background(), AppendRequest{Journal: "j"}, newReader())
			if err != nil {
				t.Fatal(err)
			}
			wantCommit(t, commit, "j", 0, int64(len(content)))
			if commits := c.commits("j"); len(commits) != 1 || string(commits[0]) != content {
				t.Fatalf("committed %d appends, want the content once", len(commits))
			}
			// Every attempt that got as far as sending content sent all
			// of it, once.
			attempts := c.attempts("j")
			if len(attempts) != 4 { // Three faults after content, and the success.
				t.Fatalf("%d attempts sent content, want 4", len(attempts))
			}
			for i, a := range attempts {
				if string(a) != content {
					t.Fatalf("attempt %d sent %d bytes, want the %d of the content", i, len(a), len(content))
				}
			}
		})
	}
}

// shortReader returns at most 97 bytes per Read, and sometimes none.
type shortReader struct {
	s     string
	reads int
}

func (r *shortReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	if r.reads++; r.reads%3 == 0 {
		return 0, nil
	}
	n := copy(p[:min(len(p), 97)], r.s)
	r.s = r.s[n:]
	return n, nil
}

func TestAppendDoesNotRetryLargeNonSeekableContent(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 1)
	cl := newTestClient(t, c, 0, "")
	cl.cfg.MaxAppendBuffer = 1 << 10
	appendString(t, cl, "j", "x") // Learn the route.
	c.inject("j", fault{status: protocol.Status_INSUFFICIENT_REPLICAS, afterContent: true})

	content := strings.Repeat("x", 4<<10)
	_, err := cl.Append(context.Background(), AppendRequest{Journal: "j"}, onlyReader{strings.NewReader(content)})
	if !errors.Is(err, ErrNotReplayable) || !errors.Is(err, ErrInsufficientReplicas) {
		t.Fatalf("err = %v, want ErrNotReplayable and ErrInsufficientReplicas", err)
	}
	if n := len(c.attempts("j")); n != 2 {
		t.Fatalf("%d attempts, want 2 (one per Append)", n)
	}
	if n := len(c.commits("j")); n != 1 {
		t.Fatalf("%d commits, want 1", n)
	}

	// Seekable content of any size is retried.
	c.inject("j", fault{status: protocol.Status_INSUFFICIENT_REPLICAS, afterContent: true})
	if _, err := cl.Append(context.Background(), AppendRequest{Journal: "j"}, strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
	if got := len(c.content("j")); got != 1+len(content) {
		t.Fatalf("journal has %d bytes, want %d", got, 1+len(content))
	}
}

func TestAppendErrors(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 1)
	c.addJournal("ro", 1)
	c.setAccess("ro", protocol.Access_READ_ONLY)
	cl := newTestClient(t, c, 0, "")
	appendString(t, cl, "j", "12345")

	five, seven := int64(5), int64(7)
	tests := []struct {
		name    string
		req     AppendRequest
		want    error
		message string // A part of the error's text.
	}{
		{"not found", AppendRequest{Journal: "nope"}, ErrJournalNotFound, `journal "nope"`},
		{"wrong offset", AppendRequest{Journal: "j", Offset: &seven}, ErrWrongAppendOffset, "offset 7"},
		{"register mismatch", AppendRequest{Journal: "j", CheckRegisters: "owner=me"}, ErrRegisterMismatch, `"owner=me"`},
		{"not allowed", AppendRequest{Journal: "ro"}, ErrNotAllowed, `journal "ro"`},
		{"bad name", AppendRequest{Journal: "a//b"}, nil, `"a//b"`},
		{"negative offset", AppendRequest{Journal: "j", Offset: ptr(int64(-2))}, nil, "offset -2 is negative"},
		{"bad selector", AppendRequest{Journal: "j", CheckRegisters: "a=(b"}, nil, "check registers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cl.Append(context.Background(), tt.req, strings.NewReader("x"))
			if err == nil {
				t.Fatal("no error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Fatalf("err = %q, want it to mention %q", err, tt.message)
			}
		})
	}
	var serr *StatusError
	_, err := cl.Append(context.Background(), AppendRequest{Journal: "j", Offset: &seven}, nil)
	if !errors.As(err, &serr) || serr.Status != protocol.Status_WRONG_APPEND_OFFSET || serr.Header.GetProcessId().GetSuffix() != "broker-1" {
		t.Fatalf("err = %#v, want a StatusError from broker-1", err)
	}

	// The conditions hold: the append commits, and updates registers.
	owner := labels.Set{{Name: "owner", Value: "me"}}
	commit, err := cl.Append(context.Background(), AppendRequest{Journal: "j", Offset: &five, Union: owner}, strings.NewReader("678"))
	if err != nil {
		t.Fatal(err)
	}
	wantCommit(t, commit, "j", 5, 8)
	if _, err := cl.Append(context.Background(), AppendRequest{Journal: "j", CheckRegisters: "owner=me", Subtract: owner}, strings.NewReader("9")); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Append(context.Background(), AppendRequest{Journal: "j", CheckRegisters: "owner=me"}, nil); !errors.Is(err, ErrRegisterMismatch) {
		t.Fatalf("err = %v, want ErrRegisterMismatch after the label was subtracted", err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAppendContentErrorAborts(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	cl := newTestClient(t, c, 0, "")
	boom := errors.New("boom")
	_, err := cl.Append(context.Background(), AppendRequest{Journal: "j"},
		io.MultiReader(strings.NewReader("partial"), errReader{boom}))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if n := len(c.commits("j")); n != 0 {
		t.Fatalf("%d commits, want none: a failed read aborts the append", n)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestAppendContextCancelledWhileRetrying(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j") // No brokers: NO_PRIMARY, always.
	cl := newTestClient(t, c, 0, "")
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	for range 5 {
		c.journal("j").faults = append(c.journal("j").faults, fault{status: protocol.Status_NO_PRIMARY})
	}
	c.mu.Unlock()
	cancel()
	_, err := cl.Append(ctx, AppendRequest{Journal: "j"}, bytes.NewReader([]byte("x")))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestClosedClient(t *testing.T) {
	c := newFakeCluster(t, "a")
	c.addJournal("j", 0)
	cl := newTestClient(t, c, 0, "")
	appendString(t, cl, "j", "x")
	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Append(context.Background(), AppendRequest{Journal: "j"}, strings.NewReader("y")); !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	if _, err := New(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "Broker") {
		t.Fatalf("err = %v, want one naming Broker", err)
	}
}

// A broker that predates Appends streams (as this fake does) answers them
// Unimplemented: the client appends on Append streams there instead, and
// stops trying Appends with it.
func TestAppendsFallBackToAppendStreams(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 0, 1)
	cl := newTestClient(t, c, 0, "")
	appendString(t, cl, "j", "one,") // Learns the route.
	wantCommit(t, appendString(t, cl, "j", "two,"), "j", 4, 8)
	cl.streams.mu.Lock()
	legacy := cl.streams.legacy[c.brokers[0].endpoint]
	cl.streams.mu.Unlock()
	if !legacy {
		t.Errorf("the broker without Appends streams is not marked so")
	}
	if got := c.brokers[0].direct.Load(); got != 1 {
		t.Errorf("the primary got %d appends sent to it directly, want 1 (on an Append stream)", got)
	}
	if got := len(c.commits("j")); got != 2 {
		t.Fatalf("%d commits, want 2", got)
	}
}
