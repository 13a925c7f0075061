package consumer

import (
	"bytes"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quire-dev/quire/internal/yamlspec"
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
	root, err := yamlspec.Decode(data)
	if err != nil || root == nil {
		return nil, err
	}
	if root.Kind != yaml.MappingNode {
		return nil, yamlspec.Error(root, "", "want a mapping with shards and, optionally, defaults")
	}
	var defaults shardPatch
	var shards *yaml.Node
	err = yamlspec.EachField(root, "", func(key string, v *yaml.Node) error {
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
		return yamlspec.UnknownField(v, "", key)
	})
	if err != nil {
		return nil, err
	}
	if shards == nil || yamlspec.IsNull(shards) {
		return nil, nil
	}
	if shards.Kind != yaml.SequenceNode {
		return nil, yamlspec.Error(shards, "shards", "want a list of shards")
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

// entryContext names shards[i] for errors, with its ID if it has one.
func entryContext(i int, entry *yaml.Node) string {
	ctx := fmt.Sprintf("shards[%d]", i)
	if entry.Kind != yaml.MappingNode {
		return ctx
	}
	for j := 0; j+1 < len(entry.Content); j += 2 {
		k, v := entry.Content[j], entry.Content[j+1]
		if k.Kind == yaml.ScalarNode && k.Value == "id" && v.Kind == yaml.ScalarNode && !yamlspec.IsNull(v) {
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
		return nil, yamlspec.Error(entry, "", "want a mapping with id and sources")
	}
	var p shardPatch
	if err := p.parse(entry, "", true); err != nil {
		return nil, err
	}
	if p.id == nil {
		return nil, yamlspec.Error(entry, "id", "missing")
	}
	if p.sources == nil {
		return nil, yamlspec.Error(entry, "sources", "missing")
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
	labels            []yamlspec.LabelValues // in the order given; nil if not given
	readBufferSize    *int
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
		s.Labels = yamlspec.MergeLabels(s.Labels, p.labels)
	}
	if p.readBufferSize != nil {
		s.ReadBufferSize = *p.readBufferSize
	}
}

// parse reads the fields of mapping n into p. entry allows id and sources.
func (p *shardPatch) parse(n *yaml.Node, path string, entry bool) error {
	if n.Kind != yaml.MappingNode {
		return yamlspec.Error(n, path, "want a mapping")
	}
	return yamlspec.EachField(n, path, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "id", "sources":
			if !entry {
				return yamlspec.Error(v, key, "not allowed in defaults; give it in each shard")
			}
			if key == "id" {
				var s string
				s, err = yamlspec.String(v, key)
				p.id = &s
			} else {
				p.sources, err = parseSources(v, key)
			}
		case "recoveryLogPrefix":
			var s string
			s, err = yamlspec.String(v, key)
			p.recoveryLogPrefix = &s
		case "hintPrefix":
			var s string
			s, err = yamlspec.String(v, key)
			p.hintPrefix = &s
		case "hintBackups":
			p.hintBackups, err = smallInt(v, key)
		case "minTxnDuration":
			p.minTxn, err = yamlspec.Duration(v, key)
		case "maxTxnDuration":
			p.maxTxn, err = yamlspec.Duration(v, key)
		case "hotStandbys":
			p.hotStandbys, err = smallInt(v, key)
		case "disable":
			var b bool
			b, err = yamlspec.Bool(v, key)
			p.disable = &b
		case "labels":
			p.labels, err = yamlspec.Labels(v, key)
		case "readBufferSize":
			p.readBufferSize, err = smallInt(v, key)
		default:
			return yamlspec.UnknownField(v, path, key)
		}
		return err
	})
}

// parseSources reads a list of sources: each a mapping with journal and,
// optionally, minOffset, or a journal's name alone.
func parseSources(n *yaml.Node, path string) ([]Source, error) {
	if yamlspec.IsNull(n) {
		return []Source{}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, yamlspec.Error(n, path, "want a list of sources")
	}
	out := []Source{}
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if e.Kind == yaml.ScalarNode {
			s, err := yamlspec.String(e, ep)
			if err != nil {
				return nil, err
			}
			out = append(out, Source{Journal: s})
			continue
		}
		if e.Kind != yaml.MappingNode {
			return nil, yamlspec.Error(e, ep, "want a mapping with journal and, optionally, minOffset")
		}
		var src Source
		var hasJournal bool
		err := yamlspec.EachField(e, ep, func(key string, v *yaml.Node) error {
			fp := ep + "." + key
			var err error
			switch key {
			case "journal":
				hasJournal = true
				src.Journal, err = yamlspec.String(v, fp)
			case "minOffset":
				src.MinOffset, err = yamlspec.Int(v, fp)
			default:
				return yamlspec.UnknownField(v, ep, key)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if !hasJournal {
			return nil, yamlspec.Error(e, ep+".journal", "missing")
		}
		out = append(out, src)
	}
	return out, nil
}

// smallInt reads an integer that an int holds within ±2^31, so that no
// platform wraps it before Validate sees it.
func smallInt(n *yaml.Node, path string) (*int, error) {
	v, err := yamlspec.Int(n, path)
	if err != nil {
		return nil, err
	}
	if v < -1<<31 || v > 1<<31-1 {
		return nil, yamlspec.Error(n, path, fmt.Sprintf("%d is out of range", v))
	}
	i := int(v)
	return &i, nil
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
