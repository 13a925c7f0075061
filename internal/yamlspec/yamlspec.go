// Package yamlspec reads the YAML spec files that operators write (journal
// specs, shard specs) strictly: one document, no anchors or aliases, no
// repeated keys, typed scalars, and errors that name the field path and
// the line. Packages protocol and consumer build their spec files on it.
package yamlspec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quire-dev/quire/labels"
)

// maxDepth bounds nesting, so that a hostile file cannot exhaust the stack.
const maxDepth = 64

// Decode parses the single YAML document of data, and returns its root
// node, or nil if the document is empty or null. It refuses more than one
// document, anchors and aliases (which would make a node appear in several
// places and, nested, blow up exponentially) and deep nesting, and turns
// any panic of the YAML parser into an error. Errors do not name the file:
// the caller does.
func Decode(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			root, err = nil, fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, locate(data, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, locate(data, err)
		}
		return nil, fmt.Errorf("more than one YAML document (line %d)", extra.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil
	}
	root = doc.Content[0]
	if err := checkTree(root, 0); err != nil {
		return nil, err
	}
	if IsNull(root) {
		return nil, nil
	}
	return root, nil
}

// lineOf matches the line that the YAML parser names in its errors.
var lineOf = regexp.MustCompile(`^yaml: line (\d+): `)

// locate gives a parser error the line where the problem is. The parser
// names the line where the enclosing collection began (a mis-indented
// entry on line 4 of a list begun on line 1 is "line 1"); the first line
// at which a prefix of data fails to parse with the same complaint is
// where the problem is. Found by bisection over prefixes, so a file of n
// lines costs log n parses; if no prefix fails the same way, the parser's
// own line stands.
func locate(data []byte, err error) error {
	m := lineOf.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	what := strings.TrimPrefix(err.Error(), m[0])
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool {
		var doc yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc)
		return err != nil && strings.HasSuffix(err.Error(), ": "+what)
	}
	lo, hi := 0, len(lines) // fails(hi) holds; find the least such n.
	if !fails(hi) {
		return err
	}
	for lo+1 < hi {
		if mid := (lo + hi) / 2; fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return fmt.Errorf("yaml: line %d: %s", hi, what)
}

func checkTree(n *yaml.Node, depth int) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return fmt.Errorf("anchors and aliases are not supported (line %d)", n.Line)
	}
	if depth > maxDepth {
		return fmt.Errorf("nested more than %d levels deep (line %d)", maxDepth, n.Line)
	}
	for _, c := range n.Content {
		if err := checkTree(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// EachField calls fn for each key and value of mapping n, refusing
// non-scalar and repeated keys.
func EachField(n *yaml.Node, path string, fn func(key string, v *yaml.Node) error) error {
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return Error(k, path, "keys must be plain strings")
		}
		if seen[k.Value] {
			return Error(k, path, fmt.Sprintf("key %q is repeated", k.Value))
		}
		seen[k.Value] = true
		if err := fn(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

// UnknownField is the error of a field that the spec does not have.
func UnknownField(v *yaml.Node, path, key string) error {
	return Error(v, path, fmt.Sprintf("unknown field %q", key))
}

// Error is an error at node n, for the field at path.
func Error(n *yaml.Node, path, msg string) error {
	if path != "" {
		msg = path + ": " + msg
	}
	return fmt.Errorf("%s (line %d)", msg, n.Line)
}

// IsNull tells whether n is YAML's null.
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// String returns the literal text of a scalar, whatever type YAML would
// give it ("1.0" stays "1.0"); null is "".
func String(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", Error(n, path, "want a single value")
	}
	if IsNull(n) {
		return "", nil
	}
	return n.Value, nil
}

// Int reads an integer.
func Int(n *yaml.Node, path string) (int64, error) {
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		return 0, Error(n, path, fmt.Sprintf("%s is not an integer", Describe(n)))
	}
	return v, nil
}

// Bool reads true or false.
func Bool(n *yaml.Node, path string) (bool, error) {
	var v bool
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&v) != nil {
		return false, Error(n, path, fmt.Sprintf("%s is not true or false", Describe(n)))
	}
	return v, nil
}

// Duration reads a duration in Go syntax (30s, 1m, 1h30m).
func Duration(n *yaml.Node, path string) (*time.Duration, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
		return nil, Error(n, path, fmt.Sprintf("%s is not a duration", Describe(n)))
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return nil, Error(n, path, fmt.Sprintf("%q is not a duration (want Go syntax such as 500ms, 30s or 1h30m)", n.Value))
	}
	return &d, nil
}

// Describe describes a node's value for an error.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return Quote(n.Value)
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return "a YAML node"
}

// Quote quotes s for an error, shortening it in the middle if it is long.
func Quote(s string) string {
	const max, keep = 64, 28
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q", s[:keep]+"..."+s[len(s)-keep:])
}

// LabelValues are the values a spec file gives one label name: one, several
// (a list), or none (an empty list, which drops a default label).
type LabelValues struct {
	Name   string
	Values []string
}

// Labels reads a mapping of label names to a value or a list of values.
func Labels(n *yaml.Node, path string) ([]LabelValues, error) {
	if IsNull(n) {
		return []LabelValues{}, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, Error(n, path, "want a mapping of label names to values (or lists of values)")
	}
	out := []LabelValues{}
	err := EachField(n, path, func(name string, v *yaml.Node) error {
		lv, err := labelValues(name, v, path)
		if err == nil {
			out = append(out, lv)
		}
		return err
	})
	return out, err
}

func labelValues(name string, v *yaml.Node, path string) (LabelValues, error) {
	fp := path + "." + name
	if err := labels.ValidateName(name); err != nil {
		return LabelValues{}, Error(v, path, err.Error())
	}
	lv := LabelValues{Name: name, Values: []string{}}
	if v.Kind == yaml.SequenceNode {
		for _, e := range v.Content {
			s, err := String(e, fp)
			if err != nil {
				return LabelValues{}, err
			}
			if slices.Contains(lv.Values, s) {
				return LabelValues{}, Error(e, fp, fmt.Sprintf("value %q is repeated", s))
			}
			lv.Values = append(lv.Values, s)
		}
	} else {
		s, err := String(v, fp)
		if err != nil {
			return LabelValues{}, err
		}
		lv.Values = append(lv.Values, s)
	}
	for _, s := range lv.Values {
		if err := labels.ValidateValue(s); err != nil {
			return LabelValues{}, Error(v, fp, err.Error())
		}
	}
	return lv, nil
}

// MergeLabels returns base with the names patch gives replaced by patch's
// values, sorted and without repeats.
func MergeLabels(base labels.Set, patch []LabelValues) labels.Set {
	replaced := make(map[string]bool, len(patch))
	var out labels.Set
	for _, lv := range patch {
		replaced[lv.Name] = true
		for _, v := range lv.Values {
			out = append(out, labels.Label{Name: lv.Name, Value: v})
		}
	}
	for _, l := range base {
		if !replaced[l.Name] {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b labels.Label) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return slices.Compact(out)
}
