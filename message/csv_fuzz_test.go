package message

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/csv"
	"errors"
	"io"
	"math"
	"reflect"
	"slices"
	"testing"
)

// These fuzz targets are in package message, to compare the records that
// the framing parses with encoding/csv's.

// csvFuzzMessage is a message of the fuzz targets' records, columns id, a
// and b.
type csvFuzzMessage struct {
	ID UUID `csv:"id"`
	A  string
	B  string
}

func (m *csvFuzzMessage) GetUUID() UUID                     { return m.ID }
func (m *csvFuzzMessage) SetUUID(u UUID)                    { m.ID = u }
func (m *csvFuzzMessage) NewAcknowledgement(string) Message { return new(csvFuzzMessage) }

var csvFuzzColumns = []string{"id", "a", "b"}

func newCSVFuzzFraming(t testing.TB, columns []string) *CSV {
	f, err := NewCSV(CSVConfig{Columns: columns, UUIDColumn: "id"})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// FuzzCSVUnpack splits arbitrary bytes into frames and decodes them. It
// checks that Unpack makes progress, that its frames are the input's
// bytes, each a record after any header rows and blank lines, that its
// records end where encoding/csv's do and hold the fields that
// encoding/csv reads, and that what decodes re-encodes the same.
func FuzzCSVUnpack(f *testing.F) {
	for _, s := range []string{
		"id,a,b\nc232ab00-9414-11ec-b3c8-9f6bdeced846,x,y\n",
		",\"a\nb\",\"c\"\"d\"\r\n\n,,\n",
		"\"id\",\"a\",\"b\"\r\n,1,2\n,\"unclosed\n,x,y\n",
		",a\"b,c\n,\"a\"b,c\n,1,2\n",
		"id,a,b\n\nid,a,b\n",
		",\"\",\"\"\"\"\n,a,b",
		"x,\"y\"\r\rz\n,1,2\n",
	} {
		f.Add([]byte(s))
	}
	fr := newCSVFuzzFraming(f, csvFuzzColumns)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int{16, 4096} {
			frames, rest := csvUnpackAll(t, fr, data, size)
			var ends []int // Where each frame ends in data.
			n := 0
			for _, frame := range frames {
				n += len(frame)
				ends = append(ends, n)
				checkCSVFrame(t, fr, frame)
			}
			if n+rest != len(data) {
				t.Fatalf("buffer %d: frames of %d bytes and %d left, of %d", size, n, rest, len(data))
			}
			if size == 4096 {
				checkCSVEnds(t, fr, data, ends, n)
			}
		}
	})
}

// csvUnpackAll unpacks data with f and a reader of buffer size. It checks
// that Unpack makes progress and ends with io.EOF, or with
// io.ErrUnexpectedEOF and the partial frame left unread, and returns the
// frames and the count of bytes left.
func csvUnpackAll(t *testing.T, f *CSV, data []byte, size int) (frames [][]byte, rest int) {
	r := bufio.NewReaderSize(bytes.NewReader(data), size)
	n := 0
	for {
		frame, err := f.Unpack(r)
		switch {
		case err == nil:
			if len(frame) == 0 {
				t.Fatal("Unpack returned an empty frame")
			}
			if !bytes.Equal(frame, data[n:n+len(frame)]) {
				t.Fatalf("frame %q at %d is not the input's %q", frame, n, data[n:min(len(data), n+len(frame))])
			}
			n += len(frame)
			frames = append(frames, bytes.Clone(frame))
			continue
		case err == io.EOF:
			if n != len(data) || r.Buffered() != 0 {
				t.Fatalf("io.EOF after %d bytes of %d, %d buffered", n, len(data), r.Buffered())
			}
			return frames, 0
		case err == io.ErrUnexpectedEOF:
			if n == len(data) {
				t.Fatalf("io.ErrUnexpectedEOF after all %d bytes", n)
			}
			if len(data)-n < size && r.Buffered() != len(data)-n {
				t.Fatalf("io.ErrUnexpectedEOF with %d bytes left, of which %d buffered", len(data)-n, r.Buffered())
			}
			return frames, len(data) - n
		default:
			t.Fatalf("Unpack: %v", err)
		}
	}
}

