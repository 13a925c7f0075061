package message_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
)

// BenchmarkJSONCodecs compares, on the messages of BenchmarkUnpack, the
// JSON decoders and encoders that JSONLines could use: encoding/json,
// json/v2 (github.com/go-json-experiment/json) with its defaults, and
// json/v2 with encoding/json's options (jsonv1.DefaultOptionsV1), whole
// or less ReportErrorsWithLegacySemantics. Besides msgs/s, it reports
// msgs/cpu-s, messages per second of the process's CPU time, which other
// work on the machine disturbs less than wall time.
func BenchmarkJSONCodecs(b *testing.B) {
	msgs := benchMessages(message.JSONLines, 1000)
	frames := make([][]byte, len(msgs))
	for i, m := range msgs {
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		if err := message.JSONLines.Marshal(m, w); err != nil {
			b.Fatal(err)
		}
		w.Flush()
		frames[i] = buf.Bytes()
	}
	run := func(name string, f func(i int) error) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := brokertest.CPUTime()
			for i := 0; b.Loop(); i++ {
				if err := f(i % len(frames)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64(b.N)/(brokertest.CPUTime()-cpu).Seconds(), "msgs/cpu-s")
		})
	}

	var m framingJSONMessage
	v1Fast := jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(), jsonv1.ReportErrorsWithLegacySemantics(false))
	run("decode/encoding-json", func(i int) error { return json.Unmarshal(frames[i], &m) })
	run("decode/v2", func(i int) error { return jsonv2.Unmarshal(frames[i], &m) })
	run("decode/v2-case-insensitive", func(i int) error {
		return jsonv2.Unmarshal(frames[i], &m, jsonv2.MatchCaseInsensitiveNames(true), jsonv1.MatchCaseSensitiveDelimiter(true))
	})
	run("decode/v2-v1options", func(i int) error { return jsonv2.Unmarshal(frames[i], &m, jsonv1.DefaultOptionsV1()) })
	run("decode/v2-v1options-less-legacy-errors", func(i int) error { return jsonv2.Unmarshal(frames[i], &m, v1Fast) })
	run("decode/JSONLines", func(i int) error { return message.JSONLines.Unmarshal(frames[i], &m) })

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	run("encode/encoding-json", func(i int) error { buf.Reset(); return enc.Encode(msgs[i]) })
	v1Enc := jsontext.NewEncoder(&buf, jsonv1.DefaultOptionsV1(), jsontext.EscapeForHTML(false))
	run("encode/v2-v1options", func(i int) error { buf.Reset(); return jsonv2.MarshalEncode(v1Enc, msgs[i]) })
	// json/v2 writes an encoding/json.Number as a JSON string; encoding/json
	// as a number. A marshaler for it restores encoding/json's output.
	number := jsonv2.WithMarshalers(jsonv2.MarshalToFunc(func(enc *jsontext.Encoder, n json.Number) error {
		return enc.WriteValue(jsontext.Value(n))
	}))
	v1EncNumber := jsontext.NewEncoder(&buf, jsonv1.DefaultOptionsV1(), jsontext.EscapeForHTML(false), number)
	run("encode/v2-v1options-with-Number", func(i int) error { buf.Reset(); return jsonv2.MarshalEncode(v1EncNumber, msgs[i]) })
	w := bufio.NewWriterSize(&buf, 64<<10)
	run("encode/JSONLines", func(i int) error {
		if buf.Len() > 32<<10 {
			buf.Reset()
		}
		return message.JSONLines.Marshal(msgs[i], w)
	})
}
