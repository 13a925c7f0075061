package message

import "bufio"

// Message is implemented by applications' message types. A message type
// carries its own UUID, in a field that its framing encodes (see JSONLines
// and Protobuf): the publisher sets it before the message is written, and
// readers get it back when the message is decoded.
type Message interface {
	// GetUUID returns the message's UUID; the zero UUID if it has none.
	GetUUID() UUID
	// SetUUID sets the message's UUID.
	SetUUID(UUID)
	// NewAcknowledgement returns a message to write to journal to
	// acknowledge a transaction: an empty message of the application's
	// type, whose UUID (with AckTxn flags) the publisher sets. Readers
	// of journal must tolerate it; they are told that it is an
	// acknowledgement by its UUID's flags.
	NewAcknowledgement(journal string) Message
}

// Framing encodes messages in a journal's bytes: it writes each message as
// one frame, and splits a journal's bytes back into frames. Framings are
// stateless and safe for concurrent use; the bufio.Reader or bufio.Writer
// that they are given is not.
//
// A frame is exactly the bytes that it occupies in the journal (a JSON
// line includes its newline; a binary frame includes its header), so a
// reader that knows the offset of its bufio.Reader's underlying reader
// knows each frame's offset: the underlying offset less r.Buffered() is
// the offset of the next frame.
type Framing interface {
	// Name returns the framing's name: "json", "proto" or "csv".
	Name() string
	// Marshal appends m to w as one frame. On error it writes nothing.
	Marshal(m Message, w *bufio.Writer) error
	// Unpack reads the next frame from r. The frame is valid until the
	// next call with r (it may be r's own buffer).
	//
	// Unpack returns io.EOF, and no frame, at a clean end of r, and
	// io.ErrUnexpectedEOF when r ends within a frame. A partial frame
	// that fits in r's buffer stays unread, so that a later Unpack, once
	// more bytes have arrived, returns it whole. Other errors of r are
	// returned as they are.
	//
	// A malformed frame is reported by an error that wraps
	// ErrDesyncFrame or ErrFrameTooLarge, after Unpack has skipped it:
	// the caller may log the error and call Unpack again to read on.
	Unpack(r *bufio.Reader) (frame []byte, err error)
	// Unmarshal decodes frame, as returned by Unpack, into m, which
	// should be a new message of the application's type.
	Unmarshal(frame []byte, m Message) error
}
