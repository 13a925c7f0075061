package message_test

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
)

// csvEvent is a message of the CSV framing's tests, with a field of each
// kind that the framing encodes.
type csvEvent struct {
	UUID   message.UUID  `csv:"uuid"`
	Kind   string        // Untagged: column "kind", but for case.
	User   string        `csv:"user"`
	Count  int64         `csv:"count"`
	Small  int8          `csv:"small"`
	Size   uint32        `csv:"size"`
	Ratio  float64       `csv:"ratio"`
	F32    float32       `csv:"f32"`
	OK     bool          `csv:"ok"`
	Score  *float64      `csv:"score"`
	Parent *message.UUID `csv:"parent"`
	At     time.Time     `csv:"at"`
	Note   *string       `csv:"note"`
	Tags   []string      `csv:"-"` // Not in the record.
	cache  string        // Unexported: not in the record.
}

func (e *csvEvent) GetUUID() message.UUID                     { return e.UUID }
func (e *csvEvent) SetUUID(u message.UUID)                    { e.UUID = u }
func (e *csvEvent) NewAcknowledgement(string) message.Message { return new(csvEvent) }

// csvColumns are the columns of csvEvent's records. "extra" has no field.
var csvColumns = []string{"uuid", "kind", "user", "count", "small", "size", "ratio", "f32", "ok", "score", "parent", "at", "note", "extra"}

func newCSVFraming(t testing.TB) *message.CSV {
	t.Helper()
	f, err := message.NewCSV(message.CSVConfig{Columns: csvColumns})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func ptr[T any](v T) *T { return &v }

// csvEvents returns messages of the tests, each with its UUID.
func csvEvents() []message.Message {
	p := message.NewProducerID()
	c := message.NewClock(time.Now())
	parent := message.BuildUUID(p, c, message.OutsideTxn)
	at := time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.UTC)
	var out []message.Message
	for i, m := range []*csvEvent{
		{Kind: "click", User: "u-1", Count: 1, Small: -128, Size: math.MaxUint32, Ratio: 0.1, F32: 1.5, OK: true, At: at},
		{}, // All zero values.
		{Kind: `say "hi", then leave`, User: "line one\nline two\r\nline three\rend", Count: math.MinInt64},
		{Kind: "ünïcödé ✓ 日本語", User: " leading space", Note: ptr(""), Score: ptr(0.0)},
		{Kind: `\.`, User: "\"", Note: ptr(`"quoted"`), Score: ptr(math.Inf(-1)), Parent: &parent},
		{Kind: ",", User: "\n", Ratio: math.SmallestNonzeroFloat64, F32: math.MaxFloat32},
		{Kind: strings.Repeat("long,\"field\"\n", 400), User: "u-2", Count: 1 << 40},
		{Kind: "uuid", User: "user"}, // Cells that are column names.
	} {
		c.Tick()
		m.SetUUID(message.BuildUUID(p, c, message.Flags(i%2)))
		out = append(out, m)
	}
	// An acknowledgement, and a message without a UUID.
	c.Tick()
	ack := new(csvEvent).NewAcknowledgement("j")
	ack.SetUUID(message.BuildUUID(p, c, message.AckTxn))
	return append(out, ack, &csvEvent{Kind: "no uuid"})
}

// unpackCSV reads frames of f from data with a reader of buffer size,
// and decodes each into a csvEvent, until Unpack fails.
func unpackCSV(t *testing.T, f *message.CSV, data []byte, size int) (msgs []*csvEvent, frames [][]byte, errs []error, end error) {
	t.Helper()
	r := bufio.NewReaderSize(bytes.NewReader(data), size)
	for {
		frame, err := f.Unpack(r)
		if errors.Is(err, message.ErrFrameTooLarge) {
			errs = append(errs, err)
			continue
		} else if err != nil {
			return msgs, frames, errs, err
		}
		frames = append(frames, bytes.Clone(frame))
		m := new(csvEvent)
		if err := f.Unmarshal(frame, m); err != nil {
			errs = append(errs, err)
			continue
		}
		msgs = append(msgs, m)
	}
}

func TestCSVRoundTrip(t *testing.T) {
	f := newCSVFraming(t)
	msgs := csvEvents()
	data := marshalAll(t, f, msgs)
	for _, size := range []int{16, 64, 4096} {
		t.Run("buffer"+strconv.Itoa(size), func(t *testing.T) {
			got, frames, errs, end := unpackCSV(t, f, data, size)
			if end != io.EOF || len(errs) != 0 {
				t.Fatalf("reading ended with %v, errors %v", end, errs)
			}
			if len(got) != len(msgs) {
				t.Fatalf("read %d messages, want %d", len(got), len(msgs))
			}
			for i, want := range msgs {
				if !reflect.DeepEqual(got[i], want) {
					t.Errorf("message %d decoded as %+v, want %+v", i, got[i], want)
				}
			}
			if n := len(bytes.Join(frames, nil)); n != len(data) {
				t.Errorf("frames have %d bytes in all, want %d", n, len(data))
			}
		})
	}
}

