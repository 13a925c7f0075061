package etcdtest

import (
	"context"
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestPrefixesAreDistinctAndCleaned(t *testing.T) {
	var first string
	t.Run("a", func(t *testing.T) {
		c, p := Client(t)
		first = p
		if _, err := c.Put(context.Background(), p+"k", "v"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("b", func(t *testing.T) {
		c, p := Client(t)
		if p == first {
			t.Fatalf("prefix %q reused", p)
		}
		resp, err := c.Get(context.Background(), first, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 0 {
			t.Fatalf("prefix %q not cleaned: %d keys", first, len(resp.Kvs))
		}
	})
}

func TestRestartKeepsData(t *testing.T) {
	s, err := Start(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after restart got %v, want k=v", resp.Kvs)
	}
}
