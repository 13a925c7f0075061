package protocol

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/allocator"
)

func TestInvalidArgument(t *testing.T) {
	if InvalidArgument(nil) != nil {
		t.Errorf("InvalidArgument(nil) is not nil")
	}
	err := InvalidArgument(errors.New("offset: -2 is below -1"))
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument || st.Message() != "offset: -2 is below -1" {
		t.Errorf("InvalidArgument = %v (status %v, %v)", err, st, ok)
	}
}

func TestProcessIDValidate(t *testing.T) {
	for _, tc := range []struct {
		id  *ProcessID
		err string
	}{
		{&ProcessID{Zone: "us-east-1a", Suffix: "broker-7"}, ""},
		{&ProcessID{Zone: "zé", Suffix: "x"}, ""},
		{nil, "process ID: missing"},
		{&ProcessID{Suffix: "x"}, "zone: empty"},
		{&ProcessID{Zone: "z"}, "suffix: empty"},
		{&ProcessID{Zone: "a#b", Suffix: "x"}, `zone: "a#b" contains '#' or '/'`},
		{&ProcessID{Zone: "z", Suffix: "a/b"}, `suffix: "a/b" contains '#' or '/'`},
		{&ProcessID{Zone: "z", Suffix: "a b"}, `suffix: "a b" contains a space or control character`},
		{&ProcessID{Zone: strings.Repeat("z", 513), Suffix: "x"}, "zone: \"zzzz"},
	} {
		err := tc.id.Validate()
		if tc.id == nil {
			checkErr(t, "nil ProcessID", err, "missing")
			continue
		}
		checkErr(t, tc.id.Zone+"#"+tc.id.Suffix, err, tc.err)
		// The rules are the allocator's.
		aerr := errors.Join(allocator.ValidateToken("zone", tc.id.Zone, false), allocator.ValidateToken("suffix", tc.id.Suffix, false))
		if (err == nil) != (aerr == nil) {
			t.Errorf("%v: protocol says %v, allocator says %v", tc.id, err, aerr)
		}
	}
}

func validRoute() *Route {
	return &Route{
		Members:   []*ProcessID{{Zone: "a", Suffix: "1"}, {Zone: "b", Suffix: "2"}},
		Endpoints: []string{"127.0.0.1:8080", "127.0.0.1:8081"},
		Revision:  42,
	}
}

func TestRouteAndHeaderValidate(t *testing.T) {
	for _, tc := range []struct {
		desc string
		edit func(h *Header)
		err  string
	}{
		{"valid", func(h *Header) {}, ""},
		{"empty", func(h *Header) { *h = Header{} }, ""},
		{"empty route", func(h *Header) { h.Route = &Route{} }, ""},
		{"no endpoints", func(h *Header) { h.Route.Endpoints = nil }, ""},
		{"bad process", func(h *Header) { h.ProcessId.Zone = "" }, "processId.zone: empty"},
		{"negative revision", func(h *Header) { h.Revision = -1 }, "revision: -1 is negative"},
		{"bad member", func(h *Header) { h.Route.Members[1].Suffix = "x#y" }, `route.members[1].suffix: "x#y" contains`},
		{"nil member", func(h *Header) { h.Route.Members[0] = nil }, "route.members[0]: missing"},
		{"repeated member", func(h *Header) { h.Route.Members[1] = &ProcessID{Zone: "a", Suffix: "1"} }, "route.members[1]: a#1 repeats members[0]"},
		{"endpoint count", func(h *Header) { h.Route.Endpoints = h.Route.Endpoints[:1] }, "route.endpoints: 1 endpoints for 2 members"},
		{"empty endpoint", func(h *Header) { h.Route.Endpoints[1] = "" }, "route.endpoints[1]: empty"},
		{"route revision", func(h *Header) { h.Route.Revision = -3 }, "route.revision: -3 is negative"},
	} {
		h := &Header{ProcessId: &ProcessID{Zone: "a", Suffix: "1"}, Route: validRoute(), Revision: 44}
		tc.edit(h)
		checkErr(t, tc.desc, h.Validate(), tc.err)
	}
	var nilRoute *Route
	checkErr(t, "nil route", nilRoute.Validate(), "missing")
}