// The framing writes what encoding/csv's Writer writes, and encoding/csv
// reads it; but for CR LF within quotes, which encoding/csv reads as LF,
// and for an empty string that is not null (quoted: "").
func TestCSVMarshalLikeEncodingCSV(t *testing.T) {
	f := newCSVFraming(t)
	for i, m := range csvEvents() {
		got := marshalAll(t, f, []message.Message{m})
		records, err := csv.NewReader(bytes.NewReader(got)).ReadAll()
		if err != nil || len(records) != 1 || len(records[0]) != len(csvColumns) {
			t.Fatalf("message %d: encoding/csv reads %q as %q, %v", i, got, records, err)
		}
		var want bytes.Buffer
		w := csv.NewWriter(&want)
		w.Write(records[0])
		w.Flush()
		e := m.(*csvEvent)
		if e.Note != nil && *e.Note == "" {
			if !bytes.HasSuffix(got, []byte(`,"",`+"\n")) {
				t.Errorf("message %d: Marshal wrote %q, with an empty note that is not quoted", i, got)
			}
			continue
		}
		if !strings.Contains(e.User, "\r\n") && want.String() != string(got) {
			t.Errorf("message %d: Marshal wrote\n%q, encoding/csv writes\n%q", i, got, want.String())
		}
	}
	u := message.BuildUUID(message.ProducerID{1, 2, 3, 4, 5, 6}, 1<<20, message.OutsideTxn)
	got := marshalAll(t, f, []message.Message{&csvEvent{UUID: u, Kind: `a "b"`, User: "x,y", Count: -3,
		Ratio: 2.5e-8, OK: true, Score: ptr(1.0), At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}})
	want := u.String() + `,"a ""b""","x,y",-3,0,0,2.5e-08,0,true,1,,2025-01-02T03:04:05Z,,` + "\n"
	if string(got) != want {
		t.Errorf("Marshal wrote\n%q, want\n%q", got, want)
	}
}

// An acknowledgement is a record whose only non-empty cell is its UUID,
// and reads back as an empty message with that UUID.
func TestCSVAcknowledgement(t *testing.T) {
	f := newCSVFraming(t)
	ack := new(csvEvent).NewAcknowledgement("j")
	u := message.BuildUUID(message.NewProducerID(), 99, message.AckTxn)
	ack.SetUUID(u)
	frame := marshalAll(t, f, []message.Message{ack})
	if want := u.String() + strings.Repeat(",", len(csvColumns)-1) + "\n"; string(frame) != want {
		t.Fatalf("acknowledgement written as %q, want %q", frame, want)
	}
	got := new(csvEvent)
	if err := f.Unmarshal(frame, got); err != nil || !reflect.DeepEqual(got, &csvEvent{UUID: u}) {
		t.Errorf("acknowledgement read as %+v, %v", got, err)
	}
}

