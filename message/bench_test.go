package message_test

import (
	"bufio"
	"bytes"
	"io"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/apipb"

	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
)

// benchMessages returns n messages of about 100 bytes, once framed, for
// framing f.
func benchMessages(f message.Framing, n int) []message.Message {
	p := message.NewProducerID()
	c := message.NewClock(time.Now())
	msgs := make([]message.Message, n)
	for i := range msgs {
		c.Tick()
		u := message.BuildUUID(p, c, message.OutsideTxn)
		user := "user-" + strconv.Itoa(10000+i%90000)
		switch f {
		case message.JSONLines:
			msgs[i] = &framingJSONMessage{UUID: u, Kind: "click", User: user, Count: int64(1000000 + i)}
		case message.Protobuf:
			m := framingProtoMessage{&apipb.Api{Name: "click " + user + " on /products/" + strconv.Itoa(1000000+i)}}
			m.SetUUID(u)
			msgs[i] = m
		}
	}
	return msgs
}

// reportRate reports msgs/s and MB/s for b.N messages of bytes in all,
// and msgs/cpu-s: messages per second of the CPU time that the process
// used since cpu (see brokertest.CPUTime), which other work on the
// machine disturbs less than wall time.
func reportRate(b *testing.B, bytes int64, cpu time.Duration) {
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(b.N)/secs, "msgs/s")
	b.ReportMetric(float64(bytes)/secs/1e6, "MB/s")
	b.ReportMetric(float64(b.N)/(brokertest.CPUTime()-cpu).Seconds(), "msgs/cpu-s")
}

// microFramings are the framings of the encoding and decoding
// benchmarks, with their messages: protobuf's through reflection
// (google.protobuf.Api, as benchMessages makes them, and
// testpb.PlainEvent) and through vtprotobuf's methods (testpb.Event, the
// same fields), as the end-to-end benchmarks use them.
var microFramings = []struct {
	name     string
	f        message.Framing
	messages func(n int) []message.Message
}{
	{"json", message.JSONLines, func(n int) []message.Message { return benchMessages(message.JSONLines, n) }},
	{"proto", message.Protobuf, func(n int) []message.Message { return benchMessages(message.Protobuf, n) }},
	{"proto-plain", message.Protobuf, func(n int) []message.Message { return stamped(benchPlainEvents(n)) }},
	{"proto-vt", message.Protobuf, func(n int) []message.Message { return stamped(benchEvents(n)) }},
}

// stamped sets UUIDs on msgs, and returns them.
func stamped(msgs []message.Message) []message.Message {
	p, c := message.NewProducerID(), message.NewClock(time.Now())
	for _, m := range msgs {
		c.Tick()
		m.SetUUID(message.BuildUUID(p, c, message.OutsideTxn))
	}
	return msgs
}

func BenchmarkMarshal(b *testing.B) {
	for _, mf := range microFramings {
		f := mf.f
		b.Run(mf.name, func(b *testing.B) {
			msgs := mf.messages(1000)
			var n countWriter
			w := bufio.NewWriterSize(&n, 64<<10)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := brokertest.CPUTime()
			for i := 0; b.Loop(); i++ {
				if err := f.Marshal(msgs[i%len(msgs)], w); err != nil {
					b.Fatal(err)
				}
			}
			w.Flush()
			reportRate(b, int64(n), cpu)
		})
	}
}

// countWriter counts the bytes written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// benchUnpack unpacks b.N frames of f, of msgs, and with decode,
// unmarshals each.
func benchUnpack(b *testing.B, f message.Framing, msgs []message.Message, decode bool) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	for _, m := range msgs {
		if err := f.Marshal(m, w); err != nil {
			b.Fatal(err)
		}
	}
	w.Flush()
	data := buf.Bytes()
	b.Logf("%d-byte frames", len(data)/len(msgs))

	br := bytes.NewReader(data)
	r := bufio.NewReaderSize(br, 64<<10)
	var total int64
	m := msgs[0]
	b.ReportAllocs()
	b.ResetTimer()
	cpu := brokertest.CPUTime()
	for b.Loop() {
		frame, err := f.Unpack(r)
		if err == io.EOF {
			br.Reset(data)
			r.Reset(br)
			frame, err = f.Unpack(r)
		}
		if err != nil {
			b.Fatal(err)
		}
		total += int64(len(frame))
		if decode {
			if err := f.Unmarshal(frame, m); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportRate(b, total, cpu)
}

func BenchmarkUnpack(b *testing.B) {
	for _, mf := range microFramings[:2] {
		b.Run(mf.name, func(b *testing.B) { benchUnpack(b, mf.f, mf.messages(10000), false) })
	}
}

func BenchmarkUnpackUnmarshal(b *testing.B) {
	for _, mf := range microFramings {
		b.Run(mf.name, func(b *testing.B) { benchUnpack(b, mf.f, mf.messages(10000), true) })
	}
}

func BenchmarkUUID(b *testing.B) {
	u := message.BuildUUID(message.NewProducerID(), message.NewClock(time.Now()), message.ContinueTxn)
	s := u.String()
	b.Run("Build", func(b *testing.B) {
		p, c := u.ProducerID(), u.Clock()
		for b.Loop() {
			c.Tick()
			u = message.BuildUUID(p, c, message.ContinueTxn)
		}
	})
	b.Run("String", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s = u.String()
		}
	})
	b.Run("Parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := message.ParseUUID(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
