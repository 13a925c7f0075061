package client

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkAppender appends 100-byte records from parallel goroutines to
// four journals of a fake broker, and reports records/s and MB/s.
func BenchmarkAppender(b *testing.B) {
	c := newFakeCluster(b, "a")
	c.discard = true
	journals := make([]string, 4)
	for i := range journals {
		journals[i] = fmt.Sprintf("bench/%d", i)
		c.addJournal(journals[i], 0)
	}
	cl := newTestClient(b, c, 0, "")
	a := cl.NewAppender(context.Background(), AppenderConfig{})
	record := bytes.Repeat([]byte("x"), 99)
	record = append(record, '\n')

	var next atomic.Int64
	b.SetBytes(int64(len(record)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		journal := journals[next.Add(1)%int64(len(journals))]
		var last *AppendHandle
		for pb.Next() {
			h, err := a.Append(context.Background(), journal, record)
			if err != nil {
				b.Error(err)
				return
			}
			last = h
		}
		if last != nil {
			if err := last.Err(); err != nil {
				b.Error(err)
			}
		}
	})
	a.Close()
	b.StopTimer()
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "records/s")
	b.ReportMetric(float64(b.N)*float64(len(record))/secs/1e6, "MB/s")
}

// BenchmarkAppendSync makes one synchronous Append of 100 bytes per
// iteration: the cost of an RPC that the Appender amortizes.
func BenchmarkAppendSync(b *testing.B) {
	c := newFakeCluster(b, "a")
	c.discard = true
	c.addJournal("bench", 0)
	cl := newTestClient(b, c, 0, "")
	record := bytes.Repeat([]byte("x"), 100)
	b.SetBytes(int64(len(record)))
	for b.Loop() {
		if _, err := cl.Append(context.Background(), AppendRequest{Journal: "bench"}, bytes.NewReader(record)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