func TestCSVHeader(t *testing.T) {
	f := newCSVFraming(t)
	header := strings.Join(csvColumns, ",") + "\n"
	if got := string(f.Header()); got != header {
		t.Fatalf("Header() = %q, want %q", got, header)
	}
	msgs := csvEvents()[:3]
	rec := func(i int) string { return string(marshalAll(t, f, msgs[i:i+1])) }
	quotedHeader := `"` + strings.Join(csvColumns, `","`) + `"` + "\r\n"
	for _, tc := range []struct {
		name   string
		data   string
		frames []string // The frames, each ending with a record.
	}{
		{"header first", header + rec(0) + rec(1), []string{header + rec(0), rec(1)}},
		{"header between", rec(0) + header + rec(1) + rec(2), []string{rec(0), header + rec(1), rec(2)}},
		{"headers and blank lines", "\n" + header + "\r\n" + header + rec(0) + "\n\n" + rec(1),
			[]string{"\n" + header + "\r\n" + header + rec(0), "\n\n" + rec(1)}},
		{"quoted header with CRLF", quotedHeader + rec(0), []string{quotedHeader + rec(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{16, 4096} {
				got, frames, errs, end := unpackCSV(t, f, []byte(tc.data), size)
				if end != io.EOF || len(errs) != 0 {
					t.Fatalf("buffer %d: reading ended with %v, errors %v", size, end, errs)
				}
				if len(frames) != len(tc.frames) {
					t.Fatalf("buffer %d: frames %q, want %q", size, frames, tc.frames)
				}
				for i, frame := range frames {
					if string(frame) != tc.frames[i] {
						t.Errorf("buffer %d: frame %d = %q, want %q", size, i, frame, tc.frames[i])
					}
				}
				for i, m := range got {
					if m.GetUUID() == (message.UUID{}) || !reflect.DeepEqual(m, msgs[slicesIndex(msgs, m.GetUUID())]) {
						t.Errorf("buffer %d: message %d = %+v", size, i, m)
					}
				}
			}
		})
	}

	// A header, or blank lines, with no record after them yet are part of
	// the frame to come.
	for _, data := range []string{header, "\n", header + "\n" + header} {
		r := bufio.NewReader(strings.NewReader(data))
		if frame, err := f.Unpack(r); err != io.ErrUnexpectedEOF || r.Buffered() != len(data) {
			t.Errorf("Unpack of %q = %q, %v; want io.ErrUnexpectedEOF with nothing read", data, frame, err)
		}
	}
	// Unmarshal wants the record.
	if err := f.Unmarshal([]byte(header), new(csvEvent)); err == nil || !strings.Contains(err.Error(), "holds no record") {
		t.Errorf("Unmarshal of a header alone: %v", err)
	}
}

// slicesIndex returns the index of the message of UUID u in msgs.
func slicesIndex(msgs []message.Message, u message.UUID) int {
	for i, m := range msgs {
		if m.GetUUID() == u {
			return i
		}
	}
	return -1
}

// A bad record in the middle of a stream is reported, saying what is
// wrong where, and the record after it reads as usual.
func TestCSVBadRecord(t *testing.T) {
	f := newCSVFraming(t)
	good := marshalAll(t, f, csvEvents()[:1])
	u := csvEvents()[0].GetUUID().String()
	cells := func(cells ...string) []string {
		row := make([]string, len(csvColumns))
		row[0] = u
		copy(row[1:], cells)
		return row
	}
	row := func(cells []string) string { return strings.Join(cells, ",") + "\n" }
	for _, tc := range []struct {
		name, record string
		want         string
		is           error
	}{
		{"bare quote", row(cells(`a"b`)), `column 2 ("kind") at byte 38 of the frame: bare " in non-quoted-field`, csv.ErrBareQuote},
		{"text after a closing quote", row(cells(`"ab"c`)), `column 2 ("kind") at byte 40 of the frame: extraneous or missing " in quoted-field`, csv.ErrQuote},
		{"quote after a multi-line field", row(cells("\"a\nb\"x")), `column 2 ("kind") at byte 41`, csv.ErrQuote},
		{"bare quote in a later column", row(cells("k", "u", `1"`)), `column 4 ("count")`, csv.ErrBareQuote},
		{"too few fields", u + ",x,y\n", "CSV record has 3 fields, want 14", csv.ErrFieldCount},
		{"too many fields", row(append(cells(), "more")), "CSV record has 15 fields, want 14", csv.ErrFieldCount},
		{"not an integer", row(cells("k", "u", "many")), `column "count" (field Count int64) value "many": invalid syntax`, strconv.ErrSyntax},
		{"integer out of range", row(cells("k", "u", "1", "128")), `column "small" (field Small int8) value "128": value out of range`, strconv.ErrRange},
		{"negative unsigned", row(cells("k", "u", "1", "1", "-1")), `column "size" (field Size uint32) value "-1": invalid syntax`, strconv.ErrSyntax},
		{"not a float", row(cells("k", "u", "1", "1", "1", "1.5.1")), `column "ratio" (field Ratio float64) value "1.5.1": invalid syntax`, strconv.ErrSyntax},
		{"not a bool", row(cells("k", "u", "1", "1", "1", "1", "1", "yes")), `column "ok" (field OK bool) value "yes": invalid syntax`, strconv.ErrSyntax},
		{"bad pointer", row(cells("k", "u", "1", "1", "1", "1", "1", "true", "x")), `column "score" (field Score *float64) value "x"`, strconv.ErrSyntax},
		{"bad UUID field", row(cells("k", "u", "1", "1", "1", "1", "1", "true", "1", "c232ab00-9414-41ec-b3c8-9f6bdeced846")), `column "parent" (field Parent *message.UUID) value "c232ab00-9414-41ec-b3c8-9f6bdeced846": message: UUID "c232ab00-9414-41ec-b3c8-9f6bdeced846" is version 4, want 1`, nil},
		{"bad time", row(cells("k", "u", "1", "1", "1", "1", "1", "true", "1", "", "yesterday")), `column "at" (field At time.Time) value "yesterday"`, nil},
		{"bad UUID", "not-a-uuid" + row(cells())[len(u):], `column "uuid": message: UUID "not-a-uuid" has length 10, want 36`, nil},
		{"long value", row(cells("k", "u", strings.Repeat("9", 100))), `value "9999999999999999999999999999999999999999...": value out of range`, strconv.ErrRange},
		{"line of garbage", "hello world\n", "CSV record has 1 fields, want 14", csv.ErrFieldCount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{16, 4096} {
				data := append(append(bytes.Clone(good), tc.record...), good...)
				got, frames, errs, end := unpackCSV(t, f, data, size)
				if end != io.EOF || len(frames) != 3 || len(got) != 2 || len(errs) != 1 {
					t.Fatalf("buffer %d: %d frames (%q), %d messages, errors %v, end %v; want the bad record between two good ones",
						size, len(frames), frames, len(got), errs, end)
				}
				if string(frames[1]) != tc.record {
					t.Errorf("buffer %d: bad frame %q, want %q", size, frames[1], tc.record)
				}
				if err := errs[0]; !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
					t.Errorf("buffer %d: error %q, want one containing %q (and wrapping %v)", size, err, tc.want, tc.is)
				}
			}
		})
	}
}

