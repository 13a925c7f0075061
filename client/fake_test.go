package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// fakeCluster is an in-process fleet of brokers sharing one state, each
// serving the Journal service on a loopback listener. It implements the
// protocol's semantics as far as the client depends on them: routes in
// headers, proxying unless do_not_proxy, NOT_PRIMARY and NOT_REPLICA,
// conditional appends, reads across fragments that block at the write
// head, and offset jumps over removed content. Faults are injected per
// journal.
type fakeCluster struct {
	t       testing.TB
	brokers []*fakeBroker

	mu        sync.Mutex
	journals  map[string]*fakeJournal
	revision  int64
	changed   chan struct{} // Closed, and replaced, on every change.
	readChunk int           // Largest content of a read response.
	discard   bool          // Keep no content (for benchmarks).
	gate      chan struct{} // If set, appends wait on it before committing,
	atGate    chan struct{} // signalling this as they start to.
}

type fakeJournal struct {
	spec      *protocol.JournalSpec
	createRev int64
	modRev    int64
	route     []int // Indexes of brokers, the primary first.
	routeRev  int64
	frags     []*fakeFrag
	head      int64
	registers labels.Set

	commits  [][]byte // Content of each committed append, in order.
	attempts [][]byte // Content received by each append that reached the primary.
	faults   []fault  // Outcomes of the next appends, in order.
	breaks   []int64  // Read streams break after sending this many bytes.
}

type fakeFrag struct {
	begin, end int64
	data       []byte
	sealed     bool
}

// fault replaces the outcome of an append that reaches the primary.
type fault struct {
	status       protocol.Status // Answered instead of committing, if not OK,
	code         codes.Code      // else the RPC fails with this code.
	afterContent bool            // After receiving content and commit, or before.
}

type fakeBroker struct {
	protocol.UnimplementedJournalServer
	c        *fakeCluster
	idx      int
	id       *protocol.ProcessID
	endpoint string
	srv      *grpc.Server
	down     atomic.Bool

	appends    atomic.Int64 // Append RPCs received.
	direct     atomic.Int64 // ... of which with do_not_proxy.
	notPrimary atomic.Int64
	reads      atomic.Int64 // Read RPCs received.
	readDirect atomic.Int64
	notReplica atomic.Int64
	blocked    chan struct{} // Signalled when a read waits at the write head.
}

// newFakeCluster starts one broker per zone.
func newFakeCluster(t testing.TB, zones ...string) *fakeCluster {
	c := &fakeCluster{
		t:         t,
		journals:  make(map[string]*fakeJournal),
		revision:  1,
		changed:   make(chan struct{}),
		readChunk: 1 << 10,
		atGate:    make(chan struct{}, 64),
	}
	for i, zone := range zones {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b := &fakeBroker{
			c:        c,
			idx:      i,
			id:       &protocol.ProcessID{Zone: zone, Suffix: fmt.Sprintf("broker-%d", i)},
			endpoint: lis.Addr().String(),
			srv:      grpc.NewServer(),
			blocked:  make(chan struct{}, 64),
		}
		protocol.RegisterJournalServer(b.srv, b)
		c.brokers = append(c.brokers, b)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = b.srv.Serve(lis)
		}()
		t.Cleanup(func() {
			b.srv.Stop()
			<-done
		})
	}
	return c
}

// changedLocked wakes blocked reads. c.mu is held.
func (c *fakeCluster) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
	c.revision++
}

func (c *fakeCluster) journal(name string) *fakeJournal {
	j, ok := c.journals[name]
	if !ok {
		c.t.Fatalf("fake: no journal %q", name)
	}
	return j
}

// addJournal creates a journal served by the brokers of route.
func (c *fakeCluster) addJournal(name string, route ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revision++
	c.journals[name] = &fakeJournal{
		spec:      &protocol.JournalSpec{Name: name, Replication: int32(len(route))},
		createRev: c.revision,
		modRev:    c.revision,
		route:     route,
		routeRev:  c.revision,
	}
}

