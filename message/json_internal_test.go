package message

//lint:file-ignore SA5008 jsonFastType's odd tags are the point of the test.

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"
)

// jsonFastType's tags include odd ones on purpose (a string option on a
// slice, a field named "-"): encoding/json's handling of them is what
// JSONLines must match.
type jsonFastType struct {
	A string            `json:"a,omitempty"`
	B []int             `json:"b,string"`
	C map[string]*int   `json:"c"`
	D time.Duration     `json:"d,omitzero"`
	E json.RawMessage   `json:"e"`
	U UUID              `json:"u"`
	F struct{ G []any } `json:"-"`
	H string            `json:"-,"`
}

type jsonNumberDeep struct {
	A []map[string]*[2]json.Number
}

type jsonRecursive struct {
	Next *jsonRecursive
	N    json.Number
}

type jsonFromType struct{ A string }

func (*jsonFromType) UnmarshalJSONFrom(*jsontext.Decoder) error { return nil }

// jsonTextType decodes with its method, whatever its fields.
type jsonTextType struct{ N json.Number }

func (*jsonTextType) UnmarshalText([]byte) error { return nil }

func TestJSONTypeNeedsV1(t *testing.T) {
	for _, c := range []struct {
		v    any
		want bool
	}{
		{new(jsonFastType), false},
		{new(jsonTextType), false},
		{new(jsonNumberDeep), true},
		{new(jsonRecursive), true},
		{new(jsonFromType), true},
		{new(struct {
			A string `json:"a,embed"`
		}), true},
		{new(struct {
			A string `json:"a,case:ignore"`
		}), true},
		{new(struct {
			A string `json:"'a'"`
		}), true},
		{new(struct {
			A string `json:"a,format:x"`
		}), true},
	} {
		if got := jsonNeedsV1(reflect.TypeOf(c.v), true, map[reflect.Type]bool{}); got != c.want {
			t.Errorf("jsonNeedsV1(%T, decode) = %v, want %v", c.v, got, c.want)
		}
	}
}

// jsonTestMessage is a message whose fields decode on the fast path.
type jsonTestMessage struct {
	UUID  UUID   `json:"uuid"`
	Name  string `json:"name"`
	Other string `json:"Name"`
	jsonEmbedded
}

type jsonEmbedded struct{ Y string }

func (m *jsonTestMessage) GetUUID() UUID                     { return m.UUID }
func (m *jsonTestMessage) SetUUID(u UUID)                    { m.UUID = u }
func (m *jsonTestMessage) NewAcknowledgement(string) Message { return new(jsonTestMessage) }

// TestJSONFallback checks which frames decode on the fast path, and that
// a type that encoding/json alone decodes turns to encoding/json.
func TestJSONFallback(t *testing.T) {
	jsonTypes.Delete(reflect.TypeFor[*jsonTestMessage]())
	defer jsonTypes.Delete(reflect.TypeFor[*jsonTestMessage]())
	for _, frame := range []string{
		`{"uuid":"c232ab00-9414-11ec-b3c8-9f6bdeced846","name":"a"}`,
		`{"name":"exact","Name":"exact too","y":"promoted","Y":"duplicate"}`,
		"{\"name\":\"invalid UTF-8 \xff\"}",
		`{"name":null}`,
	} {
		var m jsonTestMessage
		if err := JSONLines.Unmarshal([]byte(frame), &m); err != nil {
			t.Fatalf("%q: %v", frame, err)
		}
		if jsonTypeOf(&m).decodeV1.Load() {
			t.Fatalf("%q did not decode on the fast path", frame)
		}
	}
	var m jsonTestMessage
	if err := JSONLines.Unmarshal([]byte(`{"name":"x"`), &m); err == nil {
		t.Fatal("no error for a truncated frame")
	}
	if jsonTypeOf(&m).decodeV1.Load() {
		t.Fatal("a malformed frame turned the type to encoding/json")
	}
	// NAME matches two fields case-insensitively, and no field exactly:
	// json/v2 reports an error, where encoding/json takes the first field.
	m = jsonTestMessage{}
	if err := JSONLines.Unmarshal([]byte(`{"NAME":"ambiguous"}`), &m); err != nil || m.Name != "ambiguous" || m.Other != "" {
		t.Fatalf("got %+v, %v", m, err)
	}
	if !jsonTypeOf(&m).decodeV1.Load() {
		t.Fatal("the type did not turn to encoding/json")
	}
}
