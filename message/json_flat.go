package message

import (
	"encoding/binary"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A flatCodec encodes and decodes the JSON of one flat struct type, the
// shape most messages have: exported fields of strings, booleans,
// numbers and a UUID, with plain names. It writes and reads only what it
// can be sure encoding/json would write or read the same way; for
// anything else it declines, and the framing takes its general path
// (json/v2 under encoding/json's options, then encoding/json). Because it
// knows the struct's fields ahead, it needs no reflection over the
// type's structure per message, and no general JSON tokenizer.
//
// What it declines, when decoding: any frame that is not a single object;
// a key that is not exactly the name of a field it decodes (names that
// match only case-insensitively, unknown names, escaped names); null; a
// value of another JSON type than the field's; a string with \u escapes
// or invalid UTF-8; a number that does not fit its field. When encoding:
// a non-finite float, and a field of another type (a slice, a map, a
// pointer...) unless omitempty leaves it out.
//
// Invariant: decode writes to the message only once the whole frame has
// been read and accepted, so a frame it declines leaves the message as it
// was for the general path.
type flatCodec struct {
	fields  []flatField
	encodes bool // Whether encode can succeed: no field of another type is always written.
}

// flatField is a field of a flatCodec's struct.
type flatField struct {
	name      string // Its JSON name.
	key       string // Its name quoted, and a colon: what encode writes.
	index     int    // Its index in the struct.
	kind      flatKind
	bits      int // The size of a number's type, for range checks.
	omitEmpty bool
}

type flatKind uint8

const (
	flatOther flatKind = iota // Any other type: the general path's.
	flatString
	flatBool
	flatInt
	flatUint
	flatFloat
	flatUUID
)

// maxFlatFields bounds the fields of a flatCodec's type, and the keys of
// a frame that it decodes (it records them on the stack before it
// writes any).
const maxFlatFields = 32

// newFlatCodec returns the codec of the struct that t points to, or nil
// if t's JSON is not flat: see flatCodec.
func newFlatCodec(t reflect.Type) *flatCodec {
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || hasJSONMethods(t) {
		return nil
	}
	st := t.Elem()
	c := new(flatCodec)
	names := make(map[string]bool)
	for i := range st.NumField() {
		sf := st.Field(i)
		if sf.Anonymous {
			return nil // encoding/json promotes the fields of embedded structs.
		}
		if !sf.IsExported() {
			continue
		}
		tag, tagged := sf.Tag.Lookup("json")
		if tag == "-" {
			continue
		}
		f, ok := newFlatField(sf, tag, tagged)
		if !ok || names[f.name] || len(c.fields) == maxFlatFields {
			return nil // Duplicate names are resolved by rules not kept here.
		}
		names[f.name] = true
		f.index = i
		c.fields = append(c.fields, f)
	}
	c.encodes = !slices.ContainsFunc(c.fields, func(f flatField) bool { return f.kind == flatOther && !f.omitEmpty })
	return c
}

// newFlatField returns the field that sf is with the json tag tag, and
// whether the codec can have it.
func newFlatField(sf reflect.StructField, tag string, tagged bool) (flatField, bool) {
	f := flatField{name: sf.Name, kind: flatKindOf(sf.Type)}
	if tagged {
		name, opts, _ := strings.Cut(tag, ",")
		switch opts {
		case "":
		case "omitempty":
			f.omitEmpty = true
		default:
			return f, false
		}
		if name != "" {
			f.name = name
		}
	}
	if !plainJSONName(f.name) {
		return f, false
	}
	f.key = `"` + f.name + `":`
	switch f.kind {
	case flatInt, flatUint, flatFloat:
		f.bits = sf.Type.Bits()
	}
	return f, true
}

// plainJSONName tells whether name is one that encoding/json accepts as a
// tag's name and writes without escapes: ASCII letters, digits, '_', '-'
// and '.'.
func plainJSONName(name string) bool {
	if name == "" {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// hasJSONMethods tells whether encoding/json or json/v2 would call a
// method of values of t (or of pointers to them) to encode or decode.
func hasJSONMethods(t reflect.Type) bool {
	pt := t
	if t.Kind() != reflect.Pointer {
		pt = reflect.PointerTo(t)
	}
	for _, it := range []reflect.Type{jsonMarshalerType, jsonUnmarshalerType, textMarshalerType,
		textUnmarshalerType, jsonMarshalerToType, jsonUnmarshalerFrom} {
		if t.Implements(it) || pt.Implements(it) {
			return true
		}
	}
	return false
}

func flatKindOf(t reflect.Type) flatKind {
	if t == uuidType {
		return flatUUID
	}
	if t == jsonNumberType || hasJSONMethods(t) {
		return flatOther
	}
	switch t.Kind() {
	case reflect.String:
		return flatString
	case reflect.Bool:
		return flatBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return flatInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return flatUint
	case reflect.Float32, reflect.Float64:
		return flatFloat
	}
	return flatOther
}

// field returns the index of the field named key exactly, or -1. It looks
// from next on first, and wraps around: keys mostly come in the fields'
// order, as encode writes them.
func (c *flatCodec) field(key []byte, next int) int {
	for i := next; i < len(c.fields); i++ {
		if c.fields[i].name == string(key) {
			return i
		}
	}
	for i := range min(next, len(c.fields)) {
		if c.fields[i].name == string(key) {
			return i
		}
	}
	return -1
}

// encode appends the JSON line of the struct v to b, as encoding/json
// would write it with SetEscapeHTML(false), or declines (false).
func (c *flatCodec) encode(b []byte, v reflect.Value) ([]byte, bool) {
	if !c.encodes {
		return b, false
	}
	b = append(b, '{')
	first := true
	for i := range c.fields {
		f := &c.fields[i]
		fv := v.Field(f.index)
		if f.omitEmpty && isEmptyJSONValue(fv) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, f.key...)
		switch f.kind {
		case flatString:
			b = appendJSONString(b, fv.String())
		case flatBool:
			b = strconv.AppendBool(b, fv.Bool())
		case flatInt:
			b = strconv.AppendInt(b, fv.Int(), 10)
		case flatUint:
			b = strconv.AppendUint(b, fv.Uint(), 10)
		case flatFloat:
			var ok bool
			if b, ok = appendJSONFloat(b, fv.Float(), f.bits); !ok {
				return b, false
			}
		case flatUUID:
			b = append(b, '"')
			b = fv.Addr().Interface().(*UUID).appendText(b)
			b = append(b, '"')
		default:
			return b, false
		}
	}
	return append(b, '}', '\n'), true
}

// isEmptyJSONValue tells whether omitempty leaves v out, as encoding/json
// decides it.
// (Not v.IsZero: -0.0 is empty to encoding/json.)
func isEmptyJSONValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Interface, reflect.Pointer:
		return v.IsNil()
	}
	return false
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it without HTML escaping: quotes, backslashes and control
// characters; U+2028 and U+2029 (which JavaScript takes for line ends);
// and each byte of invalid UTF-8 as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendJSONFloat appends f, a float of bits bits, as encoding/json
// writes it: the shortest decimal that reads back as f, in exponent form
// only below 1e-6 or from 1e21 on, with exponents of at least one digit.
// It declines NaN and infinities, which JSON cannot hold.
func appendJSONFloat(b []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1] // e-09 becomes e-9.
		b = b[:n-1]
	}
	return b, true
}

