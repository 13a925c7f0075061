package protocol

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/labels"
)

// A decoded spec is an allocator item value.
var _ allocator.ItemValue = (*JournalSpec)(nil)

// validSpec returns a valid spec with every field set.
func validSpec() *JournalSpec {
	return &JournalSpec{
		Name:        "examples/words/part-000",
		Replication: 3,
		Labels:      []*Label{{Name: "app", Value: "wordcount"}, {Name: "region", Value: "eu"}, {Name: "region", Value: "us"}},
		Fragment: &JournalSpec_Fragment{
			Length:          64 << 20,
			Codec:           Codec_CODEC_GZIP,
			Stores:          []string{"file:///var/quire/", "s3://bucket/prefix/?region=eu-west-1"},
			RefreshInterval: durationpb.New(30 * time.Second),
			FlushInterval:   durationpb.New(time.Hour),
			Retention:       durationpb.New(720 * time.Hour),
			Fsync:           true,
		},
		Access:        Access_READ_ONLY,
		MaxAppendRate: 10 << 20,
	}
}

func TestJournalSpecValidate(t *testing.T) {
	dur := durationpb.New
	for _, tc := range []struct {
		desc string
		edit func(s *JournalSpec)
		err  string
	}{
		{"valid", func(s *JournalSpec) {}, ""},
		{"minimal", func(s *JournalSpec) { *s = JournalSpec{Name: "a", Replication: 1} }, ""},
		{"empty fragment", func(s *JournalSpec) { s.Fragment = &JournalSpec_Fragment{} }, ""},
		{"no name", func(s *JournalSpec) { s.Name = "" }, "name: journal name is empty"},
		{"bad name", func(s *JournalSpec) { s.Name = "a//b" }, `name: journal name "a//b" has an empty segment`},
		{"replication 0", func(s *JournalSpec) { s.Replication = 0 }, "replication: 0 is below 1"},
		{"replication -1", func(s *JournalSpec) { s.Replication = -1 }, "replication: -1 is below 1"},
		{"replication 16", func(s *JournalSpec) { s.Replication = 16 }, ""},
		{"replication 17", func(s *JournalSpec) { s.Replication = 17 }, "replication: 17 is above 16"},
		{"label name", func(s *JournalSpec) { s.Labels[2].Name = "bad name" }, `labels[2]: invalid label name "bad name"`},
		{"label value", func(s *JournalSpec) { s.Labels[0].Value = "a=b" }, `labels[0]: invalid label value "a=b"`},
		{"label empty value", func(s *JournalSpec) { s.Labels[0].Value = "" }, ""},
		{"label nil", func(s *JournalSpec) { s.Labels[1] = nil }, "labels[1]: missing"},
		{"labels unsorted", func(s *JournalSpec) { s.Labels[0].Name = "zz" }, `labels[1]: "region=eu" is out of order`},
		{"labels repeated", func(s *JournalSpec) { s.Labels[2].Value = "eu" }, `labels[2]: "region=eu" repeats labels[1]`},
		{"label name reserved", func(s *JournalSpec) { s.Labels[0].Name = "name" }, `labels[0]: name "name" is reserved`},
		{"label prefix reserved", func(s *JournalSpec) { s.Labels = []*Label{{Name: "prefix", Value: "a/"}} }, `labels[0]: name "prefix" is reserved`},
		{"length negative", func(s *JournalSpec) { s.Fragment.Length = -5 }, "fragment.length: -5 is negative"},
		{"length small", func(s *JournalSpec) { s.Fragment.Length = 1023 }, "fragment.length: 1023 is outside 1KiB to 4GiB"},
		{"length min", func(s *JournalSpec) { s.Fragment.Length = 1024 }, ""},
		{"length max", func(s *JournalSpec) { s.Fragment.Length = 4 << 30 }, ""},
		{"length big", func(s *JournalSpec) { s.Fragment.Length = 4<<30 + 1 }, "fragment.length: 4294967297 is outside"},
		{"codec unknown", func(s *JournalSpec) { s.Fragment.Codec = 99 }, "fragment.codec: 99 is not a known codec"},
		{"codec unspecified", func(s *JournalSpec) { s.Fragment.Codec = Codec_CODEC_UNSPECIFIED }, ""},
		{"no stores", func(s *JournalSpec) { s.Fragment.Stores = nil }, ""},
		{"bad store", func(s *JournalSpec) { s.Fragment.Stores[0] = "ftp://x" }, `fragment.stores[0]: store URL "ftp://x": scheme "ftp" is not file, s3, gs or azure`},
		{"repeated store", func(s *JournalSpec) { s.Fragment.Stores[1] = s.Fragment.Stores[0] }, `fragment.stores[1]: "file:///var/quire/" repeats fragment.stores[0]`},
		{"too many stores", func(s *JournalSpec) {
			s.Fragment.Stores = nil
			for i := range 17 {
				s.Fragment.Stores = append(s.Fragment.Stores, "file:///s"+string(rune('a'+i))+"/")
			}
		}, "fragment.stores: 17 stores, more than 16"},
		{"refresh short", func(s *JournalSpec) { s.Fragment.RefreshInterval = dur(999 * time.Millisecond) }, "fragment.refreshInterval: 999ms is shorter than 1s"},
		{"refresh negative", func(s *JournalSpec) { s.Fragment.RefreshInterval = dur(-time.Minute) }, "fragment.refreshInterval: -1m is negative"},
		{"refresh zero", func(s *JournalSpec) { s.Fragment.RefreshInterval = dur(0) }, ""},
		{"refresh 1s", func(s *JournalSpec) { s.Fragment.RefreshInterval = dur(time.Second) }, ""},
		{"flush negative", func(s *JournalSpec) { s.Fragment.FlushInterval = dur(-time.Second) }, "fragment.flushInterval: -1s is negative"},
		{"flush invalid", func(s *JournalSpec) { s.Fragment.FlushInterval = &durationpb.Duration{Seconds: 1, Nanos: -1} }, "fragment.flushInterval: {seconds: 1, nanos: -1} is not a valid duration"},
		{"retention negative", func(s *JournalSpec) { s.Fragment.Retention = dur(-time.Hour) }, "fragment.retention: -1h is negative"},
		{"retention huge", func(s *JournalSpec) { s.Fragment.Retention = &durationpb.Duration{Seconds: 315576000000} }, "fragment.retention: 315576000000s is too long"},
		{"access unknown", func(s *JournalSpec) { s.Access = 7 }, "access: 7 is not a known access"},
		{"rate negative", func(s *JournalSpec) { s.MaxAppendRate = -1 }, "maxAppendRate: -1 is negative"},
		{"rate zero", func(s *JournalSpec) { s.MaxAppendRate = 0 }, ""},
	} {
		s := validSpec()
		tc.edit(s)
		checkErr(t, tc.desc, s.Validate(), tc.err)
	}
	var nilSpec *JournalSpec
	checkErr(t, "nil", nilSpec.Validate(), "spec: missing")
}

