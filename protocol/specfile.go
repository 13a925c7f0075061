package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quire-dev/quire/labels"
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
	root, err := decodeYAML(data)
	if err != nil || root == nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, nodeError(root, "", "want a mapping with journals and, optionally, defaults")
	}
	var defaults specPatch
	var journals *yaml.Node
	err = eachField(root, "", func(key string, v *yaml.Node) error {
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
		return unknownField(v, "", key)
	})
	if err != nil {
		return nil, err
	}
	if journals == nil || isNull(journals) {
		return nil, nil
	}
	if journals.Kind != yaml.SequenceNode {
		return nil, nodeError(journals, "journals", "want a list of journals")
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

// decodeYAML parses the single YAML document of data, and returns its root
// node, or nil if the document is empty. It turns any panic of the YAML
// parser into an error.
func decodeYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("spec file: YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("spec file: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("spec file: %v", err)
		}
		return nil, fmt.Errorf("spec file: more than one YAML document (line %d)", extra.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	root = doc.Content[0]
	if err := checkNoAliases(root, 0); err != nil {
		return nil, err
	}
	if isNull(root) {
		return nil, nil
	}
	return root, nil
}

// checkNoAliases refuses anchors and aliases, which would make the same
// node appear in several places (and, nested, blow up exponentially).
func checkNoAliases(n *yaml.Node, depth int) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return fmt.Errorf("spec file: anchors and aliases are not supported (line %d)", n.Line)
	}
	if depth > 64 {
		return fmt.Errorf("spec file: nested more than 64 levels deep (line %d)", n.Line)
	}
	for _, c := range n.Content {
		if err := checkNoAliases(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// entryContext names journals[i] for errors, with its name if it has one.
func entryContext(i int, entry *yaml.Node) string {
	ctx := fmt.Sprintf("journals[%d]", i)
	if entry.Kind != yaml.MappingNode {
		return ctx
	}
	for j := 0; j+1 < len(entry.Content); j += 2 {
		k, v := entry.Content[j], entry.Content[j+1]
		if k.Kind == yaml.ScalarNode && k.Value == "name" && v.Kind == yaml.ScalarNode && !isNull(v) {
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
		return nil, nodeError(entry, "", "want a mapping with name and replication")
	}
	var p specPatch
	if err := p.parse(entry, "", true); err != nil {
		return nil, err
	}
	if p.name == nil {
		return nil, nodeError(entry, "name", "missing")
	}
	if p.replication == nil && defaults.replication == nil {
		return nil, nodeError(entry, "replication", "missing")
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
	labels        []labelValues // in the order given
	access        *Access
	maxAppendRate *int64
	fragment      fragmentPatch
}

type labelValues struct {
	name   string
	values []string
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
		s.Labels = mergeLabels(s.Labels, p.labels)
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

// mergeLabels returns base with the names of patch replaced by patch's
// values, sorted as a label set.
func mergeLabels(base []*Label, patch []labelValues) []*Label {
	replaced := make(map[string]bool, len(patch))
	var out []*Label
	for _, lv := range patch {
		replaced[lv.name] = true
		for _, v := range lv.values {
			out = append(out, &Label{Name: lv.name, Value: v})
		}
	}
	for _, l := range base {
		if !replaced[l.Name] {
			out = append(out, l)
		}
	}
	return ProtoLabels(LabelsOf(out))
}

// parse reads the fields of mapping n into p. withName allows (and
// requires a scalar for) name.
func (p *specPatch) parse(n *yaml.Node, path string, withName bool) error {
	if n.Kind != yaml.MappingNode {
		return nodeError(n, path, "want a mapping")
	}
	return eachField(n, path, func(key string, v *yaml.Node) error {
		fp := fieldPath(path, key)
		var err error
		switch key {
		case "name":
			if !withName {
				return nodeError(v, fp, "not allowed here; only journals have names")
			}
			var s string
			s, err = scalarString(v, fp)
			p.name = &s
		case "replication":
			var r int64
			if r, err = intValue(v, fp); err == nil {
				if r < math.MinInt32 || r > math.MaxInt32 {
					return nodeError(v, fp, outOfRange(r, MinReplication, MaxReplication))
				}
				r32 := int32(r)
				p.replication = &r32
			}
		case "labels":
			p.labels, err = parseLabels(v, fp)
		case "fragment":
			err = p.fragment.parse(v, fp)
		case "access":
			var a Access
			a, err = parseAccess(v, fp)
			p.access = &a
		case "maxAppendRate":
			p.maxAppendRate, err = sizeValue(v, fp)
		default:
			return unknownField(v, path, key)
		}
		return err
	})
}

func (p *fragmentPatch) parse(n *yaml.Node, path string) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return nodeError(n, path, "want a mapping")
	}
	return eachField(n, path, func(key string, v *yaml.Node) error {
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
			p.refresh, err = durationValue(v, fp)
		case "flushInterval":
			p.flush, err = durationValue(v, fp)
		case "retention":
			p.retention, err = durationValue(v, fp)
		case "fsync":
			var b bool
			b, err = boolValue(v, fp)
			p.fsync = &b
		default:
			return unknownField(v, path, key)
		}
		return err
	})
}

// parseLabels reads a map of label names to a value or a list of values.
func parseLabels(n *yaml.Node, path string) ([]labelValues, error) {
	if isNull(n) {
		return []labelValues{}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, nodeError(n, path, "want a mapping of label names to values (or lists of values)")
	}
	out := []labelValues{}
	err := eachField(n, path, func(name string, v *yaml.Node) error {
		fp := fieldPath(path, name)
		if err := labels.ValidateName(name); err != nil {
			return nodeError(v, path, err.Error())
		}
		lv := labelValues{name: name}
		if v.Kind == yaml.SequenceNode {
			for _, e := range v.Content {
				s, err := scalarString(e, fp)
				if err != nil {
					return err
				}
				if slices.Contains(lv.values, s) {
					return nodeError(e, fp, fmt.Sprintf("value %q is repeated", s))
				}
				lv.values = append(lv.values, s)
			}
		} else {
			s, err := scalarString(v, fp)
			if err != nil {
				return err
			}
			lv.values = []string{s}
		}
		for _, s := range lv.values {
			if err := labels.ValidateValue(s); err != nil {
				return nodeError(v, fp, err.Error())
			}
		}
		out = append(out, lv)
		return nil
	})
	return out, err
}

// eachField calls fn for each key and value of mapping n, refusing
// non-scalar and repeated keys.
func eachField(n *yaml.Node, path string, fn func(key string, v *yaml.Node) error) error {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nodeError(k, path, "keys must be plain strings")
		}
		if seen[k.Value] {
			return nodeError(k, path, fmt.Sprintf("key %q is repeated", k.Value))
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func unknownField(v *yaml.Node, path, key string) error {
	return nodeError(v, path, fmt.Sprintf("unknown field %q", key))
}

// nodeError is an error at node n, for the field at path.
func nodeError(n *yaml.Node, path, msg string) error {
	if path != "" {
		msg = path + ": " + msg
	}
	return fmt.Errorf("%s (line %d)", msg, n.Line)
}

func prefixError(prefix string, err error) error {
	return fmt.Errorf("%s: %w", prefix, err)
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// scalarString returns the text of a scalar: its literal text, whatever
// type YAML would give it ("1.0" stays "1.0"); null is "".
func scalarString(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", nodeError(n, path, "want a single value")
	}
	if isNull(n) {
		return "", nil
	}
	return n.Value, nil
}

func intValue(n *yaml.Node, path string) (int64, error) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, nodeError(n, path, fmt.Sprintf("%s is not an integer", describeNode(n)))
	}
	return v, nil
}

func boolValue(n *yaml.Node, path string) (bool, error) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		return false, nodeError(n, path, fmt.Sprintf("%s is not true or false", describeNode(n)))
	}
	return v, nil
}

