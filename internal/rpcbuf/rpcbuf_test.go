package rpcbuf

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/protocol"
)

func TestTier(t *testing.T) {
	for _, tc := range []struct{ size, tier int }{
		{0, 0}, {1, 0}, {256, 0}, {257, 1}, {512, 1}, {513, 2},
		{64 << 10, 8}, {64<<10 + 1, 9}, {16 << 20, 16}, {16<<20 + 1, -1},
	} {
		if got := tier(tc.size); got != tc.tier {
			t.Errorf("tier(%d) = %d, want %d", tc.size, got, tc.tier)
		}
	}
}

func TestPoolSizes(t *testing.T) {
	var p Pool
	for _, size := range []int{0, 1, 300, 70 << 10, 16 << 20, 16<<20 + 1} {
		b := p.Get(size)
		if len(*b) != size {
			t.Errorf("Get(%d): length %d", size, len(*b))
		}
		if tr := tier(size); tr >= 0 && cap(*b) != 1<<(tr+minShift) {
			t.Errorf("Get(%d): capacity %d, want tier %d's %d", size, cap(*b), tr, 1<<(tr+minShift))
		}
		p.Put(b)
	}
	// A buffer whose capacity is no tier's is dropped, never handed out
	// for a tier it cannot hold.
	foreign := make([]byte, 300)
	p.Put(&foreign)
	for range 10 {
		if b := p.Get(500); cap(*b) < 500 {
			t.Fatalf("Get(500) after a foreign Put: capacity %d", cap(*b))
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, n := range []int{10, 200 << 10} { // Below and above gRPC's pooling threshold.
		in := &protocol.AppendRequest{Content: bytes.Repeat([]byte{'x'}, n)}
		data, err := codec{}.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		out := &protocol.AppendRequest{}
		if err := (codec{}).Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		data.Free()
		if !proto.Equal(in, out) {
			t.Errorf("%d bytes of content: round trip changed the message", n)
		}
	}
	if _, err := (codec{}).Marshal("not a message"); err == nil {
		t.Error("marshaling a string: no error")
	}
	if err := (codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{1})}, new(int)); err == nil {
		t.Error("unmarshaling into an int: no error")
	}
}
