package consumer

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/labels"
)

var _ allocator.ItemValue = (*ShardSpec)(nil)

func intp(n int) *int { return &n }

// validSpec returns a valid spec with every field set.
func validSpec() *ShardSpec {
	return &ShardSpec{
		ID:                "wordcount/part-000",
		Sources:           []Source{{Journal: "examples/words/part-000"}, {Journal: "examples/words/part-001", MinOffset: 1024}},
		RecoveryLogPrefix: "recovery/wordcount",
		HintPrefix:        "/quire/wordcount/hints/",
		HintBackups:       intp(3),
		MinTxnDuration:    10 * time.Millisecond,
		MaxTxnDuration:    2 * time.Second,
		HotStandbys:       1,
		Labels:            labels.Set{{Name: "app", Value: "wordcount"}, {Name: "region", Value: "eu"}, {Name: "region", Value: "us"}},
		ReadBufferSize:    512,
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", 300)
	for _, tc := range []struct {
		name   string
		modify func(s *ShardSpec)
		want   string // substring of the error; "" is valid
	}{
		{"valid", func(s *ShardSpec) {}, ""},
		{"minimal", func(s *ShardSpec) { *s = ShardSpec{ID: "x", Sources: []Source{{Journal: "j"}}} }, ""},
		{"no recovery log", func(s *ShardSpec) { s.RecoveryLogPrefix, s.HintPrefix = "", "" }, ""},
		{"id empty", func(s *ShardSpec) { s.ID = "" }, "id: shard ID is empty"},
		{"id bad char", func(s *ShardSpec) { s.ID = "a#b" }, `id: shard ID "a#b" has character '#' at byte 1`},
		{"id space", func(s *ShardSpec) { s.ID = "a b" }, `id: shard ID "a b" has character ' '`},
		{"id leading slash", func(s *ShardSpec) { s.ID = "/a" }, `id: shard ID "/a" begins with '/'`},
		{"id trailing slash", func(s *ShardSpec) { s.ID = "a/" }, `id: shard ID "a/" ends with '/'`},
		{"id empty segment", func(s *ShardSpec) { s.ID = "a//b" }, `id: shard ID "a//b" has an empty segment`},
		{"id dotdot", func(s *ShardSpec) { s.ID = "a/../b" }, `id: shard ID "a/../b" has a ".." segment`},
		{"id too long", func(s *ShardSpec) { s.ID = strings.Repeat("a", 513) }, "id: shard ID \"aaaa"},
		{"sources none", func(s *ShardSpec) { s.Sources = nil }, "sources: none; a shard reads at least one journal"},
		{"sources too many", func(s *ShardSpec) {
			s.Sources = make([]Source, MaxSources+1)
		}, "sources: 1025 sources, more than 1024"},
		{"source journal empty", func(s *ShardSpec) { s.Sources[1].Journal = "" }, "sources[1].journal: journal name is empty"},
		{"source journal bad", func(s *ShardSpec) { s.Sources[0].Journal = "a b" }, `sources[0].journal: journal name "a b" has character ' '`},
		{"source duplicate", func(s *ShardSpec) { s.Sources[1].Journal = s.Sources[0].Journal },
			`sources[1].journal: "examples/words/part-000" repeats sources[0]`},
		{"source minOffset negative", func(s *ShardSpec) { s.Sources[1].MinOffset = -1 }, "sources[1].minOffset: -1 is negative"},
		{"recoveryLogPrefix bad", func(s *ShardSpec) { s.RecoveryLogPrefix = "recovery/" }, `recoveryLogPrefix: journal name "recovery/" ends with '/'`},
		{"recoveryLogPrefix too long", func(s *ShardSpec) { s.RecoveryLogPrefix, s.ID = long, long },
			"recoveryLogPrefix: recovery log \"aaa"},
		{"hintPrefix missing", func(s *ShardSpec) { s.HintPrefix = "" }, "hintPrefix: missing; a shard with a recoveryLogPrefix needs a hintPrefix"},
		{"hintPrefix without log", func(s *ShardSpec) { s.RecoveryLogPrefix = "" }, `hintPrefix: "/quire/wordcount/hints/" is set, but recoveryLogPrefix is not`},
		{"hintPrefix no leading slash", func(s *ShardSpec) { s.HintPrefix = "quire/hints/" }, `hintPrefix: "quire/hints/" does not begin with '/'`},
		{"hintPrefix no trailing slash", func(s *ShardSpec) { s.HintPrefix = "/quire/hints" }, `hintPrefix: "/quire/hints" does not end with '/'`},
		{"hintPrefix root", func(s *ShardSpec) { s.HintPrefix = "/" }, ""},
		{"hintPrefix double slash", func(s *ShardSpec) { s.HintPrefix = "/quire//hints/" }, `hintPrefix: "/quire//hints/" is not a valid key prefix`},
		{"hintPrefix bad char", func(s *ShardSpec) { s.HintPrefix = "/quire hints/" }, `hintPrefix: "/quire hints/" is not a valid key prefix`},
		{"hintPrefix dot segment", func(s *ShardSpec) { s.HintPrefix = "/quire/./" }, `has a "." segment`},
		{"hintPrefix too long", func(s *ShardSpec) { s.HintPrefix = "/" + strings.Repeat("h", 513) + "/" }, "is 513 bytes, longer than 512"},
		{"hintBackups zero", func(s *ShardSpec) { s.HintBackups = intp(0) }, ""},
		{"hintBackups max", func(s *ShardSpec) { s.HintBackups = intp(16) }, ""},
		{"hintBackups negative", func(s *ShardSpec) { s.HintBackups = intp(-1) }, "hintBackups: -1 is below 0"},
		{"hintBackups too many", func(s *ShardSpec) { s.HintBackups = intp(17) }, "hintBackups: 17 is above 16"},
		{"minTxn negative", func(s *ShardSpec) { s.MinTxnDuration = -time.Second }, "minTxnDuration: -1s is negative"},
		{"minTxn too long", func(s *ShardSpec) { s.MinTxnDuration = 11 * time.Minute }, "minTxnDuration: 11m is longer than 10m"},
		{"maxTxn negative", func(s *ShardSpec) { s.MaxTxnDuration = -time.Millisecond }, "maxTxnDuration: -1ms is negative"},
		{"maxTxn too long", func(s *ShardSpec) { s.MaxTxnDuration = time.Hour }, "maxTxnDuration: 1h is longer than 10m"},
		{"maxTxn max", func(s *ShardSpec) { s.MaxTxnDuration = 10 * time.Minute }, ""},
		{"min above max", func(s *ShardSpec) { s.MinTxnDuration = 3 * time.Second }, "minTxnDuration: 3s is longer than maxTxnDuration (2s)"},
		{"min equals max", func(s *ShardSpec) { s.MinTxnDuration = s.MaxTxnDuration }, ""},
		{"min above default max", func(s *ShardSpec) { s.MinTxnDuration, s.MaxTxnDuration = 2*time.Second, 0 },
			"minTxnDuration: 2s is longer than maxTxnDuration (unset: 1s)"},
		{"hotStandbys negative", func(s *ShardSpec) { s.HotStandbys = -1 }, "hotStandbys: -1 is below 0"},
		{"hotStandbys too many", func(s *ShardSpec) { s.HotStandbys = 9 }, "hotStandbys: 9 is above 8"},
		{"hotStandbys max", func(s *ShardSpec) { s.HotStandbys = 8 }, ""},
		{"labels bad name", func(s *ShardSpec) { s.Labels = labels.Set{{Name: "-x", Value: "v"}} }, `labels: label set: label 0 ("-x=v")`},
		{"labels bad value", func(s *ShardSpec) { s.Labels = labels.Set{{Name: "x", Value: "a b"}} }, `labels: label set: label 0 ("x=a b")`},
		{"labels unsorted", func(s *ShardSpec) { s.Labels = labels.Set{{Name: "b", Value: "1"}, {Name: "a", Value: "1"}} }, "labels: label set: label 1 (\"a=1\") is out of order"},
		{"labels repeated", func(s *ShardSpec) { s.Labels = labels.Set{{Name: "a", Value: "1"}, {Name: "a", Value: "1"}} }, "repeats label 0"},
		{"labels reserved id", func(s *ShardSpec) { s.Labels = labels.Set{{Name: "id", Value: "x"}} }, `labels: name "id" is reserved`},
		{"labels reserved prefix", func(s *ShardSpec) { s.Labels = labels.Set{{Name: "prefix", Value: "x/"}} }, `labels: name "prefix" is reserved`},
		{"readBufferSize negative", func(s *ShardSpec) { s.ReadBufferSize = -1 }, "readBufferSize: -1 is below 0"},
		{"readBufferSize too big", func(s *ShardSpec) { s.ReadBufferSize = 1<<16 + 1 }, "readBufferSize: 65537 is above 65536"},
		{"readBufferSize max", func(s *ShardSpec) { s.ReadBufferSize = 1 << 16 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.modify(s)
			err := s.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				// Valid specs stay valid with their defaults applied.
				if err := s.WithDefaults().Validate(); err != nil {
					t.Fatalf("Validate after defaults: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if err := (*ShardSpec)(nil).Validate(); err == nil {
		t.Error("nil spec is valid")
	}
}

func TestApplyDefaults(t *testing.T) {
	s := &ShardSpec{ID: "x", Sources: []Source{{Journal: "j"}}, Labels: labels.Set{}}
	s.ApplyDefaults()
	want := &ShardSpec{ID: "x", Sources: []Source{{Journal: "j"}}, HintBackups: intp(2), MaxTxnDuration: time.Second, ReadBufferSize: 1024}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("ApplyDefaults = %+v, want %+v", s, want)
	}
	again := s.Clone()
	again.ApplyDefaults()
	if !reflect.DeepEqual(again, s) {
		t.Fatalf("ApplyDefaults is not idempotent: %+v", again)
	}
	// Set fields stay, including an explicit 0 hintBackups.
	v := validSpec()
	v.HintBackups = intp(0)
	d := v.WithDefaults()
	if !reflect.DeepEqual(d, v) {
		t.Fatalf("WithDefaults changed a complete spec: %+v", d)
	}
	if v.HintBackupCount() != 0 || (&ShardSpec{}).HintBackupCount() != 2 {
		t.Error("HintBackupCount")
	}
	// WithDefaults does not change its receiver.
	e := &ShardSpec{ID: "x"}
	e.WithDefaults()
	if e.HintBackups != nil || e.MaxTxnDuration != 0 {
		t.Error("WithDefaults changed its receiver")
	}
	(*ShardSpec)(nil).ApplyDefaults()
}

func TestClone(t *testing.T) {
	s := validSpec()
	c := s.Clone()
	c.Sources[0].Journal = "changed"
	*c.HintBackups = 9
	c.Labels[0].Value = "changed"
	if !reflect.DeepEqual(s, validSpec()) {
		t.Fatal("Clone shares memory with its original")
	}
}

func TestDesiredReplication(t *testing.T) {
	s := validSpec()
	if got := s.DesiredReplication(); got != 2 {
		t.Errorf("DesiredReplication = %d, want 2", got)
	}
	s.HotStandbys = 0
	if got := s.DesiredReplication(); got != 1 {
		t.Errorf("DesiredReplication = %d, want 1", got)
	}
	s.Disable = true
	if got := s.DesiredReplication(); got != 0 {
		t.Errorf("disabled DesiredReplication = %d, want 0", got)
	}
}

func TestNames(t *testing.T) {
	s := validSpec()
	if got := s.RecoveryLog(); got != "recovery/wordcount/wordcount/part-000" {
		t.Errorf("RecoveryLog = %q", got)
	}
	if got := s.HintKey(); got != "/quire/wordcount/hints/wordcount/part-000" {
		t.Errorf("HintKey = %q", got)
	}
	s.RecoveryLogPrefix, s.HintPrefix = "", ""
	if s.RecoveryLog() != "" || s.HintKey() != "" {
		t.Error("RecoveryLog or HintKey without prefixes")
	}
	got := s.LabelSetWithMeta().String()
	want := "app=wordcount,id=wordcount/part-000,prefix=wordcount/,region=eu,region=us"
	if got != want {
		t.Errorf("LabelSetWithMeta = %q, want %q", got, want)
	}
}

func TestMarshalShardSpec(t *testing.T) {
	raw, err := MarshalShardSpec(validSpec())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"wordcount/part-000","sources":[{"journal":"examples/words/part-000"},{"journal":"examples/words/part-001","minOffset":1024}],` +
		`"recoveryLogPrefix":"recovery/wordcount","hintPrefix":"/quire/wordcount/hints/","hintBackups":3,"minTxnDuration":"10ms",` +
		`"maxTxnDuration":"2s","hotStandbys":1,"labels":{"app":"wordcount","region":["eu","us"]},"readBufferSize":512}`
	if string(raw) != want {
		t.Fatalf("MarshalShardSpec =\n%s\nwant\n%s", raw, want)
	}
	got, err := UnmarshalShardSpec(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, validSpec()) {
		t.Fatalf("round trip = %+v", got)
	}

	// Defaults are applied, and hintBackups 0 is kept.
	min := &ShardSpec{ID: "x", Sources: []Source{{Journal: "j"}}, HintBackups: intp(0)}
	raw, err = MarshalShardSpec(min)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"id":"x","sources":[{"journal":"j"}],"hintBackups":0,"maxTxnDuration":"1s","readBufferSize":1024}`
	if string(raw) != want {
		t.Fatalf("MarshalShardSpec = %s, want %s", raw, want)
	}
	if min.MaxTxnDuration != 0 {
		t.Error("MarshalShardSpec changed its argument")
	}
	got, err = UnmarshalShardSpec(raw)
	if err != nil || *got.HintBackups != 0 {
		t.Fatalf("UnmarshalShardSpec = %+v, %v", got, err)
	}

	// Invalid specs are refused.
	bad := validSpec()
	bad.HotStandbys = 9
	if _, err := MarshalShardSpec(bad); err == nil || !strings.Contains(err.Error(), "hotStandbys: 9 is above 8") {
		t.Errorf("MarshalShardSpec(invalid) = %v", err)
	}
	if _, err := MarshalShardSpec(nil); err == nil {
		t.Error("MarshalShardSpec(nil) succeeded")
	}
	// json.Marshal uses the same form.
	if raw, _ := json.Marshal(validSpec().WithDefaults()); !strings.Contains(string(raw), `"hintBackups":3`) {
		t.Errorf("json.Marshal = %s", raw)
	}
}

func TestUnmarshalShardSpec(t *testing.T) {
	minimal := `{"id":"x","sources":[{"journal":"j"}]}`
	got, err := UnmarshalShardSpec([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	want := &ShardSpec{ID: "x", Sources: []Source{{Journal: "j"}}, HintBackups: intp(2), MaxTxnDuration: time.Second, ReadBufferSize: 1024}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("UnmarshalShardSpec = %+v, want %+v", got, want)
	}
	for _, tc := range []struct{ in, want string }{
		{``, "decoding shard spec"},
		{`[]`, "decoding shard spec"},
		{`{"id":"x","sources":[{"journal":"j"}],"bogus":1}`, `unknown field "bogus"`},
		{`{"ID":"x","sources":[{"journal":"j"}]}`, `unknown field "ID"`},
		{`{"id":"x","sources":[{"journal":"j","offset":1}]}`, `unknown field "offset"`},
		{`{"id":"x","id":"y","sources":[{"journal":"j"}]}`, `key "id" is repeated`},
		{`{"id":"x","sources":[{"journal":"j"}],"labels":{"a":"1","a":"2"}}`, `key "a" is repeated`},
		{`{"id":"x","sources":[{"journal":"j"}]} {}`, "trailing data"},
		{`{"id":"x","sources":[{"journal":"j"}]}x`, "decoding shard spec"},
		{`{"id":"x","sources":[{"journal":"j"}],"maxTxnDuration":"soon"}`, `maxTxnDuration: "soon" is not a duration`},
		{`{"id":"x","sources":[{"journal":"j"}],"maxTxnDuration":5}`, "decoding shard spec"},
		{`{"id":"x","sources":[{"journal":"j"}],"labels":{"a":1}}`, "labels.a: want a string or a list of strings"},
		{`{"id":"x","sources":[{"journal":"j"}],"labels":{"a":null}}`, "labels.a: want a string or a list of strings"},
		{`{"id":"x","sources":[{"journal":"j"}],"labels":{"a":["1","1"]}}`, "repeats label 0"},
		{`{"id":"x","sources":[{"journal":"j"}],"labels":{"id":"y"}}`, `labels: name "id" is reserved`},
		{`{"id":"x"}`, "sources: none"},
		{`{"id":"x","sources":[{"journal":"j","minOffset":-5}]}`, "sources[0].minOffset: -5 is negative"},
		{`{"id":"x","sources":[{"journal":"j"}],"hotStandbys":9}`, "hotStandbys: 9 is above 8"},
		{`{"id":"x","sources":[{"journal":"j"}],"hintBackups":-1}`, "hintBackups: -1 is below 0"},
		{`{"id":"x","sources":[{"journal":"j"}],"readBufferSize":1.5}`, "decoding shard spec"},
	} {
		_, err := UnmarshalShardSpec([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("UnmarshalShardSpec(%s) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	// Labels given in any order come back sorted.
	got, err = UnmarshalShardSpec([]byte(`{"id":"x","sources":[{"journal":"j"}],"labels":{"b":["2","1"],"a":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := got.Labels.String(); s != "a=x,b=1,b=2" {
		t.Errorf("labels = %q", s)
	}
}

func FuzzUnmarshalShardSpec(f *testing.F) {
	raw, _ := MarshalShardSpec(validSpec())
	f.Add(raw)
	f.Add([]byte(`{"id":"x","sources":[{"journal":"j"}]}`))
	f.Add([]byte(`{"id":"x","sources":[{"journal":"j"}],"labels":{"a":["1","2"]},"hintBackups":0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := UnmarshalShardSpec(data)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes, and decodes to the same spec.
		raw, err := MarshalShardSpec(s)
		if err != nil {
			t.Fatalf("MarshalShardSpec of a decoded spec: %v", err)
		}
		again, err := UnmarshalShardSpec(raw)
		if err != nil {
			t.Fatalf("UnmarshalShardSpec(%s): %v", raw, err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("round trip: %+v != %+v", again, s)
		}
	})
}
