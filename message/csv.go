package message

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// CSV is a framing of comma-separated values: each message is one record
// of RFC 4180, whose fields are the message's columns, in the order that
// CSVConfig.Columns declares. Its name is "csv". Make one with NewCSV: a
// CSV needs its columns, which is why FramingByName does not know it.
//
// Records are written with a newline (LF) at their end, and read with LF
// or CRLF. A field is quoted where encoding/csv's Writer would quote it:
// when it holds a comma, a quote, a carriage return or a newline, or
// starts with white space (and the field `\.`); a quote within it is
// doubled. A record is one frame, which spans several lines when a quoted
// field holds newlines. Unlike encoding/csv's Reader, the framing keeps
// what quotes enclose byte for byte, carriage returns included, so every
// string round-trips.
//
// The message's UUID is in the column CSVConfig.UUIDColumn ("uuid" by
// default): Marshal writes GetUUID there, in the canonical text, and
// Unmarshal calls SetUUID with it. The other columns are the fields of
// the application's type (a struct, or a pointer to one), each the field
// whose tag `csv:"name"` or, untagged, whose Go name is the column's
// name: the same name, or the one column whose name equals it but for
// case. Tagged `csv:"-"`, a field is left out. The fields of an untagged
// embedded struct (not a pointer to one) are promoted. Every exported
// field must have a column, so that a misspelt name is an error rather
// than a field that is silently never written; a column may have no
// field, and its cells are written empty and ignored when read. A field
// of the UUID's column is left to GetUUID and SetUUID.
//
// A field is a string, a bool, an integer or a float of any size, a
// UUID, a type that implements both encoding.TextMarshaler and
// encoding.TextUnmarshaler (such as time.Time, written in RFC 3339), or a
// pointer to one of these. Numbers are written as strconv formats them,
// floats in the shortest form that parses back to the same value; bools
// as "true" and "false", and read as strconv.ParseBool reads them. As in
// PostgreSQL's CSV, an empty cell that is not quoted is null: a nil
// pointer is written as one, and one reads as the zero value of its
// field, or nil, without a call to UnmarshalText. Empty text of a pointer
// or of a TextMarshaler is written quoted, "", and reads back as the empty
// text: a pointer to an empty string, or what UnmarshalText makes of it.
// (A quoted empty cell in a field of another kind, as some writers of CSV
// quote every cell, is null too.)
//
// An acknowledgement (a message whose UUID has AckTxn flags) is written
// as a record whose only non-empty cell is its UUID: by the contract of
// NewAcknowledgement it is an empty message, and readers tell it from
// its UUID alone, so its record reads back as an empty message with its
// UUID.
//
// A header, the record of the columns' names, may be written anywhere
// in a journal (see Header), any number of times: readers skip it, as
// they skip blank lines, since a reader that starts at an offset other
// than the journal's start never sees a header there, and records from
// several sources may each start with one. A header and blank lines
// belong to the frame of the record that follows them, so that frames
// still cover the journal's bytes exactly: Unpack returns them with the
// record, and Unmarshal skips them. (A record that Marshal writes can
// never be mistaken for the header: its UUID cell holds a UUID, and
// NewCSV refuses a UUID column whose name is one.)
//
// Malformed records are reported with errors that name the column and
// value and say what is wrong, and that wrap encoding/csv's ErrQuote,
// ErrBareQuote or ErrFieldCount where those apply; the next record reads
// as usual. Unpack only finds where records end: it follows quotes, so
// that a newline within a quoted field does not end the record, and a
// record whose quotes are malformed ends with its line, as with
// encoding/csv. A quote that is never closed holds the rest of the
// journal in one field, as it would for any reader of CSV; Unpack skips
// such a record once it exceeds MaxFrameSize.
type CSV struct {
	columns []string
	uuid    int    // the index of the UUID's column
	header  []byte // the header record, with its newline
	types   sync.Map
}