// flatValue is a value that decode has read, for the field f.
type flatValue struct {
	f          *flatField
	start, end int32  // A string's bytes in the frame, within its quotes.
	n          uint64 // An integer's magnitude, a float's bits, a bool's 0 or 1, a UUID's first half.
	n2         uint64 // A UUID's second half.
	escaped    bool   // A string with escapes.
	neg        bool   // A negative integer.
}

// decode decodes frame into the struct v, as encoding/json would, or
// declines (false) and leaves v as it was.
func (c *flatCodec) decode(frame []byte, v reflect.Value) bool {
	if len(frame) > math.MaxInt32 {
		return false // flatValue holds offsets in 32 bits.
	}
	var values [maxFlatFields]flatValue
	n, ok := c.read(frame, &values)
	if !ok {
		return false
	}
	for i := range n {
		values[i].store(frame, v.Field(values[i].f.index))
	}
	return true
}

// read reads the object of frame into values, and returns how many it
// read, or declines (false).
func (c *flatCodec) read(frame []byte, values *[maxFlatFields]flatValue) (int, bool) {
	i := skipJSONSpace(frame, 0)
	if i == len(frame) || frame[i] != '{' {
		return 0, false
	}
	i = skipJSONSpace(frame, i+1)
	n, next := 0, 0
	if i < len(frame) && frame[i] == '}' {
		return 0, skipJSONSpace(frame, i+1) == len(frame)
	}
	for {
		if n == maxFlatFields {
			return 0, false
		}
		start, end, escaped, ok := scanJSONString(frame, i)
		if !ok || escaped {
			return 0, false
		}
		f := c.field(frame[start:end], next)
		if f < 0 {
			return 0, false
		}
		val := &values[n]
		val.f, next = &c.fields[f], f+1
		i = skipJSONSpace(frame, end+1)
		if i == len(frame) || frame[i] != ':' {
			return 0, false
		}
		if i, ok = val.read(frame, skipJSONSpace(frame, i+1)); !ok {
			return 0, false
		}
		n++
		i = skipJSONSpace(frame, i)
		if i == len(frame) {
			return 0, false
		}
		switch frame[i] {
		case ',':
			i = skipJSONSpace(frame, i+1)
		case '}':
			return n, skipJSONSpace(frame, i+1) == len(frame)
		default:
			return 0, false
		}
	}
}

