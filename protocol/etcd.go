package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
)

// MarshalSpec returns the etcd value of a journal spec: the spec with its
// defaults applied (s itself is not changed), as compact protobuf JSON.
// Field names are those of the proto JSON mapping (lowerCamelCase), enums
// are their names, durations strings such as "60s", and 64-bit integers
// quoted strings:
//
//	{"name":"examples/words/part-000","replication":3,"fragment":{"length":"134217728",
//	 "codec":"CODEC_ZSTD","refreshInterval":"60s"}}
//
// The output is stable: the same spec always gives the same bytes. It
// returns an error, naming the field, if the spec is invalid.
func MarshalSpec(s *JournalSpec) ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("spec: missing")
	}
	d := s.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	raw, err := protojson.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding journal %s: %w", d.Name, err)
	}
	// protojson varies its whitespace on purpose; compacting removes it.
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fmt.Errorf("encoding journal %s: %w", d.Name, err)
	}
	return buf.Bytes(), nil
}

// UnmarshalSpec decodes an etcd value written by MarshalSpec (or by hand,
// with etcdctl). It is strict: unknown fields, repeated fields and trailing
// data are errors. Both the JSON names (maxAppendRate) and the proto names
// (max_append_rate) of fields are accepted. It applies defaults to the
// decoded spec and returns an error if it is then invalid.
func UnmarshalSpec(raw []byte) (*JournalSpec, error) {
	s := new(JournalSpec)
	if err := protojson.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("decoding journal spec %s: %v", quoteShort(string(raw)), err)
	}
	s.ApplyDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}