// CSVConfig configures a CSV framing.
type CSVConfig struct {
	// Columns names the fields of each record, in order. They must be
	// distinct and not empty, and include the UUID's column.
	Columns []string
	// UUIDColumn is the name of the column of the message's UUID; empty
	// means "uuid".
	UUIDColumn string
}

// NewCSV returns the CSV framing of records of cfg's columns.
func NewCSV(cfg CSVConfig) (*CSV, error) {
	uuidColumn := cfg.UUIDColumn
	if uuidColumn == "" {
		uuidColumn = "uuid"
	}
	if len(cfg.Columns) == 0 {
		return nil, errors.New("message: CSV framing has no columns")
	}
	f := &CSV{columns: append([]string(nil), cfg.Columns...), uuid: -1}
	seen := make(map[string]bool, len(cfg.Columns))
	for i, c := range cfg.Columns {
		if c == "" {
			return nil, fmt.Errorf("message: CSV column %d has an empty name", i+1)
		}
		if seen[c] {
			return nil, fmt.Errorf("message: CSV column %q is declared twice", c)
		}
		seen[c] = true
		if c == uuidColumn {
			f.uuid = i
		}
	}
	if f.uuid < 0 {
		return nil, fmt.Errorf("message: CSV UUID column %q is not among the columns %q", uuidColumn, cfg.Columns)
	}
	// A record's UUID cell always holds a UUID: so that no record equals
	// the header, the header's must not.
	if _, err := parseUUID(uuidColumn, true); err == nil {
		return nil, fmt.Errorf("message: CSV UUID column's name %q is itself a UUID, so a record could not be told from the header", uuidColumn)
	}
	for i, c := range f.columns {
		if i > 0 {
			f.header = append(f.header, ',')
		}
		f.header = appendCSVField(f.header, []byte(c))
	}
	f.header = append(f.header, '\n')
	if len(f.header) > MaxFrameSize {
		return nil, fmt.Errorf("%w: the CSV header has %d bytes, more than %d", ErrFrameTooLarge, len(f.header), MaxFrameSize)
	}
	return f, nil
}

// Name returns "csv".
func (*CSV) Name() string { return "csv" }

// Header returns the header record, the columns' names and a newline. A
// writer may append it to a journal before its records, for the tools
// that read the journal as a CSV file; readers of the framing skip it.
func (f *CSV) Header() []byte { return bytes.Clone(f.header) }

// errCSVNoColumns is the error of a CSV that NewCSV did not make.
var errCSVNoColumns = errors.New("message: CSV framing has no columns (make it with NewCSV)")

// csvBuffers are the scratch buffers of a Marshal or an Unmarshal.
type csvBuffers struct {
	rec    []byte // a record written, or the fields read, unquoted
	cell   []byte // a cell's text, before it is quoted
	ends   []int  // the end of each field read in rec
	quoted []bool // whether each field read was quoted
}

var csvPool = sync.Pool{New: func() any { return new(csvBuffers) }}

func putCSVBuffers(b *csvBuffers) {
	if cap(b.rec) <= 64<<10 && cap(b.cell) <= 64<<10 { // Keep no huge buffers.
		csvPool.Put(b)
	}
}

