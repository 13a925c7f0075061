package fleet

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/quire-dev/quire/internal/etcdtest"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

func TestDiscoverFindsEachFleetOnce(t *testing.T) {
	etcd, prefix := etcdtest.Client(t)
	ctx := context.Background()
	put := func(k, v string) {
		if _, err := etcd.Put(ctx, prefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	put("brokers/members/z1#b1", `{"itemLimit":10,"endpoint":"127.0.0.1:1"}`)
	put("brokers/items/a/members/b", `{"name":"a/members/b","replication":1}`)
	put("brokers/assign/a/members/b#z1#b1#0", ``)
	put("brokers/cuts/z1#b1", `{"unreached":[]}`)
	put("consumers/wc/items/part-0", `{"id":"part-0"}`)
	put("consumers/wc/hints/part-0", `x`)
	put("plain/members/z#m", `{"itemLimit":1}`)
	put("unrelated/key", `x`)

	got, err := Discover(ctx, etcd, prefix)
	if err != nil {
		t.Fatal(err)
	}
	want := []Found{{prefix + "brokers/", Brokers}, {prefix + "consumers/wc/", Consumers}, {prefix + "plain/", Plain}}
	if !slices.Equal(got, want) {
		t.Fatalf("Discover = %v, want %v", got, want)
	}
}

func TestRootOf(t *testing.T) {
	for _, c := range []struct {
		key, prefix, root string
	}{
		{"/q/brokers/items/x", "/q/", "/q/brokers/"},
		{"/q/items/x", "/q/", "/q/"},
		{"/q/a/assign/j/items/k#z#s#0", "/q/", "/q/a/"},
		{"/q/other", "/q/", ""},
		{"/members/z#s", "", "/"},
	} {
		root, ok := rootOf([]byte(c.key), c.prefix)
		if root != c.root || ok != (c.root != "") {
			t.Errorf("rootOf(%q, %q) = %q, %v; want %q", c.key, c.prefix, root, ok, c.root)
		}
	}
}
