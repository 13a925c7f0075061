package message_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/message"
)

// richJSONMessage has fields of most kinds that encoding/json decodes, to
// compare JSONLines.Unmarshal with encoding/json.
type richJSONMessage struct {
	UUID     message.UUID                `json:"uuid"`
	Name     string                      `json:"name"`
	Count    int64                       `json:"count"`
	Small    int8                        `json:"small,omitempty"`
	Unsigned uint16                      `json:"unsigned"`
	Ratio    float64                     `json:"ratio"`
	Flag     bool                        `json:"flag"`
	Quoted   int                         `json:"quoted,string"`
	QuotedS  string                      `json:"quoted_s,string"`
	Ptr      *string                     `json:"ptr"`
	Bytes    []byte                      `json:"bytes"`
	Array    [3]byte                     `json:"array"`
	Tags     []string                    `json:"tags"`
	Matrix   [][]int                     `json:"matrix"`
	Attrs    map[string]string           `json:"attrs"`
	ByID     map[int]float32             `json:"by_id"`
	ByUUID   map[message.UUID]int        `json:"by_uuid"`
	Any      any                         `json:"any"`
	Raw      json.RawMessage             `json:"raw"`
	Wait     time.Duration               `json:"wait"`
	At       time.Time                   `json:"at"`
	Point    *jsonPoint                  `json:"point"`
	Custom   jsonCustom                  `json:"custom"`
	Pretty   jsonPretty                  `json:"pretty"`
	PtrM     map[string]jsonPtrMarshaler `json:"ptr_m"`
	PtrS     []jsonPtrMarshaler          `json:"ptr_s"`
	Skipped  string                      `json:"-"`
	Untagged string
	jsonEmbedded
	*JSONEmbeddedPtr
	//lint:ignore U1000 an unexported field, which encoding/json skips: the test is that JSONLines does too.
	unexported int
}

type jsonPoint struct {
	X, Y int
}

type jsonEmbedded struct {
	Inner  string `json:"inner"`
	Shadow string `json:"name"` // shadowed by richJSONMessage.Name
}

type JSONEmbeddedPtr struct {
	Deep []int `json:"deep"`
}

// jsonCustom implements json.Unmarshaler: it keeps the raw JSON that it
// was given, and the count of calls.
type jsonCustom struct {
	Raw   string
	Calls int
}

func (c *jsonCustom) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte(`"fail"`)) {
		return errors.New("custom failure")
	}
	c.Raw = string(b)
	c.Calls++
	return nil
}

// jsonPretty marshals as indented JSON, which encoding/json compacts.
type jsonPretty struct {
	A []int
}

func (p jsonPretty) MarshalJSON() ([]byte, error) {
	if p.A == nil {
		return []byte("null"), nil
	}
	return json.MarshalIndent(struct{ A []int }{p.A}, "", "\t")
}

// jsonPtrMarshaler has MarshalJSON on its pointer, which encoding/json
// calls only on addressable values (in slices, not in maps).
type jsonPtrMarshaler struct {
	S string
}

func (p *jsonPtrMarshaler) MarshalJSON() ([]byte, error) {
	return json.Marshal("ptr:" + p.S)
}

func (m *richJSONMessage) GetUUID() message.UUID                     { return m.UUID }
func (m *richJSONMessage) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *richJSONMessage) NewAcknowledgement(string) message.Message { return new(richJSONMessage) }

