package protocol

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quire-dev/quire/labels"
)

// Meta-labels: every journal's label set, as List selectors see it, also
// has these, computed from its name (see JournalSpec.LabelSetWithMeta).
// A spec's own labels may not use them.
const (
	// LabelName is the journal's name: name=examples/words/part-000.
	LabelName = "name"
	// LabelPrefix is each path prefix of the journal's name that ends in
	// '/': prefix=examples/ and prefix=examples/words/.
	LabelPrefix = "prefix"
)

// LabelsOf returns ls as a labels.Set. It sorts and removes repeated
// labels, and skips nil entries, so the result is ordered as a Set must be
// even if ls is not; it does not check names and values (Validate does).
func LabelsOf(ls []*Label) labels.Set {
	if len(ls) == 0 {
		return nil
	}
	s := make(labels.Set, 0, len(ls))
	for _, l := range ls {
		if l != nil {
			s = append(s, labels.Label{Name: l.Name, Value: l.Value})
		}
	}
	slices.SortFunc(s, compareLabel)
	return slices.Compact(s)
}

// ProtoLabels returns s as a list of Labels, in the same order.
func ProtoLabels(s labels.Set) []*Label {
	if len(s) == 0 {
		return nil
	}
	out := make([]*Label, len(s))
	for i, l := range s {
		out[i] = &Label{Name: l.Name, Value: l.Value}
	}
	return out
}

// LabelSetWithMeta returns the spec's labels together with its meta-labels:
// name=NAME, and prefix=P for each path prefix P of the name that ends in
// '/'. For examples/words/part-000 these are name=examples/words/part-000,
// prefix=examples/ and prefix=examples/words/. List requests' selectors
// match this set, so "prefix=examples/" selects every journal under
// examples/.
func (s *JournalSpec) LabelSetWithMeta() labels.Set {
	name := s.GetName()
	meta := labels.Set{{Name: LabelName, Value: name}}
	for _, p := range namePrefixes(name) {
		meta = append(meta, labels.Label{Name: LabelPrefix, Value: p})
	}
	return LabelsOf(s.GetLabels()).Union(meta)
}

func compareLabel(a, b labels.Label) int {
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return strings.Compare(a.Value, b.Value)
}

// validateLabels checks a list of labels as a label set: each name and
// value valid, sorted by name then value, no label repeated. With reserved,
// the meta-label names are refused too. Errors name the entry as path[i].
func validateLabels(path string, ls []*Label, reserved bool) error {
	for i, l := range ls {
		p := fmt.Sprintf("%s[%d]", path, i)
		if l == nil {
			return fmt.Errorf("%s: missing", p)
		}
		if err := labels.ValidateName(l.Name); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := labels.ValidateValue(l.Value); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if reserved && (l.Name == LabelName || l.Name == LabelPrefix) {
			return fmt.Errorf("%s: name %q is reserved for the meta-label computed from the journal's name", p, l.Name)
		}
		if i == 0 || ls[i-1] == nil {
			continue
		}
		prev := labels.Label{Name: ls[i-1].Name, Value: ls[i-1].Value}
		switch compareLabel(prev, labels.Label{Name: l.Name, Value: l.Value}) {
		case 0:
			return fmt.Errorf("%s: %s repeats %s[%d]", p, labelText(l), path, i-1)
		case 1:
			return fmt.Errorf("%s: %s is out of order: it sorts before %s[%d] (%s); labels are sorted by name, then value",
				p, labelText(l), path, i-1, labelText(ls[i-1]))
		}
	}
	return nil
}

func labelText(l *Label) string { return fmt.Sprintf("%q", l.Name+"="+l.Value) }
