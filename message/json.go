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
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// jsonFraming is the framing of JSONLines: each message is one line, its
// JSON encoding followed by a newline (no JSON encoding here writes a
// newline within a value).
//
// The message's UUID is a field of the application's type, by convention
//
//	UUID message.UUID `json:"uuid"`
//
// which GetUUID and SetUUID return and set. UUID is an
// encoding.TextMarshaler, so the field encodes as a JSON string in the
// canonical text form.
//
// Messages encode and decode as encoding/json would, but with the engine
// of json/v2 (github.com/go-json-experiment/json, the module that became
// Go's encoding/json/v2) under the options that give encoding/json's
// semantics (jsonv1.DefaultOptionsV1), which is faster: see jsonType for
// how the framing keeps to encoding/json's results.
type jsonFraming struct{}

// Name returns "json".
func (jsonFraming) Name() string { return "json" }

// jsonEncoder encodes to its own buffer, so that a frame is written whole
// or not at all.
type jsonEncoder struct {
	buf jsonBuffer
	v1  *json.Encoder
	v2  *jsontext.Encoder
}

// jsonBuffer is an io.Writer that appends to itself. (The json/v2 Encoder
// writes to a bytes.Buffer in place, through its AvailableBuffer, which
// makes it allocate as soon as the bytes.Buffer is reset.)
type jsonBuffer []byte

func (b *jsonBuffer) Write(p []byte) (int, error) {
	*b = append(*b, p...)
	return len(p), nil
}

var jsonEncoders = sync.Pool{New: func() any {
	e := new(jsonEncoder)
	e.v1 = json.NewEncoder(&e.buf)
	e.v1.SetEscapeHTML(false)
	e.v2 = jsontext.NewEncoder(&e.buf, jsonEncodeOptions)
	return e
}}

// jsonEncodeOptions are encoding/json's semantics in json/v2, with
// SetEscapeHTML(false), except that invalid UTF-8 is an error: json/v2
// would write U+FFFD for it as is, where encoding/json writes \ufffd.
var jsonEncodeOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsontext.EscapeForHTML(false),
	jsontext.AllowInvalidUTF8(false),
)

// Marshal writes m to w as one line of JSON: the line that encoding/json
// writes, with SetEscapeHTML(false).
func (jsonFraming) Marshal(m Message, w *bufio.Writer) error {
	e := jsonEncoders.Get().(*jsonEncoder)
	defer func() {
		if cap(e.buf) <= 64<<10 { // Keep no huge buffers.
			e.buf = e.buf[:0]
			jsonEncoders.Put(e)
		}
	}()
	if err := e.encode(m); err != nil {
		return fmt.Errorf("message: encode %T as JSON: %w", m, err)
	}
	if n := len(e.buf); n > MaxFrameSize {
		return fmt.Errorf("%w: %T encodes as %d bytes of JSON, more than %d", ErrFrameTooLarge, m, n, MaxFrameSize)
	}
	_, err := w.Write(e.buf)
	return err
}

// encode writes m's JSON and a newline to e.buf: with the type's
// flatCodec if it has one and it does not decline, else with json/v2 if
// it encodes m's type as encoding/json does, else (or if json/v2 fails,
// as it does on invalid UTF-8) with encoding/json.
func (e *jsonEncoder) encode(m Message) error {
	t := jsonTypeOf(m)
	if p := reflect.ValueOf(m); t.flat != nil && !p.IsNil() {
		buf, ok := t.flat.encode(e.buf, p.Elem())
		if ok {
			e.buf = buf
			return nil
		}
		e.buf = e.buf[:0]
	}
	if !t.encodeV1.Load() {
		err := jsonv2.MarshalEncode(e.v2, m) // Appends the newline.
		if err == nil {
			return nil
		}
		e.v2.Reset(&e.buf, jsonEncodeOptions) // It may hold part of m.
		e.buf = e.buf[:0]
	}
	return e.v1.Encode(m) // Appends the newline.
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

// Unmarshal decodes the JSON of frame into m, as encoding/json would (with
// the type's flatCodec if it has one and it does not decline): it
// leaves the fields of m that frame lacks as they were, matches names
// case-insensitively, and calls the methods of json.Unmarshaler and
// encoding.TextUnmarshaler. Its errors are those of encoding/json.
func (jsonFraming) Unmarshal(frame []byte, m Message) error {
	t := jsonTypeOf(m)
	if p := reflect.ValueOf(m); t.flat != nil && !p.IsNil() && t.flat.decode(frame, p.Elem()) {
		return nil
	}
	if !t.decodeV1.Load() {
		if jsonv2.Unmarshal(frame, m, jsonDecodeOptions) == nil {
			return nil
		}
	}
	if err := json.Unmarshal(frame, m); err != nil {
		return fmt.Errorf("message: decode JSON frame into %T: %w", m, err)
	}
	t.decodeV1.Store(true) // encoding/json decoded what json/v2 did not.
	return nil
}

// jsonDecodeOptions are encoding/json's semantics in json/v2, except for
// how errors are reported. Without ReportErrorsWithLegacySemantics,
// json/v2 does not validate the whole input before it decodes (which
// costs a fifth of the decode), and it stops at the first error, reports
// rather than ignores names that match several fields case-insensitively
// and malformed struct tags, and wraps the errors of UnmarshalJSON
// methods: it fails in more cases, and decodes the same otherwise.
var jsonDecodeOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsonv1.ReportErrorsWithLegacySemantics(false),
)