func (c *fakeCluster) setRoute(name string, route ...int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.journal(name)
	j.route = route
	c.changedLocked()
	j.routeRev = c.revision
}

func (c *fakeCluster) setAccess(name string, a protocol.Access) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.journal(name).spec.Access = a
}

// write appends content directly, as if a client had.
func (c *fakeCluster) write(name string, content string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commitLocked(c.journal(name), []byte(content))
}

// roll seals the journal's current fragment: later content starts another.
func (c *fakeCluster) roll(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.journal(name)
	if n := len(j.frags); n > 0 {
		j.frags[n-1].sealed = true
	}
}

// remove drops the fragments within [begin, end), as retention would.
func (c *fakeCluster) remove(name string, begin, end int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.journal(name)
	j.frags = slices.DeleteFunc(j.frags, func(f *fakeFrag) bool { return f.begin >= begin && f.end <= end })
}

func (c *fakeCluster) inject(name string, fs ...fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.journal(name)
	j.faults = append(j.faults, fs...)
}

func (c *fakeCluster) breakReads(name string, after ...int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.journal(name)
	j.breaks = append(j.breaks, after...)
}

// content returns the journal's content from offset 0 (removed fragments
// are zeros).
func (c *fakeCluster) content(name string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.journal(name)
	out := make([]byte, j.head)
	for _, f := range j.frags {
		copy(out[f.begin:], f.data)
	}
	return out
}

func (c *fakeCluster) commits(name string) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.journal(name).commits)
}

func (c *fakeCluster) attempts(name string) [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.journal(name).attempts)
}

// commitLocked appends content to j. c.mu is held.
func (c *fakeCluster) commitLocked(j *fakeJournal, content []byte) *protocol.Fragment {
	begin := j.head
	j.head += int64(len(content))
	if !c.discard {
		j.commits = append(j.commits, content)
		n := len(j.frags)
		if n == 0 || j.frags[n-1].sealed || j.frags[n-1].end != begin {
			j.frags = append(j.frags, &fakeFrag{begin: begin, end: begin})
			n++
		}
		f := j.frags[n-1]
		f.data = append(f.data, content...)
		f.end = j.head
	}
	c.changedLocked()
	return &protocol.Fragment{Journal: j.spec.Name, Begin: begin, End: j.head}
}

// header is broker b's header for journal j. c.mu is held.
func (c *fakeCluster) header(b *fakeBroker, j *fakeJournal) *protocol.Header {
	h := &protocol.Header{ProcessId: b.id, Revision: c.revision}
	if j != nil {
		rt := &protocol.Route{Revision: j.routeRev}
		for _, i := range j.route {
			rt.Members = append(rt.Members, c.brokers[i].id)
			rt.Endpoints = append(rt.Endpoints, c.brokers[i].endpoint)
		}
		h.Route = rt
	}
	return h
}

func unavailable(b *fakeBroker) error {
	return status.Errorf(codes.Unavailable, "fake broker %s is down", b.id.Suffix)
}

