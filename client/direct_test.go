package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/protocol"
)

// metric is the value of the counter name with labels, from the default
// registry.
func metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// readRequests records the ReadRequests that brokers receive.
type readRequests struct {
	mu   sync.Mutex
	reqs []*protocol.ReadRequest
}

// serverOption records each ReadRequest the server receives.
func (r *readRequests) serverOption() grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, recordingStream{ss, r})
	})
}

func (r *readRequests) take() []*protocol.ReadRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reqs
	r.reqs = nil
	return out
}

type recordingStream struct {
	grpc.ServerStream
	rec *readRequests
}

func (s recordingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*protocol.ReadRequest); ok && err == nil {
		s.rec.mu.Lock()
		s.rec.reqs = append(s.rec.reqs, req)
		s.rec.mu.Unlock()
	}
	return err
}

// storedJournal creates journal with fragments of 16 KiB in codec,
// appends 200 KiB of text to it in appends of 10 KiB, and waits until
// fragments up to at least 150 KiB are persisted. It returns the content
// and the persisted fragments, in order.
func storedJournal(t *testing.T, c *brokertest.Cluster, cl *client.Client, journal string, codec protocol.Codec) ([]byte, []*protocol.FragmentsResponse_Info) {
	t.Helper()
	c.Apply(cl, &protocol.JournalSpec{Name: journal, Replication: 1,
		Fragment: &protocol.JournalSpec_Fragment{Length: 16 << 10, Codec: codec}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var want bytes.Buffer
	for i := range 20 {
		var chunk bytes.Buffer
		for chunk.Len() < 10<<10 {
			fmt.Fprintf(&chunk, "append %02d, record %06d of journal %s\n", i, chunk.Len(), journal)
		}
		chunk.Truncate(10 << 10)
		if _, err := cl.Append(ctx, client.AppendRequest{Journal: journal}, bytes.NewReader(chunk.Bytes())); err != nil {
			t.Fatal(err)
		}
		want.Write(chunk.Bytes())
	}
	for {
		infos, err := cl.ListFragments(ctx, &protocol.FragmentsRequest{Journal: journal, SignatureTtl: durationpb.New(time.Minute)})
		var stored []*protocol.FragmentsResponse_Info
		var end int64
		for _, info := range infos {
			if f := info.GetFragment(); f.GetModTime() != 0 && f.GetBegin() == end {
				stored, end = append(stored, info), f.GetEnd()
			}
		}
		if err == nil && end >= 150<<10 {
			return want.Bytes(), stored
		}
		if ctx.Err() != nil {
			t.Fatalf("fragments of %s are persisted up to %d (%v), want 150 KiB", journal, end, err)
		}
		time.Sleep(20 * time.Millisecond) // Polling the persister.
	}
}

// readJournal reads req to io.EOF, collecting offset jumps.
func readJournal(t *testing.T, cl *client.Client, req client.ReadRequest) ([]byte, []client.OffsetJumpError) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := cl.NewReader(ctx, req)
	defer r.Close()
	var out bytes.Buffer
	var jumps []client.OffsetJumpError
	buf := make([]byte, 5000) // Not a divisor of chunks or fragments.
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		var jump *client.OffsetJumpError
		switch {
		case err == io.EOF:
			return out.Bytes(), jumps
		case errors.As(err, &jump):
			jumps = append(jumps, *jump)
		case err != nil:
			t.Fatalf("reading %s at offset %d: %v", req.Journal, r.Offset(), err)
		}
	}
}

