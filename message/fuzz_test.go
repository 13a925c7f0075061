package message_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/apipb"

	"github.com/quire-dev/quire/message"
)

func FuzzParseUUID(f *testing.F) {
	for _, s := range []string{
		"c232ab00-9414-11ec-b3c8-9f6bdeced846",
		"C232AB00-9414-11EC-B3C8-9F6BDECED846",
		"00000000-0000-0000-0000-000000000000",
		"c232ab00-9414-41ec-b3c8-9f6bdeced846",
		"c232ab00-9414-11ec-33c8-9f6bdeced846",
		"c232ab00941411ecb3c89f6bdeced846",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := message.ParseUUID(s)
		var text message.UUID
		textErr := text.UnmarshalText([]byte(s))
		if err != nil {
			if !u.IsZero() {
				t.Fatalf("ParseUUID(%q) = %v with error %v", s, u, err)
			}
			if textErr == nil && !text.IsZero() {
				t.Fatalf("UnmarshalText(%q) = %v, but ParseUUID failed: %v", s, text, err)
			}
			return
		}
		if textErr != nil || text != u {
			t.Fatalf("UnmarshalText(%q) = %v, %v; ParseUUID gave %v", s, text, textErr, u)
		}
		if !strings.EqualFold(u.String(), s) {
			t.Fatalf("ParseUUID(%q).String() = %q", s, u.String())
		}
		if again := message.BuildUUID(u.ProducerID(), u.Clock(), u.Flags()); again != u {
			t.Fatalf("BuildUUID of the parts of %v = %v", u, again)
		}
	})
}

// unpackAll unpacks data with f and a reader of buffer size, and calls
// each with every frame. It checks that Unpack ends with io.EOF or
// io.ErrUnexpectedEOF, that its frames and the bytes it skipped account
// for data, and that it makes progress.
func unpackAll(t *testing.T, f message.Framing, data []byte, size int, each func(frame []byte)) {
	r := bufio.NewReaderSize(bytes.NewReader(data), size)
	var frames []byte
	for i := 0; ; i++ {
		if i > len(data)+1 {
			t.Fatalf("Unpack made no progress after %d calls", i)
		}
		frame, err := f.Unpack(r)
		switch {
		case err == nil:
			if len(frame) == 0 {
				t.Fatal("Unpack returned an empty frame")
			}
			frames = append(frames, frame...)
			each(frame)
			continue
		case err == io.EOF, err == io.ErrUnexpectedEOF:
		case errors.Is(err, message.ErrDesyncFrame), errors.Is(err, message.ErrFrameTooLarge):
			if f == message.JSONLines {
				t.Fatalf("JSON Unpack: %v", err)
			}
			continue
		default:
			t.Fatalf("Unpack: %v", err)
		}
		if err == io.EOF && r.Buffered() != 0 {
			t.Fatalf("Unpack returned io.EOF with %d bytes buffered", r.Buffered())
		}
		break
	}
	if f == message.JSONLines && !bytes.HasPrefix(data, frames) {
		t.Fatalf("JSON frames %q are not a prefix of the input %q", frames, data)
	}
}

func FuzzJSONUnpack(f *testing.F) {
	f.Add([]byte(`{"uuid":"c232ab00-9414-11ec-b3c8-9f6bdeced846","kind":"click","user":"u-1","count":3}` + "\n" + `{"kind":"x"}` + "\n"))
	f.Add([]byte("not json\n{}\n\n{\"tags\":[\"a\",\"b\"]}"))
	f.Add([]byte(`{"uuid":"00000000-0000-0000-0000-000000000000","count":-1}`))
	f.Add([]byte(`{"Kind":"x","KIND":"y","count":1e3}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int{16, 4096} {
			unpackAll(t, message.JSONLines, data, size, func(frame []byte) {
				if i := bytes.IndexByte(frame, '\n'); i != len(frame)-1 {
					t.Fatalf("JSON frame %q has a newline at %d", frame, i)
				}
				var m framingJSONMessage
				if message.JSONLines.Unmarshal(frame, &m) != nil {
					return
				}
				// What decoded re-encodes, and decodes the same.
				again := marshalAll(t, message.JSONLines, []message.Message{&m})
				var m2 framingJSONMessage
				if err := message.JSONLines.Unmarshal(again, &m2); err != nil {
					t.Fatalf("Unmarshal of re-marshalled %q: %v", again, err)
				}
				if !reflect.DeepEqual(m, m2) {
					t.Fatalf("%q decoded as %+v, re-marshalled as %q, decoded as %+v", frame, m, again, m2)
				}
			})
		}
	})
}

func FuzzProtoUnpack(f *testing.F) {
	var seed bytes.Buffer
	w := bufio.NewWriter(&seed)
	for _, api := range []*apipb.Api{
		{Name: "click", Version: "c232ab00-9414-11ec-b3c8-9f6bdeced846"},
		{},
		{Name: "m", Methods: []*apipb.Method{{Name: "x"}}},
	} {
		if err := message.Protobuf.Marshal(framingProtoMessage{api}, w); err != nil {
			f.Fatal(err)
		}
	}
	w.Flush()
	f.Add(seed.Bytes())
	f.Add(append([]byte("garbage"), seed.Bytes()...))
	f.Add(binary.LittleEndian.AppendUint32([]byte{0xf1, 'Q', 'F', 0x01}, 0xffffffff))
	f.Add([]byte{0xf1, 'Q', 'F', 0x02, 0, 0, 0, 0, 0xf1, 'Q', 'F', 0x01, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int{16, 4096} {
			unpackAll(t, message.Protobuf, data, size, func(frame []byte) {
				if len(frame) < 8 || !bytes.Equal(frame[:4], []byte{0xf1, 'Q', 'F', 0x01}) ||
					int(binary.LittleEndian.Uint32(frame[4:])) != len(frame)-8 {
					t.Fatalf("Unpack returned a frame with a bad header: %x", frame)
				}
				m := newFramingProtoMessage()
				if message.Protobuf.Unmarshal(frame, m) != nil {
					return
				}
				// What decoded re-encodes, and decodes the same.
				again := marshalAll(t, message.Protobuf, []message.Message{m})
				m2 := newFramingProtoMessage()
				if err := message.Protobuf.Unmarshal(again, m2); err != nil {
					t.Fatalf("Unmarshal of re-marshalled %x: %v", again, err)
				}
				if !proto.Equal(m, m2) || m.GetUUID() != m2.GetUUID() {
					t.Fatalf("%x decoded as %v, re-marshalled as %x, decoded as %v", frame, m, again, m2)
				}
			})
		}
	})
}
