package store

import (
	"bytes"
	"testing"
)

// FuzzUnmarshalCheckpoint feeds unmarshalCheckpoint committed checkpoints
// of any shape, as a damaged store may hold: it must refuse or decode,
// never panic, and a checkpoint it decodes must be valid and encode to
// JSON that decodes back to the same encoding.
func FuzzUnmarshalCheckpoint(f *testing.F) {
	for _, s := range []string{
		`{"sources":{"a/b":{"offset":100,"read":250,"producers":{"0123456789ab":{"lastAck":1234,"begin":100}}}},"ackIntents":[{"journal":"acks","intent":"eA=="}]}`,
		`{"sources":{"a":{"offset":5,"read":4}}}`,
		`{"sources":{"":{"offset":0,"read":0}}}`,
		`{"sources":{"a":{"offset":0,"read":9,"producers":{"xyz":{"lastAck":1,"begin":-1}}}}}`,
		`{"ackIntents":[{"journal":"a"}]}`,
		`{}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := unmarshalCheckpoint(b)
		if err != nil {
			return
		}
		again, err := marshalCheckpoint(cp)
		if err != nil {
			t.Fatalf("checkpoint %s decodes as %+v, which does not encode: %v", b, cp, err)
		}
		back, err := unmarshalCheckpoint(again)
		if err != nil {
			t.Fatalf("checkpoint %s encodes as %s, which does not decode: %v", b, again, err)
		}
		if twice, err := marshalCheckpoint(back); err != nil || !bytes.Equal(twice, again) {
			t.Fatalf("checkpoint encodes as %s, then as %s (%v)", again, twice, err)
		}
	})
}

// FuzzDecodeDocument feeds decodeDocument a JSONFile store's file of any
// shape: it must refuse or decode, never panic, and what it decodes has
// both a state and a checkpoint.
func FuzzDecodeDocument(f *testing.F) {
	for _, s := range []string{
		`{"state":{"a":1},"checkpoint":{"sources":{},"ackIntents":null}}`,
		`{"state":{},"checkpoint":null}`,
		`{"state":{}}`,
		`{"state":{},"checkpoint":{},"other":1}`,
		`{"state":{},"checkpoint":{}} {}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := decodeDocument(b)
		if err != nil {
			return
		}
		if doc.State == nil || doc.Checkpoint == nil || bytes.Equal(doc.Checkpoint, []byte("null")) {
			t.Fatalf("document %q decodes with state %q and checkpoint %q", b, doc.State, doc.Checkpoint)
		}
	})
}
