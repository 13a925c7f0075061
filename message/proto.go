package message

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// protoFraming is the framing of Protobuf: each message is a frame of an
// 8-byte header and the message's protocol buffer encoding. The header is
// a 4-byte magic word, whose last byte is the version of the framing
// (protoMagic), and the 4-byte little-endian length of the encoding.
//
// Messages must implement proto.Message as well as Message. The UUID is a
// field of the application's message, by convention
//
//	bytes uuid = 1;
//
// holding the UUID's 16 bytes, which GetUUID and SetUUID convert from
// and to a UUID.
//
// Messages with vtprotobuf's methods go through them (vtMarshaler,
// vtUnmarshaler): see Protobuf.
type protoFraming struct{}

// vtMarshaler is a message with the encoding methods that vtprotobuf
// generates.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
}

// vtUnmarshaler is a message with the decoding method that vtprotobuf
// generates.
type vtUnmarshaler interface {
	UnmarshalVT(dAtA []byte) error
}

// protoMagic starts each binary frame: three bytes unlikely in other
// content (0xf1 is not valid UTF-8 at the start of text, 'Q' 'F' stand for
// Quire Frame), and the version of the framing, 1.
var protoMagic = [4]byte{0xf1, 'Q', 'F', 0x01}

// protoHeaderSize is the size of a binary frame's header: the magic word
// and the length.
const protoHeaderSize = 8

// Name returns "proto".
func (protoFraming) Name() string { return "proto" }

// Marshal writes m to w as one binary frame. m must implement
// proto.Message.
func (protoFraming) Marshal(m Message, w *bufio.Writer) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("message: %T does not implement proto.Message, as the proto framing needs", m)
	}
	size := protoSize(pm)
	if protoHeaderSize+size > MaxFrameSize {
		return fmt.Errorf("%w: %T encodes as a frame of %d bytes, more than %d", ErrFrameTooLarge, m, protoHeaderSize+size, MaxFrameSize)
	}
	// Encode into w's free buffer where it fits, else into a new slice.
	buf := w.AvailableBuffer()
	if cap(buf) < protoHeaderSize+size {
		buf = make([]byte, 0, protoHeaderSize+size)
	}
	buf = append(buf, protoMagic[:]...)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(size))
	buf, err := appendProto(buf, pm, size)
	if err != nil {
		return fmt.Errorf("message: encode %T as protobuf: %w", m, err)
	}
	_, err = w.Write(buf)
	return err
}

// protoSize returns the size of m's encoding.
func protoSize(m proto.Message) int {
	if vt, ok := m.(vtMarshaler); ok {
		return vt.SizeVT()
	}
	return proto.Size(m)
}

// appendProto appends m's encoding, of size bytes, to buf.
func appendProto(buf []byte, m proto.Message, size int) ([]byte, error) {
	n := len(buf)
	var err error
	if vt, ok := m.(vtMarshaler); ok {
		buf = slices.Grow(buf, size)[:n+size]
		var wrote int
		wrote, err = vt.MarshalToSizedBufferVT(buf[n:]) // From its end.
		if err == nil && wrote != size {
			err = fmt.Errorf("%d bytes, but its size was %d (was it changed concurrently?)", wrote, size)
		}
		return buf, err
	}
	buf, err = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf, m)
	if err == nil && len(buf)-n != size {
		err = fmt.Errorf("%d bytes, but its size was %d (was it changed concurrently?)", len(buf)-n, size)
	}
	return buf, err
}

// checkUnknown checks the unknown fields that UnmarshalVT kept in m,
// which it does not parse as strictly as proto.Unmarshal does (a group
// whose end does not match its start, say): bytes kept there that do not
// parse would fail, or panic, wherever m is encoded or printed.
func checkUnknown(m proto.Message) error {
	b := m.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("unknown fields: %w", protowire.ParseError(n))
		}
		if !num.IsValid() {
			return fmt.Errorf("unknown field number %d is out of range", num)
		}
		v := protowire.ConsumeFieldValue(num, typ, b[n:])
		if v < 0 {
			return fmt.Errorf("unknown field %d: %w", num, protowire.ParseError(v))
		}
		b = b[n+v:]
	}
	return nil
}

