package protocol

import (
	"bytes"
	"encoding/json"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/allocator"
)

func TestMarshalSpec(t *testing.T) {
	raw, err := MarshalSpec(&JournalSpec{Name: "examples/words/part-000", Replication: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"examples/words/part-000","replication":3,"fragment":{"length":"134217728","codec":"CODEC_ZSTD","refreshInterval":"60s"}}`
	if string(raw) != want {
		t.Errorf("MarshalSpec =\n%s\nwant\n%s", raw, want)
	}
	if !json.Valid(raw) || bytes.ContainsAny(raw, " \n") {
		t.Errorf("MarshalSpec is not compact JSON: %s", raw)
	}

	full := validSpec()
	raw, err = MarshalSpec(full)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // protojson randomizes whitespace; MarshalSpec must not.
		again, _ := MarshalSpec(full)
		if !bytes.Equal(raw, again) {
			t.Fatalf("MarshalSpec is not stable:\n%s\n%s", raw, again)
		}
	}
	back, err := UnmarshalSpec(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, full) {
		t.Errorf("round trip: got %v, want %v", back, full)
	}

	bad := validSpec()
	bad.Replication = 0
	if _, err := MarshalSpec(bad); err == nil || err.Error() != "replication: 0 is below 1" {
		t.Errorf("MarshalSpec of an invalid spec: %v", err)
	}
	if _, err := MarshalSpec(nil); err == nil {
		t.Errorf("MarshalSpec(nil) succeeded")
	}
	// MarshalSpec does not change its argument.
	bare := &JournalSpec{Name: "a", Replication: 1}
	if _, err := MarshalSpec(bare); err != nil || bare.Fragment != nil {
		t.Errorf("MarshalSpec changed its argument (%v)", err)
	}
}

func TestUnmarshalSpec(t *testing.T) {
	for _, tc := range []struct{ raw, err string }{
		{`{"name":"a","replication":1}`, ""},
		{`{"name":"a","replication":1,"max_append_rate":"5"}`, ""},
		{`{"name":"a","replication":1,"fragment":{"flushInterval":"3600s","stores":["file:///x/"]}}`, ""},
		{`{"name":"a","replication":1,"bogus":1}`, `unknown field "bogus"`},
		{`{"name":"a","replication":1}{}`, "decoding journal spec"},
		{`{"name":"a","replication":1,"replication":2}`, "duplicate field"},
		{`{"name":"a","replication":"x"}`, "decoding journal spec"},
		{`{"name":"a"}`, "replication: 0 is below 1"},
		{`{"name":"a","replication":1,"fragment":{"length":"-5"}}`, "fragment.length: -5 is negative"},
		{`{"name":"a","replication":1,"fragment":{"codec":"CODEC_LZ4"}}`, "decoding journal spec"},
		{``, "decoding journal spec"},
		{`null`, "decoding journal spec"},
	} {
		s, err := UnmarshalSpec([]byte(tc.raw))
		checkErr(t, tc.raw, err, tc.err)
		if err == nil && (s.Fragment == nil || s.Fragment.Length != DefaultFragmentLength && s.Fragment.Length == 0) {
			t.Errorf("%s: defaults not applied: %v", tc.raw, s)
		}
	}
}

// Brokers decode their items with UnmarshalSpec.
func TestSpecAsAllocatorItem(t *testing.T) {
	const root = "/quire/brokers/"
	dec := allocator.NewDecoder(root, allocator.Decoders{
		Item: func(raw []byte) (allocator.ItemValue, error) {
			s, err := UnmarshalSpec(raw)
			if err != nil {
				return nil, err // Not a nil *JournalSpec in a non-nil interface.
			}
			return s, nil
		},
	})
	spec := validSpec()
	raw, err := MarshalSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dec(&mvccpb.KeyValue{Key: []byte(allocator.ItemKey(root, spec.Name)), Value: raw})
	if err != nil {
		t.Fatal(err)
	}
	item := v.(allocator.Item)
	if item.ID != spec.Name || item.Value.DesiredReplication() != 3 || !proto.Equal(item.Value.(*JournalSpec), spec) {
		t.Errorf("decoded %+v", item)
	}
	_, err = dec(&mvccpb.KeyValue{Key: []byte(allocator.ItemKey(root, "x")), Value: []byte(`{"replication":3}`)})
	checkErr(t, "item without name", err, "item x: name: journal name is empty")
}