func validFragment() *Fragment {
	sum := sha256.Sum256([]byte("hello"))
	return &Fragment{Journal: "a/b", Begin: 10, End: 15, Sum: sum[:], Codec: Codec_CODEC_ZSTD, Store: "file:///x/", ModTime: 1700000000}
}

func TestFragmentValidate(t *testing.T) {
	for _, tc := range []struct {
		desc string
		edit func(f *Fragment)
		err  string
	}{
		{"valid", func(f *Fragment) {}, ""},
		{"spooled", func(f *Fragment) { f.Store, f.ModTime = "", 0 }, ""},
		{"empty", func(f *Fragment) { f.End = f.Begin; f.Sum = nil }, ""},
		{"journal", func(f *Fragment) { f.Journal = "/a" }, `journal: journal name "/a" begins with '/'`},
		{"begin", func(f *Fragment) { f.Begin = -1 }, "begin: -1 is negative"},
		{"end", func(f *Fragment) { f.End = 9 }, "end: 9 is before begin 10"},
		{"sum", func(f *Fragment) { f.Sum = []byte{1, 2} }, "sum: 2 bytes, not a SHA-256 (32 bytes)"},
		{"codec", func(f *Fragment) { f.Codec = -1 }, "codec: -1 is not a known codec"},
		{"store", func(f *Fragment) { f.Store = "file:///x" }, `store: store URL "file:///x": path "/x" does not end in "/"`},
		{"modTime", func(f *Fragment) { f.ModTime = -1 }, "modTime: -1 is negative"},
		{"modTime without store", func(f *Fragment) { f.Store = "" }, "modTime: 1700000000 is set but store is empty"},
	} {
		f := validFragment()
		tc.edit(f)
		checkErr(t, tc.desc, f.Validate(), tc.err)
	}
}

func TestAppendRequestValidate(t *testing.T) {
	off := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		desc string
		edit func(r *AppendRequest)
		err  string
	}{
		{"valid", func(r *AppendRequest) {}, ""},
		{"minimal", func(r *AppendRequest) { *r = AppendRequest{Journal: "j"} }, ""},
		{"offset 0", func(r *AppendRequest) { r.Offset = off(0) }, ""},
		{"header", func(r *AppendRequest) { r.Header.Revision = -1 }, "header.revision: -1 is negative"},
		{"journal", func(r *AppendRequest) { r.Journal = "" }, "journal: journal name is empty"},
		{"offset", func(r *AppendRequest) { r.Offset = off(-1) }, "offset: -1 is negative"},
		{"selector", func(r *AppendRequest) { r.CheckRegisters = "a in (" }, "checkRegisters: "},
		{"union", func(r *AppendRequest) { r.UnionRegisters[0].Name = "" }, "unionRegisters[0]: invalid label name"},
		{"subtract order", func(r *AppendRequest) {
			r.SubtractRegisters = []*Label{{Name: "b", Value: "1"}, {Name: "a", Value: "1"}}
		}, `subtractRegisters[1]: "a=1" is out of order`},
		{"content and commit", func(r *AppendRequest) { r.Content, r.Commit = []byte("x"), true }, ""},
		{"writer", func(r *AppendRequest) { r.Writer, r.Sequence = "w-1_A", 7 }, ""},
		{"writer without sequence", func(r *AppendRequest) { r.Writer = "w" }, `sequence: 0 for writer "w"`},
		{"sequence without writer", func(r *AppendRequest) { r.Sequence = 3 }, "sequence: 3 given without a writer"},
		{"writer's characters", func(r *AppendRequest) { r.Writer, r.Sequence = "a/b", 1 }, `writer: "a/b" has '/' at byte 1`},
		{"writer register", func(r *AppendRequest) { r.UnionRegisters[0].Name = "quire.writer/x" }, `unionRegisters[0]: "quire.writer/x": registers named quire.writer/… are the brokers' own`},
		{"writer's length", func(r *AppendRequest) { r.Writer, r.Sequence = strings.Repeat("w", 65), 1 }, "writer: 65 bytes, longer than 64"},
	} {
		r := &AppendRequest{
			Header:            &Header{ProcessId: &ProcessID{Zone: "a", Suffix: "1"}, Route: validRoute()},
			Journal:           "a/b",
			DoNotProxy:        true,
			Offset:            off(100),
			CheckRegisters:    "owner=me, !locked",
			UnionRegisters:    []*Label{{Name: "owner", Value: "me"}},
			SubtractRegisters: []*Label{{Name: "owner", Value: ""}},
		}
		tc.edit(r)
		checkErr(t, tc.desc, r.Validate(), tc.err)
	}

	checkErr(t, "chunk", (&AppendRequest{Content: []byte("x")}).ValidateContent(), "")
	checkErr(t, "commit", (&AppendRequest{}).ValidateContent(), "")
	checkErr(t, "chunk and commit", (&AppendRequest{Content: []byte("x"), Commit: true}).ValidateContent(), "")
	checkErr(t, "chunk with journal", (&AppendRequest{Journal: "j"}).ValidateContent(), `journal: "j" set after the first message`)
	checkErr(t, "chunk with header", (&AppendRequest{Header: &Header{}}).ValidateContent(), "header: set after")
	checkErr(t, "chunk with offset", (&AppendRequest{Offset: off(1)}).ValidateContent(), "fields other than content and commit")
	checkErr(t, "chunk with writer", (&AppendRequest{Writer: "w", Sequence: 2}).ValidateContent(), "fields other than content and commit")
}

func TestReadRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		r   *ReadRequest
		err string
	}{
		{&ReadRequest{Journal: "j"}, ""},
		{&ReadRequest{Journal: "j", Offset: -1, Block: true}, ""},
		{&ReadRequest{Journal: "j", Offset: -1, EndOffset: 5}, ""},
		{&ReadRequest{Journal: "j", Offset: 4, EndOffset: 5}, ""},
		{&ReadRequest{Journal: "j", Header: &Header{Revision: -1}}, "header.revision: -1 is negative"},
		{&ReadRequest{Journal: "j/"}, `journal: journal name "j/" ends with '/'`},
		{&ReadRequest{Journal: "j", Offset: -2}, "offset: -2 is below -1"},
		{&ReadRequest{Journal: "j", EndOffset: -1}, "endOffset: -1 is negative"},
		{&ReadRequest{Journal: "j", Offset: 10, EndOffset: 10}, "endOffset: 10 is not beyond offset 10"},
	} {
		checkErr(t, tc.r.String(), tc.r.Validate(), tc.err)
	}
}

func TestListRequestValidate(t *testing.T) {
	checkErr(t, "empty", (&ListRequest{}).Validate(), "")
	checkErr(t, "prefix", (&ListRequest{Selector: "prefix=examples/, app in (a, b)"}).Validate(), "")
	checkErr(t, "bad", (&ListRequest{Selector: "app=="}).Validate(), "selector: ")
	checkErr(t, "wait", (&ListRequest{WaitForRevision: 7}).Validate(), "")
	checkErr(t, "negative wait", (&ListRequest{WaitForRevision: -1}).Validate(), "waitForRevision: -1 is negative")
}

