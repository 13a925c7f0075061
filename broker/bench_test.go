package broker

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/protocol"
)

// benchCluster starts n brokers and a journal of replication n.
func benchCluster(b *testing.B, n int, edit func(*protocol.JournalSpec)) (*cluster, *testBroker, string) {
	c := newCluster(b)
	var first *testBroker
	for i := range n {
		br := c.start(fmt.Sprintf("b%d", i+1), b.TempDir())
		if first == nil {
			first = br
		}
	}
	journal := fmt.Sprintf("bench/r%d", n)
	c.journal(first, journal, int32(n), func(s *protocol.JournalSpec) {
		s.Fragment.Length = 256 << 20
		if edit != nil {
			edit(s)
		}
	})
	c.appendRetry(first, journal, []byte("warm\n"))
	_, route, _ := first.srv.resolver.resolve(journal)
	return c, c.brokers[route.Members[0].Suffix], journal
}

// BenchmarkAppend measures append throughput and latency through the
// journal's primary, over loopback gRPC, for each size, writer count and
// replication (replicas share the machine's cores).
func BenchmarkAppend(b *testing.B) {
	for _, r := range []int{1, 3} {
		for _, size := range []int{1 << 10, 64 << 10, 192 << 10} {
			for _, writers := range []int{1, 16} {
				b.Run(fmt.Sprintf("r%d/%dKiB/writers%d", r, size>>10, writers), func(b *testing.B) {
					benchAppend(b, r, size, writers, nil)
				})
			}
		}
	}
}

// BenchmarkAppendClient is BenchmarkAppend's 16 writers of small appends,
// through the Go client, as applications append: its appends of one
// message share an Appends stream to the primary.
func BenchmarkAppendClient(b *testing.B) {
	for _, r := range []int{1, 3} {
		for _, size := range []int{100, 1 << 10} {
			b.Run(fmt.Sprintf("r%d/%dB/writers16", r, size), func(b *testing.B) {
				benchAppendWith(b, r, size, 16, nil, clientAppender)
			})
		}
	}
}

// BenchmarkAppendClientLarge appends 160 KiB, about what a recorded
// store's sync appends, from one writer through the Go client.
func BenchmarkAppendClientLarge(b *testing.B) {
	benchAppendWith(b, 1, 160<<10, 1, nil, clientAppender)
}

// clientAppender appends through a Go client of the primary, whose route
// it learns first.
func clientAppender(b *testing.B, primary *testBroker, journal string) appendFunc {
	c, err := client.New(context.Background(), client.Config{Broker: primary.srv.cfg.Endpoint})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.Append(context.Background(), client.AppendRequest{Journal: journal}, bytes.NewReader([]byte("route\n"))); err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, req *protocol.AppendRequest) (*protocol.AppendResponse, error) {
		commit, err := c.Append(ctx, client.AppendRequest{Journal: req.Journal}, bytes.NewReader(req.Content))
		if err != nil {
			return nil, err
		}
		return &protocol.AppendResponse{Status: protocol.Status_OK, Commit: commit}, nil
	}
}

// messageAppender appends on an Append stream of its own per append.
func messageAppender(_ *testing.B, primary *testBroker, _ string) appendFunc {
	return func(ctx context.Context, req *protocol.AppendRequest) (*protocol.AppendResponse, error) {
		return appendMessage(ctx, primary, req)
	}
}

type appendFunc func(context.Context, *protocol.AppendRequest) (*protocol.AppendResponse, error)

// BenchmarkAppendFsync is BenchmarkAppend at replication 1 with fsync
// before acknowledging.
func BenchmarkAppendFsync(b *testing.B) {
	for _, writers := range []int{1, 16} {
		b.Run(fmt.Sprintf("r1/1KiB/writers%d", writers), func(b *testing.B) {
			benchAppend(b, 1, 1<<10, writers, func(s *protocol.JournalSpec) { s.Fragment.Fsync = true })
		})
	}
}

func benchAppend(b *testing.B, replication, size, writers int, edit func(*protocol.JournalSpec)) {
	benchAppendWith(b, replication, size, writers, edit, messageAppender)
}

