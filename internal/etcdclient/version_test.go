package etcdclient

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/version"

	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/internal/tlsconfig"
)

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"3.7.3": true, "3.6.0": true, "3.5.8": true, "3.5.21": true, "3.4.24": true, "3.4.37": true, "4.0.0": true,
		"3.5.7": false, "3.5.0": false, "3.4.23": false, "3.3.27": false, "2.3.8": false,
	} {
		err := checkVersion(v)
		if ok != (err == nil) {
			t.Errorf("checkVersion(%q) = %v, want ok %v", v, err, ok)
		}
		if err != nil && (!errors.Is(err, ErrOldServer) || !strings.Contains(err.Error(), v)) {
			t.Errorf("checkVersion(%q) = %q: want ErrOldServer, naming the version", v, err)
		}
	}
	if err := checkVersion("three"); err == nil || !strings.Contains(err.Error(), `"three"`) {
		t.Errorf("checkVersion of a version that does not parse: %v", err)
	}
}

// A real etcd server that reports an old version is refused, with a
// message naming its endpoint, its version and the minimum; a current one
// is accepted. (The server is etcd's own, built into the test; only the
// version it reports is changed, as etcd's build does.) The version is a
// variable of the process that every etcd server in it reads, so the test
// runs in a process of its own, where no other server runs.
// oldServersChild is set in the environment of the process that
// TestDialRefusesOldServers runs itself in.
const oldServersChild = "QUIRE_TEST_OLD_SERVERS_CHILD"

func TestDialRefusesOldServers(t *testing.T) {
	if os.Getenv(oldServersChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestDialRefusesOldServers$", "-test.count", "1", "-test.v")
		cmd.Env = append(os.Environ(), oldServersChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestDialRefusesOldServers") {
			t.Fatalf("in a process of its own: %v\n%s", err, out)
		}
		return
	}
	ctx := context.Background()
	for _, tc := range []struct {
		version string
		refused bool
	}{{"3.4.23", true}, {"3.5.7", true}, {version.Version, false}} {
		was := version.Version
		version.Version = tc.version
		srv, err := etcdtest.Start(t.TempDir(), etcdtest.Options{})
		if err != nil {
			version.Version = was
			t.Fatal(err)
		}
		c, err := Dial(ctx, srv.Endpoint(), tlsconfig.Files{}, User{}, "/quire/", 10*time.Second)
		srv.Close()
		version.Version = was
		switch {
		case tc.refused && err == nil:
			c.Close()
			t.Errorf("etcd %s: accepted", tc.version)
		case tc.refused && (!errors.Is(err, ErrOldServer) || !strings.Contains(err.Error(), srv.Endpoint()) ||
			!strings.Contains(err.Error(), tc.version) || !strings.Contains(err.Error(), MinVersion)):
			t.Errorf("etcd %s: error %q, want ErrOldServer naming the endpoint, the version and %s", tc.version, err, MinVersion)
		case !tc.refused && err != nil:
			t.Errorf("etcd %s: %v", tc.version, err)
		case !tc.refused:
			c.Close()
		}
	}
}
