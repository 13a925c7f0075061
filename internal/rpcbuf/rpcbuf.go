// Package rpcbuf holds the gRPC options of every Quire server and client
// (ServerOptions, DialOptions): a buffer pool, a codec that uses it,
// transport sizes for bulk content, reconnection and keepalives.
//
// gRPC's default pool clears every buffer it hands out, over the buffer's
// whole capacity, which is a power of two at least as large as the message;
// and its protobuf codec takes buffers from that default pool whatever pool
// the connection has. Quire's large messages (append chunks, read
// responses, recovery-log operations) are bulk content, and gRPC writes
// every byte of a buffer it hands out (reading a frame into it, or
// marshaling into it) before anything reads it, so clearing only spends
// CPU: a fifth of an append benchmark's. Pool hands out buffers as they
// were returned.
package rpcbuf

import (
	"fmt"
	"math/bits"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Tiers of pooled buffers: powers of two from 256 B to 16 MiB. Larger
// requests are allocated and dropped, as gRPC's own pool does.
const (
	minShift = 8
	maxShift = 24
)

// Pool is a mem.BufferPool of power-of-two tiers that does not clear
// buffers. Its zero value is ready to use.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// tier returns the index of the smallest tier holding size bytes, or -1.
func tier(size int) int {
	if size <= 1<<minShift {
		return 0
	}
	shift := bits.Len(uint(size - 1))
	if shift > maxShift {
		return -1
	}
	return shift - minShift
}

// Get returns a buffer of length size; its content is undefined.
func (p *Pool) Get(size int) *[]byte {
	t := tier(size)
	if t < 0 {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<(t+minShift))
	return &b
}

// Put returns a buffer to the tier of its capacity. Buffers whose capacity
// is not a tier's exact size (from outside the pool) are dropped.
func (p *Pool) Put(b *[]byte) {
	c := cap(*b)
	t := tier(c)
	if t < 0 || c != 1<<(t+minShift) {
		return
	}
	p.tiers[t].Put(b)
}

var shared Pool

// codec is gRPC's protobuf codec with the shared pool: gRPC's own codec
// takes its buffers from gRPC's default pool whatever pool the
// connection has.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m := message(v)
	if m == nil {
		return nil, fmt.Errorf("rpcbuf: marshaling %T: not a protobuf message", v)
	}
	size := proto.Size(m)
	// UseCachedSize is right only because Size has just run.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	b := shared.Get(size)
	if _, err := opts.MarshalAppend((*b)[:0], m); err != nil {
		shared.Put(b)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(b, &shared)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := message(v)
	if m == nil {
		return fmt.Errorf("rpcbuf: unmarshaling into %T: not a protobuf message", v)
	}
	b := data.MaterializeToBuffer(&shared)
	defer b.Free()
	return proto.Unmarshal(b.ReadOnlyData(), m)
}

// message returns v as a protobuf message, adapting generated code of
// the older API, or nil.
func message(v any) proto.Message {
	switch m := v.(type) {
	case proto.Message:
		return m
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m)
	}
	return nil
}

// Transport sizes. gRPC's defaults (a 64 KiB initial flow-control window
// grown by bandwidth probes, 32 KiB socket buffers) make a 200 KiB append
// wait for window updates and split it into many small writes.
const (
	window = 4 << 20
	socket = 256 << 10
)

// ServerOptions are the options of every Quire gRPC server.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		experimental.BufferPool(&shared), grpc.ForceServerCodecV2(codec{}),
		// Streams run on long-lived goroutines, whose stacks have grown
		// already, rather than each on a new one that grows its stack
		// again: 6% of a broker's CPU under small appends. A stream that
		// finds every worker busy gets a goroutine of its own, as before.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.InitialWindowSize(window), grpc.InitialConnWindowSize(window),
		grpc.ReadBufferSize(socket), grpc.WriteBufferSize(socket),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 2, PermitWithoutStream: true}),
	}
}

// streamWorkers is the number of a server's stream workers: enough for
// the streams that a busy server runs at once (16 writers' appends, their
// replication, reads), few enough to cost nothing idle.
const streamWorkers = 32

// DialOptions are the options of every Quire gRPC client connection.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		experimental.WithBufferPool(&shared), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{})),
		grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window),
		grpc.WithReadBufferSize(socket), grpc.WithWriteBufferSize(socket),
		grpc.WithConnectParams(reconnect),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
	}
}

// Keepalives. A peer whose machine froze, lost power or was cut off by a
// network that drops packets (rather than refuses them) leaves its
// connections open: TCP notices only once it has data to resend, after
// about fifteen minutes, and never on a connection that carries nothing,
// such as a read waiting at a journal's write head. So each side pings
// the other after KeepaliveTime without traffic, and closes the
// connection if no answer comes within KeepaliveTimeout: its calls fail
// as Unavailable, and clients retry elsewhere. Servers accept pings as
// often as every KeepaliveTime/2, with or without calls in flight.
const (
	KeepaliveTime    = 10 * time.Second // gRPC's least for clients
	KeepaliveTimeout = 5 * time.Second
)

// reconnect bounds the wait between attempts to reconnect to 5s. gRPC's
// default grows it to two minutes, and a connection in backoff fails
// every call at once: a broker back from a partition or a restart, on
// its old address, would be unreachable through its peers' connections
// (its journals refusing appends) for up to two minutes after it is back.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}
