package message

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
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

// Unmarshal decodes the JSON of frame into m, as encoding/json would: as
// encoding/json does, it leaves the fields of m that frame lacks as they
// were, matches names case-insensitively, and calls the methods of
// json.Unmarshaler and encoding.TextUnmarshaler.
//
// For speed, it decodes with the engine of json/v2
// (github.com/go-json-experiment/json) under the options that give
// encoding/json's semantics (jsonv1.DefaultOptionsV1), less legacy error
// reporting, whose cost is a full validation pass before decoding. That
// option only turns into errors what encoding/json tolerates, so where
// the fast decode succeeds its result is encoding/json's. Where it fails,
// Unmarshal decodes frame again with encoding/json itself, and returns
// encoding/json's result and error; if encoding/json succeeds, m's type
// decodes with encoding/json from then on. Types that json/v2 would
// decode otherwise than encoding/json (see jsonTypeNeedsV1) always decode
// with encoding/json.
func (jsonFraming) Unmarshal(frame []byte, m Message) error {
	t := jsonTypeOf(m)
	if !t.v1.Load() {
		if jsonv2.Unmarshal(frame, m, jsonDecodeOptions) == nil {
			return nil
		}
	}
	if err := json.Unmarshal(frame, m); err != nil {
		return fmt.Errorf("message: decode JSON frame into %T: %w", m, err)
	}
	t.v1.Store(true) // encoding/json decoded what json/v2 did not.
	return nil
}

// jsonDecodeOptions are encoding/json's semantics in json/v2, except for
// how errors are reported. Without ReportErrorsWithLegacySemantics,
// json/v2 reports errors rather than ignore them (in malformed struct
// tags, conflicting field names, names that match several fields
// case-insensitively, unknown-type values), stops at the first error,
// wraps the errors of Unmarshal methods, and does not validate the whole
// input before it decodes.
var jsonDecodeOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsonv1.ReportErrorsWithLegacySemantics(false),
)

// jsonType is what Unmarshal knows of a message type.
type jsonType struct {
	v1 atomic.Bool // Decode with encoding/json only.
}

// jsonTypes maps the reflect.Type of messages to their *jsonType.
var jsonTypes sync.Map

func jsonTypeOf(m Message) *jsonType {
	rt := reflect.TypeOf(m)
	if t, ok := jsonTypes.Load(rt); ok {
		return t.(*jsonType)
	}
	t := new(jsonType)
	t.v1.Store(jsonTypeNeedsV1(rt, make(map[reflect.Type]bool)))
	actual, _ := jsonTypes.LoadOrStore(rt, t)
	return actual.(*jsonType)
}

var (
	jsonNumberType       = reflect.TypeFor[json.Number]()
	jsonUnmarshalerType  = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType  = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonUnmarshalerFromT = reflect.TypeFor[jsonv2.UnmarshalerFrom]()
)

// jsonTypeNeedsV1 tells whether values of t, or of what t decodes into
// by reflection, would decode differently with json/v2, even under
// encoding/json's options: encoding/json.Number (json/v2 knows only its
// own Number type, and takes any string for encoding/json's), types with
// an UnmarshalJSONFrom method (which json/v2 calls, and encoding/json
// does not), and struct tags with options that only json/v2 knows (such
// as embed, case:strict, format:...) or a quoted name. Types found in
// seen were looked at already.
func jsonTypeNeedsV1(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	if t == jsonNumberType {
		return true
	}
	pt := t
	if t.Kind() != reflect.Pointer {
		pt = reflect.PointerTo(t)
	}
	if pt.Implements(jsonUnmarshalerFromT) {
		return true
	}
	if pt.Implements(jsonUnmarshalerType) || pt.Implements(textUnmarshalerType) {
		return false // Its method decodes it, the same way in both.
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return jsonTypeNeedsV1(t.Elem(), seen)
	case reflect.Map:
		return jsonTypeNeedsV1(t.Key(), seen) || jsonTypeNeedsV1(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if tag, ok := f.Tag.Lookup("json"); ok && !jsonTagIsV1(tag) {
				return true
			}
			if jsonTypeNeedsV1(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// jsonTagIsV1 tells whether a json struct tag means the same to
// encoding/json and json/v2: a plain name, and only options that both
// know.
func jsonTagIsV1(tag string) bool {
	name, opts, _ := strings.Cut(tag, ",")
	if strings.HasPrefix(name, "'") {
		return false
	}
	for opts != "" {
		var opt string
		opt, opts, _ = strings.Cut(opts, ",")
		switch opt {
		case "omitempty", "omitzero", "string":
		default:
			return false
		}
	}
	return true
}