// checkCSVFrame checks that frame is records that parse, or that its last
// record is malformed, and that they are those that encoding/csv reads.
// It checks that what decodes re-encodes, and decodes the same.
func checkCSVFrame(t *testing.T, f *CSV, frame []byte) {
	if frame[len(frame)-1] != '\n' {
		t.Fatalf("frame %q has no line end", frame)
	}
	var b csvBuffers
	var records [][]string // Those that are not blank lines.
	var parseErr error
	for i := 0; i < len(frame); {
		next, err := f.parseRecord(frame, i, &b)
		if err != nil {
			parseErr = err
			break
		}
		if next <= i {
			t.Fatalf("parseRecord of %q at %d made no progress", frame, i)
		}
		rec := frame[i:next]
		i = next
		if !csvBlank(rec) {
			records = append(records, csvFields(&b))
		}
		if skip := csvBlank(rec) || f.isHeader(&b); skip != (i < len(frame)) {
			t.Fatalf("frame %q: record %q at %d ends the frame: %v, but it is a header or blank line: %v", frame, rec, i-len(rec), i == len(frame), skip)
		}
	}
	if parseErr != nil && !errors.Is(parseErr, csv.ErrQuote) && !errors.Is(parseErr, csv.ErrBareQuote) {
		t.Fatalf("frame %q: parse error %v is not of quotes", frame, parseErr)
	}

	// encoding/csv reads CR LF within quotes as LF: compare without CRs.
	if !bytes.Contains(frame, []byte{'\r'}) {
		r := csv.NewReader(bytes.NewReader(frame))
		r.FieldsPerRecord = -1
		var want [][]string
		var wantErr error
		for {
			rec, err := r.Read()
			if err == io.EOF {
				break
			} else if err != nil {
				wantErr = err
				break
			}
			want = append(want, rec)
		}
		switch {
		case (parseErr == nil) != (wantErr == nil):
			t.Fatalf("frame %q: parse error %v; encoding/csv's %v", frame, parseErr, wantErr)
		case parseErr == nil && !reflect.DeepEqual(records, want):
			t.Fatalf("frame %q parses as %q; encoding/csv reads %q", frame, records, want)
		case parseErr == nil && r.InputOffset() != int64(len(frame)):
			t.Fatalf("frame %q: encoding/csv read %d bytes of it", frame, r.InputOffset())
		}
	}

	var m csvFuzzMessage
	if err := f.Unmarshal(frame, &m); err != nil {
		if parseErr != nil && !errors.Is(err, parseErr) && err.Error() != parseErr.Error() {
			t.Fatalf("frame %q: Unmarshal error %v, parse error %v", frame, err, parseErr)
		}
		return
	}
	if parseErr != nil {
		t.Fatalf("frame %q: Unmarshal succeeded, parse failed: %v", frame, parseErr)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := f.Marshal(&m, w); err != nil {
		t.Fatalf("Marshal of %+v, decoded from %q: %v", m, frame, err)
	}
	w.Flush()
	frames, rest := csvUnpackAll(t, f, buf.Bytes(), 4096)
	if rest != 0 || len(frames) != 1 {
		t.Fatalf("%+v re-marshalled as %q, which splits as %q", m, buf.Bytes(), frames)
	}
	var m2 csvFuzzMessage
	if err := f.Unmarshal(frames[0], &m2); err != nil || m2 != m {
		t.Fatalf("%q decoded as %+v, re-marshalled as %q, decoded as %+v, %v", frame, m, frames[0], m2, err)
	}
}

// csvFields returns the fields parsed into b.
func csvFields(b *csvBuffers) []string {
	var fields []string
	start := 0
	for _, end := range b.ends {
		fields = append(fields, string(b.rec[start:end]))
		start = end
	}
	return fields
}

// checkCSVEnds checks that frames end (at ends) where encoding/csv's
// records end, when it reads data without error: at each of its records
// in the n bytes of the frames that is not the header, and only there.
func checkCSVEnds(t *testing.T, f *CSV, data []byte, ends []int, n int) {
	if bytes.Contains(data, []byte{'\r'}) {
		return
	}
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1
	var want []int
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		} else if err != nil {
			return // Its records end otherwise after an error.
		}
		if end := int(r.InputOffset()); end <= n && !slices.Equal(rec, f.columns) {
			want = append(want, end)
		}
	}
	if !slices.Equal(ends, want) {
		t.Fatalf("frames of %q end at %v; encoding/csv's records at %v", data, ends, want)
	}
}