// Readers read persisted fragments from the store directly, by default,
// whatever their codec, from any offset to any end: the same content as
// through brokers. Spools are read through brokers.
func TestDirectReadsOfEachCodec(t *testing.T) {
	rec := &readRequests{}
	c := brokertest.New(t)
	c.ServerOptions = []grpc.ServerOption{rec.serverOption()}
	b := c.Start("b1")
	cl := c.Client(b)
	through, err := client.New(context.Background(), client.Config{Broker: b.Endpoint, ReadThroughBrokers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer through.Close()

	for _, codec := range []protocol.Codec{protocol.Codec_CODEC_NONE, protocol.Codec_CODEC_GZIP,
		protocol.Codec_CODEC_SNAPPY, protocol.Codec_CODEC_ZSTD} {
		t.Run(codec.String(), func(t *testing.T) {
			journal := "direct/" + codec.String()
			want, stored := storedJournal(t, c, cl, journal, codec)
			storedEnd := stored[len(stored)-1].GetFragment().GetEnd()
			for _, tt := range []struct {
				name        string
				offset, end int64
			}{
				{"all", 0, 0},
				{"mid-fragment to mid-fragment", 1000, storedEnd - 1000},
				{"to a fragment's end", 5, stored[1].GetFragment().GetEnd()},
				{"from the last stored fragment on", storedEnd - 10, 0},
			} {
				directBytes := metric(t, "quire_client_direct_read_bytes_total", nil)
				rec.take()
				got, jumps := readJournal(t, cl, client.ReadRequest{Journal: journal, Offset: tt.offset, EndOffset: tt.end})
				wantEnd := tt.end
				if wantEnd == 0 {
					wantEnd = int64(len(want))
				}
				if !bytes.Equal(got, want[tt.offset:wantEnd]) || len(jumps) != 0 {
					t.Fatalf("%s: read %d bytes and jumps %v directly, want the %d of [%d, %d)", tt.name, len(got), jumps, wantEnd-tt.offset, tt.offset, wantEnd)
				}
				gotThrough, _ := readJournal(t, through, client.ReadRequest{Journal: journal, Offset: tt.offset, EndOffset: tt.end})
				if !bytes.Equal(got, gotThrough) {
					t.Fatalf("%s: read %d bytes directly and %d through brokers, which differ", tt.name, len(got), len(gotThrough))
				}
				// Everything persisted when the read began came from the store.
				wantDirect := min(wantEnd, storedEnd) - tt.offset
				if d := metric(t, "quire_client_direct_read_bytes_total", nil) - directBytes; d < float64(wantDirect) {
					t.Errorf("%s: %v bytes were read directly, want at least the %d stored", tt.name, d, wantDirect)
				}
				var direct, notDirect int
				for _, req := range rec.take() {
					if req.Direct {
						direct++
					} else {
						notDirect++
					}
				}
				if direct == 0 || notDirect == 0 {
					t.Errorf("%s: brokers got %d direct reads and %d others, want both (the client's and the one reading through brokers)", tt.name, direct, notDirect)
				}
			}
		})
	}
}

// A fragment removed from its store after the broker listed it (by
// retention, say) fails to be read directly; the Reader reads it through
// the broker instead, which finds it gone and jumps: the reader sees the
// same gap, and the same content, as one reading through brokers.
func TestDirectReadOfRemovedFragmentFallsBack(t *testing.T) {
	c := brokertest.New(t)
	b := c.Start("b1")
	cl := c.Client(b)
	want, stored := storedJournal(t, c, cl, "direct/removed", protocol.Codec_CODEC_ZSTD)
	gone := stored[2]
	u, err := url.Parse(gone.GetSignedUrl())
	if err != nil || u.Scheme != "file" {
		t.Fatalf("signed URL %q of a file store's fragment: %v", gone.GetSignedUrl(), err)
	}
	if err := os.Remove(u.Path); err != nil {
		t.Fatal(err)
	}
	begin, end := gone.GetFragment().GetBegin(), gone.GetFragment().GetEnd()
	wantContent := slices.Concat(want[:begin], want[end:])
	wantJumps := []client.OffsetJumpError{{Journal: "direct/removed", From: begin, To: end}}

	fallbacks := metric(t, "quire_client_direct_reads_total", map[string]string{"result": "fallback"})
	got, jumps := readJournal(t, cl, client.ReadRequest{Journal: "direct/removed"})
	if !bytes.Equal(got, wantContent) || !slices.Equal(jumps, wantJumps) {
		t.Fatalf("read %d bytes with jumps %v, want %d bytes with jumps %v", len(got), jumps, len(wantContent), wantJumps)
	}
	if d := metric(t, "quire_client_direct_reads_total", map[string]string{"result": "fallback"}) - fallbacks; d != 1 {
		t.Errorf("quire_client_direct_reads_total{result=fallback} rose by %v, want 1", d)
	}
	got, jumps = readJournal(t, cl, client.ReadRequest{Journal: "direct/removed", ThroughBrokers: true})
	if !bytes.Equal(got, wantContent) || !slices.Equal(jumps, wantJumps) {
		t.Fatalf("through brokers: read %d bytes with jumps %v, want %d bytes with jumps %v", len(got), jumps, len(wantContent), wantJumps)
	}
}

// Config.ReadThroughBrokers and ReadRequest.ThroughBrokers send no
// direct reads: brokers serve all content.
func TestReadThroughBrokersSendsNoDirectRead(t *testing.T) {
	rec := &readRequests{}
	c := brokertest.New(t)
	c.ServerOptions = []grpc.ServerOption{rec.serverOption()}
	b := c.Start("b1")
	cl := c.Client(b)
	want, _ := storedJournal(t, c, cl, "direct/through", protocol.Codec_CODEC_GZIP)
	through, err := client.New(context.Background(), client.Config{Broker: b.Endpoint, ReadThroughBrokers: true})
	if err != nil {
		t.Fatal(err)
	}
	defer through.Close()
	for name, read := range map[string]func() ([]byte, []client.OffsetJumpError){
		"Config.ReadThroughBrokers": func() ([]byte, []client.OffsetJumpError) {
			return readJournal(t, through, client.ReadRequest{Journal: "direct/through"})
		},
		"ReadRequest.ThroughBrokers": func() ([]byte, []client.OffsetJumpError) {
			return readJournal(t, cl, client.ReadRequest{Journal: "direct/through", ThroughBrokers: true})
		},
	} {
		rec.take()
		directBytes := metric(t, "quire_client_direct_read_bytes_total", nil)
		if got, jumps := read(); !bytes.Equal(got, want) || len(jumps) != 0 {
			t.Fatalf("%s: read %d bytes with jumps %v, want the %d appended", name, len(got), jumps, len(want))
		}
		reqs := rec.take()
		if len(reqs) == 0 {
			t.Fatalf("%s: the broker recorded no reads", name)
		}
		for _, req := range reqs {
			if req.Direct {
				t.Errorf("%s: sent a direct read: %v", name, req)
			}
		}
		if d := metric(t, "quire_client_direct_read_bytes_total", nil) - directBytes; d != 0 {
			t.Errorf("%s: %v bytes were read directly", name, d)
		}
	}
}