// flatJSONMessage has only fields that the framing's fast codec for flat
// structs encodes and decodes itself, and some that it leaves to the
// general path: a slice, a map, a pointer, a json.Number.
type flatJSONMessage struct {
	UUID     message.UUID      `json:"uuid"`
	Name     string            `json:"name"`
	Label    flatLabel         `json:"label,omitempty"`
	Flag     bool              `json:"flag"`
	Count    int64             `json:"count"`
	Small    int8              `json:"small,omitempty"`
	Int      int               `json:"int"`
	I16      int16             `json:"i16"`
	I32      int32             `json:"i32"`
	Unsigned uint16            `json:"unsigned"`
	U8       uint8             `json:"u8,omitempty"`
	U32      uint32            `json:"u32"`
	U64      uint64            `json:"u64"`
	Ratio    float64           `json:"ratio"`
	F32      float32           `json:"f32,omitempty"`
	Wait     time.Duration     `json:"wait,omitempty"`
	Tags     []string          `json:"tags,omitempty"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Ptr      *string           `json:"ptr,omitempty"`
	N        json.Number       `json:"n,omitempty"`
	Dash     string            `json:"-,"`
	Skipped  string            `json:"-"`
	Untagged string
	//lint:ignore U1000 an unexported field, which encoding/json skips.
	unexported int
}

type flatLabel string

func (m *flatJSONMessage) GetUUID() message.UUID                     { return m.UUID }
func (m *flatJSONMessage) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *flatJSONMessage) NewAcknowledgement(string) message.Message { return new(flatJSONMessage) }

// jsonNumberMessage has an encoding/json.Number, which json/v2 does not
// know.
type jsonNumberMessage struct {
	UUID message.UUID `json:"uuid"`
	N    json.Number  `json:"n"`
}

func (m *jsonNumberMessage) GetUUID() message.UUID                     { return m.UUID }
func (m *jsonNumberMessage) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *jsonNumberMessage) NewAcknowledgement(string) message.Message { return new(jsonNumberMessage) }

// jsonV2TagMessage has a tag option that only json/v2 knows.
type jsonV2TagMessage struct {
	UUID message.UUID `json:"uuid"`
	Name string       `json:"name,case:strict"`
}

func (m *jsonV2TagMessage) GetUUID() message.UUID                     { return m.UUID }
func (m *jsonV2TagMessage) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *jsonV2TagMessage) NewAcknowledgement(string) message.Message { return new(jsonV2TagMessage) }

// jsonConflictMessage has two embedded fields of the same name at the
// same depth, which encoding/json ignores, both.
type jsonConflictMessage struct {
	UUID message.UUID `json:"uuid"`
	jsonConflictA
	jsonConflictB
}

type jsonConflictA struct {
	X string
}

type jsonConflictB struct {
	X string
}

func (m *jsonConflictMessage) GetUUID() message.UUID  { return m.UUID }
func (m *jsonConflictMessage) SetUUID(u message.UUID) { m.UUID = u }
func (m *jsonConflictMessage) NewAcknowledgement(string) message.Message {
	return new(jsonConflictMessage)
}

// jsonWholeMessage implements json.Unmarshaler itself.
type jsonWholeMessage struct {
	UUID message.UUID
	Raw  string
}

func (m *jsonWholeMessage) UnmarshalJSON(b []byte) error {
	var v struct {
		U message.UUID `json:"u"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	m.UUID, m.Raw = v.U, string(b)
	return nil
}

func (m *jsonWholeMessage) GetUUID() message.UUID                     { return m.UUID }
func (m *jsonWholeMessage) SetUUID(u message.UUID)                    { m.UUID = u }
func (m *jsonWholeMessage) NewAcknowledgement(string) message.Message { return new(jsonWholeMessage) }

// checkJSONLikeV1 decodes frame into a new message of newMsg's type with
// JSONLines.Unmarshal and with encoding/json, and fails unless both
// succeed with equal messages or both fail with the same error.
func checkJSONLikeV1(t *testing.T, frame []byte, newMsg func() message.Message) {
	t.Helper()
	got, want := newMsg(), newMsg()
	err := message.JSONLines.Unmarshal(frame, got)
	wantErr := json.Unmarshal(frame, want)
	switch {
	case err == nil && wantErr == nil:
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q decoded as\n%+v\nencoding/json:\n%+v", frame, got, want)
		}
	case err != nil && wantErr != nil:
		if !strings.HasSuffix(err.Error(), ": "+wantErr.Error()) {
			t.Fatalf("%q: error %q, encoding/json's %q", frame, err, wantErr)
		}
		if reflect.TypeOf(errors.Unwrap(err)) != reflect.TypeOf(wantErr) {
			t.Fatalf("%q: error of type %T, encoding/json's %T", frame, errors.Unwrap(err), wantErr)
		}
	default:
		t.Fatalf("%q: error %v, encoding/json's %v", frame, err, wantErr)
	}
}