// csvFuzzRound is a message of FuzzCSVRoundTrip, with a field of each
// kind.
type csvFuzzRound struct {
	ID  UUID `csv:"id"`
	S   string
	PS  *string
	I   int64
	I8  int8
	U   uint64
	U16 uint16
	F   float64
	F32 float32
	B   bool
	PB  *bool
	P   *UUID
	T   []byte `csv:"-"`
}

func (m *csvFuzzRound) GetUUID() UUID                     { return m.ID }
func (m *csvFuzzRound) SetUUID(u UUID)                    { m.ID = u }
func (m *csvFuzzRound) NewAcknowledgement(string) Message { return new(csvFuzzRound) }

// FuzzCSVRoundTrip writes messages of arbitrary field values, and checks
// that they read back equal: in a stream, after a header, with readers of
// a small buffer and of a large one.
func FuzzCSVRoundTrip(f *testing.F) {
	f.Add("plain", "", int64(0), uint64(0), 0.0, false, true, uint16(1))
	f.Add("a,\"b\"\r\nc", " lead", int64(math.MinInt64), uint64(math.MaxUint64), math.Inf(1), true, false, uint16(2))
	f.Add("\xff\xfe", "id,s", int64(-129), uint64(1<<63), math.NaN(), true, true, uint16(0))
	f.Add(`\.`, "\n", int64(127), uint64(65535), -0.0, false, true, uint16(5))
	fr := newCSVFuzzFraming(f, []string{"id", "s", "ps", "i", "i8", "u", "u16", "f", "f32", "b", "pb", "p", "extra"})
	f.Fuzz(func(t *testing.T, s, ps string, i int64, u uint64, x float64, flag, ptrs bool, flags uint16) {
		var producer ProducerID
		binary.BigEndian.PutUint32(producer[:], uint32(u))
		id := BuildUUID(producer, Clock(uint64(i)), Flags(flags%3))
		m := &csvFuzzRound{ID: id, S: s, I: i, I8: int8(i), U: u, U16: uint16(u), F: x, F32: float32(x), B: flag}
		if ptrs {
			m.PS, m.PB, m.P = &ps, &flag, &id
		}
		other := &csvFuzzRound{S: ps, PS: &s}
		other.SetUUID(BuildUUID(producer, 1, OutsideTxn))
		var buf bytes.Buffer
		buf.Write(fr.Header())
		w := bufio.NewWriter(&buf)
		for _, m := range []*csvFuzzRound{m, other, m} {
			if err := fr.Marshal(m, w); err != nil {
				t.Fatalf("Marshal(%+v): %v", m, err)
			}
		}
		w.Flush()
		want := m
		if id.Flags() == AckTxn {
			want = &csvFuzzRound{ID: id} // Written empty.
		}
		for _, size := range []int{16, 4096} {
			frames, rest := csvUnpackAll(t, fr, buf.Bytes(), size)
			if rest != 0 || len(frames) != 3 {
				t.Fatalf("buffer %d: %q splits as %q and %d bytes", size, buf.Bytes(), frames, rest)
			}
			for k, want := range []*csvFuzzRound{want, other, want} {
				got := new(csvFuzzRound)
				if err := fr.Unmarshal(frames[k], got); err != nil {
					t.Fatalf("buffer %d: Unmarshal(%q): %v", size, frames[k], err)
				}
				if !csvFuzzEqual(got, want) {
					t.Fatalf("buffer %d: %q decoded as %+v, want %+v", size, frames[k], got, want)
				}
			}
		}
	})
}

// csvFuzzEqual tells whether a and b are equal, taking NaNs as equal.
func csvFuzzEqual(a, b *csvFuzzRound) bool {
	a2, b2 := *a, *b
	if math.IsNaN(a2.F) && math.IsNaN(b2.F) {
		a2.F, b2.F = 0, 0
	}
	if math.IsNaN(float64(a2.F32)) && math.IsNaN(float64(b2.F32)) {
		a2.F32, b2.F32 = 0, 0
	}
	return reflect.DeepEqual(a2, b2)
}
