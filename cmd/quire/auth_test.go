package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quire-dev/quire/auth"
)

// newKeyPair writes a key pair under dir and returns its prefix.
func newKeyPair(t *testing.T, dir string) string {
	t.Helper()
	prefix := filepath.Join(dir, "fleet")
	r := quire(context.Background(), nil, "auth", "keygen", prefix)
	if r.err != nil {
		t.Fatalf("auth keygen: %v", r.err)
	}
	if r.stdout != prefix+".key\n"+prefix+".pub\n" {
		t.Fatalf("auth keygen printed %q, want the files it wrote", r.stdout)
	}
	return prefix
}

// quire auth keygen and token make a pair and tokens that servers verify
// with the public key alone.
func TestAuthKeygenAndToken(t *testing.T) {
	prefix := newKeyPair(t, t.TempDir())
	for file, mode := range map[string]os.FileMode{prefix + ".key": 0o600, prefix + ".pub": 0o644} {
		fi, err := os.Stat(file)
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %v", file, fi.Mode(), err, mode)
		}
	}
	r := quire(context.Background(), nil, "auth", "token", "--key", prefix+".key", "--cap", "read,APPEND",
		"-l", "app=orders", "--ttl", "2h", "--subject", "orders-writer")
	if r.err != nil {
		t.Fatalf("auth token: %v", r.err)
	}
	keys, err := auth.LoadKeys(prefix + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	c, err := keys.Verify(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("the printed token does not verify: %v", err)
	}
	if c.Subject != "orders-writer" || c.Capability != auth.Read|auth.Append || c.Selector.String() != "app=orders" ||
		c.ExpiresAt.Sub(c.IssuedAt.Time).Hours() != 2 {
		t.Fatalf("claims %+v, want those of the flags", c)
	}
}

// A keygen that cannot write PREFIX.pub leaves no PREFIX.key behind, and
// prints no file: a private key without its public one is of no use, and
// a later keygen would refuse to overwrite it.
func TestAuthKeygenWritesBothOrNeither(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "fleet")
	// A directory where PREFIX.pub goes: --force passes the check for
	// existing files, and the write of PREFIX.pub fails.
	if err := os.Mkdir(prefix+".pub", 0o755); err != nil {
		t.Fatal(err)
	}
	r := quire(context.Background(), nil, "auth", "keygen", "--force", prefix)
	if r.err == nil || !strings.Contains(r.err.Error(), "writing "+prefix+".pub") || r.stdout != "" {
		t.Fatalf("keygen with a directory at PREFIX.pub: err %v, stdout %q; want an error writing it and nothing printed", r.err, r.stdout)
	}
	if _, err := os.Stat(prefix + ".key"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("PREFIX.key after the failed keygen: %v, want it removed", err)
	}
	if fi, err := os.Stat(prefix + ".pub"); err != nil || !fi.IsDir() {
		t.Errorf("PREFIX.pub after the failed keygen: %v, want the directory left alone", err)
	}
}

// Bad input to the auth commands, and to every server's and client's auth
// flags, exits 2 and prints nothing on standard output.
func TestAuthBadInput(t *testing.T) {
	dir := t.TempDir()
	prefix := newKeyPair(t, dir)
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("a b\n"), 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"auth", "keygen", prefix}, "exists"},
		{[]string{"auth", "keygen"}, "takes PREFIX"},
		{[]string{"auth", "keygen", prefix + "-a", prefix + "-b"}, "takes PREFIX: got 2"},
		{[]string{"auth", "keygen", "--bogus", prefix + "-c"}, "--bogus"},
		{[]string{"auth", "token", "extra", "--key", prefix + ".key", "--cap", "READ", "--subject", "x"}, "takes no arguments"},
		{[]string{"auth", "token", "--bogus", "--key", prefix + ".key", "--cap", "READ", "--subject", "x"}, "--bogus"},
		{[]string{"auth", "tokn"}, "tokn"},
		{[]string{"auth", "token", "--cap", "READ", "--subject", "x"}, "--key is missing"},
		{[]string{"auth", "token", "--key", prefix + ".key", "--subject", "x"}, "--cap is missing"},
		{[]string{"auth", "token", "--key", prefix + ".key", "--cap", "READ"}, "--subject is missing"},
		{[]string{"auth", "token", "--key", prefix + ".key", "--cap", "READ,DROP", "--subject", "x"}, `unknown name "DROP"`},
		{[]string{"auth", "token", "--key", prefix + ".key", "--cap", "READ", "--subject", "x", "-l", "a in ("}, "-l:"},
		{[]string{"auth", "token", "--key", prefix + ".key", "--cap", "READ", "--subject", "x", "--ttl", "-1h"}, "--ttl"},
		{[]string{"auth", "token", "--key", prefix + ".pub", "--cap", "READ", "--subject", "x"}, "only verify"},
		{[]string{"journals", "list", "--token", "a", "--token-file", tokenFile}, "both given"},
		{[]string{"journals", "list", "--token-file", tokenFile}, "more than one token"},
		{[]string{"shards", "list", "--token-file", filepath.Join(dir, "missing")}, "--token-file"},
		{[]string{"broker", "serve", "--dir", dir, "--store", "file://" + dir + "/", "--auth-rollout"}, "--auth-rollout needs --auth-keys"},
		{[]string{"broker", "serve", "--dir", dir, "--store", "file://" + dir + "/", "--auth-keys", filepath.Join(dir, "missing")}, "--auth-keys"},
		{[]string{"dev", "--auth-keys", prefix + ".pub"}, "holds no private key"},
	} {
		r := quire(context.Background(), nil, tc.args...)
		if !errors.As(r.err, new(usageError)) || !strings.Contains(r.err.Error(), tc.want) || r.stdout != "" {
			t.Errorf("quire %s: err %v, stdout %q; want a usage error with %q", strings.Join(tc.args, " "), r.err, r.stdout, tc.want)
		}
	}
}