// read reads the value at frame[i:] for v.f, and returns the offset after
// it, or declines (false).
func (v *flatValue) read(frame []byte, i int) (int, bool) {
	if i == len(frame) {
		return i, false
	}
	switch v.f.kind {
	case flatString:
		start, end, escaped, ok := scanJSONString(frame, i)
		v.start, v.end, v.escaped = int32(start), int32(end), escaped
		return end + 1, ok
	case flatUUID:
		start, end, escaped, ok := scanJSONString(frame, i)
		if !ok || escaped {
			return i, false
		}
		u, err := parseUUID(frame[start:end], true)
		v.n, v.n2 = binary.BigEndian.Uint64(u[:8]), binary.BigEndian.Uint64(u[8:])
		return end + 1, err == nil
	case flatBool:
		switch {
		case hasLiteral(frame[i:], "true"):
			v.n = 1
			return i + 4, true
		case hasLiteral(frame[i:], "false"):
			v.n = 0
			return i + 5, true
		}
		return i, false
	case flatInt, flatUint:
		return v.readInteger(frame, i)
	case flatFloat:
		end, ok := scanJSONNumber(frame, i)
		if !ok {
			return i, false
		}
		f, err := strconv.ParseFloat(string(frame[i:end]), v.f.bits)
		v.n = math.Float64bits(f)
		return end, err == nil
	}
	return i, false
}

// readInteger reads an integer that fits v.f, as strconv.ParseInt or
// ParseUint and the range of the field's type accept it; encoding/json
// refuses a fraction or an exponent for an integer field.
func (v *flatValue) readInteger(frame []byte, i int) (int, bool) {
	end, ok := scanJSONNumber(frame, i)
	if !ok {
		return i, false
	}
	digits := frame[i:end]
	if digits[0] == '-' {
		v.neg, digits = true, digits[1:]
	}
	var n uint64
	for _, d := range digits {
		if d < '0' || d > '9' || n > (math.MaxUint64-9)/10 {
			return i, false // A fraction, an exponent, or a number near overflow.
		}
		n = n*10 + uint64(d-'0')
	}
	v.n = n
	bits := uint(v.f.bits)
	if v.f.kind == flatUint {
		return end, !v.neg && n <= math.MaxUint64>>(64-bits)
	}
	if v.neg {
		return end, n <= 1<<(bits-1)
	}
	return end, n < 1<<(bits-1)
}

