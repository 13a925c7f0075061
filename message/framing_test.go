package message_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/apipb"

	"github.com/quire-dev/quire/message"
)

// framingCase is a framing, with messages of its tests.
type framingCase struct {
	framing message.Framing
	newMsg  func() message.Message
	msgs    func() []message.Message
	equal   func(a, b message.Message) bool
}

var framingCases = []framingCase{
	{
		framing: message.JSONLines,
		newMsg:  func() message.Message { return new(framingJSONMessage) },
		msgs: func() []message.Message {
			p := message.NewProducerID()
			c := message.NewClock(time.Now())
			var out []message.Message
			for i, m := range []*framingJSONMessage{
				{Kind: "click", User: "u-1", Count: 1},
				{Kind: "", User: "", Count: 0},
				{Kind: "view\nwith newline", User: "ü <&> \u2028", Count: -5, Tags: []string{"a", "b"}},
				{Kind: strings.Repeat("long", 100), User: "u-2", Count: 1 << 40},
				{Kind: "ack"},
			} {
				c.Tick()
				m.SetUUID(message.BuildUUID(p, c, message.Flags(i%3)))
				out = append(out, m)
			}
			out = append(out, &framingJSONMessage{Kind: "no uuid"})
			return out
		},
		equal: func(a, b message.Message) bool { return reflect.DeepEqual(a, b) },
	},
	{
		framing: message.Protobuf,
		newMsg:  func() message.Message { return newFramingProtoMessage() },
		msgs: func() []message.Message {
			p := message.NewProducerID()
			c := message.NewClock(time.Now())
			var out []message.Message
			for i, api := range []*apipb.Api{
				{Name: "click u-1"},
				{},
				{Name: "view\nwith newline", Methods: []*apipb.Method{{Name: "m", RequestTypeUrl: "t"}}},
				{Name: strings.Repeat("long", 100)},
				{Name: "ack"},
			} {
				m := framingProtoMessage{api}
				c.Tick()
				m.SetUUID(message.BuildUUID(p, c, message.Flags(i%3)))
				out = append(out, m)
			}
			out = append(out, framingProtoMessage{&apipb.Api{Name: "no uuid"}})
			return out
		},
		equal: func(a, b message.Message) bool {
			return proto.Equal(a.(proto.Message), b.(proto.Message))
		},
	},
}