func TestStoreHealthRequestValidate(t *testing.T) {
	checkErr(t, "empty", (&StoreHealthRequest{}).Validate(), "")
	checkErr(t, "full", (&StoreHealthRequest{Selector: "app=a", Stores: []string{"file:///s/", "s3://bucket/p/"}}).Validate(), "")
	checkErr(t, "bad selector", (&StoreHealthRequest{Selector: "app=="}).Validate(), "selector: ")
	checkErr(t, "bad store", (&StoreHealthRequest{Stores: []string{"file:///s/", "ftp://x/"}}).Validate(), "stores[1]: ")
	checkErr(t, "twice", (&StoreHealthRequest{Stores: []string{"file:///s/", "file:///s/"}}).Validate(), `stores[1]: "file:///s/" is named twice`)
	checkErr(t, "bad header", (&StoreHealthRequest{Header: &Header{ProcessId: &ProcessID{Zone: "a#b", Suffix: "x"}}}).Validate(), "header.")
	many := make([]string, MaxStoreHealthStores+1)
	for i := range many {
		many[i] = fmt.Sprintf("file:///s%d/", i)
	}
	checkErr(t, "too many", (&StoreHealthRequest{Stores: many}).Validate(), "stores: 101 URLs, more than 100")
}

func TestApplyRequestValidate(t *testing.T) {
	upsert := func(name string) *ApplyRequest_Change {
		return &ApplyRequest_Change{Upsert: &JournalSpec{Name: name, Replication: 1}}
	}
	for _, tc := range []struct {
		desc string
		r    *ApplyRequest
		err  string
	}{
		{"upsert new", &ApplyRequest{Changes: []*ApplyRequest_Change{upsert("a")}}, ""},
		{"upsert and delete", &ApplyRequest{Changes: []*ApplyRequest_Change{
			{Upsert: validSpec(), ExpectModRevision: 5}, {Delete: "b", ExpectModRevision: 7}}}, ""},
		{"none", &ApplyRequest{}, "changes: none"},
		{"nil change", &ApplyRequest{Changes: []*ApplyRequest_Change{upsert("a"), nil}}, "changes[1]: missing"},
		{"neither", &ApplyRequest{Changes: []*ApplyRequest_Change{{ExpectModRevision: 3}}}, "changes[0]: neither upsert nor delete is set"},
		{"both", &ApplyRequest{Changes: []*ApplyRequest_Change{{Upsert: validSpec(), Delete: "a", ExpectModRevision: 3}}}, "changes[0]: both upsert and delete are set"},
		{"bad spec", &ApplyRequest{Changes: []*ApplyRequest_Change{upsert("a"), {Upsert: &JournalSpec{
			Name: "b", Replication: 1, Fragment: &JournalSpec_Fragment{Length: -5}}}}}, "changes[1].upsert.fragment.length: -5 is negative"},
		{"bad spec name", &ApplyRequest{Changes: []*ApplyRequest_Change{upsert("a//b")}}, `changes[0].upsert.name: journal name "a//b"`},
		{"bad delete", &ApplyRequest{Changes: []*ApplyRequest_Change{{Delete: "/x", ExpectModRevision: 1}}}, `changes[0].delete: journal name "/x" begins`},
		{"delete absent", &ApplyRequest{Changes: []*ApplyRequest_Change{{Delete: "x"}}}, "changes[0].expectModRevision: 0 with delete"},
		{"negative revision", &ApplyRequest{Changes: []*ApplyRequest_Change{{Delete: "x", ExpectModRevision: -1}}}, "changes[0].expectModRevision: -1 is negative"},
		{"same journal", &ApplyRequest{Changes: []*ApplyRequest_Change{upsert("a"), upsert("b"), {Delete: "a", ExpectModRevision: 2}}},
			`changes[2]: journal "a" is also changed by changes[0]`},
	} {
		checkErr(t, tc.desc, tc.r.Validate(), tc.err)
	}
}

func TestFragmentsRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		desc string
		r    *FragmentsRequest
		err  string
	}{
		{"minimal", &FragmentsRequest{Journal: "j"}, ""},
		{"full", &FragmentsRequest{Journal: "j", BeginModTime: 10, EndModTime: 20, NextPageToken: 1 << 30,
			PageLimit: 100, SignatureTtl: durationpb.New(time.Hour), DoNotProxy: true}, ""},
		{"journal", &FragmentsRequest{Journal: "a/../b"}, `journal: journal name "a/../b" has a ".." segment`},
		{"header", &FragmentsRequest{Journal: "j", Header: &Header{ProcessId: &ProcessID{}}}, "header.processId.zone: empty"},
		{"begin", &FragmentsRequest{Journal: "j", BeginModTime: -1}, "beginModTime: -1 is negative"},
		{"end", &FragmentsRequest{Journal: "j", EndModTime: -1}, "endModTime: -1 is negative"},
		{"end before begin", &FragmentsRequest{Journal: "j", BeginModTime: 5, EndModTime: 5}, "endModTime: 5 is not beyond beginModTime 5"},
		{"token", &FragmentsRequest{Journal: "j", NextPageToken: -1}, "nextPageToken: -1 is negative"},
		{"limit negative", &FragmentsRequest{Journal: "j", PageLimit: -1}, "pageLimit: -1 is below 0"},
		{"limit big", &FragmentsRequest{Journal: "j", PageLimit: MaxPageLimit + 1}, "pageLimit: 10001 is above 10000"},
		{"ttl zero", &FragmentsRequest{Journal: "j", SignatureTtl: durationpb.New(0)}, "signatureTtl: 0s is not positive"},
		{"ttl negative", &FragmentsRequest{Journal: "j", SignatureTtl: durationpb.New(-time.Second)}, "signatureTtl: -1s is negative"},
	} {
		checkErr(t, tc.desc, tc.r.Validate(), tc.err)
	}
}

func TestReplicateRequestValidate(t *testing.T) {
	for _, tc := range []struct {
		desc string
		edit func(r *ReplicateRequest)
		err  string
	}{
		{"valid", func(r *ReplicateRequest) {}, ""},
		{"no header", func(r *ReplicateRequest) { r.Header = nil }, "header: missing"},
		{"bad header", func(r *ReplicateRequest) { r.Header.Route.Members[0].Zone = "" }, "header.route.members[0].zone: empty"},
		{"short route", func(r *ReplicateRequest) {
			r.Header.Route.Members = r.Header.Route.Members[:1]
			r.Header.Route.Endpoints = nil
		}, "header.route.members: 1 members"},
		{"journal", func(r *ReplicateRequest) { r.Journal = "" }, "journal: journal name is empty"},
		{"no proposal", func(r *ReplicateRequest) { r.Proposal = nil }, "proposal: missing"},
		{"bad proposal", func(r *ReplicateRequest) { r.Proposal.End = 0 }, "proposal.end: 0 is before begin 10"},
		{"other journal", func(r *ReplicateRequest) { r.Proposal.Journal = "c" }, `proposal.journal: "c" is not journal "a/b"`},
		{"registers", func(r *ReplicateRequest) { r.Registers = []*Label{{Name: "x", Value: "a b"}} }, "registers[0]: invalid label value"},
		{"content", func(r *ReplicateRequest) { r.Content = []byte("abc") }, "content: 3 bytes in the first message"},
		{"delta", func(r *ReplicateRequest) { r.ContentDelta = 3 }, "contentDelta: 3 in the first message"},
	} {
		r := &ReplicateRequest{
			Header:      &Header{ProcessId: &ProcessID{Zone: "a", Suffix: "1"}, Route: validRoute(), Revision: 50},
			Journal:     "a/b",
			Proposal:    validFragment(),
			Registers:   []*Label{{Name: "owner", Value: "me"}},
			Acknowledge: true,
		}
		tc.edit(r)
		checkErr(t, tc.desc, r.Validate(), tc.err)
	}
}

func TestNilRequests(t *testing.T) {
	for _, v := range []interface{ Validate() error }{
		(*AppendRequest)(nil), (*ReadRequest)(nil), (*ListRequest)(nil), (*ApplyRequest)(nil),
		(*FragmentsRequest)(nil), (*ReplicateRequest)(nil), (*Header)(nil), (*Route)(nil),
		(*ProcessID)(nil), (*Fragment)(nil), (*JournalSpec)(nil), (*StoreHealthRequest)(nil),
	} {
		checkErr(t, "nil", v.Validate(), "missing")
	}
}
