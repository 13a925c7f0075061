package broker_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/freeport"
	"github.com/quire-dev/quire/protocol"
)

// StoreHealth asked of one broker reports every broker of the fleet, each
// with its default store and the stores of the selected journals: a
// healthy file store passes every step and keeps no probe; a store whose
// probe directory cannot be made fails at the write, and one that cannot
// even be opened fails at the open, each with its error.
func TestStoreHealthReportsEveryBrokerAndStore(t *testing.T) {
	c := brokertest.New(t)
	a, b := c.Start("a"), c.Start("b")
	blocked := "file://" + t.TempDir() + "/"
	if err := os.WriteFile(filepath.Join(strings.TrimPrefix(blocked, "file://"), fragment.ProbeDir), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	missing := "file://" + notDir + "/store/"
	c.Apply(c.Client(a),
		&protocol.JournalSpec{Name: "health/ok", Replication: 1, Labels: []*protocol.Label{{Name: "app", Value: "h"}}},
		&protocol.JournalSpec{Name: "health/blocked", Replication: 1, Labels: []*protocol.Label{{Name: "app", Value: "h"}},
			Fragment: &protocol.JournalSpec_Fragment{Stores: []string{blocked}}},
		&protocol.JournalSpec{Name: "other/x", Replication: 1})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := conn(t, b, "").StoreHealth(ctx, &protocol.StoreHealthRequest{Selector: "app=h", Stores: []string{missing}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Brokers) != 2 {
		t.Fatalf("%d brokers reported, want 2: %v", len(resp.Brokers), resp)
	}
	for i, br := range resp.Brokers {
		want := []string{"a", "b"}[i]
		if br.ProcessId.GetSuffix() != want || br.Error != "" || br.Endpoint != c.Brokers[want].Endpoint {
			t.Fatalf("broker %d: %v, want %s at %s without an error", i, br, want, c.Brokers[want].Endpoint)
		}
		stores := map[string]*protocol.StoreHealthResponse_Store{}
		for _, st := range br.Stores {
			stores[st.Url] = st
		}
		if len(stores) != 3 {
			t.Fatalf("broker %s reported %d stores, want 3 (default, blocked, missing): %v", want, len(stores), br.Stores)
		}
		def := stores[c.Store]
		if !def.GetOk() || !def.DefaultStore || def.Journals != 1 || len(def.Passed) != 4 || def.Error != "" {
			t.Errorf("broker %s: default store %v, want ok, default, 1 journal, 4 steps", want, def)
		}
		for i, st := range def.GetPassed() {
			if wantStep := protocol.StoreStep(i + 2); st.Step != wantStep || st.Latency.AsDuration() <= 0 {
				t.Errorf("broker %s: step %d of the default store: %v, want %s with a latency", want, i, st, wantStep)
			}
		}
		bl := stores[blocked]
		if bl.GetOk() || bl.FailedStep != protocol.StoreStep_STORE_WRITE || bl.Journals != 1 || len(bl.Passed) != 0 ||
			!strings.Contains(bl.Error, "not a directory") {
			t.Errorf("broker %s: blocked store %v, want a failed write (not a directory), 1 journal", want, bl)
		}
		ms := stores[missing]
		if ms.GetOk() || ms.FailedStep != protocol.StoreStep_STORE_OPEN || ms.Journals != 0 || !strings.Contains(ms.Error, notDir) {
			t.Errorf("broker %s: missing store %v, want a failed open naming %s", want, ms, notDir)
		}
	}
	// No probe is left in the healthy store, and its journals' listings
	// never saw one.
	root := strings.TrimPrefix(c.Store, "file://")
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, fragment.ProbeDir) {
			t.Errorf("probe left behind: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// A broker that cannot be reached (a member key whose endpoint
	// nothing serves, and which holds no journal) is reported as such,
	// the others still checked.
	down := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	if _, err := c.Etcd.Put(ctx, allocator.MemberKey(c.Root, "zq", "q"), `{"itemLimit":0,"endpoint":"`+down+`"}`); err != nil {
		t.Fatal(err)
	}
	resp, err = conn(t, b, "").StoreHealth(ctx, &protocol.StoreHealthRequest{Selector: "name=health/ok"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Brokers) != 3 {
		t.Fatalf("%d brokers reported, want 3: %v", len(resp.Brokers), resp)
	}
	for _, br := range resp.Brokers {
		switch br.ProcessId.GetSuffix() {
		case "q":
			if br.Error == "" || !strings.Contains(br.Error, down) || len(br.Stores) != 0 {
				t.Errorf("unreachable broker q reported %v, want an error naming %s", br, down)
			}
		default:
			if len(br.Stores) != 1 || !br.Stores[0].Ok || br.Stores[0].Journals != 1 {
				t.Errorf("broker %s: %v, want its healthy default store alone, with 1 journal", br.ProcessId.GetSuffix(), br)
			}
		}
	}

	_, err = conn(t, b, "").StoreHealth(ctx, &protocol.StoreHealthRequest{Stores: []string{"ftp://x/"}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "stores[0]") {
		t.Errorf("StoreHealth of a bad store URL: %v, want InvalidArgument naming stores[0]", err)
	}
}