// Marshal writes m to w as one record. m must be a struct or a pointer to
// one, whose fields have columns as CSV tells.
func (f *CSV) Marshal(m Message, w *bufio.Writer) error {
	if len(f.columns) == 0 {
		return errCSVNoColumns
	}
	t := f.typeOf(reflect.TypeOf(m))
	if t.err != nil {
		return fmt.Errorf("message: encode %T as CSV: %w", m, t.err)
	}
	v := reflect.ValueOf(m)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return fmt.Errorf("message: encode %T as CSV: nil pointer", m)
		}
		v = v.Elem()
	} else {
		// Fields are read through their addresses (see csvField.encode).
		p := reflect.New(v.Type())
		p.Elem().Set(v)
		v = p.Elem()
	}
	b := csvPool.Get().(*csvBuffers)
	defer putCSVBuffers(b)
	u := m.GetUUID()
	ack := u.Flags() == AckTxn
	rec := b.rec[:0]
	for i, fld := range t.cols {
		if i > 0 {
			rec = append(rec, ',')
		}
		switch {
		case i == f.uuid:
			rec = u.appendText(rec) // Never quoted.
		case fld == nil || ack:
		default:
			cell, null, err := fld.encode(v, b.cell[:0])
			b.cell = cell
			switch {
			case err != nil:
				return fmt.Errorf("message: encode %T as CSV: column %q (field %s): %w", m, f.columns[i], fld.name, err)
			case null:
			case len(cell) == 0 && (fld.ptr || fld.kind == csvText):
				rec = append(rec, `""`...) // Not null.
			default:
				rec = appendCSVField(rec, cell)
			}
		}
	}
	rec = append(rec, '\n')
	b.rec = rec
	if len(rec) > MaxFrameSize {
		return fmt.Errorf("%w: %T encodes as a CSV record of %d bytes, more than %d", ErrFrameTooLarge, m, len(rec), MaxFrameSize)
	}
	_, err := w.Write(rec)
	return err
}

// appendCSVField appends field to b, quoted where encoding/csv's Writer
// quotes it: where it must be (a comma, quote, CR or LF), and where
// readers might otherwise alter it (a leading space, which some trim;
// `\.`, which ends PostgreSQL's COPY).
func appendCSVField(b, field []byte) []byte {
	quote := string(field) == `\.`
	for _, c := range field {
		if c == ',' || c == '"' || c == '\r' || c == '\n' {
			quote = true
			break
		}
	}
	if !quote && len(field) > 0 {
		r, _ := utf8.DecodeRune(field)
		quote = unicode.IsSpace(r)
	}
	if !quote {
		return append(b, field...)
	}
	b = append(b, '"')
	for {
		i := bytes.IndexByte(field, '"')
		if i < 0 {
			break
		}
		b = append(b, field[:i+1]...)
		b = append(b, '"')
		field = field[i+1:]
	}
	b = append(b, field...)
	return append(b, '"')
}

