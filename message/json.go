package message

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// jsonFraming is the framing of JSONLines: each message is one line, its
// JSON encoding (by encoding/json, which never writes a newline within a
// value) followed by a newline.
//
// The message's UUID is a field of the application's type, by convention
//
//	UUID message.UUID `json:"uuid"`
//
// which GetUUID and SetUUID return and set. UUID is an
// encoding.TextMarshaler, so the field encodes as a JSON string in the
// canonical text form.
type jsonFraming struct{}

// Name returns "json".
func (jsonFraming) Name() string { return "json" }

// jsonEncoder is an Encoder that writes to its own buffer, so that a
// frame is written whole or not at all.
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonEncoders = sync.Pool{New: func() any {
	e := new(jsonEncoder)
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// Marshal writes m to w as one line of JSON.
func (jsonFraming) Marshal(m Message, w *bufio.Writer) error {
	e := jsonEncoders.Get().(*jsonEncoder)
	defer func() {
		if e.buf.Cap() <= 64<<10 { // Keep no huge buffers.
			e.buf.Reset()
			jsonEncoders.Put(e)
		}
	}()
	if err := e.enc.Encode(m); err != nil { // Appends the newline.
		return fmt.Errorf("message: encode %T as JSON: %w", m, err)
	}
	if n := e.buf.Len(); n > MaxFrameSize {
		return fmt.Errorf("%w: %T encodes as %d bytes of JSON, more than %d", ErrFrameTooLarge, m, n, MaxFrameSize)
	}
	_, err := w.Write(e.buf.Bytes())
	return err
}

// Unpack returns the next line of r, its newline included. A line that
// fits in r's buffer is returned from the buffer, without copying. A final
// line without a newline is io.ErrUnexpectedEOF. Unpack does not parse the
// JSON: Unmarshal reports a line that is not valid JSON, and the next
// line is readable all the same.
func (jsonFraming) Unpack(r *bufio.Reader) ([]byte, error) {
	scanned := 0 // r's buffered bytes known to hold no newline.
	for {
		buf, _ := r.Peek(r.Buffered())
		if i := bytes.IndexByte(buf[scanned:], '\n'); i >= 0 {
			frame := buf[:scanned+i+1]
			r.Discard(len(frame))
			return frame, nil
		}
		scanned = len(buf)
		if scanned == r.Size() {
			return unpackLongLine(r)
		}
		if _, err := r.Peek(scanned + 1); err != nil { // Read more.
			if err == io.EOF {
				if scanned == 0 {
					return nil, io.EOF
				}
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// unpackLongLine reads a line longer than r's buffer into a new slice. It
// skips a line longer than MaxFrameSize, with an ErrFrameTooLarge error.
func unpackLongLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > MaxFrameSize {
			n, skipErr := skipLine(r, err)
			n += int64(len(line) + len(chunk))
			if skipErr != nil && skipErr != io.EOF {
				return nil, skipErr
			}
			return nil, fmt.Errorf("%w: skipped a JSON line of %d bytes, more than %d", ErrFrameTooLarge, n, MaxFrameSize)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			return nil, io.ErrUnexpectedEOF // len(line) > 0.
		default:
			return nil, err
		}
	}
}

// skipLine discards the rest of the line whose last ReadSlice returned
// err, and returns the count of bytes discarded.
func skipLine(r *bufio.Reader, err error) (int64, error) {
	var n int64
	for errors.Is(err, bufio.ErrBufferFull) {
		var chunk []byte
		chunk, err = r.ReadSlice('\n')
		n += int64(len(chunk))
	}
	return n, err
}

// Unmarshal decodes the JSON of frame into m, with encoding/json. As
// encoding/json does, it leaves the fields of m that frame lacks as they
// were.
func (jsonFraming) Unmarshal(frame []byte, m Message) error {
	if err := json.Unmarshal(frame, m); err != nil {
		return fmt.Errorf("message: decode JSON frame into %T: %w", m, err)
	}
	return nil
}