// Bad records through a Decoder are reported with their journal and
// offset, or skipped, and reading goes on, as for the other framings.
func TestCSVThroughDecoder(t *testing.T) {
	cl := brokertest.New(t)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "events/csv")
	f := newCSVFraming(t)
	fj := framedJournal{framing: f, journal: "events/csv", name: f.Name(),
		newMsg: func() message.Message { return new(csvEvent) },
		body:   func(m message.Message) string { return m.(*csvEvent).Kind }}
	var content bytes.Buffer
	w := bufio.NewWriter(&content)
	offset := func() int64 { return int64(content.Len() + w.Buffered()) }
	producer, clock := message.NewProducerID(), message.NewClock(time.Now())
	begin := offset()
	w.Write(f.Header())
	for i := range 500 {
		if i == 250 { // A second header, as a second writer might append.
			w.Write(f.Header())
		}
		body := "message " + strconv.Itoa(i) + ",\n\"quoted\""
		clock.Tick()
		m := &csvEvent{Kind: body, Count: int64(i)}
		m.SetUUID(message.BuildUUID(producer, clock, message.OutsideTxn))
		if err := f.Marshal(m, w); err != nil {
			t.Fatal(err)
		}
		fj.bodies = append(fj.bodies, body)
		fj.begins = append(fj.begins, begin)
		fj.ends = append(fj.ends, offset())
		begin = offset()
		if i%97 == 96 {
			fj.bad = append(fj.bad, offset())
			if len(fj.bad)%2 == 0 {
				w.WriteString("a,\"b\"c,d\n") // Malformed quotes.
			} else {
				w.WriteString("x,y\n") // Too few fields.
			}
			begin = offset()
		}
	}
	w.Flush()
	ctx := t.Context()
	if _, err := c.Append(ctx, client.AppendRequest{Journal: fj.journal}, bytes.NewReader(content.Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, decoders := range []int{1, 2} {
		for _, skip := range []bool{true, false} {
			t.Run(fmt.Sprintf("decoders=%d/skip=%v", decoders, skip), func(t *testing.T) {
				readFramedJournal(t, c, fj, decoders, skip)
			})
		}
	}
}

func TestCSVLongRecord(t *testing.T) {
	f := newCSVFraming(t)
	msgs := []message.Message{
		&csvEvent{Kind: strings.Repeat("x,\n\"", 1<<18), User: "a"},
		&csvEvent{Kind: "short"},
		&csvEvent{Kind: strings.Repeat("y", 1<<20), User: "b"},
	}
	data := marshalAll(t, f, msgs)
	for _, size := range []int{16, 4096} {
		got, _, errs, end := unpackCSV(t, f, data, size)
		if end != io.EOF || len(errs) != 0 || len(got) != len(msgs) {
			t.Fatalf("buffer %d: %d messages, errors %v, end %v", size, len(got), errs, end)
		}
		for i := range msgs {
			if !reflect.DeepEqual(got[i], msgs[i]) {
				t.Errorf("buffer %d: message %d differs", size, i)
			}
		}
	}
}

// repeatReader reads n copies of a byte.
type repeatReader struct {
	c byte
	n int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), r.n)]
	for i := range p {
		p[i] = r.c
	}
	r.n -= len(p)
	return len(p), nil
}

// A record longer than MaxFrameSize is skipped, to its end (quotes
// followed), and the record after it reads as usual.
func TestCSVRecordTooLarge(t *testing.T) {
	f := newCSVFraming(t)
	good := marshalAll(t, f, csvEvents()[:1])
	u := csvEvents()[0].GetUUID().String()
	// Lines within the quoted field that would be records if the field's
	// quotes were not followed.
	fake := strings.Repeat(u+strings.Repeat(",", len(csvColumns)-1)+"\n", 1000)
	for _, tc := range []struct {
		name   string
		prefix string
		n      int
		suffix string
	}{
		{"unquoted", u + ",", message.MaxFrameSize, strings.Repeat(",", len(csvColumns)-2) + "\n"},
		{"quoted, with newlines", u + `,"` + fake, message.MaxFrameSize, fake + `"` + strings.Repeat(",", len(csvColumns)-2) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := len(tc.prefix) + tc.n + len(tc.suffix)
			r := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(good), strings.NewReader(tc.prefix),
				&repeatReader{c: 'x', n: tc.n}, strings.NewReader(tc.suffix), bytes.NewReader(good)), 64<<10)
			var msgs int
			var tooLarge []error
			for {
				frame, err := f.Unpack(r)
				if err == io.EOF {
					break
				} else if errors.Is(err, message.ErrFrameTooLarge) {
					tooLarge = append(tooLarge, err)
					continue
				} else if err != nil {
					t.Fatal(err)
				}
				if err := f.Unmarshal(frame, new(csvEvent)); err != nil {
					t.Fatalf("frame %d after %d too large: %v", msgs, len(tooLarge), err)
				}
				msgs++
			}
			want := fmt.Sprintf("skipped a CSV record of %d bytes, more than %d", size, message.MaxFrameSize)
			if msgs != 2 || len(tooLarge) != 1 || !strings.Contains(tooLarge[0].Error(), want) {
				t.Errorf("read %d messages and errors %v; want 2, and one error containing %q", msgs, tooLarge, want)
			}
		})
	}
}

