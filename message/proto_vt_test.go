package message_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/message/internal/testpb"
)

// plainOf returns e as a PlainEvent: the same fields, without
// vtprotobuf's methods.
func plainOf(e *testpb.Event) *testpb.PlainEvent {
	return &testpb.PlainEvent{Uuid: e.Uuid, Kind: e.Kind, User: e.User, Count: e.Count}
}

// sameEvent tells whether e and p hold the same fields.
func sameEvent(e *testpb.Event, p *testpb.PlainEvent) bool {
	return bytes.Equal(e.Uuid, p.Uuid) && e.Kind == p.Kind && e.User == p.User && e.Count == p.Count
}

// A message with vtprotobuf's methods encodes to the same frame through
// them as through protobuf's reflection, and decodes the same either way.
func TestProtoVTLikeReflection(t *testing.T) {
	u := message.BuildUUID(message.NewProducerID(), message.NewClock(time.Now()), message.ContinueTxn)
	for _, e := range []*testpb.Event{
		{},
		{Uuid: u[:]},
		{Uuid: u[:], Kind: "click", User: "user-1@example.com", Count: 42},
		{Kind: "ünïcødé ✓", Count: -1},
		{User: strings.Repeat("x", 1000), Count: 1 << 62},
	} {
		vt := marshalAll(t, message.Protobuf, []message.Message{e})
		reflected := marshalAll(t, message.Protobuf, []message.Message{plainOf(e)})
		if !bytes.Equal(vt, reflected) {
			t.Errorf("%v: frame %x through vtprotobuf, %x through reflection", e, vt, reflected)
		}
		got, gotPlain := &testpb.Event{}, &testpb.PlainEvent{}
		if err := message.Protobuf.Unmarshal(vt, got); err != nil {
			t.Fatal(err)
		}
		if err := message.Protobuf.Unmarshal(vt, gotPlain); err != nil {
			t.Fatal(err)
		}
		if !sameEvent(got, gotPlain) || !sameEvent(e, gotPlain) {
			t.Errorf("%v decoded as %v through vtprotobuf, %v through reflection", e, got, gotPlain)
		}
	}
}

// Unmarshal into a message that already holds fields replaces them, as
// proto.Unmarshal does, though vtprotobuf's UnmarshalVT merges.
func TestProtoVTUnmarshalReplaces(t *testing.T) {
	m := &testpb.Event{}
	for _, e := range []*testpb.Event{{Kind: "first", User: "someone", Count: 7}, {Kind: "second"}} {
		if err := message.Protobuf.Unmarshal(marshalAll(t, message.Protobuf, []message.Message{e}), m); err != nil {
			t.Fatal(err)
		}
	}
	if m.Kind != "second" || m.User != "" || m.Count != 0 {
		t.Errorf("decoding {Kind: second} into a used message gave %v, want only Kind set", m)
	}
}

// protoFrame frames payload as the proto framing does.
func protoFrame(payload []byte) []byte {
	frame := binary.LittleEndian.AppendUint32([]byte{0xf1, 'Q', 'F', 0x01}, uint32(len(payload)))
	return append(frame, payload...)
}

// Whatever the payload, decoding through vtprotobuf's methods agrees with
// decoding through reflection where reflection succeeds: vtprotobuf does
// too (but for a known field in another wire type than its own, which
// reflection keeps as an unknown field), with the same fields. Where
// reflection fails, vtprotobuf may not (it accepts some malformed
// encodings: string fields that are not UTF-8, over-long varints), but
// what it returns is a sound message: it prints, and encodes to a frame
// that reflection decodes the same.
func FuzzProtoVTLikeReflection(f *testing.F) {
	u := message.BuildUUID(message.NewProducerID(), message.NewClock(time.Now()), message.OutsideTxn)
	for _, e := range []*testpb.Event{{}, {Uuid: u[:], Kind: "k", User: "u", Count: -3}} {
		frame := marshalAll(f, message.Protobuf, []message.Message{e})
		f.Add(frame[8:])
	}
	f.Add([]byte{0x12, 0x02, 0xff, 0xfe})                                                 // Kind, not UTF-8.
	f.Add([]byte{0x0a, 0x10, 0x01})                                                       // UUID, truncated.
	f.Add([]byte{0x28, 0x01, 0x22, 0x01, 0x41})                                           // Unknown fields.
	f.Add([]byte{0x20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}) // Varint too long.
	f.Add([]byte{0x8b, 0x30, 0x24})                                                       // A group ended by another.
	f.Fuzz(func(t *testing.T, payload []byte) {
		frame := protoFrame(payload)
		vt, plain := &testpb.Event{}, &testpb.PlainEvent{}
		vtErr := message.Protobuf.Unmarshal(frame, vt)
		plainErr := message.Protobuf.Unmarshal(frame, plain)
		switch {
		case plainErr == nil && vtErr != nil && !strings.Contains(vtErr.Error(), "wrong wireType"):
			t.Fatalf("%x: reflection decodes %v, vtprotobuf fails: %v", payload, plain, vtErr)
		case plainErr == nil && vtErr == nil && !sameEvent(vt, plain):
			t.Fatalf("%x: decoded as %v through vtprotobuf, %v through reflection", payload, vt, plain)
		case vtErr != nil:
			return
		}
		_ = vt.String()
		again := marshalAll(t, message.Protobuf, []message.Message{vt})
		back := &testpb.PlainEvent{}
		if err := message.Protobuf.Unmarshal(again, back); err != nil && !strings.Contains(err.Error(), "UTF-8") {
			t.Fatalf("%x: decoded through vtprotobuf as %v, encoded as %x, which reflection fails to decode: %v", payload, vt, again, err)
		} else if err == nil && !sameEvent(vt, back) {
			t.Fatalf("%x: decoded through vtprotobuf as %v, encoded as %x, decoded through reflection as %v", payload, vt, again, back)
		}
	})
}
