package protocol

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestParseSpecFile(t *testing.T) {
	const file = `
defaults:            # applied to every journal before its own fields
  fragment: {length: 64MiB, codec: zstd, flushInterval: 1m, stores: ["file:///d/"]}
  labels: {app: wordcount, tier: [a, b]}
journals:
  - name: examples/words/part-000
    replication: 3
    labels: {app: wordcount}
  - name: examples/words/part-001
    replication: 2
    labels: {app: other, tier: [], region: [us, eu]}
    fragment:
      length: 1048576
      codec: CODEC_GZIP
      stores: [s3://bucket/words/, "file:///x/"]
      refreshInterval: 30s
      flushInterval: 0s
      retention: 720h
      fsync: true
    access: read-only
    maxAppendRate: 1MiB
`
	specs, err := ParseSpecFile([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := []*JournalSpec{{
		Name:        "examples/words/part-000",
		Replication: 3,
		Labels:      []*Label{{Name: "app", Value: "wordcount"}, {Name: "tier", Value: "a"}, {Name: "tier", Value: "b"}},
		Fragment: &JournalSpec_Fragment{
			Length: 64 << 20, Codec: Codec_CODEC_ZSTD, Stores: []string{"file:///d/"},
			RefreshInterval: durationpb.New(time.Minute), FlushInterval: durationpb.New(time.Minute),
		},
	}, {
		Name:        "examples/words/part-001",
		Replication: 2,
		Labels:      []*Label{{Name: "app", Value: "other"}, {Name: "region", Value: "eu"}, {Name: "region", Value: "us"}},
		Fragment: &JournalSpec_Fragment{
			Length: 1 << 20, Codec: Codec_CODEC_GZIP, Stores: []string{"s3://bucket/words/", "file:///x/"},
			RefreshInterval: durationpb.New(30 * time.Second), Retention: durationpb.New(720 * time.Hour), Fsync: true,
		},
		Access:        Access_READ_ONLY,
		MaxAppendRate: 1 << 20,
	}}
	checkSpecs(t, specs, want)

	// Only name and replication are needed; replication may come from defaults.
	specs, err = ParseSpecFile([]byte("defaults: {replication: 2}\njournals: [{name: a}, {name: b, replication: 1}]"))
	if err != nil {
		t.Fatal(err)
	}
	checkSpecs(t, specs, []*JournalSpec{
		(&JournalSpec{Name: "a", Replication: 2}).WithDefaults(),
		(&JournalSpec{Name: "b", Replication: 1}).WithDefaults(),
	})

	for _, empty := range []string{"", "# nothing\n", "~", "journals: []", "journals:", "defaults: {}\n"} {
		if specs, err := ParseSpecFile([]byte(empty)); err != nil || len(specs) != 0 {
			t.Errorf("ParseSpecFile(%q) = %v, %v", empty, specs, err)
		}
	}
}

func checkSpecs(t *testing.T, got, want []*JournalSpec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d specs, want %d: %v", len(got), len(want), got)
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("spec %d:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
}

func TestParseSpecFileErrors(t *testing.T) {
	for _, tc := range []struct{ file, err string }{
		{"journals:\n  - name: examples/x\n    replication: 1\n    fragment: {lenght: 5}\n",
			`journals[0] (examples/x): fragment: unknown field "lenght" (line 4)`},
		{"journals:\n- {name: a, replication: 1}\n- {name: a/b, replication: 1}\n- {name: c, replication: 1}\n- {name: examples/x, replication: 1, lenght: 5}\n",
			`journals[3] (examples/x): unknown field "lenght" (line 5)`},
		{"journals: [{name: a, replication: 1}, {name: a, replication: 2}]", "journals[1] (a): duplicate name; also journals[0]"},
		{"journals: [{replication: 1}]", "journals[0]: name: missing (line 1)"},
		{"journals: [{name: a}]", "journals[0] (a): replication: missing"},
		{"journals: [{name: 'a b', replication: 1}]", `journals[0] ("a b"): name: journal name "a b" has character ' '`},
		{"journals: [{name: a, replication: 0}]", "journals[0] (a): replication: 0 is below 1"},
		{"journals: [{name: a, replication: 99999999999}]", "journals[0] (a): replication: 99999999999 is above 16"},
		{"journals: [{name: a, replication: three}]", `journals[0] (a): replication: "three" is not an integer (line 1)`},
		{"journals: [{name: a, replication: 1.5}]", `replication: "1.5" is not an integer`},
		{"journals: [{name: a, replication: 1, fragment: {length: -5}}]", "journals[0] (a): fragment.length: -5 is negative"},
		{"journals: [{name: a, replication: 1, fragment: {length: 64MB}}]", `journals[0] (a): fragment.length: "64MB" is not a size`},
		{"journals: [{name: a, replication: 1, fragment: {length: [1]}}]", `fragment.length: a list is not a size`},
		{"journals: [{name: a, replication: 1, fragment: {codec: lz4}}]", `fragment.codec: "lz4" is not a codec (want none, gzip, zstd or snappy)`},
		{"journals: [{name: a, replication: 1, fragment: {codec: unspecified}}]", `fragment.codec: "unspecified" is not a codec`},
		{"journals: [{name: a, replication: 1, fragment: {flushInterval: 1 minute}}]", `fragment.flushInterval: "1 minute" is not a duration`},
		{"journals: [{name: a, replication: 1, fragment: {flushInterval: 60}}]", `fragment.flushInterval: "60" is not a duration`},
		{"journals: [{name: a, replication: 1, fragment: {retention: -1h}}]", "fragment.retention: -1h is negative"},
		{"journals: [{name: a, replication: 1, fragment: {refreshInterval: 10ms}}]", "fragment.refreshInterval: 10ms is shorter than 1s"},
		{"journals: [{name: a, replication: 1, fragment: {fsync: yes}}]", `fragment.fsync: "yes" is not true or false`},
		{"journals: [{name: a, replication: 1, fragment: {stores: file:///x/}}]", "fragment.stores: want a list"},
		{"journals: [{name: a, replication: 1, fragment: {stores: [ftp://x]}}]", `journals[0] (a): fragment.stores[0]: store URL "ftp://x": scheme "ftp" is not file, s3, gs or azure`},
		{"journals: [{name: a, replication: 1, fragment: {stores: [[x]]}}]", "fragment.stores[0]: want a single value"},
		{"journals: [{name: a, replication: 1, fragment: 5}]", "fragment: want a mapping"},
		{"journals: [{name: a, replication: 1, access: admin}]", `access: "admin" is not an access (want read-write, read-only or write-only)`},
		{"journals: [{name: a, replication: 1, maxAppendRate: -1}]", "maxAppendRate: -1 is negative"},
		{"journals: [{name: a, replication: 1, labels: {bad name: x}}]", `labels: invalid label name "bad name"`},
		{"journals: [{name: a, replication: 1, labels: {app: 'a b'}}]", `labels.app: invalid label value "a b"`},
		{"journals: [{name: a, replication: 1, labels: {app: [x, x]}}]", `labels.app: value "x" is repeated`},
		{"journals: [{name: a, replication: 1, labels: {app: {x: y}}}]", "labels.app: want a single value"},
		{"journals: [{name: a, replication: 1, labels: [app]}]", "labels: want a mapping"},
		{"journals: [{name: a, replication: 1, labels: {prefix: x/}}]", `labels[0]: name "prefix" is reserved`},
		{"journals: [{name: a, replication: 1, replication: 2}]", `journals[0] (a): key "replication" is repeated`},
		{"journals: [{name: a, replication: 1, [x]: 2}]", "keys must be plain strings"},
		{"journals: [a]", "journals[0]: want a mapping with name and replication"},
		{"journals: {name: a}", "journals: want a list of journals"},
		{"jounals: []", `unknown field "jounals" (line 1)`},
		{"[1, 2]", "want a mapping with journals"},
		{"journals: []\njournals: []", `key "journals" is repeated`},
		{"defaults: {name: x}", "defaults: name: not allowed here"},
		{"defaults: {fragment: {length: 5}}\njournals: [{name: a, replication: 1}]", "defaults: fragment.length: 5 is outside 1KiB to 4GiB"},
		{"defaults: {lenght: 5}", `defaults: unknown field "lenght"`},
		{"defaults: 5", "defaults: want a mapping"},
		{"journals: []\n---\njournals: []\n", "more than one YAML document (line 2)"},
		{"journals: [{name: a, replication: 1, fragment: &f {length: 1MiB}}, {name: b, replication: 1, fragment: *f}]", "anchors and aliases are not supported"},
		{"journals: [{name: a, replication: 1, <<: {x: 1}}]", `unknown field "<<"`},
		{"journals: [{name: a\n", "yaml:"},
		{"\tjournals: []", "yaml:"},
		// The parser names the line where the list began; the error names
		// the mis-indented entry's.
		{"journals:\n  - name: a\n    replication: 1\n   - name: b\n", "yaml: line 4: did not find expected '-' indicator"},
		{"defaults:\n  labels: {app: x}\njournals:\n  - name: a\n    replication: 1\n  - name: b\n    replication: [1\n", "yaml: line 7:"},
	} {
		_, err := ParseSpecFile([]byte(tc.file))
		checkErr(t, tc.file, err, tc.err)
	}
}

func TestFormatSpecFile(t *testing.T) {
	specs := []*JournalSpec{
		validSpec(),
		(&JournalSpec{Name: "b", Replication: 1, Labels: []*Label{{Name: "v", Value: "true"}, {Name: "w", Value: ""}, {Name: "x", Value: "1.0"}, {Name: "y", Value: "~"}}}).WithDefaults(),
		(&JournalSpec{Name: "c", Replication: 1, Fragment: &JournalSpec_Fragment{Length: 1500, Codec: Codec_CODEC_NONE}, MaxAppendRate: 7}).WithDefaults(),
	}
	out, err := FormatSpecFile(specs)
	if err != nil {
		t.Fatal(err)
	}
	const want = `journals:
  - name: examples/words/part-000
    replication: 3
    labels:
      app: wordcount
      region:
        - eu
        - us
    fragment:
      length: 64MiB
      codec: gzip
      stores:
        - file:///var/quire/
        - s3://bucket/prefix/?region=eu-west-1
      refreshInterval: 30s
      flushInterval: 1h
      retention: 720h
      fsync: true
    access: read-only
    maxAppendRate: 10MiB
  - name: b
    replication: 1
    labels:
      v: "true"
      w: ""
      x: "1.0"
      "y": "~"
    fragment:
      length: 128MiB
      codec: zstd
      refreshInterval: 1m
  - name: c
    replication: 1
    fragment:
      length: 1500
      codec: none
      refreshInterval: 1m
    maxAppendRate: 7
`
	if string(out) != want {
		t.Errorf("FormatSpecFile =\n%s\nwant\n%s", out, want)
	}
	back, err := ParseSpecFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkSpecs(t, back, specs)

	// Specs without defaults come back with them.
	bare := []*JournalSpec{{Name: "a", Replication: 1}}
	out, err = FormatSpecFile(bare)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "journals:\n  - name: a\n    replication: 1\n" {
		t.Errorf("FormatSpecFile(bare) = %q", out)
	}
	back, err = ParseSpecFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkSpecs(t, back, []*JournalSpec{bare[0].WithDefaults()})

	out, err = FormatSpecFile(nil)
	if err != nil || string(out) != "journals: []\n" {
		t.Errorf("FormatSpecFile(nil) = %q, %v", out, err)
	}

	for _, tc := range []struct {
		specs []*JournalSpec
		err   string
	}{
		{[]*JournalSpec{nil}, "journals[0]: missing"},
		{[]*JournalSpec{{Name: "a"}}, "journals[0] (a): replication: 0 is below 1"},
		{[]*JournalSpec{{Name: "a", Replication: 1}, {Name: "a", Replication: 1}}, "journals[1] (a): duplicate name; also journals[0]"},
	} {
		_, err := FormatSpecFile(tc.specs)
		checkErr(t, fmt.Sprint(tc.specs), err, tc.err)
	}
}

func FuzzParseSpecFile(f *testing.F) {
	for _, s := range []string{
		"",
		"journals: [{name: a, replication: 1}]",
		"defaults: {replication: 2, labels: {a: b}}\njournals: [{name: a/b, labels: {a: [c, d]}}]",
		"journals:\n  - name: x\n    replication: 3\n    fragment: {length: 64MiB, codec: gzip, stores: ['file:///x/'], flushInterval: 1m, retention: 1h, fsync: true}\n    access: write-only\n    maxAppendRate: 1KiB\n",
		"journals: [{name: a, replication: 1, fragment: &f {length: 1MiB}}, {name: b, replication: 1, fragment: *f}]",
		"journals: []\n---\n",
		"journals: [{name: a, replication: 99999999999999999999}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := ParseSpecFile(data)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("empty error")
			}
			return
		}
		// What parses is valid, and round-trips through FormatSpecFile.
		for i, s := range specs {
			if err := s.Validate(); err != nil {
				t.Fatalf("spec %d is invalid: %v", i, err)
			}
		}
		out, err := FormatSpecFile(specs)
		if err != nil {
			t.Fatalf("FormatSpecFile: %v", err)
		}
		back, err := ParseSpecFile(out)
		if err != nil {
			t.Fatalf("ParseSpecFile(FormatSpecFile(...)): %v\n%s", err, out)
		}
		if len(back) != len(specs) {
			t.Fatalf("round trip: %d specs, want %d", len(back), len(specs))
		}
		for i := range specs {
			if !proto.Equal(back[i], specs[i]) {
				t.Fatalf("round trip of spec %d: got %v, want %v\n%s", i, back[i], specs[i], out)
			}
			// And through etcd.
			raw, err := MarshalSpec(specs[i])
			if err != nil {
				t.Fatalf("MarshalSpec: %v", err)
			}
			if u, err := UnmarshalSpec(raw); err != nil || !proto.Equal(u, specs[i]) {
				t.Fatalf("etcd round trip: %v, %v", u, err)
			}
		}
	})
}

// SpecJSON writes sizes as bytes and labels as a map, and a spec file of
// it (JSON is YAML) reads back as the spec.
func TestSpecJSON(t *testing.T) {
	spec := validSpec()
	raw, err := SpecJSON(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"length":67108864`, `"maxAppendRate":10485760`, `"labels":{"app":"wordcount","region":["eu","us"]}`, `"retention":"720h"`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("SpecJSON = %s, which lacks %s", raw, want)
		}
	}
	back, err := ParseSpecFile([]byte(`{"journals": [` + string(raw) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	checkSpecs(t, back, []*JournalSpec{spec})
	if _, err := SpecJSON(&JournalSpec{Name: "//"}); err == nil {
		t.Error("SpecJSON of an invalid spec succeeded")
	}
}