func TestCSVTruncatedRecord(t *testing.T) {
	f := newCSVFraming(t)
	msgs := csvEvents()
	first := marshalAll(t, f, msgs[:1])
	for _, second := range [][]byte{
		marshalAll(t, f, msgs[2:3]), // Quoted fields with newlines and CR LF.
		append(f.Header(), marshalAll(t, f, msgs[1:2])...),
		[]byte("\r\n" + msgs[0].GetUUID().String() + ",\"a\r\nb\",c" + strings.Repeat(",", len(csvColumns)-3) + "\r\n"), // CR LF line ends.
	} {
		for cut := 1; cut < len(second); cut++ {
			g := new(growingReader)
			g.buf.Write(first)
			g.buf.Write(second[:cut])
			r := bufio.NewReaderSize(g, 4096)
			if _, err := f.Unpack(r); err != nil {
				t.Fatalf("cut %d: Unpack of the whole record: %v", cut, err)
			}
			if frame, err := f.Unpack(r); err != io.ErrUnexpectedEOF {
				t.Fatalf("cut %d of %q: Unpack of a truncated record = %q, %v; want io.ErrUnexpectedEOF", cut, second, frame, err)
			}
			if r.Buffered() != cut {
				t.Fatalf("cut %d: %d bytes left buffered", cut, r.Buffered())
			}
			g.buf.Write(second[cut:])
			frame, err := f.Unpack(r)
			if err != nil || !bytes.Equal(frame, second) {
				t.Fatalf("cut %d: Unpack once complete = %q, %v; want %q", cut, frame, err, second)
			}
			if _, err := f.Unpack(r); err != io.EOF {
				t.Fatalf("cut %d: Unpack at the end: %v, want io.EOF", cut, err)
			}
		}
	}
	// Larger than the buffer, and cut.
	long := marshalAll(t, f, msgs[6:7])
	r := bufio.NewReaderSize(bytes.NewReader(long[:len(long)-1]), 16)
	if frame, err := f.Unpack(r); err != io.ErrUnexpectedEOF {
		t.Errorf("Unpack of a long truncated record = %q, %v; want io.ErrUnexpectedEOF", frame, err)
	}
}

func TestCSVReaderError(t *testing.T) {
	f := newCSVFraming(t)
	boom := errors.New("boom")
	data := marshalAll(t, f, csvEvents()[6:7])
	for _, size := range []int{16, 4096} {
		for _, n := range []int{0, 5, len(data) - 1} {
			r := bufio.NewReaderSize(&errReader{data: data[:n], err: boom}, size)
			if frame, err := f.Unpack(r); err != boom {
				t.Errorf("buffer %d: Unpack of %d bytes then an error = %q, %v; want %v", size, n, frame, err, boom)
			}
		}
	}
}

func TestCSVUnpackDoesNotAllocate(t *testing.T) {
	f := newCSVFraming(t)
	frame := marshalAll(t, f, csvEvents()[2:3])
	data := append(f.Header(), bytes.Repeat(frame, 1000)...)
	br := bytes.NewReader(data)
	r := bufio.NewReaderSize(br, 64<<10)
	allocs := testing.AllocsPerRun(20, func() {
		br.Reset(data)
		r.Reset(br)
		for range 1000 {
			if _, err := f.Unpack(r); err != nil {
				t.Fatal(err)
			}
		}
	})
	// AllocsPerRun counts the whole process's allocations, so another
	// goroutine's may show; an Unpack that allocated would show 1000.
	if allocs >= 10 {
		t.Errorf("Unpack of 1000 records allocated %v times", allocs)
	}
}

