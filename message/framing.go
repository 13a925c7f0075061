package message

import (
	"errors"
	"fmt"
)

// MaxFrameSize bounds the size of a frame, its header or newline included.
// Marshal refuses a larger message, and Unpack skips a larger frame with
// an error that wraps ErrFrameTooLarge. A binary frame whose length field
// exceeds the bound is rejected on reading the field, before any memory is
// allocated for it.
const MaxFrameSize = 64 << 20

// ErrDesyncFrame is wrapped by the error of an Unpack that found no frame
// header where a binary frame should start. Unpack has then skipped to the
// next frame header (or to the end of the input), and the error tells how
// many bytes were skipped.
var ErrDesyncFrame = errors.New("message: frame header not found (desynchronized)")

// ErrFrameTooLarge is wrapped by the error of a Marshal whose frame would
// exceed MaxFrameSize, and of an Unpack that skipped such a frame.
var ErrFrameTooLarge = errors.New("message: frame exceeds the maximum frame size")

// JSONLines is the framing of newline-delimited JSON; its name is "json".
var JSONLines Framing = jsonFraming{}

// Protobuf is the framing of length-prefixed protocol buffers; its name
// is "proto".
//
// A message whose Go type also has the methods that vtprotobuf's
// protoc-gen-go-vtproto generates (features marshal, unmarshal and size)
// is encoded and decoded by them rather than by protobuf's reflection:
// the same bytes, two to three times faster for small messages. They
// decode less strictly than proto.Unmarshal: they accept some malformed
// encodings that no encoder writes (string fields that are not UTF-8,
// over-long varints), and fail on a known field encoded in another wire
// type than its own, which proto.Unmarshal keeps as an unknown field. The
// unknown fields they keep are checked, so what they decode always
// encodes and prints.
var Protobuf Framing = protoFraming{}

// FramingByName returns the framing named name: "json" (JSONLines) or
// "proto" (Protobuf).
func FramingByName(name string) (Framing, error) {
	switch name {
	case JSONLines.Name():
		return JSONLines, nil
	case Protobuf.Name():
		return Protobuf, nil
	}
	return nil, fmt.Errorf("message: unknown framing %q (want %q or %q); a CSV framing is made by NewCSV, with its columns", name, JSONLines.Name(), Protobuf.Name())
}
