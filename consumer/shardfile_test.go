package consumer

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/labels"
)

const exampleFile = `
defaults: {recoveryLogPrefix: recovery/wordcount, hintPrefix: /quire/wordcount/hints/, hotStandbys: 1, labels: {app: wordcount}}
shards:
  - id: wordcount/part-000
    sources: [{journal: examples/words/part-000}]
  - id: wordcount/part-001
    sources:
      - journal: examples/words/part-001
        minOffset: 4096
      - examples/words/extra
    hintBackups: 0
    minTxnDuration: 50ms
    maxTxnDuration: 1m30s
    hotStandbys: 0
    disable: true
    labels: {region: [eu, us]}
    readBufferSize: 64
  - id: wordcount/part-002
    sources: [{journal: examples/words/part-002}]
    recoveryLogPrefix: ""
    hintPrefix: ""
    labels: {app: [], tier: gold}
`

func TestParseShardFile(t *testing.T) {
	specs, err := ParseShardFile([]byte(exampleFile))
	if err != nil {
		t.Fatal(err)
	}
	app := labels.Label{Name: "app", Value: "wordcount"}
	want := []*ShardSpec{{
		ID:                "wordcount/part-000",
		Sources:           []Source{{Journal: "examples/words/part-000"}},
		RecoveryLogPrefix: "recovery/wordcount",
		HintPrefix:        "/quire/wordcount/hints/",
		HintBackups:       intp(2),
		MaxTxnDuration:    time.Second,
		HotStandbys:       1,
		Labels:            labels.Set{app},
		ReadBufferSize:    1024,
	}, {
		ID:                "wordcount/part-001",
		Sources:           []Source{{Journal: "examples/words/part-001", MinOffset: 4096}, {Journal: "examples/words/extra"}},
		RecoveryLogPrefix: "recovery/wordcount",
		HintPrefix:        "/quire/wordcount/hints/",
		HintBackups:       intp(0),
		MinTxnDuration:    50 * time.Millisecond,
		MaxTxnDuration:    90 * time.Second,
		Disable:           true,
		Labels:            labels.Set{app, {Name: "region", Value: "eu"}, {Name: "region", Value: "us"}},
		ReadBufferSize:    64,
	}, {
		ID:             "wordcount/part-002",
		Sources:        []Source{{Journal: "examples/words/part-002"}},
		HintBackups:    intp(2),
		MaxTxnDuration: time.Second,
		HotStandbys:    1,
		Labels:         labels.Set{{Name: "tier", Value: "gold"}},
		ReadBufferSize: 1024,
	}}
	if !reflect.DeepEqual(specs, want) {
		for i := range specs {
			t.Logf("got[%d] = %+v", i, specs[i])
		}
		t.Fatal("ParseShardFile differs")
	}

	// Round trip.
	out, err := FormatShardFile(specs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseShardFile(out)
	if err != nil {
		t.Fatalf("ParseShardFile(FormatShardFile):\n%s\n%v", out, err)
	}
	if !reflect.DeepEqual(again, specs) {
		t.Fatalf("round trip differs:\n%s", out)
	}
}

func TestParseShardFileEmpty(t *testing.T) {
	for _, in := range []string{"", "# nothing\n", "~", "shards:", "shards: []", "defaults: {hotStandbys: 1}"} {
		specs, err := ParseShardFile([]byte(in))
		if err != nil || len(specs) != 0 {
			t.Errorf("ParseShardFile(%q) = %v, %v", in, specs, err)
		}
	}
}

func TestParseShardFileErrors(t *testing.T) {
	const src = "\n    sources: [j]"
	for _, tc := range []struct{ in, want string }{
		{"[]", "want a mapping with shards and, optionally, defaults (line 1)"},
		{"shard: []", `unknown field "shard" (line 1)`},
		{"shards: {}", "shards: want a list of shards (line 1)"},
		{"shards: [x]", "shards[0]: want a mapping with id and sources (line 1)"},
		{"shards:\n  - sources: [j]", "shards[0]: id: missing (line 2)"},
		{"shards:\n  - id: a", "shards[0] (a): sources: missing (line 2)"},
		{"shards:\n  - id: a\n    sources: []", "shards[0] (a): sources: none; a shard reads at least one journal (line 2)"},
		{"shards:\n  - id: a" + src + "\n    hotStandby: 1", `shards[0] (a): unknown field "hotStandby" (line 4)`},
		{"shards:\n  - id: a" + src + "\n    hotStandbys: 9", "shards[0] (a): hotStandbys: 9 is above 8 (line 2)"},
		{"shards:\n  - id: a" + src + "\n    hotStandbys: 1.5", `shards[0] (a): hotStandbys: "1.5" is not an integer (line 4)`},
		{"shards:\n  - id: a" + src + "\n    hotStandbys: 99999999999", "hotStandbys: 99999999999 is out of range (line 4)"},
		{"shards:\n  - id: a" + src + "\n    disable: yes", `disable: "yes" is not true or false (line 4)`},
		{"shards:\n  - id: a" + src + "\n    maxTxnDuration: soon", `maxTxnDuration: "soon" is not a duration`},
		{"shards:\n  - id: a" + src + "\n    maxTxnDuration: [1s]", `maxTxnDuration: a list is not a duration`},
		{"shards:\n  - id: a" + src + "\n    minTxnDuration: 2s", "minTxnDuration: 2s is longer than maxTxnDuration (1s)"},
		{"shards:\n  - id: a" + src + "\n    id: b", `shards[0] (a): key "id" is repeated (line 4)`},
		{"shards:\n  - id: a b" + src, `shards[0] ("a b"): id: shard ID "a b" has character ' '`},
		{"shards:\n  - id: [a]" + src, "shards[0]: id: want a single value (line 2)"},
		{"shards:\n  - id: a\n    sources: j", "sources: want a list of sources (line 3)"},
		{"shards:\n  - id: a\n    sources: [[j]]", "sources[0]: want a mapping with journal"},
		{"shards:\n  - id: a\n    sources: [{minOffset: 1}]", "sources[0].journal: missing (line 3)"},
		{"shards:\n  - id: a\n    sources: [{journal: j, offset: 1}]", `sources[0]: unknown field "offset" (line 3)`},
		{"shards:\n  - id: a\n    sources: [{journal: j, minOffset: x}]", `sources[0].minOffset: "x" is not an integer`},
		{"shards:\n  - id: a\n    sources: [{journal: j, minOffset: -1}]", "sources[0].minOffset: -1 is negative"},
		{"shards:\n  - id: a\n    sources: [j, j]", `sources[1].journal: "j" repeats sources[0]`},
		{"shards:\n  - id: a" + src + "\n  - id: a" + src, "shards[1] (a): id is repeated; also shards[0] (line 4)"},
		{"shards:\n  - id: a" + src + "\n    labels: {-x: 1}", `labels: invalid label name "-x"`},
		{"shards:\n  - id: a" + src + "\n    labels: {x: a b}", `labels.x: invalid label value "a b"`},
		{"shards:\n  - id: a" + src + "\n    labels: {x: [1, 1]}", `labels.x: value "1" is repeated`},
		{"shards:\n  - id: a" + src + "\n    labels: {x: {y: z}}", "labels.x: want a single value"},
		{"shards:\n  - id: a" + src + "\n    labels: [x]", "labels: want a mapping of label names"},
		{"shards:\n  - id: a" + src + "\n    labels: {id: x}", `labels: name "id" is reserved`},
		{"shards:\n  - id: a" + src + "\n    hintPrefix: /h/", `hintPrefix: "/h/" is set, but recoveryLogPrefix is not`},
		{"shards:\n  - id: a" + src + "\n    recoveryLogPrefix: r", "hintPrefix: missing"},
		{"defaults: {id: a}", "defaults: id: not allowed in defaults"},
		{"defaults: {sources: [j]}", "defaults: sources: not allowed in defaults"},
		{"defaults: {hotStandbys: 9}", "defaults: hotStandbys: 9 is above 8 (line 1)"},
		{"defaults: {hintPrefix: nope}", `defaults: hintPrefix: "nope" does not begin with '/'`},
		{"defaults: {minTxnDuration: 11m}", "defaults: minTxnDuration: 11m is longer than 10m"},
		{"defaults: {bogus: 1}", `defaults: unknown field "bogus" (line 1)`},
		{"defaults: []", "defaults: want a mapping (line 1)"},
		{"defaults: {}\ndefaults: {}", `key "defaults" is repeated (line 2)`},
		{"shards: &a []", "anchors and aliases are not supported (line 1)"},
		{"x: &a 1\nshards: *a", "anchors and aliases are not supported"},
		{"shards: []\n---\nshards: []", "more than one YAML document"},
		{"shards: [", "yaml:"},
		{"{[a]: 1}", "keys must be plain strings"},
		{"shards: " + strings.Repeat("[", 70) + strings.Repeat("]", 70), "nested more than 64 levels deep"},
	} {
		specs, err := ParseShardFile([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseShardFile(%q) = %v, %v; want an error containing %q", tc.in, specs, err, tc.want)
		}
	}
}

// Defaults that need an entry to complete them are accepted on their own.
func TestParseShardFilePartialDefaults(t *testing.T) {
	for _, in := range []string{
		"defaults: {hintPrefix: /h/}\nshards: [{id: a, sources: [j], recoveryLogPrefix: r}]",
		"defaults: {recoveryLogPrefix: r}\nshards: [{id: a, sources: [j], hintPrefix: /h/}]",
		"defaults: {minTxnDuration: 2s}\nshards: [{id: a, sources: [j], maxTxnDuration: 5s}]",
		"defaults: {recoveryLogPrefix: r, hintPrefix: \"\"}\nshards: [{id: a, sources: [j], hintPrefix: /h/}]",
	} {
		if _, err := ParseShardFile([]byte(in)); err != nil {
			t.Errorf("ParseShardFile(%q): %v", in, err)
		}
	}
}

func TestFormatShardFile(t *testing.T) {
	s := validSpec()
	min := (&ShardSpec{ID: "null", Sources: []Source{{Journal: "true"}}}).WithDefaults()
	out, err := FormatShardFile([]*ShardSpec{s, min})
	if err != nil {
		t.Fatal(err)
	}
	want := `shards:
  - id: wordcount/part-000
    sources:
      - journal: examples/words/part-000
      - journal: examples/words/part-001
        minOffset: 1024
    recoveryLogPrefix: recovery/wordcount
    hintPrefix: /quire/wordcount/hints/
    hintBackups: 3
    minTxnDuration: 10ms
    maxTxnDuration: 2s
    hotStandbys: 1
    labels:
      app: wordcount
      region:
        - eu
        - us
    readBufferSize: 512
  - id: "null"
    sources:
      - journal: "true"
    hintBackups: 2
    maxTxnDuration: 1s
    readBufferSize: 1024
`
	if string(out) != want {
		t.Fatalf("FormatShardFile =\n%s\nwant\n%s", out, want)
	}
	back, err := ParseShardFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, []*ShardSpec{s, min}) {
		t.Fatalf("round trip differs: %+v", back)
	}

	// Specs without defaults come back with them.
	raw := &ShardSpec{ID: "a", Sources: []Source{{Journal: "j"}}}
	out, err = FormatShardFile([]*ShardSpec{raw})
	if err != nil {
		t.Fatal(err)
	}
	back, err = ParseShardFile(out)
	if err != nil || !reflect.DeepEqual(back, []*ShardSpec{raw.WithDefaults()}) {
		t.Fatalf("ParseShardFile = %+v, %v", back, err)
	}

	// Empty.
	out, err = FormatShardFile(nil)
	if err != nil || string(out) != "shards: []\n" {
		t.Fatalf("FormatShardFile(nil) = %q, %v", out, err)
	}

	bad := validSpec()
	bad.HotStandbys = -1
	for _, tc := range []struct {
		specs []*ShardSpec
		want  string
	}{
		{[]*ShardSpec{nil}, "shards[0]: missing"},
		{[]*ShardSpec{bad}, "shards[0] (wordcount/part-000): hotStandbys: -1 is below 0"},
		{[]*ShardSpec{s, s}, "shards[1] (wordcount/part-000): id is repeated; also shards[0]"},
		{[]*ShardSpec{{ID: "a b", Sources: []Source{{Journal: "j"}}}}, `shards[0] ("a b"): id: shard ID "a b"`},
	} {
		if _, err := FormatShardFile(tc.specs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FormatShardFile = %v, want an error containing %q", err, tc.want)
		}
	}
}

// The shard file and etcd forms agree.
func TestShardFileAndJSON(t *testing.T) {
	specs, err := ParseShardFile([]byte(exampleFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		raw, err := MarshalShardSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := UnmarshalShardSpec(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Errorf("JSON round trip of %s: %+v", s.ID, got)
		}
	}
}

func FuzzParseShardFile(f *testing.F) {
	f.Add([]byte(exampleFile))
	f.Add([]byte("shards:\n  - id: a\n    sources: [j]\n"))
	f.Add([]byte("defaults: {labels: {a: [x, y]}, hintBackups: 0}\nshards: [{id: a/b, sources: [{journal: j, minOffset: 5}], labels: {a: []}}]"))
	f.Add([]byte("shards: [{id: \"null\", sources: [\"1.0\"], maxTxnDuration: 10m, minTxnDuration: 10m}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		specs, err := ParseShardFile(data)
		if err != nil {
			return
		}
		out, err := FormatShardFile(specs)
		if err != nil {
			t.Fatalf("FormatShardFile of parsed specs: %v", err)
		}
		again, err := ParseShardFile(out)
		if err != nil {
			t.Fatalf("ParseShardFile(FormatShardFile):\n%s\n%v", out, err)
		}
		if len(specs) == 0 && len(again) == 0 {
			return
		}
		if !reflect.DeepEqual(again, specs) {
			t.Fatalf("round trip differs:\n%s", out)
		}
		for _, s := range specs {
			raw, err := MarshalShardSpec(s)
			if err != nil {
				t.Fatalf("MarshalShardSpec: %v", err)
			}
			if back, err := UnmarshalShardSpec(raw); err != nil || !reflect.DeepEqual(back, s) {
				t.Fatalf("JSON round trip of %s: %v", raw, err)
			}
		}
	})
}