// An empty cell that is not quoted is null; a quoted one is empty text
// for strings and text types, and null for others.
func TestCSVNull(t *testing.T) {
	f, err := message.NewCSV(message.CSVConfig{Columns: []string{"uuid", "s", "ps", "n", "pn", "t", "pt"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m      csvNullable
		record string
	}{
		{csvNullable{}, `,,,0,,"",`},
		{csvNullable{PS: ptr(""), PN: ptr(0), T: csvText{"x"}, PT: &csvText{}}, `,,"",0,0,x,""`},
		{csvNullable{S: "a", PS: ptr("b"), N: 1, PN: ptr(2), T: csvText{}, PT: &csvText{"y"}}, `,a,b,1,2,"",y`},
	} {
		got := marshalAll(t, f, []message.Message{&tc.m})
		want := message.UUID{}.String() + tc.record + "\n"
		if string(got) != want {
			t.Errorf("Marshal(%+v) = %q, want %q", tc.m, got, want)
		}
		var back csvNullable
		if err := f.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, tc.m) {
			t.Errorf("Unmarshal(%q) = %+v, %v; want %+v", got, back, err, tc.m)
		}
	}
	// Some writers quote every cell: a quoted empty number is null too.
	var m csvNullable
	if err := f.Unmarshal([]byte(`"","","","","","",""`+"\r\n"), &m); err != nil || !reflect.DeepEqual(m, csvNullable{PS: ptr(""), PT: &csvText{}}) {
		t.Errorf("Unmarshal of quoted empty cells = %+v, %v", m, err)
	}
}

type csvNullable struct {
	S  string   `csv:"s"`
	PS *string  `csv:"ps"`
	N  int      `csv:"n"`
	PN *int     `csv:"pn"`
	T  csvText  `csv:"t"`
	PT *csvText `csv:"pt"`
}

func (*csvNullable) GetUUID() message.UUID                     { return message.UUID{} }
func (*csvNullable) SetUUID(message.UUID)                      {}
func (*csvNullable) NewAcknowledgement(string) message.Message { return new(csvNullable) }

// csvText is a text type whose zero value's text is empty.
type csvText struct{ s string }

func (c csvText) MarshalText() ([]byte, error) { return []byte(c.s), nil }
func (c *csvText) UnmarshalText(b []byte) error {
	c.s = string(b)
	return nil
}

// An empty cell reads as its field's zero value, or nil.
func TestCSVEmptyCells(t *testing.T) {
	f := newCSVFraming(t)
	m := &csvEvent{Kind: "k", Count: 5, OK: true, Score: ptr(1.0), Note: ptr("n"), At: time.Now()}
	frame := []byte(strings.Repeat(",", len(csvColumns)-1) + "\n")
	if err := f.Unmarshal(frame, m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, new(csvEvent)) {
		t.Errorf("a record of empty cells read as %+v", m)
	}
}

func TestNewCSV(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  message.CSVConfig
		err  string
	}{
		{"default UUID column", message.CSVConfig{Columns: []string{"a", "uuid"}}, ""},
		{"named UUID column", message.CSVConfig{Columns: []string{"id", "a"}, UUIDColumn: "id"}, ""},
		{"only the UUID", message.CSVConfig{Columns: []string{"uuid"}}, ""},
		{"no columns", message.CSVConfig{}, "has no columns"},
		{"no UUID column", message.CSVConfig{Columns: []string{"a", "b"}}, `UUID column "uuid" is not among the columns ["a" "b"]`},
		{"UUID column missing", message.CSVConfig{Columns: []string{"uuid"}, UUIDColumn: "id"}, `UUID column "id" is not among`},
		{"duplicate", message.CSVConfig{Columns: []string{"uuid", "a", "a"}}, `column "a" is declared twice`},
		{"empty name", message.CSVConfig{Columns: []string{"uuid", ""}}, "column 2 has an empty name"},
		{"UUID column named by a UUID", message.CSVConfig{Columns: []string{"00000000-0000-0000-0000-000000000000"},
			UUIDColumn: "00000000-0000-0000-0000-000000000000"}, "is itself a UUID"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := message.NewCSV(tc.cfg)
			if tc.err == "" {
				if err != nil || f.Name() != "csv" {
					t.Errorf("NewCSV = %v, %v", f, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("NewCSV = %v, want an error containing %q", err, tc.err)
			}
		})
	}
	// Columns are the framing's own.
	cols := []string{"uuid", "a"}
	f, _ := message.NewCSV(message.CSVConfig{Columns: cols})
	cols[1] = "b"
	if got := string(f.Header()); got != "uuid,a\n" {
		t.Errorf("Header after the columns changed = %q", got)
	}
	// A zero CSV splits records, and has no columns to decode them.
	var zero message.CSV
	r := bufio.NewReader(strings.NewReader("a,\"b\nc\"\nd\n"))
	if frame, err := zero.Unpack(r); err != nil || string(frame) != "a,\"b\nc\"\n" {
		t.Errorf("zero CSV Unpack = %q, %v", frame, err)
	}
	if err := zero.Unmarshal([]byte("d\n"), new(csvEvent)); err == nil || !strings.Contains(err.Error(), "NewCSV") {
		t.Errorf("zero CSV Unmarshal: %v", err)
	}
}

// Field names map to columns: by tag, or by name, matching case if one
// column does, and through embedded structs.
func TestCSVFieldMapping(t *testing.T) {
	f, err := message.NewCSV(message.CSVConfig{Columns: []string{"id", "Name", "name2", "NAME2", "Base", "inner", "unused"}, UUIDColumn: "id"})
	if err != nil {
		t.Fatal(err)
	}
	m := &csvMapped{Name: "n", Name2: "exact", Other: "by tag", csvBase: csvBase{Base: 7, Inner: csvInner{Inner: true}}}
	m.SetUUID(message.BuildUUID(message.NewProducerID(), 1, message.OutsideTxn))
	frame := marshalAll(t, f, []message.Message{m})
	if want := m.id.String() + ",n,by tag,exact,7,true,\n"; string(frame) != want {
		t.Errorf("Marshal = %q, want %q", frame, want)
	}
	got := new(csvMapped)
	if err := f.Unmarshal(frame, got); err != nil || !reflect.DeepEqual(got, m) {
		t.Errorf("Unmarshal = %+v, %v; want %+v", got, err, m)
	}
}

type csvMapped struct {
	id    message.UUID // Through GetUUID and SetUUID.
	Name  string       // "Name", exactly.
	Name2 string       `csv:"NAME2"`
	Other string       `csv:"name2"`
	csvBase
	Ignored string `csv:"-"`
}

type csvBase struct {
	Base  int
	Inner csvInner `csv:"inner"`
}

// csvInner is a struct that is a text type.
type csvInner struct{ Inner bool }

func (c csvInner) MarshalText() ([]byte, error) { return []byte(strconv.FormatBool(c.Inner)), nil }
func (c *csvInner) UnmarshalText(b []byte) (err error) {
	c.Inner, err = strconv.ParseBool(string(b))
	return err
}

func (m *csvMapped) GetUUID() message.UUID                     { return m.id }
func (m *csvMapped) SetUUID(u message.UUID)                    { m.id = u }
func (m *csvMapped) NewAcknowledgement(string) message.Message { return new(csvMapped) }

// csvMessage makes a message of a struct type T for the tests of types
// the framing refuses.
type csvMessage[T any] struct{ V T }

func (*csvMessage[T]) GetUUID() message.UUID                     { return message.UUID{} }
func (*csvMessage[T]) SetUUID(message.UUID)                      {}
func (*csvMessage[T]) NewAcknowledgement(string) message.Message { return nil }

type csvValueMessage struct{ A string }

func (csvValueMessage) GetUUID() message.UUID                     { return message.UUID{} }
func (csvValueMessage) SetUUID(message.UUID)                      {}
func (csvValueMessage) NewAcknowledgement(string) message.Message { return nil }

type csvStringMessage string

func (csvStringMessage) GetUUID() message.UUID                     { return message.UUID{} }
func (csvStringMessage) SetUUID(message.UUID)                      {}
func (csvStringMessage) NewAcknowledgement(string) message.Message { return nil }

type csvOnlyMarshals struct{}

func (csvOnlyMarshals) MarshalText() ([]byte, error) { return nil, nil }

type csvEmbedsPointer struct{ *csvBase }

func TestCSVTypeErrors(t *testing.T) {
	f, err := message.NewCSV(message.CSVConfig{Columns: []string{"uuid", "v", "ab", "AB", "base"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    message.Message
		err  string
	}{
		{"slice", &csvMessage[[]string]{}, "field V: type []string is not one that the CSV framing encodes"},
		{"map", &csvMessage[map[string]int]{}, "type map[string]int is not one"},
		{"pointer to pointer", &csvMessage[**int]{}, "type *int is not one"},
		{"struct", &csvMessage[struct{ X int }]{}, "type struct { X int } is not one"},
		{"half a text type", &csvMessage[csvOnlyMarshals]{}, "implements only one of encoding.TextMarshaler and encoding.TextUnmarshaler"},
		{"no column", &struct {
			csvMessage[int]
			Missing string
		}{}, `field Missing: no column is named "Missing", among ["uuid" "v" "ab" "AB" "base"] (tag the field csv:"-" to leave it out)`},
		{"ambiguous", &struct {
			csvMessage[int]
			X string `csv:"V"`
		}{}, `fields V and X both have column "v"`},
		{"case ambiguous", &struct {
			csvMessage[int]
			Base int `csv:"BASE"`
			Ab   int
		}{}, `field Ab: columns "ab" and "AB" both match "Ab" but for case, and neither exactly`},
		{"tag options", &struct {
			csvMessage[int]
			X int `csv:"ab,omitempty"`
		}{}, `csv tag with options "omitempty"`},
		{"embedded pointer", &struct {
			csvMessage[int]
			csvEmbedsPointer
		}{}, "field csvBase embeds a pointer to a struct"},
		{"not a struct", csvStringMessage("x"), "needs a struct or a pointer to one, not message_test.csvStringMessage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := bufio.NewWriter(&buf)
			err := f.Marshal(tc.m, w)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Marshal = %v, want an error containing %q", err, tc.err)
			}
			if w.Buffered() != 0 {
				t.Errorf("Marshal wrote %d bytes on error", w.Buffered())
			}
			err = f.Unmarshal([]byte(",,,,\n"), tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Unmarshal = %v, want an error containing %q", err, tc.err)
			}
		})
	}

	// A struct value marshals; it cannot unmarshal.
	g, _ := message.NewCSV(message.CSVConfig{Columns: []string{"uuid", "A"}})
	if got := marshalAll(t, g, []message.Message{csvValueMessage{A: "x"}}); string(got) != "00000000-0000-0000-0000-000000000000,x\n" {
		t.Errorf("Marshal of a struct value = %q", got)
	}
	if err := g.Unmarshal([]byte(",x\n"), csvValueMessage{}); err == nil || !strings.Contains(err.Error(), "want a non-nil pointer") {
		t.Errorf("Unmarshal into a struct value: %v", err)
	}
	if err := g.Unmarshal([]byte(",x\n"), (*csvEvent)(nil)); err == nil {
		t.Errorf("Unmarshal into a nil pointer succeeded")
	}
	if err := g.Marshal((*csvEvent)(nil), bufio.NewWriter(io.Discard)); err == nil {
		t.Errorf("Marshal of a nil pointer succeeded")
	}
}

// csvSmall is a small message that both CSV and JSONLines encode.
type csvSmall struct {
	UUID  message.UUID `csv:"uuid" json:"uuid"`
	Kind  string       `csv:"kind" json:"kind"`
	User  string       `csv:"user" json:"user"`
	Count int64        `csv:"count" json:"count"`
}

func (m *csvSmall) GetUUID() message.UUID                     { return m.UUID }
func (m *csvSmall) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *csvSmall) NewAcknowledgement(string) message.Message { return new(csvSmall) }

