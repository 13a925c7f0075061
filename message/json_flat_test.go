package message

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
)

type flatType struct {
	U     UUID    `json:"uuid"`
	S     string  `json:"s"`
	B     bool    `json:"b"`
	I     int64   `json:"i"`
	I8    int8    `json:"i8"`
	U16   uint16  `json:"u16"`
	F     float64 `json:"f"`
	F32   float32 `json:"f32,omitempty"`
	Tags  []int   `json:"tags,omitempty"`
	Plain string
}

type flatEmbedded struct {
	flatType
	X string
}

type flatQuoted struct {
	N int `json:"n,string"`
}

type flatUnicode struct {
	Naïve string
}

type flatMarshaler struct{ S string }

func (flatMarshaler) MarshalJSON() ([]byte, error) { return []byte(`"m"`), nil }

type flatNumber struct {
	N json.Number `json:"n"`
}

func TestNewFlatCodec(t *testing.T) {
	for _, c := range []struct {
		v    any
		flat bool
	}{
		{new(flatType), true},
		{flatType{}, false},
		{new(int), false},
		{new(flatEmbedded), false},
		{new(flatQuoted), false},
		{new(flatUnicode), false},
		{new(flatMarshaler), false},
		{new(flatNumber), true},
	} {
		if got := newFlatCodec(reflect.TypeOf(c.v)) != nil; got != c.flat {
			t.Errorf("%T: flat %v, want %v", c.v, got, c.flat)
		}
	}
	// Built by reflection, as go vet refuses the repeated tag in source.
	duplicate := reflect.StructOf([]reflect.StructField{
		{Name: "A", Type: reflect.TypeFor[string](), Tag: `json:"x"`},
		{Name: "B", Type: reflect.TypeFor[string](), Tag: `json:"x"`},
	})
	if newFlatCodec(reflect.PointerTo(duplicate)) != nil {
		t.Error("a struct with two fields named x is flat")
	}
	c := newFlatCodec(reflect.TypeFor[*flatNumber]())
	if c.fields[0].kind != flatOther {
		t.Errorf("json.Number is of kind %v, want flatOther", c.fields[0].kind)
	}
}

// TestFlatCodecDecodes checks which frames the codec reads itself, so
// that the comparisons with encoding/json (json_compat_test.go) test it
// and not only the general path, and that a frame it declines leaves the
// message as it was.
func TestFlatCodecDecodes(t *testing.T) {
	c := newFlatCodec(reflect.TypeFor[*flatType]())
	const id = "c232ab00-9414-11ec-b3c8-9f6bdeced846"
	for _, frame := range []string{
		`{"uuid":"` + id + `","s":"x","b":true,"i":-5,"i8":-128,"u16":65535,"f":1.5e3,"f32":0.25,"Plain":"p"}` + "\n",
		` { "s" : "esc \" \\ \/ \b \f \n \r \t" , "b":false } ` + "\r\n",
		`{"s":"ü 😀","i":-9223372036854775808,"f":-0}`,
		`{}`,
		`{"s":"a","s":"b"}`,
	} {
		m := flatType{Tags: []int{1}}
		if !c.decode([]byte(frame), reflect.ValueOf(&m).Elem()) {
			t.Errorf("declined %q", frame)
			continue
		}
		want := flatType{Tags: []int{1}}
		if err := json.Unmarshal([]byte(frame), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, want) {
			t.Errorf("%q decoded as %+v, encoding/json %+v", frame, m, want)
		}
	}
	for _, frame := range []string{
		`{"S":"other case"}`, `{"unknown":1}`, `{"s":null}`, `{"s":1}`, `{"s":"\u00e9"}`,
		"{\"s\":\"bad \xff\"}", `{"tags":[1]}`, `{"i8":128}`, `{"i":1.0}`, `{"i":1e2}`,
		`{"u16":-1}`, `{"f32":1e39}`, `{"b":"true"}`, `{"uuid":"not a uuid"}`,
		`{"s":"a"} x`, `{"s":"a",}`, `[1]`, `null`, ``, `{"s":"a"`, `{"s" "a"}`,
	} {
		m := flatType{S: "kept", I: 7}
		if c.decode([]byte(frame), reflect.ValueOf(&m).Elem()) {
			t.Errorf("read %q, which it should decline", frame)
		}
		if !reflect.DeepEqual(m, flatType{S: "kept", I: 7}) {
			t.Errorf("declined %q, but changed the message to %+v", frame, m)
		}
	}
}

func TestFlatCodecEncodes(t *testing.T) {
	c := newFlatCodec(reflect.TypeFor[*flatType]())
	for _, m := range []flatType{
		{S: "x", I: -1, F: 1e21, F32: 1e-7},
		{S: "\x00\"\u2028\xff", F: math.Copysign(0, -1)},
	} {
		got, ok := c.encode(nil, reflect.ValueOf(&m).Elem())
		if !ok {
			t.Errorf("declined %+v", m)
			continue
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want)+"\n" {
			t.Errorf("%+v encoded as %q, encoding/json %q", m, got, want)
		}
	}
	for _, m := range []flatType{{F: math.NaN()}, {F32: float32(math.Inf(-1))}, {Tags: []int{1}}} {
		if _, ok := c.encode(nil, reflect.ValueOf(&m).Elem()); ok {
			t.Errorf("encoded %+v, which it should decline", m)
		}
	}
	n := newFlatCodec(reflect.TypeFor[*flatNumber]())
	if _, ok := n.encode(nil, reflect.ValueOf(&flatNumber{}).Elem()); ok {
		t.Error("encoded a json.Number, which it should leave to encoding/json")
	}
}

// TestFlatNilMessage checks that a nil pointer to a flat struct takes the
// general path, as it did before the codec: encoding/json writes null for
// it, and refuses to decode into it.
func TestFlatNilMessage(t *testing.T) {
	var m *flatNilMessage
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := JSONLines.Marshal(m, w); err != nil {
		t.Fatalf("Marshal of a nil message: %v", err)
	}
	w.Flush()
	if buf.String() != "null\n" {
		t.Errorf("a nil message marshals as %q, want null", buf.String())
	}
	err := JSONLines.Unmarshal([]byte(`{"s":"x"}`), m)
	var invalid *json.InvalidUnmarshalError
	if !errors.As(err, &invalid) {
		t.Errorf("Unmarshal into a nil message: %v, want encoding/json's InvalidUnmarshalError", err)
	}
}

type flatNilMessage struct {
	U UUID   `json:"uuid"`
	S string `json:"s"`
}

func (m *flatNilMessage) GetUUID() UUID                     { return m.U }
func (m *flatNilMessage) SetUUID(u UUID)                    { m.U = u }
func (m *flatNilMessage) NewAcknowledgement(string) Message { return new(flatNilMessage) }
