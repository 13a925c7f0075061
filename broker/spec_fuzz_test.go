package broker

import "testing"

// FuzzDecodeMember feeds the decoder of broker member specs values of any
// shape, as etcd may hold them: it must refuse or decode, never panic,
// and a spec it decodes is valid.
func FuzzDecodeMember(f *testing.F) {
	for _, s := range []string{`{"itemLimit":100,"endpoint":"10.0.0.1:7700"}`, `{"itemLimit":-1,"endpoint":"a:1"}`, `{"itemLimit":1,"endpoint":"nohost"}`, `{"itemLimit":1,"endpoint":"a:1","x":1}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := decodeMember(raw)
		if err != nil {
			return
		}
		if err := v.(*MemberSpec).Validate(); err != nil {
			t.Fatalf("broker spec %q decodes as invalid: %v", raw, err)
		}
	})
}
