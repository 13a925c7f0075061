package allocator

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// FuzzDecoder feeds a fleet's decoder keys and values of any shape, as
// anyone with write access to etcd could leave them: it must refuse or
// decode, never panic, and what it decodes must name the very key it came
// from, with a value that encodes back to an equal spec.
func FuzzDecoder(f *testing.F) {
	const root = "/quire/fleet/"
	f.Add("members/us-east#b1", `{"itemLimit":10}`)
	f.Add("members/us-east#b1", `{"itemLimit":10,"exiting":true}`)
	f.Add("members/us-east", `{"itemLimit":10}`)
	f.Add("members/a#b#c", `{"itemLimit":-1}`)
	f.Add("items/journals/a/b", `{"replication":3}`)
	f.Add("items/x", `{"replication":3,"extra":1}`)
	f.Add("items/x", `{"replication":3} {}`)
	f.Add("assign/journals/a#us-east#b1#0", `ok`)
	f.Add("assign/journals/a#us-east#b1#01", ``)
	f.Add("assign/a#b#c#-1", ``)
	f.Add("other/key", `{}`)
	dec := NewDecoder(root, Decoders{})
	f.Fuzz(func(t *testing.T, key, value string) {
		v, err := dec(&mvccpb.KeyValue{Key: []byte(root + key), Value: []byte(value)})
		if err != nil {
			return
		}
		switch v := v.(type) {
		case Member:
			if got := MemberKey(root, v.Zone, v.Suffix); got != root+key {
				t.Fatalf("member %+v decoded from %q has key %q", v, root+key, got)
			}
			s := v.Value.(MemberSpec)
			if back, err := DecodeMemberSpec([]byte(Encode(s))); err != nil || back != s {
				t.Fatalf("member spec %+v encodes as %s, which decodes as %+v, %v", s, Encode(s), back, err)
			}
		case Item:
			if got := ItemKey(root, v.ID); got != root+key {
				t.Fatalf("item %+v decoded from %q has key %q", v, root+key, got)
			}
			s := v.Value.(ItemSpec)
			if back, err := DecodeItemSpec([]byte(Encode(s))); err != nil || back != s {
				t.Fatalf("item spec %+v encodes as %s, which decodes as %+v, %v", s, Encode(s), back, err)
			}
		case Assignment:
			if got := AssignmentKey(root, v.Item, v.Zone, v.Suffix, v.Slot); got != root+key {
				t.Fatalf("assignment %+v decoded from %q has key %q", v, root+key, got)
			}
			if v.Value != value {
				t.Fatalf("assignment's value %q decoded from %q", v.Value, value)
			}
		default:
			t.Fatalf("decoded %T from %q", v, key)
		}
	})
}

// FuzzParseWhatIf feeds the planner's command-line forms, ZONE#SUFFIX:LIMIT
// and ITEM=N, anything: they must refuse or parse, never panic, and what
// parses must be a valid member, whose name parses back to it, or an item
// and a count.
func FuzzParseWhatIf(f *testing.F) {
	f.Add("us-east#b4:100")
	f.Add("us-east#b4:-1")
	f.Add("us-east:100")
	f.Add("journals/a=3")
	f.Add("=3")
	f.Add("a=01")
	f.Fuzz(func(t *testing.T, s string) {
		if m, err := ParseAddedMember(s); err == nil {
			if err := validateScenarioMember(m); err != nil {
				t.Fatalf("member %+v parsed from %q is invalid: %v", m, s, err)
			}
			if zone, suffix, err := ParseMemberName(MemberName(m.Zone, m.Suffix)); err != nil || zone != m.Zone || suffix != m.Suffix {
				t.Fatalf("member %+v from %q: its name %q parses as %q, %q, %v", m, s, MemberName(m.Zone, m.Suffix), zone, suffix, err)
			}
		}
		if id, n, err := ParseReplication(s); err == nil && (id == "" || n < 0) {
			t.Fatalf("replication %q parsed as %q=%d", s, id, n)
		}
	})
}