// store sets fv, the field of v.f, to the value read.
func (v *flatValue) store(frame []byte, fv reflect.Value) {
	switch v.f.kind {
	case flatString:
		raw := frame[v.start:v.end]
		if v.escaped {
			fv.SetString(string(unescapeJSON(raw)))
		} else if fv.String() != string(raw) {
			fv.SetString(string(raw))
		}
	case flatUUID:
		u := fv.Addr().Interface().(*UUID)
		binary.BigEndian.PutUint64(u[:8], v.n)
		binary.BigEndian.PutUint64(u[8:], v.n2)
	case flatBool:
		fv.SetBool(v.n == 1)
	case flatInt:
		if v.neg {
			fv.SetInt(int64(-v.n)) // -v.n wraps to the minimum of int64 too.
		} else {
			fv.SetInt(int64(v.n))
		}
	case flatUint:
		fv.SetUint(v.n)
	case flatFloat:
		fv.SetFloat(math.Float64frombits(v.n))
	}
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

func hasLiteral(b []byte, lit string) bool {
	return len(b) >= len(lit) && string(b[:len(lit)]) == lit
}

// scanJSONString reads the string at b[i:], and returns the offsets of
// its contents (within the quotes) and whether it holds escapes. It
// declines (false) a string that is not plain enough: one with a \u
// escape, a control character, or invalid UTF-8.
func scanJSONString(b []byte, i int) (start, end int, escaped, ok bool) {
	if i == len(b) || b[i] != '"' {
		return 0, 0, false, false
	}
	start = i + 1
	ascii := true
	for j := plainPrefix(b, start); j < len(b); j++ {
		if plainJSONByte[b[j]] {
			continue
		}
		switch c := b[j]; {
		case c == '"':
			return start, j, escaped, ascii || utf8.Valid(b[start:j])
		case c == '\\':
			j++
			if j == len(b) {
				return 0, 0, false, false
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				escaped = true
			default:
				return 0, 0, false, false
			}
		case c < 0x20:
			return 0, 0, false, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return 0, 0, false, false
}

// plainJSONByte tells the bytes that need no look in a string: printable
// ASCII other than '"' and '\\'.
var plainJSONByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainPrefix returns the end of the run of bytes from b[i:] that need no
// look in a string: printable ASCII other than '"' and '\\'. It looks at
// eight bytes at a time, and may stop a little short of the run's end.
func plainPrefix(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		// A byte below 0x20 borrows into its high bit; one from 0x80 has it.
		special := (w - 0x20*ones) | w
		// A zero byte of w^c is a byte equal to c.
		q, bs := w^('"'*ones), w^('\\'*ones)
		special |= (q - ones) &^ q
		special |= (bs - ones) &^ bs
		if special&highs != 0 {
			break
		}
	}
	return i
}

// unescapeJSON returns the contents of a string that scanJSONString
// accepted, its escapes replaced.
func unescapeJSON(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case 'n':
			c = '\n'
		case 'r':
			c = '\r'
		case 't':
			c = '\t'
		default: // '"', '\\', '/'
			c = raw[i]
		}
		out = append(out, c)
	}
	return out
}

// scanJSONNumber returns the end of the JSON number at b[i:]: an
// optional minus sign, an integer part without leading zeros, an
// optional fraction and an optional exponent. It declines (false) what
// is not a number, and a number followed by anything but whitespace, a
// comma or the object's end.
func scanJSONNumber(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i == len(b):
		return i, false
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return i, false
		}
		i = j
	}
	if i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r', ',', '}':
		default:
			return i, false
		}
	}
	return i, true
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