func (b *fakeBroker) Append(stream protocol.Journal_AppendServer) error {
	if b.down.Load() {
		return unavailable(b)
	}
	b.appends.Add(1)
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.DoNotProxy {
		b.direct.Add(1)
	}
	if err := protocol.ValidateJournalName(first.Journal); err != nil {
		return status.Errorf(codes.InvalidArgument, "journal: %v", err)
	}
	c := b.c
	c.mu.Lock()
	j := c.journals[first.Journal]
	if j == nil {
		hdr := c.header(b, nil)
		c.mu.Unlock()
		return stream.SendAndClose(&protocol.AppendResponse{Status: protocol.Status_JOURNAL_NOT_FOUND, Header: hdr})
	}
	if len(j.route) == 0 {
		hdr := c.header(b, j)
		c.mu.Unlock()
		return stream.SendAndClose(&protocol.AppendResponse{Status: protocol.Status_NO_PRIMARY, Header: hdr})
	}
	primary := c.brokers[j.route[0]]
	hdr := c.header(b, j)
	if primary != b {
		if first.DoNotProxy {
			c.mu.Unlock()
			b.notPrimary.Add(1)
			return stream.SendAndClose(&protocol.AppendResponse{Status: protocol.Status_NOT_PRIMARY, Header: hdr})
		}
		if primary.down.Load() {
			c.mu.Unlock()
			return unavailable(primary)
		}
		hdr = c.header(primary, j) // Proxied: the primary answers.
	}
	var f *fault
	if len(j.faults) > 0 {
		f = &j.faults[0]
		j.faults = j.faults[1:]
	}
	gate := c.gate
	c.mu.Unlock()

	if f != nil && !f.afterContent {
		return f.reply(stream, hdr)
	}
	content, committed, err := receiveContent(stream, first)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if !c.discard {
		j.attempts = append(j.attempts, content)
	}
	c.mu.Unlock()
	if !committed {
		return status.Error(codes.Aborted, "append aborted before its commit message")
	}
	if f != nil {
		return f.reply(stream, hdr)
	}
	if gate != nil {
		select {
		case c.atGate <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
	return stream.SendAndClose(c.commit(j, first, content, hdr))
}

// receiveContent receives an append's content, the first message's
// included, up to its commit: a message with commit set, or a later one
// with no content.
func receiveContent(stream protocol.Journal_AppendServer, first *protocol.AppendRequest) (content []byte, committed bool, _ error) {
	for m := first; ; {
		content = append(content, m.Content...)
		if m.Commit || (m != first && len(m.Content) == 0) {
			return content, true, nil
		}
		var err error
		if m, err = stream.Recv(); err == io.EOF {
			return content, false, nil
		} else if err != nil {
			return nil, false, err
		}
	}
}

func (f *fault) reply(stream protocol.Journal_AppendServer, hdr *protocol.Header) error {
	if f.status != protocol.Status_OK {
		return stream.SendAndClose(&protocol.AppendResponse{Status: f.status, Header: hdr})
	}
	return status.Errorf(f.code, "fake: injected %v", f.code)
}

// commit checks an append's conditions and commits it.
func (c *fakeCluster) commit(j *fakeJournal, req *protocol.AppendRequest, content []byte, hdr *protocol.Header) *protocol.AppendResponse {
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &protocol.AppendResponse{Header: hdr, Registers: protocol.ProtoLabels(j.registers)}
	if j.spec.Access == protocol.Access_READ_ONLY {
		resp.Status = protocol.Status_NOT_ALLOWED
		return resp
	}
	if req.Offset != nil && *req.Offset != j.head {
		resp.Status = protocol.Status_WRONG_APPEND_OFFSET
		return resp
	}
	if req.CheckRegisters != "" {
		sel, err := labels.ParseSelector(req.CheckRegisters)
		if err != nil || !sel.Matches(j.registers) {
			resp.Status = protocol.Status_REGISTER_MISMATCH
			return resp
		}
	}
	resp.Commit = c.commitLocked(j, content)
	j.registers = j.registers.Union(protocol.LabelsOf(req.UnionRegisters)).Subtract(protocol.LabelsOf(req.SubtractRegisters))
	resp.Registers = protocol.ProtoLabels(j.registers)
	return resp
}

func (b *fakeBroker) Read(req *protocol.ReadRequest, stream protocol.Journal_ReadServer) error {
	if b.down.Load() {
		return unavailable(b)
	}
	b.reads.Add(1)
	if req.DoNotProxy {
		b.readDirect.Add(1)
	}
	if err := req.Validate(); err != nil {
		return protocol.InvalidArgument(err)
	}
	c := b.c
	c.mu.Lock()
	j := c.journals[req.Journal]
	if j == nil {
		hdr := c.header(b, nil)
		c.mu.Unlock()
		return stream.Send(&protocol.ReadResponse{Status: protocol.Status_JOURNAL_NOT_FOUND, Header: hdr})
	}
	hdr, server := c.header(b, j), b
	if !slices.Contains(j.route, b.idx) {
		if req.DoNotProxy {
			c.mu.Unlock()
			b.notReplica.Add(1)
			return stream.Send(&protocol.ReadResponse{Status: protocol.Status_NOT_REPLICA, Header: hdr})
		}
		replica := -1
		for _, i := range j.route {
			if !c.brokers[i].down.Load() {
				replica = i
				break
			}
		}
		if replica < 0 {
			c.mu.Unlock()
			return status.Errorf(codes.Unavailable, "fake: no replica of %q is up", req.Journal)
		}
		server = c.brokers[replica]
		hdr = c.header(server, j)
	}
	breakAfter := int64(-1)
	if len(j.breaks) > 0 {
		breakAfter, j.breaks = j.breaks[0], j.breaks[1:]
	}
	c.mu.Unlock()
	return b.serveRead(server, j, req, hdr, breakAfter, stream)
}

// serveRead serves a read on b, from server (b, or the replica b proxies
// to).
func (b *fakeBroker) serveRead(server *fakeBroker, j *fakeJournal, req *protocol.ReadRequest, hdr *protocol.Header,
	breakAfter int64, stream protocol.Journal_ReadServer) error {

	c := b.c
	offset, sent := req.Offset, int64(0)
	for {
		c.mu.Lock()
		if b.down.Load() {
			c.mu.Unlock()
			return unavailable(b)
		}
		if offset == -1 {
			offset = j.head
		}
		if req.EndOffset != 0 && offset >= req.EndOffset {
			c.mu.Unlock()
			return nil
		}
		if offset < j.head {
			meta, data := j.readFrom(offset, req.EndOffset)
			meta.Header, hdr = hdr, nil
			c.mu.Unlock()
			if meta.Offset != offset { // Content before meta.Offset is gone.
				offset = meta.Offset
			}
			if err := stream.Send(meta); err != nil {
				return err
			}
			for len(data) > 0 {
				n := min(int64(len(data)), int64(c.readChunk))
				if breakAfter >= 0 && sent+n > breakAfter {
					if n = breakAfter - sent; n == 0 {
						return status.Error(codes.Unavailable, "fake: read stream broken")
					}
				}
				if err := stream.Send(&protocol.ReadResponse{Offset: offset, Content: data[:n]}); err != nil {
					return err
				}
				offset, sent, data = offset+n, sent+n, data[n:]
			}
			continue
		}
		if !req.Block {
			resp := &protocol.ReadResponse{Status: protocol.Status_OFFSET_NOT_YET_AVAILABLE, Header: hdr,
				Offset: offset, WriteHead: j.head}
			c.mu.Unlock()
			return stream.Send(resp)
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case server.blocked <- struct{}{}:
		default:
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}

// readFrom returns the metadata response for a read at offset < j.head,
// and the content from there to the end of its fragment (or end). The
// fragment is the first that ends after offset; if it begins after
// offset, the read jumps there. c.mu is held.
func (j *fakeJournal) readFrom(offset, end int64) (*protocol.ReadResponse, []byte) {
	i := sort.Search(len(j.frags), func(i int) bool { return j.frags[i].end > offset })
	if i == len(j.frags) { // Everything up to the head is gone.
		return &protocol.ReadResponse{Offset: j.head, WriteHead: j.head}, nil
	}
	f := j.frags[i]
	offset = max(offset, f.begin)
	stop := f.end
	if end != 0 {
		stop = max(offset, min(stop, end)) // A jump may go past end.
	}
	meta := &protocol.ReadResponse{
		Offset:    offset,
		WriteHead: j.head,
		Fragment:  &protocol.Fragment{Journal: j.spec.Name, Begin: f.begin, End: f.end},
	}
	return meta, f.data[offset-f.begin : stop-f.begin : stop-f.begin]
}

func (b *fakeBroker) List(_ context.Context, req *protocol.ListRequest) (*protocol.ListResponse, error) {
	if b.down.Load() {
		return nil, unavailable(b)
	}
	sel, err := labels.ParseSelector(req.Selector)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "selector: %v", err)
	}
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &protocol.ListResponse{Header: c.header(b, nil)}
	for _, j := range c.journals {
		if sel.Matches(j.spec.LabelSetWithMeta()) {
			resp.Journals = append(resp.Journals, &protocol.ListResponse_Journal{
				Spec: j.spec, CreateRevision: j.createRev, ModRevision: j.modRev, Route: c.header(b, j).Route,
			})
		}
	}
	slices.SortFunc(resp.Journals, func(a, b *protocol.ListResponse_Journal) int {
		return compareStrings(a.Spec.Name, b.Spec.Name)
	})
	return resp, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (b *fakeBroker) Apply(_ context.Context, req *protocol.ApplyRequest) (*protocol.ApplyResponse, error) {
	if b.down.Load() {
		return nil, unavailable(b)
	}
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ch := range req.Changes {
		name := ch.Delete
		if ch.Upsert != nil {
			name = ch.Upsert.Name
		}
		var rev int64
		if j := c.journals[name]; j != nil {
			rev = j.modRev
		}
		if rev != ch.ExpectModRevision {
			return &protocol.ApplyResponse{Status: protocol.Status_REVISION_MISMATCH, Header: c.header(b, nil)}, nil
		}
	}
	c.revision++
	for _, ch := range req.Changes {
		if ch.Upsert == nil {
			delete(c.journals, ch.Delete)
			continue
		}
		j := c.journals[ch.Upsert.Name]
		if j == nil {
			j = &fakeJournal{createRev: c.revision, route: []int{0}, routeRev: c.revision}
			c.journals[ch.Upsert.Name] = j
		}
		j.spec, j.modRev = ch.Upsert, c.revision
	}
	return &protocol.ApplyResponse{Header: c.header(b, nil), Revision: c.revision}, nil
}

func (b *fakeBroker) ListFragments(_ context.Context, req *protocol.FragmentsRequest) (*protocol.FragmentsResponse, error) {
	if b.down.Load() {
		return nil, unavailable(b)
	}
	c := b.c
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.journals[req.Journal]
	if j == nil {
		return &protocol.FragmentsResponse{Status: protocol.Status_JOURNAL_NOT_FOUND, Header: c.header(b, nil)}, nil
	}
	hdr := c.header(b, j)
	if !slices.Contains(j.route, b.idx) && req.DoNotProxy {
		return &protocol.FragmentsResponse{Status: protocol.Status_NOT_REPLICA, Header: hdr}, nil
	}
	resp := &protocol.FragmentsResponse{Header: hdr}
	for _, f := range j.frags {
		if f.begin < req.NextPageToken {
			continue
		}
		if req.PageLimit > 0 && len(resp.Fragments) == int(req.PageLimit) {
			resp.NextPageToken = f.begin
			break
		}
		info := &protocol.FragmentsResponse_Info{
			Fragment: &protocol.Fragment{Journal: j.spec.Name, Begin: f.begin, End: f.end},
		}
		if req.SignatureTtl != nil {
			info.SignedUrl = fmt.Sprintf("https://store.example/%s/%d", j.spec.Name, f.begin)
		}
		resp.Fragments = append(resp.Fragments, info)
	}
	return resp, nil
}

// kill stops b's server: its connections close, and new ones are refused.
func (b *fakeBroker) kill() { b.srv.Stop() }

// waitBlocked waits until a read on b waits at the write head.
func (b *fakeBroker) waitBlocked(t testing.TB) {
	t.Helper()
	select {
	case <-b.blocked:
	case <-time.After(10 * time.Second):
		t.Fatalf("no read blocked on broker %d", b.idx)
	}
}

// newTestClient returns a client whose default broker is c.brokers[def].
func newTestClient(t testing.TB, c *fakeCluster, def int, zone string) *Client {
	t.Helper()
	cl, err := New(context.Background(), Config{
		Broker:     c.brokers[def].endpoint,
		Zone:       zone,
		Backoff:    time.Millisecond,
		MaxBackoff: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// onlyReader hides every method of r but Read.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