// jsonType is what the framing knows of a message type: its flatCodec, if
// it has one, and whether json/v2 encodes and decodes it as encoding/json
// does.
//
// json/v2 under encoding/json's options encodes and decodes as
// encoding/json does (that is how Go's encoding/json is built under
// GOEXPERIMENT=jsonv2), except for what json/v2 knows and encoding/json
// does not: the Number type of encoding/json (json/v2 knows only its own,
// and takes encoding/json's for a plain string), MarshalJSONTo and
// UnmarshalJSONFrom methods, and struct tag options of json/v2 (such as
// embed, case:ignore, format:...). A type that has any of these, in its
// fields or elements, is marked to use encoding/json (see jsonNeedsV1).
//
// Marshal and Unmarshal try json/v2 first, and when it fails, try again
// with encoding/json, and return its result and error: so errors are
// always encoding/json's. If encoding/json decodes a frame that json/v2
// did not, the type is marked to decode with encoding/json from then on.
type jsonType struct {
	flat     *flatCodec // Tried first, if not nil.
	encodeV1 atomic.Bool
	decodeV1 atomic.Bool
}

// jsonTypes maps the reflect.Type of messages to their *jsonType.
var jsonTypes sync.Map

func jsonTypeOf(m Message) *jsonType {
	rt := reflect.TypeOf(m)
	if t, ok := jsonTypes.Load(rt); ok {
		return t.(*jsonType)
	}
	t := &jsonType{flat: newFlatCodec(rt)}
	t.encodeV1.Store(jsonNeedsV1(rt, false, make(map[reflect.Type]bool)))
	t.decodeV1.Store(jsonNeedsV1(rt, true, make(map[reflect.Type]bool)))
	actual, _ := jsonTypes.LoadOrStore(rt, t)
	return actual.(*jsonType)
}

var (
	jsonNumberType      = reflect.TypeFor[json.Number]()
	jsonMarshalerType   = reflect.TypeFor[json.Marshaler]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonMarshalerToType = reflect.TypeFor[jsonv2.MarshalerTo]()
	jsonUnmarshalerFrom = reflect.TypeFor[jsonv2.UnmarshalerFrom]()
)

// jsonNeedsV1 tells whether json/v2 might encode (or with decode, decode)
// values of t otherwise than encoding/json, as jsonType tells. It looks
// at t and the types of its fields and elements, but not into a type
// whose methods encoding/json calls (MarshalJSON or MarshalText on the
// value; UnmarshalJSON or UnmarshalText on the pointer). Types found in
// seen were looked at already.
func jsonNeedsV1(t reflect.Type, decode bool, seen map[reflect.Type]bool) bool {
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
	if decode {
		if pt.Implements(jsonUnmarshalerFrom) {
			return true
		}
		if pt.Implements(jsonUnmarshalerType) || pt.Implements(textUnmarshalerType) {
			return false
		}
	} else {
		if pt.Implements(jsonMarshalerToType) {
			return true
		}
		if t.Implements(jsonMarshalerType) || t.Implements(textMarshalerType) {
			return false
		}
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return jsonNeedsV1(t.Elem(), decode, seen)
	case reflect.Map:
		return jsonNeedsV1(t.Key(), decode, seen) || jsonNeedsV1(t.Elem(), decode, seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if tag, ok := f.Tag.Lookup("json"); ok && !jsonTagIsV1(tag) {
				return true
			}
			if jsonNeedsV1(f.Type, decode, seen) {
				return true
			}
		}
	}
	return false
}

// jsonTagIsV1 tells whether a json struct tag means the same to
// encoding/json and json/v2: a name that is not quoted, and only options
// that both know.
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
