package consumer

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quire-dev/quire/labels"
)

// ParseShardFile parses a shard file. It returns the shards' specs, in the
// file's order, each with the file's defaults and then ApplyDefaults
// applied, and validated. Errors name the entry and the field, with the
// line: `shards[3] (wordcount/part-003): unknown field "hotStandby" (line
// 12)` or `shards[0] (a/b): hotStandbys: 9 is above 8 (line 4)`.
//
// A shard file is the YAML form of a list of shard specs: what
// `quire shards apply -f` reads, and what `quire shards list -o yaml` and
// `quire shards edit` write.
//
//	defaults:                      # optional: applied to every shard first
//	  recoveryLogPrefix: recovery/wordcount
//	  hintPrefix: /quire/wordcount/hints/
//	  hotStandbys: 1
//	  labels: {app: wordcount}
//	shards:
//	  - id: wordcount/part-000
//	    sources:
//	      - journal: examples/words/part-000
//	        minOffset: 0           # optional
//	      - examples/words/extra   # a journal's name alone: minOffset 0
//	    recoveryLogPrefix: recovery/wordcount   # log: recovery/wordcount/wordcount/part-000
//	    hintPrefix: /quire/wordcount/hints/     # hints: /quire/wordcount/hints/wordcount/part-000
//	    hintBackups: 2
//	    minTxnDuration: 0s
//	    maxTxnDuration: 1s
//	    hotStandbys: 1
//	    disable: false
//	    labels: {app: wordcount, region: [eu, us]}
//	    readBufferSize: 1024     # messages
//
// Field names are those of the specs' JSON form (see MarshalShardSpec).
// Each shard needs an id and sources; every other field may come from
// defaults or has a default (see ApplyDefaults). Durations use Go's syntax
// ("500ms", "1m30s"). Defaults may give every field but id and sources.
//
// Labels are a map from name to value, or to a list of values for a name
// with several. A shard's labels replace the default labels of the same
// name and keep the others; a name given an empty list ("region: []")
// drops a default label.
//
// Parsing is strict: unknown fields, repeated keys, a shard ID given twice,
// anchors and aliases, and more than one YAML document are errors.
func ParseShardFile(data []byte) (specs []*ShardSpec, err error) {
	root, err := decodeYAML(data)
	if err != nil || root == nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, nodeError(root, "", "want a mapping with shards and, optionally, defaults")
	}
	var defaults shardPatch
	var shards *yaml.Node
	err = eachField(root, "", func(key string, v *yaml.Node) error {
		switch key {
		case "defaults":
			if err := defaults.parse(v, "", false); err != nil {
				return fmt.Errorf("defaults: %w", err)
			}
			return defaults.check(v)
		case "shards":
			shards = v
			return nil
		}
		return unknownField(v, "", key)
	})
	if err != nil {
		return nil, err
	}
	if shards == nil || isNull(shards) {
		return nil, nil
	}
	if shards.Kind != yaml.SequenceNode {
		return nil, nodeError(shards, "shards", "want a list of shards")
	}
	seen := make(map[string]int, len(shards.Content))
	for i, entry := range shards.Content {
		ctx := entryContext(i, entry)
		spec, err := parseEntry(entry, &defaults)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		if j, ok := seen[spec.ID]; ok {
			return nil, fmt.Errorf("%s: id is repeated; also shards[%d] (line %d)", ctx, j, entry.Line)
		}
		seen[spec.ID] = i
		specs = append(specs, spec)
	}
	return specs, nil
}

// decodeYAML parses the single YAML document of data and returns its root
// node, or nil if there is none. A panic of the YAML parser is an error.
func decodeYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("shard file: YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("shard file: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("shard file: %v", err)
		}
		return nil, fmt.Errorf("shard file: more than one YAML document (line %d)", extra.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	root = doc.Content[0]
	if err := checkTree(root, 0); err != nil {
		return nil, err
	}
	if isNull(root) {
		return nil, nil
	}
	return root, nil
}

