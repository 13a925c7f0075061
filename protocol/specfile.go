package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/internal/yamlspec"
)

// ParseSpecFile parses a spec file. It returns the journals' specs, in the
// file's order, each with the file's defaults and then ApplyDefaults
// applied, and validated. Errors name the entry and the field, such as
// `journals[3] (examples/x): unknown field "lenght" (line 12)` or
// `journals[0] (a/b): fragment.length: -5 is negative`.
//
// A spec file is the YAML form of a list of journal specs: what
// `quire journals apply -f` reads, and what `quire journals list -o yaml`
// and `quire journals edit` write.
//
//	defaults:                  # optional: applied to every journal first
//	  replication: 3
//	  fragment: {length: 64MiB, codec: zstd, flushInterval: 1m}
//	  labels: {app: wordcount}
//	journals:
//	  - name: examples/words/part-000
//	    replication: 3
//	    labels: {app: wordcount, region: [eu, us]}
//	    fragment:
//	      length: 128MiB
//	      codec: zstd          # none, gzip, zstd or snappy
//	      stores: [file:///var/quire/fragments/]
//	      refreshInterval: 1m
//	      flushInterval: 1h
//	      retention: 720h
//	      fsync: false
//	    access: read-write     # read-write, read-only or write-only
//	    maxAppendRate: 10MiB   # bytes per second; 0 is unlimited
//
// Field names are those of the specs' JSON form (see MarshalSpec). Each
// journal needs only a name and a replication (which may come from
// defaults); every other field has a default (see ApplyDefaults). Sizes
// (length, maxAppendRate) are integers or strings with a binary unit
// ("64MiB", see ParseSize); durations use Go's syntax ("30s", "1h30m").
// Codec and access names are case insensitive, and also accepted in
// their proto form (CODEC_ZSTD, READ_ONLY).
//
// Labels are a map from name to value, or to a list of values for a name
// with several. A journal's labels replace the default labels of the same
// name and keep the others; a name given an empty list ("region: []")
// drops a default label.
//
// A journal's fields override those of defaults; stores is replaced as a
// whole. Parsing is strict: unknown fields, repeated keys, a journal named
// twice, anchors and aliases, and more than one YAML document are errors.
func ParseSpecFile(data []byte) (specs []*JournalSpec, err error) {
	root, err := yamlspec.Decode(data)
	if err != nil || root == nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, yamlspec.Error(root, "", "want a mapping with journals and, optionally, defaults")
	}
	var defaults specPatch
	var journals *yaml.Node
	err = yamlspec.EachField(root, "", func(key string, v *yaml.Node) error {
		switch key {
		case "defaults":
			if err := defaults.parse(v, "", false); err != nil {
				return prefixError("defaults", err)
			}
			return defaults.check()
		case "journals":
			journals = v
			return nil
		}
		return yamlspec.UnknownField(v, "", key)
	})
	if err != nil {
		return nil, err
	}
	if journals == nil || yamlspec.IsNull(journals) {
		return nil, nil
	}
	if journals.Kind != yaml.SequenceNode {
		return nil, yamlspec.Error(journals, "journals", "want a list of journals")
	}
	seen := make(map[string]int, len(journals.Content))
	for i, entry := range journals.Content {
		ctx := entryContext(i, entry)
		spec, err := parseEntry(entry, &defaults)
		if err != nil {
			return nil, prefixError(ctx, err)
		}
		if j, ok := seen[spec.Name]; ok {
			return nil, fmt.Errorf("%s: duplicate name; also journals[%d]", ctx, j)
		}
		seen[spec.Name] = i
		specs = append(specs, spec)
	}
	return specs, nil
}

// entryContext names journals[i] for errors, with its name if it has one.
func entryContext(i int, entry *yaml.Node) string {
	ctx := fmt.Sprintf("journals[%d]", i)
	if entry.Kind != yaml.MappingNode {
		return ctx
	}
	for j := 0; j+1 < len(entry.Content); j += 2 {
		k, v := entry.Content[j], entry.Content[j+1]
		if k.Kind == yaml.ScalarNode && k.Value == "name" && v.Kind == yaml.ScalarNode && !yamlspec.IsNull(v) {
			return fmt.Sprintf("%s (%s)", ctx, quoteIfOdd(v.Value))
		}
	}
	return ctx
}

// quoteIfOdd quotes s unless it is a plain journal name.
func quoteIfOdd(s string) string {
	if ValidateJournalName(s) == nil {
		return s
	}
	return quoteShort(s)
}