// Unpack returns the next binary frame of r, its header included. A
// frame that fits in r's buffer is returned from the buffer, without
// copying; a larger one is read into a new slice, which grows as its bytes
// arrive. Where r holds no frame header, Unpack skips to the next one, and
// returns an error wrapping ErrDesyncFrame. A header whose length exceeds
// MaxFrameSize is skipped with an error wrapping ErrFrameTooLarge (so the
// next Unpack resynchronizes at the next header).
func (protoFraming) Unpack(r *bufio.Reader) ([]byte, error) {
	hdr, err := r.Peek(protoHeaderSize)
	if err != nil {
		if err == io.EOF && len(hdr) > 0 && !bytes.HasPrefix(protoMagic[:], hdr[:min(len(hdr), len(protoMagic))]) {
			return nil, skipToProtoMagic(r, hdr)
		}
		return nil, unexpectedEOF(len(hdr), err)
	}
	if !bytes.Equal(hdr[:4], protoMagic[:]) {
		return nil, skipToProtoMagic(r, hdr)
	}
	size := protoHeaderSize + int64(binary.LittleEndian.Uint32(hdr[4:]))
	if size > MaxFrameSize {
		r.Discard(protoHeaderSize)
		return nil, fmt.Errorf("%w: skipped a frame header with length %d, more than %d", ErrFrameTooLarge, size-protoHeaderSize, MaxFrameSize-protoHeaderSize)
	}
	if int(size) <= r.Size() {
		frame, err := r.Peek(int(size))
		if err != nil {
			return nil, unexpectedEOF(len(frame), err)
		}
		r.Discard(len(frame))
		return frame, nil
	}
	return readLargeFrame(r, int(size))
}

// unexpectedEOF returns err, or io.ErrUnexpectedEOF if err is io.EOF
// after n > 0 bytes of a frame.
func unexpectedEOF(n int, err error) error {
	if err == io.EOF && n > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readLargeFrame reads a frame of size bytes, more than r's buffer holds,
// into a new slice. The slice grows as bytes arrive, so that a corrupt
// length allocates no more than the bytes that r has.
func readLargeFrame(r *bufio.Reader, size int) ([]byte, error) {
	frame := make([]byte, 0, 2*r.Size())
	for len(frame) < size {
		if len(frame) == cap(frame) {
			frame = append(frame, 0)[:len(frame)] // Grow.
		}
		n, err := io.ReadFull(r, frame[len(frame):min(cap(frame), size)])
		frame = frame[:len(frame)+n]
		if err != nil {
			return nil, unexpectedEOF(len(frame), err)
		}
	}
	return frame, nil
}

// skipToProtoMagic discards the bytes of r before the next occurrence of
// protoMagic after its first byte, or to its end, and returns an error
// wrapping ErrDesyncFrame that tells what was found and how much was
// skipped, or the error of r.
func skipToProtoMagic(r *bufio.Reader, found []byte) error {
	what := fmt.Sprintf("found % x", found[:min(len(found), 4)])
	if len(found) >= 4 && bytes.Equal(found[:3], protoMagic[:3]) {
		what = fmt.Sprintf("frame version %d is not %d", found[3], protoMagic[3])
	}
	r.Discard(1)
	skipped := 1
	for {
		buf, err := r.Peek(max(r.Buffered(), len(protoMagic)))
		if i := bytes.Index(buf, protoMagic[:]); i >= 0 {
			r.Discard(i)
			skipped += i
			break
		}
		// Keep a tail of buf that may begin a magic word.
		n := max(len(buf)-(len(protoMagic)-1), 0)
		if err != nil {
			n = len(buf)
		}
		r.Discard(n)
		skipped += n
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %s; skipped %d bytes", ErrDesyncFrame, what, skipped)
}

// Unmarshal decodes frame, a binary frame with its header, into m, which
// must implement proto.Message.
func (protoFraming) Unmarshal(frame []byte, m Message) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("message: %T does not implement proto.Message, as the proto framing needs", m)
	}
	if len(frame) < protoHeaderSize {
		return fmt.Errorf("message: binary frame of %d bytes is shorter than its %d-byte header", len(frame), protoHeaderSize)
	}
	if !bytes.Equal(frame[:4], protoMagic[:]) {
		return fmt.Errorf("message: binary frame starts with % x, not the frame header % x", frame[:4], protoMagic)
	}
	if n := binary.LittleEndian.Uint32(frame[4:]); int64(n) != int64(len(frame)-protoHeaderSize) {
		return fmt.Errorf("message: binary frame header has length %d, but %d bytes follow it", n, len(frame)-protoHeaderSize)
	}
	var err error
	if vt, ok := m.(vtUnmarshaler); ok {
		proto.Reset(pm) // As proto.Unmarshal does: UnmarshalVT merges.
		if err = vt.UnmarshalVT(frame[protoHeaderSize:]); err == nil {
			err = checkUnknown(pm)
		}
	} else {
		err = proto.Unmarshal(frame[protoHeaderSize:], pm)
	}
	if err != nil {
		return fmt.Errorf("message: decode protobuf frame into %T: %w", m, err)
	}
	return nil
}