func benchAppendWith(b *testing.B, replication, size, writers int, edit func(*protocol.JournalSpec),
	appender func(*testing.B, *testBroker, string) appendFunc) {
	_, primary, journal := benchCluster(b, replication, edit)
	send := appender(b, primary, journal)
	data := bytes.Repeat([]byte("x"), size-1)
	data = append(data, '\n')
	var (
		mu        sync.Mutex
		latencies []time.Duration
		wg        sync.WaitGroup
		next      = make(chan struct{})
	)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	commits0, appends0 := testutil.ToFloat64(appendCommits), testutil.ToFloat64(appendsCommitted)
	cpu0 := cpuTime()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for range next {
				t0 := time.Now()
				resp, err := send(context.Background(), &protocol.AppendRequest{Journal: journal, Content: data, Commit: true})
				if err != nil || resp.Status != protocol.Status_OK {
					b.Errorf("append: %v %v", resp, err)
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		}()
	}
	for range b.N {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	cpu := cpuTime() - cpu0
	commits, appends := testutil.ToFloat64(appendCommits)-commits0, testutil.ToFloat64(appendsCommitted)-appends0
	slices.Sort(latencies)
	q := func(p float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "appends/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(0.999), "p99.9-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/append")
	if commits > 0 {
		b.ReportMetric(appends/commits, "appends/commit")
	}
}

// BenchmarkRead measures reading 64 MiB back through the primary: from its
// spool, and from the file store after the spool was persisted.
func BenchmarkRead(b *testing.B) {
	for _, from := range []string{"spool", "store"} {
		b.Run(from, func(b *testing.B) {
			c, primary, journal := benchCluster(b, 1, func(s *protocol.JournalSpec) {
				s.Fragment.Length = 8 << 20
				s.Fragment.RefreshInterval = durationpb.New(time.Second)
			})
			chunk := bytes.Repeat([]byte("0123456789abcde\n"), 64<<10) // 1 MiB
			const total = 64 << 20
			for range total / len(chunk) {
				c.appendRetry(primary, journal, chunk)
			}
			end := int64(total + 5)
			if from == "store" {
				c.waitPersisted(primary, journal, end-int64(8<<20)-5)
			}
			b.SetBytes(total)
			b.ResetTimer()
			for range b.N {
				got, err := readRange(context.Background(), primary, journal, 5, end)
				if err != nil || len(got) != total {
					b.Fatalf("read %d bytes: %v", len(got), err)
				}
			}
		})
	}
}

// BenchmarkAppendLarge measures one large append streamed in 1 MiB chunks
// (a bulk load), at replication 1.
func BenchmarkAppendLarge(b *testing.B) {
	_, primary, journal := benchCluster(b, 1, func(s *protocol.JournalSpec) { s.Fragment.Length = 1 << 30 })
	const size = 256 << 20
	data := bytes.Repeat([]byte("0123456789abcde\n"), size/16)
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		stream, err := protocol.NewJournalClient(primary.conn).Append(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		stream.Send(&protocol.AppendRequest{Journal: journal})
		for off := 0; off < size; off += 1 << 20 {
			stream.Send(&protocol.AppendRequest{Content: data[off : off+1<<20]})
		}
		stream.Send(&protocol.AppendRequest{})
		if resp, err := stream.CloseAndRecv(); err != nil || resp.Status != protocol.Status_OK {
			b.Fatalf("append: %v %v", resp, err)
		}
	}
}

// appendMessage appends as the Go client does content that fits in one
// message: a single message that commits.
func appendMessage(ctx context.Context, b *testBroker, req *protocol.AppendRequest) (*protocol.AppendResponse, error) {
	stream, err := protocol.NewJournalClient(b.conn).Append(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(req); err != nil {
		return stream.CloseAndRecv()
	}
	return stream.CloseAndRecv()
}

// cpuTime is the CPU time the process has used, user and system: as
// brokertest.CPUTime, which this package's tests cannot import (brokertest
// imports broker).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err) // RUSAGE_SELF with a valid pointer cannot fail.
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