// BenchmarkCSV measures the CSV framing on small messages, next to
// JSONLines on the same messages.
func BenchmarkCSV(b *testing.B) {
	f, err := message.NewCSV(message.CSVConfig{Columns: []string{"uuid", "kind", "user", "count"}})
	if err != nil {
		b.Fatal(err)
	}
	p, c := message.NewProducerID(), message.NewClock(time.Now())
	msgs := make([]message.Message, 1000)
	for i := range msgs {
		c.Tick()
		msgs[i] = &csvSmall{UUID: message.BuildUUID(p, c, message.OutsideTxn),
			Kind: "click", User: "user-" + strconv.Itoa(i), Count: int64(i * 7)}
	}
	for _, fr := range []message.Framing{f, message.JSONLines} {
		data := marshalAll(b, fr, msgs)
		b.Run(fr.Name()+"/marshal", func(b *testing.B) {
			b.ReportAllocs()
			w := bufio.NewWriterSize(io.Discard, 64<<10)
			for i := 0; b.Loop(); i++ {
				if err := fr.Marshal(msgs[i%len(msgs)], w); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fr.Name()+"/unpack+unmarshal", func(b *testing.B) {
			b.ReportAllocs()
			br := bytes.NewReader(data)
			r := bufio.NewReaderSize(br, 64<<10)
			var m csvSmall
			for b.Loop() {
				frame, err := fr.Unpack(r)
				if err == io.EOF {
					br.Reset(data)
					r.Reset(br)
					continue
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := fr.Unmarshal(frame, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// click is the message type of ExampleNewCSV.
type click struct {
	UUID     message.UUID `csv:"uuid"`
	User     string       `csv:"user"`
	Page     string       `csv:"page"`
	Count    int          `csv:"count"`
	At       time.Time    `csv:"at"`
	Referrer *string      `csv:"referrer"` // An unquoted empty cell is nil.
}

func (c *click) GetUUID() message.UUID                     { return c.UUID }
func (c *click) SetUUID(u message.UUID)                    { c.UUID = u }
func (c *click) NewAcknowledgement(string) message.Message { return new(click) }

func ExampleNewCSV() {
	clicks, err := message.NewCSV(message.CSVConfig{
		Columns: []string{"uuid", "user", "page", "count", "at", "referrer"},
	})
	if err != nil {
		panic(err)
	}
	var journal bytes.Buffer
	journal.Write(clicks.Header()) // Optional: readers skip it.
	w := bufio.NewWriter(&journal)
	m := &click{User: "u-1", Page: "/search?q=a,b", Count: 3, At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	m.SetUUID(message.BuildUUID(message.ProducerID{1, 2, 3, 4, 5, 6}, message.NewClock(m.At), message.OutsideTxn))
	if err := clicks.Marshal(m, w); err != nil {
		panic(err)
	}
	w.Flush()
	fmt.Print(journal.String())

	r := bufio.NewReader(&journal)
	frame, err := clicks.Unpack(r) // The header and the record.
	if err != nil {
		panic(err)
	}
	var got click
	if err := clicks.Unmarshal(frame, &got); err != nil {
		panic(err)
	}
	fmt.Println(got.Page, got.Count, got.Referrer == nil)
	// Output:
	// uuid,user,page,count,at,referrer
	// 39bc0080-c8b6-11ef-8000-010203040506,u-1,"/search?q=a,b",3,2025-01-02T03:04:05Z,
	// /search?q=a,b 3 true
}