// parseEntry returns the spec of one journal entry, with defaults applied
// and validated.
func parseEntry(entry *yaml.Node, defaults *specPatch) (*JournalSpec, error) {
	if entry.Kind != yaml.MappingNode {
		return nil, yamlspec.Error(entry, "", "want a mapping with name and replication")
	}
	var p specPatch
	if err := p.parse(entry, "", true); err != nil {
		return nil, err
	}
	if p.name == nil {
		return nil, yamlspec.Error(entry, "name", "missing")
	}
	if p.replication == nil && defaults.replication == nil {
		return nil, yamlspec.Error(entry, "replication", "missing")
	}
	spec := &JournalSpec{Name: *p.name}
	defaults.applyTo(spec)
	p.applyTo(spec)
	spec.ApplyDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return spec, nil
}

// specPatch holds the fields given in an entry, or in defaults: nil fields
// were not given.
type specPatch struct {
	name          *string
	replication   *int32
	labels        []yamlspec.LabelValues // in the order given
	access        *Access
	maxAppendRate *int64
	fragment      fragmentPatch
}

type fragmentPatch struct {
	length                    *int64
	codec                     *Codec
	stores                    *[]string
	refresh, flush, retention *time.Duration
	fsync                     *bool
}

// check validates defaults on their own, so that their errors are reported
// once, naming defaults, rather than for each journal.
func (p *specPatch) check() error {
	s := &JournalSpec{Name: "defaults", Replication: MinReplication}
	p.applyTo(s)
	if err := s.Validate(); err != nil {
		return prefixError("defaults", err)
	}
	return nil
}

// applyTo sets the fields of s that p gives.
func (p *specPatch) applyTo(s *JournalSpec) {
	if p.replication != nil {
		s.Replication = *p.replication
	}
	if p.labels != nil {
		s.Labels = ProtoLabels(yamlspec.MergeLabels(LabelsOf(s.Labels), p.labels))
	}
	if p.access != nil {
		s.Access = *p.access
	}
	if p.maxAppendRate != nil {
		s.MaxAppendRate = *p.maxAppendRate
	}
	p.fragment.applyTo(s)
}

func (p *fragmentPatch) applyTo(s *JournalSpec) {
	if s.Fragment == nil {
		s.Fragment = &JournalSpec_Fragment{}
	}
	f := s.Fragment
	if p.length != nil {
		f.Length = *p.length
	}
	if p.codec != nil {
		f.Codec = *p.codec
	}
	if p.stores != nil {
		f.Stores = slices.Clone(*p.stores)
	}
	if p.refresh != nil {
		f.RefreshInterval = durationpb.New(*p.refresh)
	}
	if p.flush != nil {
		f.FlushInterval = durationpb.New(*p.flush)
	}
	if p.retention != nil {
		f.Retention = durationpb.New(*p.retention)
	}
	if p.fsync != nil {
		f.Fsync = *p.fsync
	}
}

// parse reads the fields of mapping n into p. withName allows (and
// requires a scalar for) name.
func (p *specPatch) parse(n *yaml.Node, path string, withName bool) error {
	if n.Kind != yaml.MappingNode {
		return yamlspec.Error(n, path, "want a mapping")
	}
	return yamlspec.EachField(n, path, func(key string, v *yaml.Node) error {
		fp := fieldPath(path, key)
		var err error
		switch key {
		case "name":
			if !withName {
				return yamlspec.Error(v, fp, "not allowed here; only journals have names")
			}
			var s string
			s, err = yamlspec.String(v, fp)
			p.name = &s
		case "replication":
			var r int64
			if r, err = yamlspec.Int(v, fp); err == nil {
				if r < math.MinInt32 || r > math.MaxInt32 {
					return yamlspec.Error(v, fp, outOfRange(r, MinReplication, MaxReplication))
				}
				r32 := int32(r)
				p.replication = &r32
			}
		case "labels":
			p.labels, err = yamlspec.Labels(v, fp)
		case "fragment":
			err = p.fragment.parse(v, fp)
		case "access":
			var a Access
			a, err = parseAccess(v, fp)
			p.access = &a
		case "maxAppendRate":
			p.maxAppendRate, err = sizeValue(v, fp)
		default:
			return yamlspec.UnknownField(v, path, key)
		}
		return err
	})
}