// sizeValue reads an integer or a size with a unit (see ParseSize).
func sizeValue(n *yaml.Node, path string) (*int64, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		v, err := intValue(n, path)
		return &v, err
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return nil, nodeError(n, path, fmt.Sprintf("%s is not a size", describeNode(n)))
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return nil, nodeError(n, path, err.Error())
	}
	return &v, nil
}

func durationValue(n *yaml.Node, path string) (*time.Duration, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
		return nil, nodeError(n, path, fmt.Sprintf("%s is not a duration", describeNode(n)))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return nil, nodeError(n, path, fmt.Sprintf("%q is not a duration (want Go syntax such as 30s, 1m or 1h30m)", n.Value))
	}
	return &d, nil
}

func stringList(n *yaml.Node, path string) ([]string, error) {
	if isNull(n) {
		return []string{}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, nodeError(n, path, "want a list")
	}
	out := []string{}
	for i, e := range n.Content {
		s, err := scalarString(e, fmt.Sprintf("%s[%d]", path, i))
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
	s, err := scalarString(n, path)
	if err != nil {
		return 0, err
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "CODEC_")
	if v, ok := Codec_value["CODEC_"+name]; ok && v != int32(Codec_CODEC_UNSPECIFIED) {
		return Codec(v), nil
	}
	return 0, nodeError(n, path, fmt.Sprintf("%q is not a codec (want none, gzip, zstd or snappy)", s))
}

// parseAccess reads an access name: read-write, read-only or write-only,
// in any case, with '-' or '_'.
func parseAccess(n *yaml.Node, path string) (Access, error) {
	s, err := scalarString(n, path)
	if err != nil {
		return 0, err
	}
	if v, ok := Access_value[strings.ReplaceAll(strings.ToUpper(s), "-", "_")]; ok {
		return Access(v), nil
	}
	return 0, nodeError(n, path, fmt.Sprintf("%q is not an access (want read-write, read-only or write-only)", s))
}

// describeNode describes a node's value for an error.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return quoteShort(n.Value)
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a YAML node"
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
		Journals []journalYAML `yaml:"journals"`
	}
	journalYAML struct {
		Name          string         `yaml:"name"`
		Replication   int32          `yaml:"replication"`
		Labels        map[string]any `yaml:"labels,omitempty"`
		Fragment      *fragmentYAML  `yaml:"fragment,omitempty"`
		Access        string         `yaml:"access,omitempty"`
		MaxAppendRate any            `yaml:"maxAppendRate,omitempty"`
	}
	fragmentYAML struct {
		Length          any      `yaml:"length,omitempty"`
		Codec           string   `yaml:"codec,omitempty"`
		Stores          []string `yaml:"stores,omitempty"`
		RefreshInterval string   `yaml:"refreshInterval,omitempty"`
		FlushInterval   string   `yaml:"flushInterval,omitempty"`
		Retention       string   `yaml:"retention,omitempty"`
		Fsync           bool     `yaml:"fsync,omitempty"`
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