func TestApplyDefaults(t *testing.T) {
	s := &JournalSpec{Name: "a", Replication: 2, Fragment: &JournalSpec_Fragment{
		FlushInterval: durationpb.New(0), Retention: durationpb.New(0), RefreshInterval: durationpb.New(0),
	}}
	s.ApplyDefaults()
	want := &JournalSpec{Name: "a", Replication: 2, Fragment: &JournalSpec_Fragment{
		Length:          DefaultFragmentLength,
		Codec:           Codec_CODEC_ZSTD,
		RefreshInterval: durationpb.New(time.Minute),
	}}
	if !proto.Equal(s, want) {
		t.Errorf("ApplyDefaults = %v, want %v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("defaults are invalid: %v", err)
	}
	again := proto.Clone(s).(*JournalSpec)
	again.ApplyDefaults()
	if !proto.Equal(s, again) {
		t.Errorf("ApplyDefaults is not idempotent: %v, then %v", s, again)
	}

	// Set fields are kept.
	full := validSpec()
	if d := full.WithDefaults(); !proto.Equal(d, full) {
		t.Errorf("WithDefaults changed a full spec: %v", d)
	}
	// WithDefaults leaves its receiver alone.
	bare := &JournalSpec{Name: "a", Replication: 1}
	bare.WithDefaults()
	if bare.Fragment != nil {
		t.Errorf("WithDefaults changed its receiver")
	}
}

func TestDesiredReplication(t *testing.T) {
	var v allocator.ItemValue = validSpec()
	if got := v.DesiredReplication(); got != 3 {
		t.Errorf("DesiredReplication = %d", got)
	}
}

func TestLabelConversion(t *testing.T) {
	ls := []*Label{{Name: "b", Value: "2"}, nil, {Name: "a", Value: "1"}, {Name: "b", Value: "2"}}
	got := LabelsOf(ls)
	want := labels.Set{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}}
	if !got.Equal(want) {
		t.Errorf("LabelsOf = %v, want %v", got, want)
	}
	back := ProtoLabels(got)
	if len(back) != 2 || back[0].Name != "a" || back[1].Value != "2" {
		t.Errorf("ProtoLabels = %v", back)
	}
	if LabelsOf(nil) != nil || ProtoLabels(nil) != nil {
		t.Errorf("empty conversions are not nil")
	}
	if err := ValidateLabels("labels", back); err != nil {
		t.Errorf("ProtoLabels gives an invalid list: %v", err)
	}
}

func TestLabelSetWithMeta(t *testing.T) {
	s := &JournalSpec{Name: "examples/words/part-000", Labels: []*Label{{Name: "app", Value: "wc"}, {Name: "zone", Value: "x"}}}
	got := s.LabelSetWithMeta()
	want := "app=wc,name=examples/words/part-000,prefix=examples/,prefix=examples/words/,zone=x"
	if got.String() != want {
		t.Errorf("LabelSetWithMeta = %s, want %s", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("LabelSetWithMeta is not a valid set: %v", err)
	}
	for sel, match := range map[string]bool{
		"prefix=examples/":                  true,
		"prefix=examples/words/":            true,
		"prefix=examples/w":                 false,
		"name=examples/words/part-000":      true,
		"app=wc, prefix in (x/, examples/)": true,
		"!prefix":                           false,
	} {
		if got := labels.MustParseSelector(sel).Matches(got); got != match {
			t.Errorf("selector %q matches = %v, want %v", sel, got, match)
		}
	}
	flat := (&JournalSpec{Name: "top"}).LabelSetWithMeta()
	if flat.String() != "name=top" {
		t.Errorf("LabelSetWithMeta of top = %s", flat)
	}
}

// Codecs are named as spec files and flags name them, in any case, with
// or without the enum's prefix; "unspecified" is no codec a user picks.
func TestCodecNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		want Codec
		ok   bool
	}{
		{"none", Codec_CODEC_NONE, true},
		{"ZSTD", Codec_CODEC_ZSTD, true},
		{"codec_gzip", Codec_CODEC_GZIP, true},
		{"Snappy", Codec_CODEC_SNAPPY, true},
		{"unspecified", 0, false},
		{"CODEC_UNSPECIFIED", 0, false},
		{"lz4", 0, false},
		{"", 0, false},
	} {
		if got, ok := CodecNamed(tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("CodecNamed(%q) = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
