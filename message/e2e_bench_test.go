package message_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/message/internal/testpb"
)

// benchFramings are the framings of the end-to-end benchmarks, a new
// message of each, and n messages of 85–100 bytes framed: JSON's those
// of benchMessages, protobuf's testpb.Events (the UUID in a bytes field,
// as an application's would be), encoded and decoded by their vtprotobuf
// methods, and the same as testpb.PlainEvents, through protobuf's
// reflection.
var benchFramings = []struct {
	name     string
	f        message.Framing
	new      func() message.Message
	messages func(n int) []message.Message
}{
	{"json", message.JSONLines, func() message.Message { return &framingJSONMessage{} },
		func(n int) []message.Message { return benchMessages(message.JSONLines, n) }},
	{"proto", message.Protobuf, func() message.Message { return &testpb.Event{} }, benchEvents},
	{"proto-reflect", message.Protobuf, func() message.Message { return &testpb.PlainEvent{} }, benchPlainEvents},
}

func benchEvents(n int) []message.Message {
	msgs := make([]message.Message, n)
	for i := range msgs {
		msgs[i] = &testpb.Event{Kind: benchKind(i), User: benchUser(i), Count: int64(1000000 + i)}
	}
	return msgs
}

func benchPlainEvents(n int) []message.Message {
	msgs := make([]message.Message, n)
	for i := range msgs {
		msgs[i] = &testpb.PlainEvent{Kind: benchKind(i), User: benchUser(i), Count: int64(1000000 + i)}
	}
	return msgs
}

func benchKind(i int) string { return "click /products/" + strconv.Itoa(1000000+i) + "/details" }
func benchUser(i int) string { return "user-" + strconv.Itoa(10000+i%90000) + "@example.com" }

// BenchmarkPublishRead publishes b.N small messages (about 100 bytes
// framed, see benchMessages) through one broker and reads them back,
// reporting messages per second each way, of wall time and of the
// process's CPU time (broker and etcd included; see brokertest.CPUTime), and the
// whole cycle's time per message (ns/op); BenchmarkRawAppendRead moves
// the same bytes without the message layer, for comparison.
func BenchmarkPublishRead(b *testing.B) {
	for _, bf := range benchFramings {
		b.Run(bf.name, func(b *testing.B) { benchPublishRead(b, bf.f, bf.new, bf.messages(1024)) })
	}
}

func benchPublishRead(b *testing.B, f message.Framing, newMsg func() message.Message, msgs []message.Message) {
	ctx, c, appender := benchJournal(b, "bench/messages")
	p := message.NewPublisher(appender, f, message.NewProducerID(), message.NewClock(time.Now()))

	b.ResetTimer()
	start, cpu := time.Now(), brokertest.CPUTime()
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
	published, publishedCPU := time.Since(start), brokertest.CPUTime()-cpu
	appender.Close()

	start, cpu = time.Now(), brokertest.CPUTime()
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
	read, readCPU := time.Since(start), brokertest.CPUTime()-cpu
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
		b.Run(bf.name, func(b *testing.B) { benchRawAppendRead(b, bf.f, bf.messages(1024)) })
	}
}

func benchRawAppendRead(b *testing.B, f message.Framing, msgs []message.Message) {
	ctx, c, appender := benchJournal(b, "bench/raw")
	frames, size := benchFrames(b, f, msgs, b.N)

	b.SetBytes(size / int64(b.N))
	b.ResetTimer()
	start, cpu := time.Now(), brokertest.CPUTime()
	var last *client.AppendHandle
	for _, frame := range frames {
		h, err := appender.Append(ctx, "bench/raw", frame)
		if err != nil {
			b.Fatal(err)
		}
		last = h
	}
	if _, err := last.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	appended, appendedCPU := time.Since(start), brokertest.CPUTime()-cpu
	appender.Close()

	start, cpu = time.Now(), brokertest.CPUTime()
	got, err := io.Copy(io.Discard, c.NewReader(ctx, client.ReadRequest{Journal: "bench/raw"}))
	if err != nil && !errors.Is(err, io.EOF) {
		b.Fatal(err)
	}
	read, readCPU := time.Since(start), brokertest.CPUTime()-cpu
	if got != size {
		b.Fatalf("read %d bytes, appended %d", got, size)
	}
	b.ReportMetric(float64(b.N)/appended.Seconds(), "appended-frames/s")
	b.ReportMetric(float64(b.N)/read.Seconds(), "read-frames/s")
	b.ReportMetric(float64(b.N)/appendedCPU.Seconds(), "appended-frames/cpu-s")
	b.ReportMetric(float64(b.N)/readCPU.Seconds(), "read-frames/cpu-s")
}