// quire dev --auth-keys PREFIX.key serves only requests with tokens, mints
// its own, and prints an operator's token that every command takes.
func TestDevWithAuthKeys(t *testing.T) {
	dir := t.TempDir()
	prefix := newKeyPair(t, dir)
	ports := freeDevPorts(t)
	dev := startDev(t, filepath.Join(dir, "dev"), ports, "--auth-keys", prefix+".key")
	m := regexp.MustCompile(`export QUIRE_TOKEN=(\S+)`).FindStringSubmatch(dev.stdout.String())
	if m == nil {
		t.Fatalf("the banner gives no token:\n%s", dev.stdout)
	}
	operator := m[1]
	broker := ports.brokerAddr()
	ctx := context.Background()

	if r := quire(ctx, nil, "journals", "list", "--broker", broker); r.err == nil || !strings.Contains(r.err.Error(), "needs a token") {
		t.Errorf("journals list without a token: %v, want it refused", r.err)
	}
	r := quire(ctx, nil, "journals", "list", "--broker", broker, "--token", operator)
	if r.err != nil || !strings.Contains(r.stdout, "wordcount/words/part-000") {
		t.Errorf("journals list with the operator's token: %v\n%s", r.err, r.stdout)
	}
	r = quire(ctx, nil, "shards", "list", "--consumer", ports.consumerAddr(), "--token", operator)
	if r.err != nil || !strings.Contains(r.stdout, "wordcount/shard-000") {
		t.Errorf("shards list with the operator's token: %v\n%s", r.err, r.stdout)
	}

	reader := quire(ctx, nil, "auth", "token", "--key", prefix+".key", "--cap", "LIST,READ", "-l", "app=wordcount", "--subject", "reader")
	if reader.err != nil {
		t.Fatal(reader.err)
	}
	tokenFile := filepath.Join(dir, "reader.token")
	os.WriteFile(tokenFile, []byte(reader.stdout), 0o600)
	r = quire(ctx, strings.NewReader("hello\n"), "journals", "append", "-j", "wordcount/words/part-000", "--broker", broker, "--token-file", tokenFile)
	if r.err == nil || !strings.Contains(r.err.Error(), `lacks APPEND on journal wordcount/words/part-000`) {
		t.Errorf("append with a reader's token: %v, want it denied", r.err)
	}
	r = quire(ctx, nil, "journals", "list", "--broker", broker, "--token-file", tokenFile)
	if r.err != nil || strings.Contains(r.stdout, "recovery/") || !strings.Contains(r.stdout, "wordcount/words/") {
		t.Errorf("journals list with a reader's token of app=wordcount: %v\n%s", r.err, r.stdout)
	}
	// The example token, without LIST: append and read still work.
	writer := quire(ctx, nil, "auth", "token", "--key", prefix+".key", "--cap", "READ,APPEND", "-l", "app=wordcount", "--subject", "writer")
	if writer.err != nil {
		t.Fatal(writer.err)
	}
	w := strings.TrimSpace(writer.stdout)
	if r := quire(ctx, strings.NewReader("hello\n"), "journals", "append", "-j", "wordcount/words/part-001", "--broker", broker, "--token", w); r.err != nil {
		t.Errorf("append with a READ,APPEND token: %v", r.err)
	}
	if r := quire(ctx, nil, "journals", "read", "-j", "wordcount/words/part-001", "--broker", broker, "--token", w); r.err != nil || !strings.Contains(r.stdout, "hello") {
		t.Errorf("read with a READ,APPEND token: %v %q", r.err, r.stdout)
	}
	if r := quire(ctx, nil, "journals", "read", "-j", "recovery/wordcount/shard-000", "--broker", broker, "--token", w); r.err == nil || !strings.Contains(r.err.Error(), "outside the selector") {
		t.Errorf("read outside the token's selector: %v, want it denied", r.err)
	}
	// The HTTP gateway on the admin address authorizes each request by
	// its own token.
	gw := "http://127.0.0.1:" + strconv.Itoa(ports.admin) + "/v1/journals/wordcount/words/part-001"
	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {w, 200}} {
		req, _ := http.NewRequest("GET", gw, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == 200 && !strings.Contains(string(body), "hello")) {
			t.Errorf("GET %s with a token %v: %s %s, want %d", gw, tc.token != "", resp.Status, body, tc.want)
		}
	}
	// And the shard endpoints, through quire dev's word count.
	base := "http://127.0.0.1:" + strconv.Itoa(ports.admin) + "/v1/shards"
	for _, tc := range []struct {
		url, token, want string
		code             int
	}{
		{base + "?selector=app=wordcount", operator, "wordcount/shard-000", 200},
		{base + "/wordcount/shard-000/stat", operator, "readThrough", 200},
		{base + "/wordcount/shard-000/stat", "", "needs a token", 401},
		{base + "/wordcount/nope/stat", operator, "not found", 404},
	} {
		req, _ := http.NewRequest("GET", tc.url, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %s: %s %s, want %d with %q", tc.url, resp.Status, body, tc.code, tc.want)
		}
	}
	if code := dev.interrupt(t); code != 0 {
		t.Errorf("quire dev exited %d", code)
	}
}