// Unpack returns the next record of r, its line end included, with the
// header rows and blank lines before it. A record that fits in r's buffer
// is returned from the buffer, without copying. A final record without a
// line end is io.ErrUnexpectedEOF (it may still be being written), and so
// are a header or blank lines with no record after them yet. Unpack does
// not parse the fields: Unmarshal reports a malformed record, and the
// next record is readable all the same. A record longer than MaxFrameSize
// is skipped, with an error that wraps ErrFrameTooLarge.
func (f *CSV) Unpack(r *bufio.Reader) ([]byte, error) {
	var s csvSplit
	scanned := 0 // r's buffered bytes that s has scanned.
	for {
		buf, _ := r.Peek(r.Buffered())
		if end, ok := f.split(&s, buf, scanned); ok {
			r.Discard(end)
			if end > MaxFrameSize {
				return nil, csvTooLarge(int64(end))
			}
			return buf[:end], nil
		}
		scanned = len(buf)
		if scanned == r.Size() || scanned > MaxFrameSize {
			return f.unpackLong(r, &s)
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

// unpackLong reads a record longer than r's buffer, which s has scanned,
// into a new slice. It skips a record longer than MaxFrameSize, with an
// ErrFrameTooLarge error.
func (f *CSV) unpackLong(r *bufio.Reader, s *csvSplit) ([]byte, error) {
	buf, _ := r.Peek(r.Buffered())
	frame := append(make([]byte, 0, 2*len(buf)), buf...)
	r.Discard(len(buf))
	var skipped int64 // Once frame exceeds MaxFrameSize, the bytes dropped.
	for {
		if !s.skipping && len(frame) > MaxFrameSize {
			// The rest of the record is skipped: only its end matters.
			s.skipping, skipped, frame = true, int64(len(frame)), nil
		}
		if _, err := r.Peek(1); err != nil { // Read more.
			switch {
			case err != io.EOF:
				return nil, err
			case s.skipping:
				return nil, csvTooLarge(skipped)
			}
			return nil, io.ErrUnexpectedEOF // len(frame) > 0.
		}
		buf, _ := r.Peek(r.Buffered())
		if s.skipping {
			end, ok := f.split(s, buf, 0)
			if !ok {
				end = len(buf)
			}
			r.Discard(end)
			skipped += int64(end)
			if ok {
				return nil, csvTooLarge(skipped)
			}
			continue
		}
		from := len(frame)
		frame = append(frame, buf...)
		end, ok := f.split(s, frame, from)
		if !ok {
			r.Discard(len(buf))
			continue
		}
		r.Discard(end - from)
		if end > MaxFrameSize {
			return nil, csvTooLarge(int64(end))
		}
		return frame[:end], nil
	}
}

func csvTooLarge(n int64) error {
	return fmt.Errorf("%w: skipped a CSV record of %d bytes, more than %d", ErrFrameTooLarge, n, MaxFrameSize)
}

// csvState is where a scan of records is: in what part of a record.
type csvState uint8

const (
	csvFieldStart csvState = iota // at the start of a field (or record)
	csvUnquoted                   // in a field that is not quoted
	csvQuoted                     // in a quoted field
	csvQuote                      // after a quote in a quoted field: its end, or the first of two
	csvQuoteCR                    // after a quoted field's end and a CR
	csvBad                        // in a record whose quotes are malformed, which ends with its line
)

// csvSplit is the state of an Unpack.
type csvSplit struct {
	state    csvState
	recStart int  // the offset in the frame of the record being scanned
	skipping bool // the frame is too large: its first record end ends it
}

// split scans frame[from:], the bytes that follow those that s scanned,
// and returns the end of the frame: the end of its first record that is
// neither a blank line nor the header. It returns false if frame holds
// no such end.
//
// The quotes of a record are followed as encoding/csv's Reader follows
// them: a quote that starts a field opens it, two quotes within it are
// one, and a quote followed by a comma or a line end closes it. Any other
// quote is malformed, and the record then ends with its line. Unmarshal
// parses a record (csvNextField) to the same end.
func (f *CSV) split(s *csvSplit, frame []byte, from int) (int, bool) {
	for i := from; i < len(frame); i++ {
		// Skip what does not change the state, faster than csvStep.
		switch s.state {
		case csvQuoted:
			j := bytes.IndexByte(frame[i:], '"')
			if j < 0 {
				return 0, false
			}
			i += j
		case csvUnquoted:
			for i < len(frame) && !csvUnquotedEnds[frame[i]] {
				i++
			}
		case csvBad:
			j := bytes.IndexByte(frame[i:], '\n')
			if j < 0 {
				return 0, false
			}
			i += j
		}
		if i == len(frame) {
			break
		}
		var end bool
		s.state, end = csvStep(s.state, frame[i])
		if !end {
			continue
		}
		if s.skipping || !f.skippable(frame[s.recStart:i+1]) {
			return i + 1, true
		}
		s.recStart = i + 1
	}
	return 0, false
}

// csvUnquotedEnds are the bytes that change the state csvUnquoted.
var csvUnquotedEnds = [256]bool{',': true, '\n': true, '"': true}

// csvStep returns the state after c in state st, and whether c ended a
// record.
func csvStep(st csvState, c byte) (csvState, bool) {
	switch st {
	case csvFieldStart:
		switch c {
		case '"':
			return csvQuoted, false
		case ',':
			return csvFieldStart, false
		case '\n':
			return csvFieldStart, true
		}
		return csvUnquoted, false
	case csvUnquoted:
		switch c {
		case ',':
			return csvFieldStart, false
		case '\n':
			return csvFieldStart, true
		case '"':
			return csvBad, false
		}
		return csvUnquoted, false
	case csvQuoted:
		if c == '"' {
			return csvQuote, false
		}
		return csvQuoted, false
	case csvQuote:
		switch c {
		case '"':
			return csvQuoted, false
		case ',':
			return csvFieldStart, false
		case '\n':
			return csvFieldStart, true
		case '\r':
			return csvQuoteCR, false
		}
		return csvBad, false
	case csvQuoteCR:
		if c == '\n' {
			return csvFieldStart, true
		}
		return csvBad, false
	}
	if c == '\n' { // csvBad
		return csvFieldStart, true
	}
	return csvBad, false
}

// skippable tells whether rec, a whole record, is a blank line or the
// header.
func (f *CSV) skippable(rec []byte) bool {
	return csvBlank(rec) || (len(f.columns) > 0 && csvRecordIs(rec, f.columns))
}

// csvBlank tells whether rec is a blank line, which encoding/csv's Reader
// skips too.
func csvBlank(rec []byte) bool {
	return string(rec) == "\n" || string(rec) == "\r\n"
}

// csvRecordIs tells whether rec, a whole record, has the fields names.
// It compares the fields without unquoting them into a buffer, so that
// Unpack does not allocate.
func csvRecordIs(rec []byte, names []string) bool {
	i := 0
	for k, name := range names {
		raw, quoted, next, last, bad := csvNextField(rec, i)
		if bad != nil || last != (k == len(names)-1) {
			return false
		}
		if quoted {
			if !csvUnquotedEquals(raw, name) {
				return false
			}
		} else if string(raw) != name {
			return false
		}
		i = next
	}
	return i == len(rec)
}

// csvUnquotedEquals tells whether raw, the content of a quoted field, is
// s once its doubled quotes are undone.
func csvUnquotedEquals(raw []byte, s string) bool {
	n := 0
	for i := 0; i < len(raw); i++ {
		if raw[i] == '"' {
			i++ // The first of two: raw holds quotes only in pairs.
		}
		if n == len(s) || raw[i] != s[n] {
			return false
		}
		n++
	}
	return n == len(s)
}

// csvNextField scans the field that starts at data[i]. It returns the
// field's content, raw (a quoted field's without its quotes, and its
// doubled quotes not yet undone), whether it was quoted, the offset that
// follows the field and its delimiter, and whether that delimiter ended
// the record: a line end (LF or CRLF), or the end of data. The CR of a
// CRLF that ends an unquoted field is not part of the field.
//
// A malformed field returns csv.ErrQuote (a quoted field whose closing
// quote is followed by neither a comma nor a line end, or that is not
// closed) or csv.ErrBareQuote (a quote within a field that is not
// quoted), and as next the offset of the quote at fault.
func csvNextField(data []byte, i int) (raw []byte, quoted bool, next int, last bool, bad error) {
	if i < len(data) && data[i] == '"' {
		j := i + 1
		for {
			k := bytes.IndexByte(data[j:], '"')
			if k < 0 {
				return nil, true, i, false, csv.ErrQuote // Not closed.
			}
			j += k + 1
			if j < len(data) && data[j] == '"' {
				j++
				continue
			}
			break
		}
		raw = data[i+1 : j-1]
		switch {
		case j == len(data):
			return raw, true, j, true, nil
		case data[j] == ',':
			return raw, true, j + 1, false, nil
		case data[j] == '\n':
			return raw, true, j + 1, true, nil
		case data[j] == '\r' && (j+1 == len(data) || data[j+1] == '\n'):
			return raw, true, min(j+2, len(data)), true, nil
		}
		return nil, true, j - 1, false, csv.ErrQuote
	}
	j := i
	for j < len(data) && data[j] != ',' && data[j] != '\n' && data[j] != '"' {
		j++
	}
	switch {
	case j == len(data):
		return bytes.TrimSuffix(data[i:j], []byte{'\r'}), false, j, true, nil
	case data[j] == ',':
		return data[i:j], false, j + 1, false, nil
	case data[j] == '\n':
		return bytes.TrimSuffix(data[i:j], []byte{'\r'}), false, j + 1, true, nil
	}
	return nil, false, j, false, csv.ErrBareQuote
}

// Unmarshal decodes the record of frame, as returned by Unpack, into m,
// which must be a pointer to a struct whose fields have columns as CSV
// tells. It skips the header rows and blank lines before the record.
func (f *CSV) Unmarshal(frame []byte, m Message) error {
	if len(f.columns) == 0 {
		return errCSVNoColumns
	}
	t := f.typeOf(reflect.TypeOf(m))
	if t.err != nil {
		return fmt.Errorf("message: decode CSV record into %T: %w", m, t.err)
	}
	v := reflect.ValueOf(m)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("message: decode CSV record into %T: want a non-nil pointer to a struct", m)
	}
	v = v.Elem()
	b := csvPool.Get().(*csvBuffers)
	defer putCSVBuffers(b)
	if err := f.parseFrame(frame, b); err != nil {
		return err
	}
	if n := len(b.ends); n != len(f.columns) {
		return fmt.Errorf("message: CSV record has %d fields, want %d (%s): %w", n, len(f.columns), shortText(strings.Join(f.columns, ",")), csv.ErrFieldCount)
	}
	start := 0
	for i, fld := range t.cols {
		cell, quoted := b.rec[start:b.ends[i]], b.quoted[i]
		start = b.ends[i]
		if i == f.uuid {
			var u UUID
			if len(cell) > 0 {
				var err error
				if u, err = parseUUID(cell, true); err != nil {
					return fmt.Errorf("message: CSV column %q: %w", f.columns[i], err)
				}
			}
			m.SetUUID(u)
			continue
		}
		if fld == nil {
			continue
		}
		if err := fld.decode(v, cell, quoted); err != nil {
			return fmt.Errorf("message: CSV column %q (field %s %s) value %q: %w", f.columns[i], fld.name, fld.typ, shortText(cell), err)
		}
	}
	return nil
}

// parseFrame parses the record of frame, after any header rows and blank
// lines, into b: the unquoted contents of its fields in b.rec, which end
// at b.ends.
func (f *CSV) parseFrame(frame []byte, b *csvBuffers) error {
	for i := 0; ; {
		next, err := f.parseRecord(frame, i, b)
		if err != nil {
			return err
		}
		rec := frame[i:next]
		if !csvBlank(rec) && !f.isHeader(b) {
			if next != len(frame) {
				return fmt.Errorf("message: CSV frame holds more than one record: %d bytes follow the record at byte %d", len(frame)-next, i)
			}
			return nil
		}
		i = next
		if i == len(frame) {
			return fmt.Errorf("message: CSV frame of %d bytes holds no record, only the header or blank lines", len(frame))
		}
	}
}

// parseRecord parses the record at data[i:] into b, and returns the
// offset that follows it.
func (f *CSV) parseRecord(data []byte, i int, b *csvBuffers) (int, error) {
	b.rec, b.ends, b.quoted = b.rec[:0], b.ends[:0], b.quoted[:0]
	for {
		raw, quoted, next, last, bad := csvNextField(data, i)
		if bad != nil {
			col := len(b.ends)
			return 0, fmt.Errorf("message: CSV column %s at byte %d of the frame: %w", f.columnName(col), next, bad)
		}
		if quoted {
			for {
				j := bytes.IndexByte(raw, '"')
				if j < 0 {
					break
				}
				b.rec = append(b.rec, raw[:j+1]...) // One of the two.
				raw = raw[j+2:]
			}
		}
		b.rec = append(b.rec, raw...)
		b.ends = append(b.ends, len(b.rec))
		b.quoted = append(b.quoted, quoted)
		i = next
		if last {
			return i, nil
		}
	}
}

// isHeader tells whether the fields parsed into b are the columns' names.
func (f *CSV) isHeader(b *csvBuffers) bool {
	if len(b.ends) != len(f.columns) {
		return false
	}
	start := 0
	for i, name := range f.columns {
		if string(b.rec[start:b.ends[i]]) != name {
			return false
		}
		start = b.ends[i]
	}
	return true
}

// columnName names column i (from 0) for an error: its number, and its
// name if it was declared.
func (f *CSV) columnName(i int) string {
	if i < len(f.columns) {
		return fmt.Sprintf("%d (%q)", i+1, f.columns[i])
	}
	return fmt.Sprintf("%d (of %d declared)", i+1, len(f.columns))
}

// csvType is how the fields of a message type map to f's columns.
type csvType struct {
	// cols has the field of each column; nil for the UUID's column and
	// for columns without a field.
	cols []*csvField
	err  error // the type cannot be encoded
}

// csvField is a field of a message type, and how it is encoded.
type csvField struct {
	name  string       // the Go name, for errors
	index []int        // in the message's struct, through embedded ones
	typ   reflect.Type // the field's type
	kind  csvKind      // of typ, or of its element if ptr
	ptr   bool
}

// csvKind is how a field's value is encoded.
type csvKind uint8

const (
	csvString csvKind = iota
	csvBool
	csvInt
	csvUint
	csvFloat
	csvUUID // as csvText, without the interface calls
	csvText // by its encoding.TextMarshaler and TextUnmarshaler
)

var uuidType = reflect.TypeFor[UUID]()

// typeOf returns the mapping of message type rt, which it builds on first
// use and keeps, so that later messages take no reflection on types.
func (f *CSV) typeOf(rt reflect.Type) *csvType {
	if t, ok := f.types.Load(rt); ok {
		return t.(*csvType)
	}
	t := &csvType{cols: make([]*csvField, len(f.columns))}
	st := rt
	if st != nil && st.Kind() == reflect.Pointer {
		st = st.Elem()
	}
	if st == nil || st.Kind() != reflect.Struct {
		t.err = fmt.Errorf("the CSV framing needs a struct or a pointer to one, not %v", rt)
	} else {
		t.err = f.mapFields(t, st, nil)
	}
	actual, _ := f.types.LoadOrStore(rt, t)
	return actual.(*csvType)
}

// mapFields maps the fields of st, a struct at index in the message's
// struct, to their columns in t.
func (f *CSV) mapFields(t *csvType, st reflect.Type, index []int) error {
	for i := range st.NumField() {
		sf := st.Field(i)
		tag, tagged := sf.Tag.Lookup("csv")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" {
			continue
		}
		if opts != "" {
			return fmt.Errorf("field %s has a csv tag with options %q, which the CSV framing does not know", sf.Name, opts)
		}
		path := append(append([]int(nil), index...), i)
		if sf.Anonymous && !tagged {
			ft := sf.Type
			if ft.Kind() == reflect.Struct {
				if err := f.mapFields(t, ft, path); err != nil {
					return err
				}
				continue
			}
			if ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct {
				return fmt.Errorf("field %s embeds a pointer to a struct, whose fields the CSV framing does not promote (embed the struct, or tag the field csv:\"-\")", sf.Name)
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		col, err := f.column(name)
		if err != nil {
			return fmt.Errorf("field %s: %w", sf.Name, err)
		}
		if col == f.uuid {
			continue // Left to GetUUID and SetUUID.
		}
		if prev := t.cols[col]; prev != nil {
			return fmt.Errorf("fields %s and %s both have column %q", prev.name, sf.Name, f.columns[col])
		}
		fld := &csvField{name: sf.Name, index: path, typ: sf.Type}
		et := sf.Type
		if et.Kind() == reflect.Pointer {
			fld.ptr, et = true, et.Elem()
		}
		if fld.kind, err = csvKindOf(et); err != nil {
			return fmt.Errorf("field %s: %w", sf.Name, err)
		}
		t.cols[col] = fld
	}
	return nil
}

// column returns the index of the column of name: the column of that
// name, or else the one whose name equals it but for case.
func (f *CSV) column(name string) (int, error) {
	found := -1
	for i, c := range f.columns {
		if c == name {
			return i, nil
		}
		if strings.EqualFold(c, name) {
			if found >= 0 {
				return 0, fmt.Errorf("columns %q and %q both match %q but for case, and neither exactly", f.columns[found], c, name)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("no column is named %q, among %q (tag the field csv:\"-\" to leave it out)", name, f.columns)
	}
	return found, nil
}

// csvKindOf returns the kind of t, or an error if the framing cannot
// encode it.
func csvKindOf(t reflect.Type) (csvKind, error) {
	if t == uuidType {
		return csvUUID, nil
	}
	pt := reflect.PointerTo(t)
	marshals := t.Implements(textMarshalerType) || pt.Implements(textMarshalerType)
	unmarshals := pt.Implements(textUnmarshalerType)
	switch {
	case marshals && unmarshals:
		return csvText, nil
	case marshals || unmarshals:
		return 0, fmt.Errorf("type %v implements only one of encoding.TextMarshaler and encoding.TextUnmarshaler, so it would not read back as written", t)
	}
	switch t.Kind() {
	case reflect.String:
		return csvString, nil
	case reflect.Bool:
		return csvBool, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return csvInt, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return csvUint, nil
	case reflect.Float32, reflect.Float64:
		return csvFloat, nil
	}
	return 0, fmt.Errorf("type %v is not one that the CSV framing encodes (a string, bool, number, UUID, encoding.TextMarshaler, or a pointer to one)", t)
}

// encode appends the text of the field of v, an addressable struct, to
// b; or it tells that the field is null, a nil pointer.
func (fld *csvField) encode(v reflect.Value, b []byte) (text []byte, null bool, err error) {
	fv := v.FieldByIndex(fld.index)
	if fld.ptr {
		if fv.IsNil() {
			return b, true, nil
		}
		fv = fv.Elem()
	}
	switch fld.kind {
	case csvString:
		return append(b, fv.String()...), false, nil
	case csvBool:
		return strconv.AppendBool(b, fv.Bool()), false, nil
	case csvInt:
		return strconv.AppendInt(b, fv.Int(), 10), false, nil
	case csvUint:
		return strconv.AppendUint(b, fv.Uint(), 10), false, nil
	case csvFloat:
		return strconv.AppendFloat(b, fv.Float(), 'g', -1, fv.Type().Bits()), false, nil
	case csvUUID:
		return fv.Addr().Interface().(*UUID).appendText(b), false, nil
	}
	text, err = fv.Addr().Interface().(encoding.TextMarshaler).MarshalText()
	return append(b, text...), false, err
}

// decode sets the field of v, an addressable struct, to what cell holds;
// quoted tells whether the cell was quoted, which an empty string or text
// is, where null is not.
func (fld *csvField) decode(v reflect.Value, cell []byte, quoted bool) error {
	fv := v.FieldByIndex(fld.index)
	if len(cell) == 0 && !(quoted && (fld.kind == csvString || fld.kind == csvText)) {
		fv.SetZero() // Null.
		return nil
	}
	if fld.ptr {
		// A new value, rather than the one that fv may point to, which
		// something else may share.
		fv.Set(reflect.New(fld.typ.Elem()))
		fv = fv.Elem()
	}
	switch fld.kind {
	case csvString:
		fv.SetString(string(cell))
	case csvBool:
		x, err := strconv.ParseBool(string(cell))
		if err != nil {
			return numError(err)
		}
		fv.SetBool(x)
	case csvInt:
		x, err := strconv.ParseInt(string(cell), 10, fv.Type().Bits())
		if err != nil {
			return numError(err)
		}
		fv.SetInt(x)
	case csvUint:
		x, err := strconv.ParseUint(string(cell), 10, fv.Type().Bits())
		if err != nil {
			return numError(err)
		}
		fv.SetUint(x)
	case csvFloat:
		x, err := strconv.ParseFloat(string(cell), fv.Type().Bits())
		if err != nil {
			return numError(err)
		}
		fv.SetFloat(x)
	case csvUUID:
		u, err := parseUUID(cell, true)
		if err != nil {
			return err
		}
		*fv.Addr().Interface().(*UUID) = u
	default:
		return fv.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText(cell)
	}
	return nil
}

// numError returns the cause of a strconv error, strconv.ErrSyntax or
// ErrRange: the error that wraps it names the value already.
func numError(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		return ne.Err
	}
	return err
}
