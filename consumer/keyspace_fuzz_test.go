package consumer

import (
	"testing"

	"github.com/quire-dev/quire/protocol"
)

// FuzzDecodeStatus feeds decodeStatus assignment values of any shape, as
// etcd may hold them: it must refuse or decode, never panic, and a status
// it decodes has a known code and encodes back to itself.
func FuzzDecodeStatus(f *testing.F) {
	for _, s := range []string{``, `{"code":"PRIMARY"}`, `{"code":"FAILED","error":"boom"}`, `{"code":"NOPE"}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := decodeStatus(raw)
		if err != nil {
			return
		}
		s := v.(Status)
		if _, ok := protocol.ReplicaCode_name[int32(s.Code)]; !ok {
			t.Fatalf("status %q decodes with code %d", raw, s.Code)
		}
		if back, err := decodeStatus([]byte(s.encode())); err != nil || back.(Status) != s {
			t.Fatalf("status %+v from %q encodes as %s, which decodes as %+v, %v", s, raw, s.encode(), back, err)
		}
	})
}

// FuzzDecodeMemberSpec feeds a consumer process's member spec decoder
// values of any shape: it must refuse or decode, never panic, and never
// decode a negative limit.
func FuzzDecodeMemberSpec(f *testing.F) {
	for _, s := range []string{`{"itemLimit":10,"endpoint":"10.0.0.1:7702"}`, `{"itemLimit":-1}`, `{"exiting":true}`, `null`, `7`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := decodeMemberSpec(raw)
		if err != nil {
			return
		}
		if v.ItemLimit() < 0 {
			t.Fatalf("member spec %q decodes with limit %d", raw, v.ItemLimit())
		}
	})
}
