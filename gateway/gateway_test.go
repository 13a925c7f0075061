package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quire-dev/quire/auth"
	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/gateway"
	"github.com/quire-dev/quire/internal/authtest"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// newGateway serves the gateway over one broker with journals
// test/text and test/bin, and returns its URL.
func newGateway(t *testing.T) (string, *brokertest.Cluster) {
	c := brokertest.New(t)
	// A 64 MiB append under the race detector, on a loaded 2-core
	// machine, once left its journal with no primary for 30 s, silently,
	// as a lease run out would (then 3 s; brokertest's default is now
	// 10 s): nothing here fails over, so a longer lease costs nothing.
	c.LeaseTTL = 15 * time.Second
	b := c.Start("a")
	cl := c.Client(b)
	c.Journals(cl, 1, "test/text", "test/bin", "test/big")
	srv := httptest.NewServer(gateway.New(gateway.Config{Journals: cl}))
	t.Cleanup(srv.Close)
	return srv.URL, c
}

func post(t *testing.T, url string, body []byte) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

// committed decodes an append's answer: the fragment it committed in.
func committed(t *testing.T, body []byte) (begin, end int64) {
	t.Helper()
	var f struct{ Begin, End string }
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatalf("append answered %s: %v", body, err)
	}
	b, _ := strconv.ParseInt(f.Begin, 10, 64)
	e, _ := strconv.ParseInt(f.End, 10, 64)
	return b, e
}

// What is appended through the gateway reads back byte for byte, text
// and binary, from 1 byte to the largest append it takes.
func TestRoundTripsAreByteExact(t *testing.T) {
	url, _ := newGateway(t)
	rng := rand.New(rand.NewPCG(1, 2))
	offsets := map[string]int64{}
	for _, tc := range []struct {
		journal string
		size    int
	}{
		{"test/text", 1}, {"test/text", 1000}, {"test/bin", 1}, {"test/bin", 1 << 20}, {"test/big", gateway.MaxAppend},
	} {
		body := make([]byte, tc.size)
		for i := range body {
			if tc.journal == "test/text" {
				body[i] = byte('a' + rng.IntN(26))
			} else {
				body[i] = byte(rng.Uint32())
			}
		}
		resp, out := post(t, url+"/v1/journals/"+tc.journal, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("append of %d bytes to %s: %s %s", tc.size, tc.journal, resp.Status, out)
		}
		begin, end := committed(t, out)
		if end-begin < int64(tc.size) || end < offsets[tc.journal]+int64(tc.size) {
			t.Fatalf("append of %d bytes committed [%d, %d)", tc.size, begin, end)
		}
		from := offsets[tc.journal]
		resp, got := get(t, fmt.Sprintf("%s/v1/journals/%s?offset=%d&end=%d", url, tc.journal, from, from+int64(tc.size)))
		if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
			t.Fatalf("read of %s [%d, +%d): %s, %d bytes, equal %v", tc.journal, from, tc.size, resp.Status, len(got), bytes.Equal(got, body))
		}
		if resp.Header.Get("Quire-Offset") != strconv.FormatInt(from, 10) || resp.Header.Get("Quire-Write-Head") == "" {
			t.Fatalf("read headers %v", resp.Header)
		}
		offsets[tc.journal] += int64(tc.size)
	}
}

// A blocking read at the write head answers its headers at once, and
// streams what is appended after it began, as it is appended.
func TestBlockingReadStreamsNewContent(t *testing.T) {
	url, _ := newGateway(t)
	post(t, url+"/v1/journals/test/text", []byte("before\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/journals/test/text?offset=-1&block=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Quire-Offset") != "7" || resp.Header.Get("Quire-Write-Head") != "7" {
		t.Fatalf("headers %v, want the read to begin at the write head, 7", resp.Header)
	}
	var got syncBuffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(&got, resp.Body)
	}()
	for i := range 3 {
		line := fmt.Sprintf("line %d\n", i)
		if resp, out := post(t, url+"/v1/journals/test/text?framing=lines", []byte(line)); resp.StatusCode != http.StatusOK {
			t.Fatalf("append: %s %s", resp.Status, out)
		}
		awaitContains(t, &got, line)
	}
	cancel()
	<-copied
	if strings.Contains(got.String(), "before") {
		t.Fatalf("the read from the write head streamed %q, from before it began", got.String())
	}
}

// syncBuffer is a buffer that one goroutine writes while another reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func awaitContains(t *testing.T, b *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the blocking read has not streamed %q; it streamed %q", s, b.String())
		}
		time.Sleep(10 * time.Millisecond) // Until the read streams it.
	}
}