func (p *fragmentPatch) parse(n *yaml.Node, path string) error {
	if yamlspec.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return yamlspec.Error(n, path, "want a mapping")
	}
	return yamlspec.EachField(n, path, func(key string, v *yaml.Node) error {
		fp := fieldPath(path, key)
		var err error
		switch key {
		case "length":
			p.length, err = sizeValue(v, fp)
		case "codec":
			var c Codec
			c, err = parseCodec(v, fp)
			p.codec = &c
		case "stores":
			var ss []string
			ss, err = stringList(v, fp)
			p.stores = &ss
		case "refreshInterval":
			p.refresh, err = yamlspec.Duration(v, fp)
		case "flushInterval":
			p.flush, err = yamlspec.Duration(v, fp)
		case "retention":
			p.retention, err = yamlspec.Duration(v, fp)
		case "fsync":
			var b bool
			b, err = yamlspec.Bool(v, fp)
			p.fsync = &b
		default:
			return yamlspec.UnknownField(v, path, key)
		}
		return err
	})
}

func prefixError(prefix string, err error) error {
	return fmt.Errorf("%s: %w", prefix, err)
}

// sizeValue reads an integer or a size with a unit (see ParseSize).
func sizeValue(n *yaml.Node, path string) (*int64, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		v, err := yamlspec.Int(n, path)
		return &v, err
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return nil, yamlspec.Error(n, path, fmt.Sprintf("%s is not a size", yamlspec.Describe(n)))
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return nil, yamlspec.Error(n, path, err.Error())
	}
	return &v, nil
}