// marshalAll returns the frames of msgs, written one after the other.
func marshalAll(t testing.TB, f message.Framing, msgs []message.Message) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	for _, m := range msgs {
		if err := f.Marshal(m, w); err != nil {
			t.Fatalf("%s: Marshal(%v): %v", f.Name(), m, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestFramingRoundTrip(t *testing.T) {
	for _, tc := range framingCases {
		for _, size := range []int{16, 64, 4096} {
			t.Run(tc.framing.Name()+"/buffer"+strconv.Itoa(size), func(t *testing.T) {
				msgs := tc.msgs()
				data := marshalAll(t, tc.framing, msgs)
				r := bufio.NewReaderSize(bytes.NewReader(data), size)
				total := 0
				for i, want := range msgs {
					frame, err := tc.framing.Unpack(r)
					if err != nil {
						t.Fatalf("Unpack of frame %d: %v", i, err)
					}
					total += len(frame)
					got := tc.newMsg()
					if err := tc.framing.Unmarshal(frame, got); err != nil {
						t.Fatalf("Unmarshal of frame %d: %v", i, err)
					}
					if !tc.equal(got, want) || got.GetUUID() != want.GetUUID() {
						t.Errorf("frame %d decoded as %v, want %v", i, got, want)
					}
				}
				if frame, err := tc.framing.Unpack(r); err != io.EOF {
					t.Errorf("Unpack at the end = %q, %v; want io.EOF", frame, err)
				}
				if total != len(data) {
					t.Errorf("frames have %d bytes in all, want %d", total, len(data))
				}
			})
		}
	}
}

// growingReader reads what has been appended to it; at its end it returns
// io.EOF, until more is appended.
type growingReader struct{ buf bytes.Buffer }

func (g *growingReader) Read(p []byte) (int, error) { return g.buf.Read(p) }

func TestFramingTruncatedFrame(t *testing.T) {
	for _, tc := range framingCases {
		t.Run(tc.framing.Name(), func(t *testing.T) {
			msgs := tc.msgs()[:2]
			first := marshalAll(t, tc.framing, msgs[:1])
			second := marshalAll(t, tc.framing, msgs[1:])
			for cut := 1; cut < len(second); cut++ {
				g := new(growingReader)
				g.buf.Write(first)
				g.buf.Write(second[:cut])
				r := bufio.NewReaderSize(g, 4096)
				if _, err := tc.framing.Unpack(r); err != nil {
					t.Fatalf("cut %d: Unpack of the whole frame: %v", cut, err)
				}
				if frame, err := tc.framing.Unpack(r); err != io.ErrUnexpectedEOF {
					t.Fatalf("cut %d: Unpack of a truncated frame = %q, %v; want io.ErrUnexpectedEOF", cut, frame, err)
				}
				// The partial frame stayed unread: once the rest
				// arrives, it reads whole.
				g.buf.Write(second[cut:])
				frame, err := tc.framing.Unpack(r)
				if err != nil || !bytes.Equal(frame, second) {
					t.Fatalf("cut %d: Unpack once complete = %q, %v; want %q", cut, frame, err, second)
				}
				if _, err := tc.framing.Unpack(r); err != io.EOF {
					t.Fatalf("cut %d: Unpack at the end: %v, want io.EOF", cut, err)
				}
			}
		})
	}
}

func TestFramingTruncatedLargeFrame(t *testing.T) {
	for _, tc := range framingCases {
		t.Run(tc.framing.Name(), func(t *testing.T) {
			data := marshalAll(t, tc.framing, tc.msgs()[3:4]) // A long one.
			r := bufio.NewReaderSize(bytes.NewReader(data[:len(data)-1]), 16)
			if frame, err := tc.framing.Unpack(r); err != io.ErrUnexpectedEOF {
				t.Errorf("Unpack = %q, %v; want io.ErrUnexpectedEOF", frame, err)
			}
		})
	}
}

// errReader returns its error after its data.
type errReader struct {
	data []byte
	err  error
}

func (e *errReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func TestFramingReaderError(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range framingCases {
		for _, size := range []int{16, 4096} {
			t.Run(tc.framing.Name()+"/buffer"+strconv.Itoa(size), func(t *testing.T) {
				data := marshalAll(t, tc.framing, tc.msgs()[3:4])
				for _, n := range []int{0, 5, len(data) - 1} {
					r := bufio.NewReaderSize(&errReader{data: data[:n], err: boom}, size)
					if frame, err := tc.framing.Unpack(r); err != boom {
						t.Errorf("Unpack of %d bytes then an error = %q, %v; want %v", n, frame, err, boom)
					}
				}
			})
		}
	}
}

func TestFramingUnpackDoesNotAllocate(t *testing.T) {
	for _, tc := range framingCases {
		t.Run(tc.framing.Name(), func(t *testing.T) {
			msgs := tc.msgs()[:1]
			frame := marshalAll(t, tc.framing, msgs)
			data := bytes.Repeat(frame, 1000)
			br := bytes.NewReader(data)
			r := bufio.NewReaderSize(br, 64<<10)
			allocs := testing.AllocsPerRun(100, func() {
				br.Reset(data)
				r.Reset(br)
				for range 1000 {
					if _, err := tc.framing.Unpack(r); err != nil {
						t.Fatal(err)
					}
				}
			})
			// AllocsPerRun counts the whole process's allocations, so another
			// goroutine's may show; an Unpack that allocated would show 1000.
			if allocs >= 10 {
				t.Errorf("Unpack of 1000 frames allocated %v times", allocs)
			}
		})
	}
}

func TestJSONBadLine(t *testing.T) {
	good := marshalAll(t, message.JSONLines, []message.Message{&framingJSONMessage{Kind: "good"}})
	for _, tc := range []struct {
		name, line, want string
	}{
		{"not JSON", "hello, world\n", "invalid character 'h'"},
		{"truncated object", `{"kind": "x"` + "\n", "unexpected end of JSON input"},
		{"empty line", "\n", "unexpected end of JSON input"},
		{"wrong type", `{"count": "many"}` + "\n", "cannot unmarshal string"},
		{"bad UUID", `{"uuid": "not-a-uuid"}` + "\n", `UUID "not-a-uuid" has length 10`},
		{"UUID of version 4", `{"uuid": "c232ab00-9414-41ec-b3c8-9f6bdeced846"}` + "\n", "is version 4, want 1"},
		{"trailing data", `{} {}` + "\n", "invalid character '{' after top-level value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := append([]byte(tc.line), good...)
			r := bufio.NewReader(bytes.NewReader(data))
			frame, err := message.JSONLines.Unpack(r)
			if err != nil || string(frame) != tc.line {
				t.Fatalf("Unpack = %q, %v; want %q", frame, err, tc.line)
			}
			err = message.JSONLines.Unmarshal(frame, new(framingJSONMessage))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Unmarshal(%q) = %v, want an error containing %q", frame, err, tc.want)
			}
			frame, err = message.JSONLines.Unpack(r)
			if err != nil {
				t.Fatalf("Unpack after the bad line: %v", err)
			}
			var m framingJSONMessage
			if err := message.JSONLines.Unmarshal(frame, &m); err != nil || m.Kind != "good" {
				t.Errorf("Unmarshal after the bad line = %+v, %v", m, err)
			}
		})
	}
}

// protoHeader returns a binary frame header with magic and length n.
func protoHeader(magic []byte, n uint32) []byte {
	return binary.LittleEndian.AppendUint32(append([]byte(nil), magic...), n)
}

var protoMagic = []byte{0xf1, 'Q', 'F', 0x01}

func TestProtoDesync(t *testing.T) {
	msgs := framingCases[1].msgs()[:3]
	var frames [][]byte
	for _, m := range msgs {
		frames = append(frames, marshalAll(t, message.Protobuf, []message.Message{m}))
	}
	corrupt := func(f []byte, i int, b byte) []byte {
		f = bytes.Clone(f)
		f[i] = b
		return f
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	for _, tc := range []struct {
		name string
		data []byte
		want []any // A frame index, or the text of an error.
	}{
		{"garbage first", cat([]byte("garbage"), frames[0], frames[1]),
			[]any{"found 67 61 72 62; skipped 7 bytes", 0, 1}},
		{"garbage between", cat(frames[0], []byte("xx"), frames[1]),
			[]any{0, "found 78 78 f1 51; skipped 2 bytes", 1}},
		{"garbage last", cat(frames[0], []byte("tail bytes")),
			[]any{0, "skipped 10 bytes"}},
		{"short garbage last", cat(frames[0], []byte("t")),
			[]any{0, "found 74; skipped 1 bytes"}},
		{"corrupt magic", cat(frames[0], corrupt(frames[1], 0, 0xf2), frames[2]),
			[]any{0, "found f2 51 46 01; skipped " + strconv.Itoa(len(frames[1])) + " bytes", 2}},
		{"wrong version", cat(frames[0], corrupt(frames[1], 3, 2), frames[2]),
			[]any{0, "frame version 2 is not 1", 2}},
		{"partial magic in garbage", cat([]byte{0xf1, 'Q', 0xf1, 'Q', 'F'}, frames[0]),
			[]any{"skipped 5 bytes", 0}},
		{"huge length", cat(frames[0], protoHeader(protoMagic, 0xffffffff), frames[1]),
			[]any{0, "length 4294967295, more than 67108856", 1}},
		{"length over the bound", cat(protoHeader(protoMagic, message.MaxFrameSize-7), frames[1]),
			[]any{"length 67108857, more than 67108856", 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{16, 4096} {
				r := bufio.NewReaderSize(bytes.NewReader(tc.data), size)
				for i, want := range tc.want {
					frame, err := message.Protobuf.Unpack(r)
					switch want := want.(type) {
					case int:
						if err != nil || !bytes.Equal(frame, frames[want]) {
							t.Fatalf("buffer %d: Unpack %d = %x, %v; want frame %d", size, i, frame, err, want)
						}
					case string:
						if !errors.Is(err, message.ErrDesyncFrame) && !errors.Is(err, message.ErrFrameTooLarge) {
							t.Fatalf("buffer %d: Unpack %d = %x, %v; want a desync or too-large error", size, i, frame, err)
						}
						if !strings.Contains(err.Error(), want) {
							t.Errorf("buffer %d: Unpack %d error %q does not contain %q", size, i, err, want)
						}
					}
				}
				if frame, err := message.Protobuf.Unpack(r); err != io.EOF {
					t.Errorf("buffer %d: Unpack at the end = %x, %v; want io.EOF", size, frame, err)
				}
			}
		})
	}
}

// TestProtoLengthAllocates checks that a frame header whose length is
// large, beyond the bound or within it, allocates nothing like its length
// when the bytes are not there.
func TestProtoLengthAllocates(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint32
		want error
	}{
		{"beyond the bound", 0xffffffff, message.ErrFrameTooLarge},
		{"within the bound", message.MaxFrameSize - 8, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := append(protoHeader(protoMagic, tc.n), "short"...)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range 10 {
				_, err := message.Protobuf.Unpack(bufio.NewReader(bytes.NewReader(data)))
				if !errors.Is(err, tc.want) {
					t.Fatalf("Unpack = %v, want %v", err, tc.want)
				}
			}
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("10 Unpacks allocated %d bytes", n)
			}
		})
	}
}

