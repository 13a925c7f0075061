package message_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
)

// benchFramings are the framings of the end-to-end benchmarks, and a
// new message of each.
var benchFramings = []struct {
	name string
	f    message.Framing
	new  func() message.Message
}{
	{"json", message.JSONLines, func() message.Message { return &framingJSONMessage{} }},
	{"proto", message.Protobuf, func() message.Message { return newFramingProtoMessage() }},
}

// BenchmarkPublishRead publishes b.N small messages (about 100 bytes
// framed, see benchMessages) through one broker and reads them back,
// reporting messages per second each way, of wall time and of the
// process's CPU time (broker and etcd included; see cpuTime), and the
// whole cycle's time per message (ns/op); BenchmarkRawAppendRead moves
// the same bytes without the message layer, for comparison.
func BenchmarkPublishRead(b *testing.B) {
	for _, bf := range benchFramings {
		b.Run(bf.name, func(b *testing.B) { benchPublishRead(b, bf.f, bf.new) })
	}
}

func benchPublishRead(b *testing.B, f message.Framing, newMsg func() message.Message) {
	cl := brokertest.New(b)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "bench/messages")
	ctx := context.Background()
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	p := message.NewPublisher(appender, f, message.NewProducerID(), message.NewClock(time.Now()))
	msgs := benchMessages(f, 1024)

	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	var last *client.AppendHandle
	for i := range b.N {
		h, err := p.PublishCommitted(ctx, "bench/messages", msgs[i%len(msgs)])
		if err != nil {
			b.Fatal(err)
		}
		last = h
	}
	if _, err := last.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	published, publishedCPU := time.Since(start), cpuTime()-cpu
	appender.Close()

	start, cpu = time.Now(), cpuTime()
	r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: "bench/messages", Framing: f, New: newMsg})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for {
		if _, err := r.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			b.Fatal(err)
		}
		n++
	}
	read, readCPU := time.Since(start), cpuTime()-cpu
	if n != b.N {
		b.Fatalf("read %d messages, published %d", n, b.N)
	}
	b.ReportMetric(float64(b.N)/published.Seconds(), "published-msgs/s")
	b.ReportMetric(float64(b.N)/read.Seconds(), "read-msgs/s")
	b.ReportMetric(float64(b.N)/publishedCPU.Seconds(), "published-msgs/cpu-s")
	b.ReportMetric(float64(b.N)/readCPU.Seconds(), "read-msgs/cpu-s")
}

func BenchmarkRawAppendRead(b *testing.B) {
	for _, bf := range benchFramings {
		b.Run(bf.name, func(b *testing.B) { benchRawAppendRead(b, bf.f) })
	}
}

func benchRawAppendRead(b *testing.B, f message.Framing) {
	cl := brokertest.New(b)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "bench/raw")
	ctx := context.Background()
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	var frame bytes.Buffer
	w := bufio.NewWriter(&frame)
	if err := f.Marshal(benchMessages(f, 1)[0], w); err != nil {
		b.Fatal(err)
	}
	w.Flush()

	b.SetBytes(int64(frame.Len()))
	b.ResetTimer()
	start, cpu := time.Now(), cpuTime()
	var last *client.AppendHandle
	for range b.N {
		h, err := appender.Append(ctx, "bench/raw", frame.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		last = h
	}
	if _, err := last.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	appended, appendedCPU := time.Since(start), cpuTime()-cpu
	appender.Close()

	start, cpu = time.Now(), cpuTime()
	got, err := io.Copy(io.Discard, c.NewReader(ctx, client.ReadRequest{Journal: "bench/raw"}))
	if err != nil && !errors.Is(err, io.EOF) {
		b.Fatal(err)
	}
	read, readCPU := time.Since(start), cpuTime()-cpu
	if got != int64(b.N*frame.Len()) {
		b.Fatalf("read %d bytes, appended %d", got, b.N*frame.Len())
	}
	b.ReportMetric(float64(b.N)/appended.Seconds(), "appended-frames/s")
	b.ReportMetric(float64(b.N)/read.Seconds(), "read-frames/s")
	b.ReportMetric(float64(b.N)/appendedCPU.Seconds(), "appended-frames/cpu-s")
	b.ReportMetric(float64(b.N)/readCPU.Seconds(), "read-frames/cpu-s")
}