// checkTree refuses anchors and aliases (which would make a node appear in
// several places, and, nested, blow up exponentially) and deep nesting.
func checkTree(n *yaml.Node, depth int) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return fmt.Errorf("shard file: anchors and aliases are not supported (line %d)", n.Line)
	}
	if depth > 64 {
		return fmt.Errorf("shard file: nested more than 64 levels deep (line %d)", n.Line)
	}
	for _, c := range n.Content {
		if err := checkTree(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// entryContext names shards[i] for errors, with its ID if it has one.
func entryContext(i int, entry *yaml.Node) string {
	ctx := fmt.Sprintf("shards[%d]", i)
	if entry.Kind != yaml.MappingNode {
		return ctx
	}
	for j := 0; j+1 < len(entry.Content); j += 2 {
		k, v := entry.Content[j], entry.Content[j+1]
		if k.Kind == yaml.ScalarNode && k.Value == "id" && v.Kind == yaml.ScalarNode && !isNull(v) {
			return fmt.Sprintf("%s (%s)", ctx, quoteIfOdd(v.Value))
		}
	}
	return ctx
}

// quoteIfOdd quotes s unless it is a plain shard ID.
func quoteIfOdd(s string) string {
	if ValidateShardID(s) == nil {
		return s
	}
	return quoteShort(s)
}

// parseEntry returns the spec of one shard entry, with defaults applied and
// validated.
func parseEntry(entry *yaml.Node, defaults *shardPatch) (*ShardSpec, error) {
	if entry.Kind != yaml.MappingNode {
		return nil, nodeError(entry, "", "want a mapping with id and sources")
	}
	var p shardPatch
	if err := p.parse(entry, "", true); err != nil {
		return nil, err
	}
	if p.id == nil {
		return nil, nodeError(entry, "id", "missing")
	}
	if p.sources == nil {
		return nil, nodeError(entry, "sources", "missing")
	}
	spec := &ShardSpec{ID: *p.id, Sources: p.sources}
	defaults.applyTo(spec)
	p.applyTo(spec)
	spec.ApplyDefaults()
	if err := spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w (line %d)", err, entry.Line)
	}
	return spec, nil
}

// shardPatch holds the fields given in an entry, or in defaults: nil
// fields were not given.
type shardPatch struct {
	id                *string
	sources           []Source
	recoveryLogPrefix *string
	hintPrefix        *string
	hintBackups       *int
	minTxn, maxTxn    *time.Duration
	hotStandbys       *int
	disable           *bool
	labels            []labelValues // in the order given; nil if not given
	readBufferSize    *int
}

type labelValues struct {
	name   string
	values []string
}

// check validates defaults on their own, so that their errors are reported
// once, naming defaults, rather than for each shard. Fields that only an
// entry may complete (the other of recoveryLogPrefix and hintPrefix,
// maxTxnDuration) are filled in with placeholders.
func (p *shardPatch) check(n *yaml.Node) error {
	s := &ShardSpec{ID: "defaults", Sources: []Source{{Journal: "defaults"}}, MaxTxnDuration: MaxTxnDuration}
	if p.recoveryLogPrefix != nil || p.hintPrefix != nil {
		s.RecoveryLogPrefix, s.HintPrefix = "defaults", "/defaults/"
	}
	p.applyTo(s)
	if p.recoveryLogPrefix != nil && *p.recoveryLogPrefix == "" && p.hintPrefix != nil && *p.hintPrefix != "" {
		s.RecoveryLogPrefix = "defaults"
	}
	if p.hintPrefix != nil && *p.hintPrefix == "" && s.RecoveryLogPrefix != "" {
		s.HintPrefix = "/defaults/"
	}
	if err := s.Validate(); err != nil {
		return fmt.Errorf("defaults: %w (line %d)", err, n.Line)
	}
	return nil
}

// applyTo sets the fields of s that p gives.
func (p *shardPatch) applyTo(s *ShardSpec) {
	if p.recoveryLogPrefix != nil {
		s.RecoveryLogPrefix = *p.recoveryLogPrefix
	}
	if p.hintPrefix != nil {
		s.HintPrefix = *p.hintPrefix
	}
	if p.hintBackups != nil {
		n := *p.hintBackups
		s.HintBackups = &n
	}
	if p.minTxn != nil {
		s.MinTxnDuration = *p.minTxn
	}
	if p.maxTxn != nil {
		s.MaxTxnDuration = *p.maxTxn
	}
	if p.hotStandbys != nil {
		s.HotStandbys = *p.hotStandbys
	}
	if p.disable != nil {
		s.Disable = *p.disable
	}
	if p.labels != nil {
		s.Labels = mergeLabels(s.Labels, p.labels)
	}
	if p.readBufferSize != nil {
		s.ReadBufferSize = *p.readBufferSize
	}
}

// mergeLabels returns base with the names of patch replaced by patch's
// values, sorted as a label set.
func mergeLabels(base labels.Set, patch []labelValues) labels.Set {
	replaced := make(map[string]bool, len(patch))
	var out labels.Set
	for _, lv := range patch {
		replaced[lv.name] = true
		for _, v := range lv.values {
			out = append(out, labels.Label{Name: lv.name, Value: v})
		}
	}
	for _, l := range base {
		if !replaced[l.Name] {
			out = append(out, l)
		}
	}
	return sortLabels(out)
}

// parse reads the fields of mapping n into p. entry allows id and sources.
func (p *shardPatch) parse(n *yaml.Node, path string, entry bool) error {
	if n.Kind != yaml.MappingNode {
		return nodeError(n, path, "want a mapping")
	}
	return eachField(n, path, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "id", "sources":
			if !entry {
				return nodeError(v, key, "not allowed in defaults; give it in each shard")
			}
			if key == "id" {
				var s string
				s, err = scalarString(v, key)
				p.id = &s
			} else {
				p.sources, err = parseSources(v, key)
			}
		case "recoveryLogPrefix":
			var s string
			s, err = scalarString(v, key)
			p.recoveryLogPrefix = &s
		case "hintPrefix":
			var s string
			s, err = scalarString(v, key)
			p.hintPrefix = &s
		case "hintBackups":
			p.hintBackups, err = smallInt(v, key)
		case "minTxnDuration":
			p.minTxn, err = durationValue(v, key)
		case "maxTxnDuration":
			p.maxTxn, err = durationValue(v, key)
		case "hotStandbys":
			p.hotStandbys, err = smallInt(v, key)
		case "disable":
			var b bool
			b, err = boolValue(v, key)
			p.disable = &b
		case "labels":
			p.labels, err = parseLabels(v, key)
		case "readBufferSize":
			p.readBufferSize, err = smallInt(v, key)
		default:
			return unknownField(v, path, key)
		}
		return err
	})
}