// Every error is an HTTP status with a JSON body naming what was wrong,
// and nothing is appended.
func TestErrorsAreStatuses(t *testing.T) {
	url, _ := newGateway(t)
	for _, tc := range []struct {
		method, path string
		body         []byte
		header       string
		want         int
		error        string
	}{
		{"GET", "/v1/journals/test/missing", nil, "", 404, "not found"},
		{"POST", "/v1/journals/test/missing", []byte("x"), "", 404, "not found"},
		{"GET", "/v1/journals/test/text?offset=x", nil, "", 400, "offset"},
		{"GET", "/v1/journals/test/text?offset=-2", nil, "", 400, "offset"},
		{"GET", "/v1/journals/test/text?offset=5&end=3", nil, "", 400, "end=3"},
		{"GET", "/v1/journals/test/text?block=maybe", nil, "", 400, "block"},
		{"GET", "/v1/journals/test/text?offset=999999", nil, "", 416, "past the write head 0"},
		{"GET", "/v1/journals/bad%20name", nil, "", 400, "journal name"},
		{"GET", "/v1/journals?selector=a+in+(", nil, "", 400, "selector"},
		{"POST", "/v1/journals/test/text", nil, "", 400, "empty"},
		{"POST", "/v1/journals/test/text?framing=lines", []byte("no newline"), "", 400, "no newline"},
		{"POST", "/v1/journals/test/text?framing=csv", []byte("a\n"), "", 400, "framing"},
		{"POST", "/v1/journals/test/text", make([]byte, gateway.MaxAppend+1), "", 413, "over"},
		{"GET", "/v1/journals/test/text", nil, "Basic abc", 401, "Bearer"},
		{"GET", "/v1/shards", nil, "", 404, "no consumer application"},
		{"GET", "/v1/nothing", nil, "", 404, "no endpoint"},
		{"DELETE", "/v1/journals/test/text", nil, "", 405, "takes GET, HEAD, POST"},
		{"POST", "/v1/shards", []byte("x"), "", 405, "takes GET, HEAD"},
		{"PUT", "/v1/nothing", nil, "", 404, "no endpoint"},
		{"GET", "/v1/specs/test/missing", nil, "", 404, "not found"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, tc.method, url+tc.path, bytes.NewReader(tc.body))
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct{ Error string }
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatalf("%s: the body is not JSON: %v", resp.Status, err)
			}
			if resp.StatusCode != tc.want || !strings.Contains(body.Error, tc.error) {
				t.Fatalf("%s %q, want %d with %q", resp.Status, body.Error, tc.want, tc.error)
			}
		})
	}
	// A method an endpoint does not take is answered with those it does.
	req, _ := http.NewRequest(http.MethodDelete, url+"/v1/journals/test/text", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Allow"); got != "GET, HEAD, POST" {
		t.Errorf("DELETE of a journal: Allow %q, want GET, HEAD, POST", got)
	}
	// Nothing of the refused appends was appended.
	if _, got := get(t, url+"/v1/journals/test/text"); len(got) != 0 {
		t.Fatalf("test/text holds %q after refused appends", got)
	}
}