// BenchmarkStream measures end-to-end throughput as a pipeline: a reader
// tails the journal while b.N messages are published to it, and the time
// is until the reader has them all (ns/op is per message, e2e-msgs/s the
// rate). "messages" publishes and reads messages (decoded and sequenced);
// "raw" appends the same frames, and reads their bytes, for comparison.
func BenchmarkStream(b *testing.B) {
	for _, bf := range benchFramings {
		b.Run(bf.name+"/messages", func(b *testing.B) { benchStreamMessages(b, bf.f, bf.new, bf.messages(1024)) })
		b.Run(bf.name+"/raw", func(b *testing.B) { benchStreamRaw(b, bf.f, bf.messages(1024)) })
	}
}

func benchStreamMessages(b *testing.B, f message.Framing, newMsg func() message.Message, msgs []message.Message) {
	ctx, c, appender := benchJournal(b, "bench/stream")
	p := message.NewPublisher(appender, f, message.NewProducerID(), message.NewClock(time.Now()))
	r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: "bench/stream", Framing: f, New: newMsg, Block: true})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()

	b.ResetTimer()
	start, cpu := time.Now(), brokertest.CPUTime()
	read := make(chan error, 1)
	go func() {
		for range b.N {
			if _, err := r.Next(); err != nil {
				read <- err
				return
			}
		}
		read <- nil
	}()
	for i := range b.N {
		if _, err := p.PublishCommitted(ctx, "bench/stream", msgs[i%len(msgs)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	reportStream(b, time.Since(start), brokertest.CPUTime()-cpu)
}

func benchStreamRaw(b *testing.B, f message.Framing, msgs []message.Message) {
	ctx, c, appender := benchJournal(b, "bench/stream")
	frames, size := benchFrames(b, f, msgs, b.N)
	jr := c.NewReader(ctx, client.ReadRequest{Journal: "bench/stream", Block: true})
	defer jr.Close()

	b.ResetTimer()
	start, cpu := time.Now(), brokertest.CPUTime()
	read := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, jr, size)
		read <- err
	}()
	for _, frame := range frames {
		if _, err := appender.Append(ctx, "bench/stream", frame); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	reportStream(b, time.Since(start), brokertest.CPUTime()-cpu)
}

// benchJournal starts a broker with journal, and returns a client of it
// and an appender to it, closed when the benchmark ends.
func benchJournal(b *testing.B, journal string) (context.Context, *client.Client, *client.Appender) {
	cl := brokertest.New(b)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, journal)
	ctx, cancel := context.WithCancel(context.Background())
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	b.Cleanup(func() { appender.Close(); cancel() })
	return ctx, c, appender
}

// benchFrames returns the n frames that a publisher writes when it
// publishes msgs in turn as committed messages, n in all, and their total
// size: the same bytes, UUIDs included, that the message benchmarks
// append, for the raw ones to append without the message layer.
func benchFrames(b *testing.B, f message.Framing, msgs []message.Message, n int) ([][]byte, int64) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	p, clock := message.NewProducerID(), message.NewClock(time.Now())
	ends := make([]int, n)
	for i := range n {
		clock.Update(time.Now())
		clock.Tick()
		m := msgs[i%len(msgs)]
		m.SetUUID(message.BuildUUID(p, clock, message.OutsideTxn))
		if err := f.Marshal(m, w); err != nil {
			b.Fatal(err)
		}
		w.Flush()
		ends[i] = buf.Len()
	}
	data := buf.Bytes()
	frames := make([][]byte, n)
	begin := 0
	for i, end := range ends {
		frames[i], begin = data[begin:end:end], end
	}
	return frames, int64(len(data))
}

func reportStream(b *testing.B, wall, cpu time.Duration) {
	b.ReportMetric(float64(b.N)/wall.Seconds(), "e2e-msgs/s")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "e2e-msgs/cpu-s")
}