// parseSources reads a list of sources: each a mapping with journal and,
// optionally, minOffset, or a journal's name alone.
func parseSources(n *yaml.Node, path string) ([]Source, error) {
	if isNull(n) {
		return []Source{}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, nodeError(n, path, "want a list of sources")
	}
	out := []Source{}
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if e.Kind == yaml.ScalarNode {
			s, err := scalarString(e, ep)
			if err != nil {
				return nil, err
			}
			out = append(out, Source{Journal: s})
			continue
		}
		if e.Kind != yaml.MappingNode {
			return nil, nodeError(e, ep, "want a mapping with journal and, optionally, minOffset")
		}
		var src Source
		var hasJournal bool
		err := eachField(e, ep, func(key string, v *yaml.Node) error {
			fp := ep + "." + key
			var err error
			switch key {
			case "journal":
				hasJournal = true
				src.Journal, err = scalarString(v, fp)
			case "minOffset":
				src.MinOffset, err = intValue(v, fp)
			default:
				return unknownField(v, ep, key)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if !hasJournal {
			return nil, nodeError(e, ep+".journal", "missing")
		}
		out = append(out, src)
	}
	return out, nil
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
		fp := path + "." + name
		if err := labels.ValidateName(name); err != nil {
			return nodeError(v, path, err.Error())
		}
		lv := labelValues{name: name, values: []string{}}
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
			lv.values = append(lv.values, s)
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

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// scalarString returns the literal text of a scalar, whatever type YAML
// would give it ("1.0" stays "1.0"); null is "".
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

// smallInt reads an integer that an int holds within ±2^31, so that no
// platform wraps it before Validate sees it.
func smallInt(n *yaml.Node, path string) (*int, error) {
	v, err := intValue(n, path)
	if err != nil {
		return nil, err
	}
	if v < -1<<31 || v > 1<<31-1 {
		return nil, nodeError(n, path, fmt.Sprintf("%d is out of range", v))
	}
	i := int(v)
	return &i, nil
}

func boolValue(n *yaml.Node, path string) (bool, error) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		return false, nodeError(n, path, fmt.Sprintf("%s is not true or false", describeNode(n)))
	}
	return v, nil
}

func durationValue(n *yaml.Node, path string) (*time.Duration, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
		return nil, nodeError(n, path, fmt.Sprintf("%s is not a duration", describeNode(n)))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return nil, nodeError(n, path, fmt.Sprintf("%q is not a duration (want Go syntax such as 500ms, 1s or 1m30s)", n.Value))
	}
	return &d, nil
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

// Types of FormatShardFile's output.
type (
	shardFileYAML struct {
		Shards []shardYAML `yaml:"shards"`
	}
	shardYAML struct {
		ID                string         `yaml:"id"`
		Sources           []sourceYAML   `yaml:"sources"`
		RecoveryLogPrefix string         `yaml:"recoveryLogPrefix,omitempty"`
		HintPrefix        string         `yaml:"hintPrefix,omitempty"`
		HintBackups       *int           `yaml:"hintBackups,omitempty"`
		MinTxnDuration    string         `yaml:"minTxnDuration,omitempty"`
		MaxTxnDuration    string         `yaml:"maxTxnDuration,omitempty"`
		HotStandbys       int            `yaml:"hotStandbys,omitempty"`
		Disable           bool           `yaml:"disable,omitempty"`
		Labels            map[string]any `yaml:"labels,omitempty"`
		ReadBufferSize    int            `yaml:"readBufferSize,omitempty"`
	}
	sourceYAML struct {
		Journal   string `yaml:"journal"`
		MinOffset int64  `yaml:"minOffset,omitempty"`
	}
)

// FormatShardFile returns the shard file of specs, in the form
// ParseShardFile reads, without a defaults section: each shard with every
// field that is not zero (and hintBackups whenever it is set). Specs with
// their defaults applied (as ParseShardFile and UnmarshalShardSpec return
// them) round-trip: ParseShardFile(FormatShardFile(specs)) equals specs.
// Others come back with their defaults applied. It returns an error,
// naming the entry, if a spec is invalid or two have the same ID.
func FormatShardFile(specs []*ShardSpec) ([]byte, error) {
	out := shardFileYAML{Shards: make([]shardYAML, 0, len(specs))}
	seen := make(map[string]int, len(specs))
	for i, s := range specs {
		ctx := fmt.Sprintf("shards[%d]", i)
		if s == nil {
			return nil, fmt.Errorf("%s: missing", ctx)
		}
		if s.ID != "" {
			ctx = fmt.Sprintf("%s (%s)", ctx, quoteIfOdd(s.ID))
		}
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", ctx, err)
		}
		if j, ok := seen[s.ID]; ok {
			return nil, fmt.Errorf("%s: id is repeated; also shards[%d]", ctx, j)
		}
		seen[s.ID] = i
		out.Shards = append(out.Shards, formatShard(s))
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		return nil, fmt.Errorf("encoding shard file: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding shard file: %w", err)
	}
	return buf.Bytes(), nil
}

func formatShard(s *ShardSpec) shardYAML {
	y := shardYAML{
		ID:                s.ID,
		RecoveryLogPrefix: s.RecoveryLogPrefix,
		HintPrefix:        s.HintPrefix,
		HintBackups:       s.HintBackups,
		HotStandbys:       s.HotStandbys,
		Disable:           s.Disable,
		ReadBufferSize:    s.ReadBufferSize,
	}
	for _, src := range s.Sources {
		y.Sources = append(y.Sources, sourceYAML(src))
	}
	if s.MinTxnDuration != 0 {
		y.MinTxnDuration = formatDuration(s.MinTxnDuration)
	}
	if s.MaxTxnDuration != 0 {
		y.MaxTxnDuration = formatDuration(s.MaxTxnDuration)
	}
	for name, values := range labelMap(s.Labels) {
		if y.Labels == nil {
			y.Labels = make(map[string]any)
		}
		if len(values) == 1 {
			y.Labels[name] = values[0]
		} else {
			y.Labels[name] = values
		}
	}
	return y
}
