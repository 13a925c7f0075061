package protocol

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzUnmarshalSpec feeds UnmarshalSpec etcd values of any shape, as one
// written by hand with etcdctl may be: it must refuse or decode, never
// panic, and a spec it decodes must be valid, with its defaults, and go
// through MarshalSpec and back unchanged.
func FuzzUnmarshalSpec(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","replication":1}`,
		`{"name":"a/b","replication":3,"max_append_rate":"5","labels":{"labels":[{"name":"app","value":"x"}]}}`,
		`{"name":"a","replication":1,"fragment":{"flushInterval":"3600s","stores":["file:///x/"],"codec":"CODEC_NONE"}}`,
		`{"name":"a","replication":1,"fragment":{"length":"-5"}}`,
		`{"name":"a","replication":1}{}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	if raw, err := MarshalSpec(validSpec()); err == nil {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := UnmarshalSpec(raw)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("UnmarshalSpec(%q) returned an invalid spec: %v", raw, err)
		}
		if !proto.Equal(s, s.WithDefaults()) {
			t.Fatalf("UnmarshalSpec(%q) returned %v, without its defaults", raw, s)
		}
		again, err := MarshalSpec(s)
		if err != nil {
			t.Fatalf("MarshalSpec of %v, decoded from %q: %v", s, raw, err)
		}
		back, err := UnmarshalSpec(again)
		if err != nil || !proto.Equal(back, s) {
			t.Fatalf("%q decodes as %v, which encodes as %s, which decodes as %v, %v", raw, s, again, back, err)
		}
	})
}

// FuzzParseSize feeds ParseSize any text: it must refuse or parse, never
// panic, and FormatSize of what it parses must parse back to it.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1048576", "64MiB", " 1 GiB ", "1KB", "-3KiB", "8388607TiB", "9223372036854775807", "+5B", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Fatalf("ParseSize(%q) = %d, formatted %q, which parses as %d, %v", s, n, FormatSize(n), back, err)
		}
	})
}