func TestProtoUnmarshalErrors(t *testing.T) {
	m := framingProtoMessage{&apipb.Api{Name: "x"}}
	frame := marshalAll(t, message.Protobuf, []message.Message{m})
	for _, tc := range []struct {
		name  string
		frame []byte
		msg   message.Message
		want  string
	}{
		{"short", frame[:5], newFramingProtoMessage(), "frame of 5 bytes is shorter than its 8-byte header"},
		{"bad magic", append([]byte("XXXX"), frame[4:]...), newFramingProtoMessage(), "starts with 58 58 58 58"},
		{"length mismatch", frame[:len(frame)-1], newFramingProtoMessage(), "header has length 3, but 2 bytes follow it"},
		{"bad payload", append(protoHeader(protoMagic, 2), 0x0a, 0x05), newFramingProtoMessage(), "decode protobuf frame into message_test.framingProtoMessage"},
		{"not proto", frame, new(framingJSONMessage), "*message_test.framingJSONMessage does not implement proto.Message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := message.Protobuf.Unmarshal(tc.frame, tc.msg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Unmarshal = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestProtoMarshalNotProto(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	err := message.Protobuf.Marshal(new(framingJSONMessage), w)
	if err == nil || !strings.Contains(err.Error(), "*message_test.framingJSONMessage does not implement proto.Message") {
		t.Errorf("Marshal = %v", err)
	}
	if w.Buffered() != 0 {
		t.Errorf("Marshal wrote %d bytes on error", w.Buffered())
	}
}

func TestJSONMarshalError(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	err := message.JSONLines.Marshal(&badJSONMessage{}, w)
	if err == nil || !strings.Contains(err.Error(), "encode *message_test.badJSONMessage as JSON") {
		t.Errorf("Marshal = %v", err)
	}
	if w.Buffered() != 0 {
		t.Errorf("Marshal wrote %d bytes on error", w.Buffered())
	}
}

// badJSONMessage has a field that encoding/json cannot encode.
type badJSONMessage struct {
	framingJSONMessage
	C chan int
}

func TestProtoLargeFrame(t *testing.T) {
	m := framingProtoMessage{&apipb.Api{Name: strings.Repeat("x", 1<<20)}}
	data := marshalAll(t, message.Protobuf, []message.Message{m, m})
	r := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	for i := range 2 {
		frame, err := message.Protobuf.Unpack(r)
		if err != nil {
			t.Fatalf("Unpack %d: %v", i, err)
		}
		got := newFramingProtoMessage()
		if err := message.Protobuf.Unmarshal(frame, got); err != nil || got.Name != m.Name {
			t.Fatalf("Unmarshal %d: %v", i, err)
		}
	}
}

func TestJSONLongLine(t *testing.T) {
	m := &framingJSONMessage{Kind: strings.Repeat("x", 1<<20)}
	data := marshalAll(t, message.JSONLines, []message.Message{m, m})
	r := bufio.NewReaderSize(bytes.NewReader(data), 4096)
	for i := range 2 {
		frame, err := message.JSONLines.Unpack(r)
		if err != nil {
			t.Fatalf("Unpack %d: %v", i, err)
		}
		var got framingJSONMessage
		if err := message.JSONLines.Unmarshal(frame, &got); err != nil || got.Kind != m.Kind {
			t.Fatalf("Unmarshal %d: %v", i, err)
		}
	}
}

func TestFramingByName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want message.Framing
		err  string
	}{
		{"json", message.JSONLines, ""},
		{"proto", message.Protobuf, ""},
		{"", nil, `unknown framing "" (want "json" or "proto")`},
		{"JSON", nil, `unknown framing "JSON"`},
		{"lines", nil, `unknown framing "lines"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := message.FramingByName(tc.name)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("FramingByName(%q) = %v, %v; want an error containing %q", tc.name, f, err, tc.err)
				}
				return
			}
			if err != nil || f != tc.want || f.Name() != tc.name {
				t.Errorf("FramingByName(%q) = %v, %v", tc.name, f, err)
			}
		})
	}
}
