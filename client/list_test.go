package client

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/protocol"
)

func TestListApply(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	cl := newTestClient(t, c, 0, "")
	ctx := context.Background()

	spec := func(name, app string) *protocol.JournalSpec {
		return &protocol.JournalSpec{Name: name, Replication: 1,
			Labels: []*protocol.Label{{Name: "app", Value: app}}}
	}
	resp, err := cl.Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Upsert: spec("clicks/0", "clicks")},
		{Upsert: spec("clicks/1", "clicks")},
		{Upsert: spec("views/0", "views")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// A change whose expected revision is stale fails, typed.
	_, err = cl.Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Upsert: spec("views/0", "other")},
	}})
	if !errors.Is(err, ErrRevisionMismatch) {
		t.Fatalf("err = %v, want ErrRevisionMismatch", err)
	}

	tests := []struct {
		selector string
		want     []string
	}{
		{"", []string{"clicks/0", "clicks/1", "views/0"}},
		{"app=clicks", []string{"clicks/0", "clicks/1"}},
		{"prefix=views/", []string{"views/0"}},
		{"app=none", nil},
	}
	for _, tt := range tests {
		js, err := cl.ListAll(ctx, tt.selector)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, j := range js {
			got = append(got, j.Spec.Name)
			if j.ModRevision != resp.Revision {
				t.Fatalf("%s: mod revision %d, want %d", j.Spec.Name, j.ModRevision, resp.Revision)
			}
		}
		if !equalStrings(got, tt.want) {
			t.Fatalf("ListAll(%q) = %v, want %v", tt.selector, got, tt.want)
		}
	}
	// List taught the client every journal's route.
	if rt := cl.Route("views/0"); rt == nil || rt.Endpoints[0] != c.brokers[0].endpoint {
		t.Fatalf("route of views/0 = %v", rt)
	}
	if _, err := cl.ListAll(ctx, "a in (b"); err == nil || !strings.Contains(err.Error(), "selector") {
		t.Fatalf("err = %v, want a selector error", err)
	}

	// A current expected revision applies.
	if _, err := cl.Apply(ctx, &protocol.ApplyRequest{Changes: []*protocol.ApplyRequest_Change{
		{Upsert: spec("views/0", "other"), ExpectModRevision: resp.Revision},
	}}); err != nil {
		t.Fatal(err)
	}
}

func TestListFailsOverUnavailableBroker(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 1)
	cl := newTestClient(t, c, 0, "")
	if _, err := cl.ListAll(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	c.brokers[0].down.Store(true) // The default broker; broker 1 is known.
	js, err := cl.ListAll(context.Background(), "")
	if err != nil || len(js) != 1 {
		t.Fatalf("ListAll = %v, %v", js, err)
	}
}

func TestListFragments(t *testing.T) {
	c := newFakeCluster(t, "a", "b")
	c.addJournal("j", 1)
	writeFragments(c, "j", "aa", "bbb", "c", "dddd", "ee")
	cl := newTestClient(t, c, 0, "")

	for _, limit := range []int32{0, 1, 2, 5, 6} {
		infos, err := cl.ListFragments(context.Background(), &protocol.FragmentsRequest{
			Journal: "j", PageLimit: limit, SignatureTtl: durationpb.New(60e9)})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, in := range infos {
			got = append(got, in.Fragment.Begin, in.Fragment.End)
			if in.SignedUrl == "" {
				t.Fatal("no signed URL")
			}
		}
		if want := []int64{0, 2, 2, 5, 5, 6, 6, 10, 10, 12}; !equalInts(got, want) {
			t.Fatalf("limit %d: fragments %v, want %v", limit, got, want)
		}
	}
	// With the route learned, listings go to the replica directly; a
	// stale route is corrected by NOT_REPLICA.
	c.setRoute("j", 0)
	if _, err := cl.ListFragments(context.Background(), &protocol.FragmentsRequest{Journal: "j"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ListFragments(context.Background(), &protocol.FragmentsRequest{Journal: "missing"}); !errors.Is(err, ErrJournalNotFound) {
		t.Fatalf("err = %v, want ErrJournalNotFound", err)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