var jsonCompatFrames = []string{
	`{"uuid":"c232ab00-9414-11ec-b3c8-9f6bdeced846","name":"a","count":3}`,
	`{"NAME":"upper","Count":1,"UUID":"C232AB00-9414-11EC-B3C8-9F6BDECED846"}`,
	`{"name":"first","name":"second","Name":"third"}`,
	`{"name":"bad utf8 \xff\xfe here"}`,
	`{"name":"escapes \u00e9 \ud83d\ude00 \ud800 \n\t\"\\"}`,
	`{"count":null,"name":null,"ptr":null,"tags":null,"attrs":null}`,
	`{"count":1e3}`,
	`{"count":1.5}`,
	`{"count":"3"}`,
	`{"count":99999999999999999999}`,
	`{"small":300}`,
	`{"unsigned":-1}`,
	`{"ratio":1e400}`,
	`{"ratio":-0.0,"flag":true}`,
	`{"flag":"true"}`,
	`{"quoted":"42","quoted_s":"\"q\""}`,
	`{"quoted":42}`,
	`{"quoted":"x"}`,
	`{"quoted_s":"unquoted"}`,
	`{"ptr":"p","point":{"X":1,"y":2,"z":3}}`,
	`{"bytes":"aGVsbG8=","array":[1,2,3]}`,
	"{\"bytes\":\"aGVs\\nbG8=\"}",
	`{"bytes":"not base64!"}`,
	`{"array":[1,2]}`,
	`{"array":[1,2,3,4]}`,
	`{"array":"AQID"}`,
	`{"tags":["a","b"],"matrix":[[1],[2,3],[]]}`,
	`{"tags":"a"}`,
	`{"attrs":{"k":"v","K":"w"},"by_id":{"1":1.5,"-2":2}}`,
	`{"by_id":{"x":1}}`,
	`{"by_uuid":{"c232ab00-9414-11ec-b3c8-9f6bdeced846":1}}`,
	`{"by_uuid":{"nope":1}}`,
	`{"any":{"a":[1,"x",null,true,{"b":2.5}]}}`,
	`{"any":12345678901234567890}`,
	`{"raw":{"a": [1, 2]},"custom":  {"z" : 1}}`,
	`{"custom":"fail"}`,
	`{"custom":null}`,
	`{"wait":1500000000,"at":"2024-02-29T12:00:00.5+01:00"}`,
	`{"wait":"1s"}`,
	`{"at":"2024-02-29 12:00:00"}`,
	`{"at":"2024-02-29T25:00:00Z"}`,
	`{"Skipped":"x","-":"y","Untagged":"u","untagged":"v"}`,
	`{"inner":"i","deep":[1,2]}`,
	`{"unexported":1}`,
	`{"uuid":"not a uuid"}`,
	`{"uuid":null}`,
	`{"uuid":1}`,
	`{"name":"x"} trailing`,
	`{"name":"x"}{"name":"y"}`,
	`{"name":"x",}`,
	`{"name":"x"`,
	`[1,2]`,
	`"string"`,
	`null`,
	`{}`,
	` { "name" : "spaces" } ` + "\r\n",
	``,
	`{"name":tru}`,
	`{"count":01}`,
	`{"count":-}`,
	`{"name":"\x01"}`,
	// For flatJSONMessage, whose fast codec reads some of these itself.
	`{"uuid":"c232ab00-9414-11ec-b3c8-9f6bdeced846","name":"n","label":"l","flag":false,"count":-9223372036854775808,"int":-1,"i16":32767,"i32":-2147483648,"unsigned":65535,"u8":255,"u32":4294967295,"u64":18446744073709551615,"ratio":-1.5e-7,"f32":3.4028235e38,"wait":1000,"-":"dash","Untagged":"u"}`,
	`{"uuid":"00000000-0000-0000-0000-000000000000","u64":18446744073709551616,"i16":-32769,"f32":3.5e38}`,
	`{"name":"esc \" \\ \/ \b \f \n \r \t","label":"ü 😀","count":-0,"ratio":-0,"u8":256}`,
	`{"count":1,"count":2,"name":"a","name":"b"}`,
	`{"i32":2147483648}`, `{"int":9223372036854775807}`, `{"int":-9223372036854775809}`,
	`{"u32":-0}`, `{"ratio":1E+2}`, `{"ratio":1.}`, `{"ratio":.5}`, `{"ratio":1e}`, `{"ratio":-}`,
	`{"flag":true }`, `{"flag":truex}`, `{"flag":nul}`, `{"n":1.5}`, `{"tags":[]}`,
	`{"uuid":"C232AB00-9414-11EC-B3C8-9F6BDECED846"}`, `{"uuid":"c232ab00-9414-41ec-b3c8-9f6bdeced846"}`,
	`{"uuid":"c232ab00\u002d9414-11ec-b3c8-9f6bdeced846"}`, `{"na\u006de":"escaped key"}`,
	"{\"name\":\"tab\tinside\"}", "{\"name\":\"a\"}\n\n", `{"name":"a"} ,`, `{ }`, ` {}`, `{"":1}`, `{"count":1 "name":"a"}`,
}