// Readers of one journal, at once, each read all of it.
func TestConcurrentReaders(t *testing.T) {
	url, _ := newGateway(t)
	var want bytes.Buffer
	for i := range 50 {
		line := fmt.Sprintf("record %03d\n", i)
		want.WriteString(line)
		if resp, out := post(t, url+"/v1/journals/test/text", []byte(line)); resp.StatusCode != http.StatusOK {
			t.Fatalf("append: %s %s", resp.Status, out)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			resp, err := http.Get(url + "/v1/journals/test/text")
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err == nil && !bytes.Equal(got, want.Bytes()) {
				err = fmt.Errorf("read %d bytes, want %d", len(got), want.Len())
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The listings answer JSON: journals by selector, a spec, fragments.
func TestListingsAreJSON(t *testing.T) {
	url, _ := newGateway(t)
	post(t, url+"/v1/journals/test/text", []byte("hello\n"))
	resp, body := get(t, url+"/v1/journals?selector=name=test/text")
	var list struct {
		Journals []struct {
			Spec  struct{ Name string }
			Route struct{ Members []struct{ Suffix string } }
		}
	}
	if err := json.Unmarshal(body, &list); err != nil || resp.StatusCode != 200 || len(list.Journals) != 1 ||
		list.Journals[0].Spec.Name != "test/text" || len(list.Journals[0].Route.Members) != 1 {
		t.Fatalf("list: %s %s (%v)", resp.Status, body, err)
	}
	resp, body = get(t, url+"/v1/specs/test/text")
	var spec struct {
		Name        string
		Replication int
	}
	if err := json.Unmarshal(body, &spec); err != nil || spec.Name != "test/text" || spec.Replication != 1 {
		t.Fatalf("spec: %s %s (%v)", resp.Status, body, err)
	}
	resp, body = get(t, url+"/v1/fragments/test/text")
	var frags struct {
		Fragments []struct{ Fragment struct{ Journal string } }
	}
	if err := json.Unmarshal(body, &frags); err != nil || resp.StatusCode != 200 ||
		(len(frags.Fragments) > 0 && frags.Fragments[0].Fragment.Journal != "test/text") {
		t.Fatalf("fragments: %s %s (%v)", resp.Status, body, err)
	}
}

// curl, as a shell script would use it: append lines, read them back.
func TestWithCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl here")
	}
	url, _ := newGateway(t)
	out, err := exec.Command("curl", "-sS", "--fail-with-body", "--data-binary", "one\ntwo\n",
		url+"/v1/journals/test/text?framing=lines").CombinedOutput()
	// The answer is the range appended, and nothing else.
	if want := `{"journal":"test/text","begin":"0","end":"8"}` + "\n"; err != nil || string(out) != want {
		t.Fatalf("curl append: %v: %s, want %s", err, out, want)
	}
	out, err = exec.Command("curl", "-sS", "--fail-with-body", url+"/v1/journals/test/text").CombinedOutput()
	if err != nil || string(out) != "one\ntwo\n" {
		t.Fatalf("curl read: %v: %q", err, out)
	}
	out, err = exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", url+"/v1/journals/test/nope").CombinedOutput()
	if err != nil || string(out) != "404" {
		t.Fatalf("curl read of an unknown journal: %v: %s", err, out)
	}
}

// With no broker to take it, an append or a read answers 503 within the
// gateway's timeout, rather than hold its caller.
func TestNoBrokerIs503(t *testing.T) {
	c := brokertest.New(t)
	b := c.Start("a")
	cl := c.Client(b)
	c.Journals(cl, 1, "test/text")
	srv := httptest.NewServer(gateway.New(gateway.Config{Journals: cl, Timeout: time.Second}))
	t.Cleanup(srv.Close)
	c.Stop(b)
	if resp, body := post(t, srv.URL+"/v1/journals/test/text", []byte("x")); resp.StatusCode != 503 || !strings.Contains(string(body), "within 1s") {
		t.Errorf("append with no broker: %s %s, want 503", resp.Status, body)
	}
	if resp, body := get(t, srv.URL+"/v1/journals/test/text"); resp.StatusCode != 503 || !strings.Contains(string(body), "within 1s") {
		t.Errorf("read with no broker: %s %s, want 503", resp.Status, body)
	}
}

// A request's bearer token is what the brokers authorize: none is
// refused, one that lacks the capability is forbidden, the right one
// reads and appends. The gateway lends no rights of its own.
func TestBearerTokensReachTheBrokers(t *testing.T) {
	key := authtest.NewKey(t)
	c := brokertest.New(t)
	c.Auth = key.Authorizer()
	c.Token = auth.StaticToken(key.Token("brokers", authtest.Broker, "", time.Hour))
	b := c.Start("a")
	c.Journals(c.ClientWith(b, auth.StaticToken(key.Token("admin", authtest.All, "", time.Hour))), 1, "orders/a")
	srv := httptest.NewServer(gateway.New(gateway.Config{Journals: callerClient(t, b)}))
	t.Cleanup(srv.Close)
	do := func(method, token string, body []byte) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/v1/journals/orders/a", bytes.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	writer := key.Token("w", auth.Append|auth.Read, "prefix=orders/", time.Hour)
	reader := key.Token("r", auth.Read, "prefix=orders/", time.Hour)
	for _, tc := range []struct {
		method, token string
		want          int
	}{
		{"POST", "", 401}, {"GET", "", 401},
		{"POST", reader, 403},
		{"POST", writer, 200}, {"GET", reader, 200},
		{"GET", key.Token("r", auth.Read, "prefix=billing/", time.Hour), 403},
		{"GET", authtest.NewKey(t).Token("r", auth.Read, "", time.Hour), 401},
	} {
		if code, body := do(tc.method, tc.token, []byte("order\n")); code != tc.want {
			t.Errorf("%s with token %.12s…: %d %s, want %d", tc.method, tc.token, code, body, tc.want)
		}
	}
	if code, body := do("GET", reader, nil); code != 200 || body != "order\n" {
		t.Errorf("read back: %d %q", code, body)
	}
}

// callerClient is a client of b that sends its calls' callers' tokens.
func callerClient(t *testing.T, b *brokertest.Broker) *client.Client {
	cl, err := client.New(context.Background(), client.Config{Broker: b.Endpoint, DialOptions: auth.CallerDialOptions()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