func stringList(n *yaml.Node, path string) ([]string, error) {
	if yamlspec.IsNull(n) {
		return []string{}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, yamlspec.Error(n, path, "want a list")
	}
	out := []string{}
	for i, e := range n.Content {
		s, err := yamlspec.String(e, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// parseCodec reads a codec name: none, gzip, zstd or snappy, in any case,
// with or without the CODEC_ prefix.
func parseCodec(n *yaml.Node, path string) (Codec, error) {
	s, err := yamlspec.String(n, path)
	if err != nil {
		return 0, err
	}
	if c, ok := CodecNamed(s); ok {
		return c, nil
	}
	return 0, yamlspec.Error(n, path, fmt.Sprintf("%q is not a codec (want none, gzip, zstd or snappy)", s))
}

// parseAccess reads an access name: read-write, read-only or write-only,
// in any case, with '-' or '_'.
func parseAccess(n *yaml.Node, path string) (Access, error) {
	s, err := yamlspec.String(n, path)
	if err != nil {
		return 0, err
	}
	if v, ok := Access_value[strings.ReplaceAll(strings.ToUpper(s), "-", "_")]; ok {
		return Access(v), nil
	}
	return 0, yamlspec.Error(n, path, fmt.Sprintf("%q is not an access (want read-write, read-only or write-only)", s))
}

// codecName and accessName are the spec file's names of c and a.
func codecName(c Codec) string {
	return strings.ToLower(strings.TrimPrefix(c.String(), "CODEC_"))
}

func accessName(a Access) string {
	return strings.ReplaceAll(strings.ToLower(a.String()), "_", "-")
}

// Types of FormatSpecFile's output.
type (
	specFileYAML struct {
		Journals []journalYAML `yaml:"journals" json:"journals"`
	}
	journalYAML struct {
		Name          string         `yaml:"name" json:"name"`
		Replication   int32          `yaml:"replication" json:"replication"`
		Labels        map[string]any `yaml:"labels,omitempty" json:"labels,omitempty"`
		Fragment      *fragmentYAML  `yaml:"fragment,omitempty" json:"fragment,omitempty"`
		Access        string         `yaml:"access,omitempty" json:"access,omitempty"`
		MaxAppendRate any            `yaml:"maxAppendRate,omitempty" json:"maxAppendRate,omitempty"`
		// Only in JSON: a spec file never holds one (see Suspension).
		Suspension *suspensionJSON `yaml:"-" json:"suspension,omitempty"`
	}
	suspensionJSON struct {
		Active    bool   `json:"active"`
		Offset    int64  `json:"offset"`
		Registers string `json:"registers,omitempty"`
		Time      string `json:"time"`
	}
	fragmentYAML struct {
		Length          any      `yaml:"length,omitempty" json:"length,omitempty"`
		Codec           string   `yaml:"codec,omitempty" json:"codec,omitempty"`
		Stores          []string `yaml:"stores,omitempty" json:"stores,omitempty"`
		RefreshInterval string   `yaml:"refreshInterval,omitempty" json:"refreshInterval,omitempty"`
		FlushInterval   string   `yaml:"flushInterval,omitempty" json:"flushInterval,omitempty"`
		Retention       string   `yaml:"retention,omitempty" json:"retention,omitempty"`
		Fsync           bool     `yaml:"fsync,omitempty" json:"fsync,omitempty"`
	}
)

// FormatSpecFile returns the spec file of specs, in the form ParseSpecFile
// reads, without a defaults section: each journal with every field that is
// not zero. Specs with their defaults applied (as ParseSpecFile,
// UnmarshalSpec and brokers' List return them) round-trip:
// ParseSpecFile(FormatSpecFile(specs)) equals specs. Others come back with
// their defaults applied. It returns an error, naming the entry, if a spec
// is invalid or two have the same name.
func FormatSpecFile(specs []*JournalSpec) ([]byte, error) {
	out := specFileYAML{Journals: make([]journalYAML, 0, len(specs))}
	seen := make(map[string]int, len(specs))
	for i, s := range specs {
		ctx := fmt.Sprintf("journals[%d]", i)
		if s == nil {
			return nil, fmt.Errorf("%s: missing", ctx)
		}
		if s.Name != "" {
			ctx = fmt.Sprintf("%s (%s)", ctx, quoteIfOdd(s.Name))
		}
		if err := s.Validate(); err != nil {
			return nil, prefixError(ctx, err)
		}
		if j, ok := seen[s.Name]; ok {
			return nil, fmt.Errorf("%s: duplicate name; also journals[%d]", ctx, j)
		}
		seen[s.Name] = i
		out.Journals = append(out.Journals, formatJournal(s))
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("encoding spec file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding spec file: %w", err)
	}
	return buf.Bytes(), nil
}

// SpecJSON is the JSON form of a spec that `quire journals list -o json`
// prints: the spec file's fields (labels as a map, durations as "1m"),
// with sizes as numbers of bytes, and the journal's suspension, if any.
func SpecJSON(s *JournalSpec) (json.RawMessage, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	j := formatJournal(s)
	if sp := s.Suspension; sp != nil {
		j.Suspension = &suspensionJSON{Active: sp.Active, Offset: sp.Offset,
			Registers: LabelsOf(sp.Registers).String(), Time: time.Unix(sp.Time, 0).UTC().Format(time.RFC3339)}
	}
	if s.MaxAppendRate != 0 {
		j.MaxAppendRate = s.MaxAppendRate
	}
	if j.Fragment != nil && s.Fragment.Length != 0 {
		j.Fragment.Length = s.Fragment.Length
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encoding journal %s: %w", s.Name, err)
	}
	return raw, nil
}

func formatJournal(s *JournalSpec) journalYAML {
	j := journalYAML{Name: s.Name, Replication: s.Replication}
	for _, l := range s.Labels {
		if j.Labels == nil {
			j.Labels = make(map[string]any)
		}
		switch prev := j.Labels[l.Name].(type) {
		case nil:
			j.Labels[l.Name] = l.Value
		case string:
			j.Labels[l.Name] = []string{prev, l.Value}
		case []string:
			j.Labels[l.Name] = append(prev, l.Value)
		}
	}
	if s.Access != Access_READ_WRITE {
		j.Access = accessName(s.Access)
	}
	if s.MaxAppendRate != 0 {
		j.MaxAppendRate = sizeYAML(s.MaxAppendRate)
	}
	if f := s.Fragment; f != nil {
		fy := fragmentYAML{
			Stores:          f.Stores,
			RefreshInterval: durationYAML(f.RefreshInterval),
			FlushInterval:   durationYAML(f.FlushInterval),
			Retention:       durationYAML(f.Retention),
			Fsync:           f.Fsync,
		}
		if f.Length != 0 {
			fy.Length = sizeYAML(f.Length)
		}
		if f.Codec != Codec_CODEC_UNSPECIFIED {
			fy.Codec = codecName(f.Codec)
		}
		if !fy.isZero() {
			j.Fragment = &fy
		}
	}
	return j
}

func (f *fragmentYAML) isZero() bool {
	return f.Length == nil && f.Codec == "" && len(f.Stores) == 0 && f.RefreshInterval == "" &&
		f.FlushInterval == "" && f.Retention == "" && !f.Fsync
}

// sizeYAML is n as FormatSize writes it, or as an integer if it has no
// unit.
func sizeYAML(n int64) any {
	s := FormatSize(n)
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v
	}
	return s
}

func durationYAML(d *durationpb.Duration) string {
	if isZeroDuration(d) {
		return ""
	}
	return formatDuration(d.AsDuration())
}