func TestJSONUnmarshalLikeEncodingJSON(t *testing.T) {
	types := map[string]func() message.Message{
		"rich":     func() message.Message { return new(richJSONMessage) },
		"framing":  func() message.Message { return new(framingJSONMessage) },
		"flat":     func() message.Message { return new(flatJSONMessage) },
		"number":   func() message.Message { return new(jsonNumberMessage) },
		"v2tag":    func() message.Message { return new(jsonV2TagMessage) },
		"conflict": func() message.Message { return new(jsonConflictMessage) },
		"whole":    func() message.Message { return new(jsonWholeMessage) },
	}
	extra := []string{
		`{"n":12.5e3}`, `{"n":"12"}`, `{"n":"abc"}`, `{"n":null}`, `{"n":true}`,
		`{"NAME":"x"}`, `{"x":"conflict","X":"c"}`, `{"u":"c232ab00-9414-11ec-b3c8-9f6bdeced846","v":1}`,
	}
	for name, newMsg := range types {
		t.Run(name, func(t *testing.T) {
			for _, frame := range append(jsonCompatFrames, extra...) {
				checkJSONLikeV1(t, []byte(frame+"\n"), newMsg)
				checkJSONLikeV1(t, []byte(frame), newMsg)
			}
		})
	}
}

func TestJSONUnmarshalerCalled(t *testing.T) {
	var m jsonWholeMessage
	frame := []byte(`{"u":"c232ab00-9414-11ec-b3c8-9f6bdeced846", "x": 1}` + "\n")
	if err := message.JSONLines.Unmarshal(frame, &m); err != nil {
		t.Fatal(err)
	}
	if m.UUID.String() != "c232ab00-9414-11ec-b3c8-9f6bdeced846" || m.Raw != strings.TrimSpace(string(frame)) {
		t.Fatalf("UnmarshalJSON got %q, UUID %v", m.Raw, m.UUID)
	}
	var r richJSONMessage
	if err := message.JSONLines.Unmarshal([]byte(`{"custom": [1, 2]}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Custom.Raw != "[1, 2]" || r.Custom.Calls != 1 {
		t.Fatalf("field's UnmarshalJSON: %+v", r.Custom)
	}
}

// TestJSONUnmarshalKeepsFields checks that fields that a frame lacks keep
// their values, as with encoding/json.
func TestJSONUnmarshalKeepsFields(t *testing.T) {
	s := "kept"
	m := &richJSONMessage{Name: "n", Count: 7, Ptr: &s, Tags: []string{"a", "b", "c"}, Attrs: map[string]string{"a": "1"}, Point: &jsonPoint{X: 1, Y: 2}}
	want := *m
	want.Tags = []string{"a", "b", "c"}
	want.Attrs = map[string]string{"a": "1"}
	want.Point = &jsonPoint{X: 1, Y: 2}
	frame := []byte(`{"count":8,"tags":["x"],"attrs":{"b":"2"},"point":{"Y":5},"ptr":"changed"}`)
	if err := json.Unmarshal(frame, &want); err != nil {
		t.Fatal(err)
	}
	if err := message.JSONLines.Unmarshal(frame, m); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, &want) {
		t.Fatalf("got %+v, encoding/json %+v", m, &want)
	}
	if s != "changed" {
		t.Fatalf("the pointed-to string was not reused: %q", s)
	}
}

// TestJSONUnmarshalConcurrent decodes messages of several types from
// several goroutines, for the race detector.
func TestJSONUnmarshalConcurrent(t *testing.T) {
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			var err error
			for i := range 200 {
				var m message.Message = new(framingJSONMessage)
				if (g+i)%2 == 1 {
					m = new(jsonNumberMessage)
				}
				if e := message.JSONLines.Unmarshal([]byte(fmt.Sprintf(`{"kind":"k","n":%d}`, i)), m); e != nil {
					err = e
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzJSONUnmarshalLikeEncodingJSON(f *testing.F) {
	for _, frame := range jsonCompatFrames {
		f.Add([]byte(frame))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkJSONLikeV1(t, frame, func() message.Message { return new(richJSONMessage) })
		checkJSONLikeV1(t, frame, func() message.Message { return new(framingJSONMessage) })
		checkJSONLikeV1(t, frame, func() message.Message { return new(flatJSONMessage) })
	})
}

// checkJSONMarshalLikeV1 fails unless JSONLines.Marshal writes m as
// encoding/json's Encoder does with SetEscapeHTML(false), or both fail
// with the same error.
func checkJSONMarshalLikeV1(t *testing.T, m message.Message) {
	t.Helper()
	var got, want bytes.Buffer
	w := bufio.NewWriter(&got)
	err := message.JSONLines.Marshal(m, w)
	w.Flush()
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	wantErr := enc.Encode(m)
	switch {
	case err == nil && wantErr == nil:
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("%+v marshalled as\n%q\nencoding/json:\n%q", m, got.Bytes(), want.Bytes())
		}
	case err != nil && wantErr != nil:
		if !strings.HasSuffix(err.Error(), ": "+wantErr.Error()) || got.Len() != 0 {
			t.Fatalf("%+v: error %q, encoding/json's %q; wrote %q", m, err, wantErr, got.Bytes())
		}
	default:
		t.Fatalf("%+v: error %v, encoding/json's %v", m, err, wantErr)
	}
}

func TestJSONMarshalLikeEncodingJSON(t *testing.T) {
	s := "pointed <to> & \u2028"
	var ms []message.Message
	for _, frame := range jsonCompatFrames {
		m := new(richJSONMessage)
		if json.Unmarshal([]byte(frame), m) == nil {
			ms = append(ms, m)
		}
	}
	ms = append(ms,
		new(richJSONMessage),
		&richJSONMessage{
			Name:            "html <b>&amp;</b> \u2028\u2029 \x00\x1f\x7f \b\f\n\r\t \"\\ \xff\xfe é 😀",
			Count:           -1 << 63,
			Unsigned:        65535,
			Ratio:           1e21,
			Quoted:          -5,
			QuotedS:         "q\"s",
			Ptr:             &s,
			Bytes:           []byte{0, 1, 2, 250, 251, 252},
			Array:           [3]byte{7, 8, 9},
			Tags:            []string{},
			Matrix:          [][]int{nil, {}, {1}},
			Attrs:           map[string]string{"b": "2", "a": "1", "": "empty", "<": "lt"},
			ByID:            map[int]float32{3: 0.1, -1: 1e-7, 20: 1e20},
			ByUUID:          map[message.UUID]int{{1}: 1, {}: 0},
			Any:             map[string]any{"z": []any{1.5, "x", nil, true, map[string]any{}}, "a": float64(1e-9)},
			Raw:             json.RawMessage(" {\"a\" :\n [1, 2] } "),
			Wait:            time.Hour + time.Nanosecond,
			At:              time.Date(2024, 2, 29, 12, 0, 0, 5, time.FixedZone("x", 3600)),
			Point:           &jsonPoint{X: 1, Y: -2},
			Custom:          jsonCustom{Raw: "r", Calls: 2},
			Pretty:          jsonPretty{A: []int{1, 2, 3}},
			PtrM:            map[string]jsonPtrMarshaler{"k": {S: "in map"}},
			PtrS:            []jsonPtrMarshaler{{S: "in slice"}},
			Skipped:         "skipped",
			Untagged:        "untagged",
			jsonEmbedded:    jsonEmbedded{Inner: "inner", Shadow: "shadow"},
			JSONEmbeddedPtr: &JSONEmbeddedPtr{Deep: []int{4}},
		},
		&richJSONMessage{Ratio: 1e-7, Small: -128, Any: float64(12345678901234567890)},
		&richJSONMessage{Ratio: math.Copysign(0, -1), Any: []byte("bytes in any")},
		&richJSONMessage{Raw: json.RawMessage("{bad json")},
		&richJSONMessage{Any: func() {}},
		&jsonNumberMessage{N: "12.5e3"},
		&jsonNumberMessage{N: "not a number"},
		&jsonV2TagMessage{Name: "n"},
		&jsonConflictMessage{jsonConflictA: jsonConflictA{X: "a"}, jsonConflictB: jsonConflictB{X: "b"}},
		&framingJSONMessage{Kind: "k", User: "u", Count: 3, Tags: []string{"t"}},
		&flatJSONMessage{Name: "n", Ratio: math.NaN()},
		&flatJSONMessage{Name: "n", F32: float32(math.Inf(1))},
		&flatJSONMessage{Name: "n", N: "12.5e3", Ptr: &s, Attrs: map[string]string{}},
		&flatJSONMessage{Name: "n", Ratio: 1e20, F32: 1e-7, Label: "\u2028"},
		&badJSONMessage{},
	)
	for _, m := range ms {
		checkJSONMarshalLikeV1(t, m)
	}
}

// FuzzJSONMarshalFlatLikeEncodingJSON checks the framing's fast codec for
// flat structs against encoding/json, on fields of any value.
func FuzzJSONMarshalFlatLikeEncodingJSON(f *testing.F) {
	f.Add("name", "label", true, int64(-1), int64(1), uint64(2), 1.5, "tag")
	f.Add("\x00\x1f\x7f\"\\<>&\u2028\u2029\xff\xfe é 😀", "", false, int64(-1<<63), int64(127), uint64(1<<64-1), 1e21, "")
	f.Add("", "", false, int64(0), int64(0), uint64(0), math.Copysign(0, -1), "")
	f.Add("a", "b", true, int64(1), int64(-128), uint64(255), 1e-7, "")
	f.Add("a", "b", true, int64(1), int64(-128), uint64(255), 123456789e-15, "")
	f.Fuzz(func(t *testing.T, name, label string, flag bool, count, small int64, u uint64, ratio float64, tag string) {
		m := &flatJSONMessage{
			Name: name, Label: flatLabel(label), Flag: flag, Count: count, Small: int8(small),
			Int: int(count), I16: int16(small), I32: int32(count), Unsigned: uint16(u), U8: uint8(u),
			U32: uint32(u), U64: u, Ratio: ratio, F32: float32(ratio), Wait: time.Duration(count),
			Dash: tag, Skipped: name, Untagged: label,
		}
		m.UUID = message.BuildUUID(message.ProducerID{byte(u), 1, 2, 3, 4, 5}, message.Clock(count), message.Flags(u&0x3ff))
		checkJSONMarshalLikeV1(t, m)
		if tag != "" {
			m.Tags = []string{tag}
			checkJSONMarshalLikeV1(t, m)
		}
	})
}

func FuzzJSONMarshalLikeEncodingJSON(f *testing.F) {
	for _, frame := range jsonCompatFrames {
		f.Add([]byte(frame))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		m := new(richJSONMessage)
		if json.Unmarshal(frame, m) != nil {
			return
		}
		checkJSONMarshalLikeV1(t, m)
	})
}
