package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

// Defaults and limits of ShardSpec fields: see ApplyDefaults and Validate.
const (
	// MaxShardIDLength is the longest shard ID, in bytes, as for journal
	// names and allocator item IDs.
	MaxShardIDLength = protocol.MaxJournalNameLength
	// MaxSources is the most source journals a shard may read.
	MaxSources = 1024

	// DefaultHintBackups is the default hintBackups; MaxHintBackups the
	// most.
	DefaultHintBackups = 2
	MaxHintBackups     = 16

	// DefaultMaxTxnDuration is the default maxTxnDuration; MaxTxnDuration
	// bounds both transaction durations. The default minTxnDuration is 0.
	DefaultMaxTxnDuration = time.Second
	MaxTxnDuration        = 10 * time.Minute

	// MaxHotStandbys is the most hot standbys a shard may have; the
	// default is none.
	MaxHotStandbys = 8

	// DefaultReadBufferSize is the default readBufferSize, in messages;
	// MaxReadBufferSize the most.
	DefaultReadBufferSize = 1024
	MaxReadBufferSize     = 1 << 16
)

// Meta-labels: every shard's label set, as selectors see it, also has
// these, computed from its ID (see ShardSpec.LabelSetWithMeta). A spec's
// own labels may not use them.
const (
	// LabelID is the shard's ID: id=wordcount/part-000.
	LabelID = "id"
	// LabelPrefix is each path prefix of the shard's ID that ends in '/':
	// prefix=wordcount/.
	LabelPrefix = "prefix"
)

// ShardSpec describes a shard: a unit of work of a consumer application,
// which one primary replica processes, with hot standbys ready to take
// over. Shards are allocator items: a spec is stored in etcd under the
// application's prefix at ROOT/items/ID, as the JSON of MarshalShardSpec.
type ShardSpec struct {
	// ID names the shard. It is path-like, with the rules of journal names
	// (protocol.ValidateJournalName): wordcount/part-000.
	ID string
	// Sources are the journals the shard reads, at least one, each once.
	Sources []Source
	// RecoveryLogPrefix is the journal name prefix of the shard's recovery
	// log, which is RecoveryLogPrefix/ID (see RecoveryLog). Empty means the
	// shard has no recovery log: its store keeps its state elsewhere (such
	// as a SQL database).
	RecoveryLogPrefix string
	// HintPrefix is the etcd key prefix of the shard's recovery-log hints,
	// which are at HintPrefix followed by the ID (see HintKey). It begins
	// and ends with '/'. It is required with a RecoveryLogPrefix, and
	// refused without one.
	HintPrefix string
	// HintBackups is the number of previous hints kept, 0 to 16. Nil is
	// unset: ApplyDefaults sets DefaultHintBackups (2). It is a pointer so
	// that 0 (no backups) differs from unset.
	HintBackups *int
	// MinTxnDuration is the shortest a transaction lasts: it stays open,
	// waiting for more messages, for at least this long. Default 0.
	MinTxnDuration time.Duration
	// MaxTxnDuration is the longest a transaction consumes messages before
	// it commits, even if more are available. Default 1s; at most 10m, and
	// not less than MinTxnDuration.
	MaxTxnDuration time.Duration
	// HotStandbys is the number of standby replicas, 0 to 8, which tail the
	// recovery log to take over quickly. Default 0.
	HotStandbys int
	// Disable stops the shard: it has no replicas while set.
	Disable bool
	// Labels are the shard's labels, which selectors match. They may not
	// use the meta-label names "id" and "prefix".
	Labels labels.Set
	// ReadBufferSize is the number of messages read ahead of processing
	// and buffered, per shard, 1 to 65536. Zero is unset: ApplyDefaults
	// sets DefaultReadBufferSize (1024).
	ReadBufferSize int
}

// Source is a journal that a shard reads.
type Source struct {
	// Journal is the source journal's name.
	Journal string
	// MinOffset is the offset at which the shard begins to read the
	// journal if its checkpoint has none (or an earlier one). Not negative.
	MinOffset int64
}

// ApplyDefaults sets every unset field of s to its default:
//
//	field            default   meaning
//	hintBackups      2         two previous hints are kept (nil is unset)
//	minTxnDuration   0         a transaction closes as soon as input stalls
//	maxTxnDuration   1s        a transaction commits within 1s of its start
//	hotStandbys      0         no standbys
//	disable          false     the shard is served
//	labels           none
//	readBufferSize   1024      messages buffered ahead of processing
//
// id and sources have no default, nor have recoveryLogPrefix and
// hintPrefix (empty: no recovery log). ApplyDefaults is idempotent.
// Specs stored in etcd have their defaults applied, so changing a default
// later does not change existing shards.
func (s *ShardSpec) ApplyDefaults() {
	if s == nil {
		return
	}
	if s.HintBackups == nil {
		n := DefaultHintBackups
		s.HintBackups = &n
	}
	if s.MaxTxnDuration == 0 {
		s.MaxTxnDuration = DefaultMaxTxnDuration
	}
	if s.ReadBufferSize == 0 {
		s.ReadBufferSize = DefaultReadBufferSize
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Sources) == 0 && s.Sources != nil {
		s.Sources = nil
	}
}

// WithDefaults returns a copy of s with its defaults applied.
func (s *ShardSpec) WithDefaults() *ShardSpec {
	c := s.Clone()
	c.ApplyDefaults()
	return c
}

// Clone returns a deep copy of s.
func (s *ShardSpec) Clone() *ShardSpec {
	if s == nil {
		return nil
	}
	c := *s
	if s.Sources != nil {
		c.Sources = append([]Source(nil), s.Sources...)
	}
	if s.HintBackups != nil {
		n := *s.HintBackups
		c.HintBackups = &n
	}
	if s.Labels != nil {
		c.Labels = append(labels.Set(nil), s.Labels...)
	}
	return &c
}

// DesiredReplication is the number of replicas the shard wants: its primary
// and its hot standbys, or none if it is disabled. It makes a decoded spec
// an allocator ItemValue.
func (s *ShardSpec) DesiredReplication() int {
	if s == nil || s.Disable {
		return 0
	}
	return 1 + s.HotStandbys
}

// RecoveryLog returns the name of the shard's recovery-log journal,
// RecoveryLogPrefix/ID, or "" if it has none.
func (s *ShardSpec) RecoveryLog() string {
	if s.RecoveryLogPrefix == "" {
		return ""
	}
	return s.RecoveryLogPrefix + "/" + s.ID
}

// HintKey returns the etcd key of the shard's recovery-log hints,
// HintPrefix followed by the ID, or "" if it has no hint prefix.
func (s *ShardSpec) HintKey() string {
	if s.HintPrefix == "" {
		return ""
	}
	return s.HintPrefix + s.ID
}

// HintBackupCount returns HintBackups, or its default if unset.
func (s *ShardSpec) HintBackupCount() int {
	if s.HintBackups == nil {
		return DefaultHintBackups
	}
	return *s.HintBackups
}

// LabelSetWithMeta returns the shard's labels together with its
// meta-labels: id=ID, and prefix=P for each path prefix P of the ID that
// ends in '/'.
func (s *ShardSpec) LabelSetWithMeta() labels.Set {
	meta := labels.Set{{Name: LabelID, Value: s.ID}}
	for i := 0; i < len(s.ID); i++ {
		if s.ID[i] == '/' {
			meta = append(meta, labels.Label{Name: LabelPrefix, Value: s.ID[:i+1]})
		}
	}
	return s.Labels.Union(meta)
}

// Validate returns an error if s is not a valid shard spec, naming the
// first offending field by its path and quoting its value, such as
// "hotStandbys: 9 is above 8" or `sources[1].journal: "a/b" repeats
// sources[0]`. Unset fields that have defaults are valid: Validate accepts
// a spec before or after ApplyDefaults.
//
// The rules: id is a valid shard ID (ValidateShardID); sources are 1 to
// 1024 distinct valid journal names with non-negative minOffsets;
// recoveryLogPrefix, if set, is a valid journal name and
// recoveryLogPrefix/id is at most 512 bytes; hintPrefix is set exactly when
// recoveryLogPrefix is, begins and ends with '/', has the characters of
// journal names, no "//", no "." or ".." segment, and at most 512 bytes
// between its first and last '/'; hintBackups is 0 to 16; minTxnDuration
// is 0 to 10m; maxTxnDuration is 0 (unset) or positive, at most 10m, and not less than
// minTxnDuration (a 0 maxTxnDuration counts as its default, 1s);
// hotStandbys is 0 to 8; labels are a valid label set without the
// meta-label names "id" and "prefix"; readBufferSize is 0 (unset) to 65536.
func (s *ShardSpec) Validate() error {
	if s == nil {
		return errors.New("shard spec: missing")
	}
	if err := ValidateShardID(s.ID); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	if err := validateSources(s.Sources); err != nil {
		return err
	}
	if p := s.RecoveryLogPrefix; p != "" {
		if err := protocol.ValidateJournalName(p); err != nil {
			return fmt.Errorf("recoveryLogPrefix: %w", err)
		}
		if n := len(p) + 1 + len(s.ID); n > protocol.MaxJournalNameLength {
			return fmt.Errorf("recoveryLogPrefix: recovery log %s is %d bytes, longer than %d", quoteShort(s.RecoveryLog()), n, protocol.MaxJournalNameLength)
		}
	}
	if err := s.validateHintPrefix(); err != nil {
		return err
	}
	if b := s.HintBackups; b != nil && (*b < 0 || *b > MaxHintBackups) {
		return fmt.Errorf("hintBackups: %s", outOfRange(int64(*b), 0, MaxHintBackups))
	}
	if err := s.validateTxnDurations(); err != nil {
		return err
	}
	if h := s.HotStandbys; h < 0 || h > MaxHotStandbys {
		return fmt.Errorf("hotStandbys: %s", outOfRange(int64(h), 0, MaxHotStandbys))
	}
	if err := validateLabels(s.Labels); err != nil {
		return err
	}
	if r := s.ReadBufferSize; r < 0 || r > MaxReadBufferSize {
		return fmt.Errorf("readBufferSize: %s", outOfRange(int64(r), 0, MaxReadBufferSize))
	}
	return nil
}

// ValidateShardID returns an error if id is not a valid shard ID. The rules
// are those of journal names (protocol.ValidateJournalName): 1 to 512 bytes
// of ASCII letters, digits and "-_./", in segments separated by single
// '/'s, neither beginning nor ending with '/', with no "." or ".."
// segment. So an ID is also an allocator item ID and an etcd key suffix.
func ValidateShardID(id string) error {
	if err := protocol.ValidateJournalName(id); err != nil {
		// Its errors say "journal name"; here it is a shard ID.
		return errors.New(strings.Replace(err.Error(), "journal name", "shard ID", 1))
	}
	return nil
}

func validateSources(sources []Source) error {
	switch {
	case len(sources) == 0:
		return errors.New("sources: none; a shard reads at least one journal")
	case len(sources) > MaxSources:
		return fmt.Errorf("sources: %d sources, more than %d", len(sources), MaxSources)
	}
	seen := make(map[string]int, len(sources))
	for i, src := range sources {
		if err := protocol.ValidateJournalName(src.Journal); err != nil {
			return fmt.Errorf("sources[%d].journal: %w", i, err)
		}
		if j, ok := seen[src.Journal]; ok {
			return fmt.Errorf("sources[%d].journal: %q repeats sources[%d]", i, src.Journal, j)
		}
		seen[src.Journal] = i
		if src.MinOffset < 0 {
			return fmt.Errorf("sources[%d].minOffset: %d is negative", i, src.MinOffset)
		}
	}
	return nil
}

func (s *ShardSpec) validateHintPrefix() error {
	p := s.HintPrefix
	switch {
	case p == "" && s.RecoveryLogPrefix != "":
		return errors.New("hintPrefix: missing; a shard with a recoveryLogPrefix needs a hintPrefix")
	case p == "":
		return nil
	case s.RecoveryLogPrefix == "":
		return fmt.Errorf("hintPrefix: %s is set, but recoveryLogPrefix is not; hints are of a recovery log", quoteShort(p))
	case p[0] != '/':
		return fmt.Errorf("hintPrefix: %s does not begin with '/'", quoteShort(p))
	case p[len(p)-1] != '/':
		return fmt.Errorf("hintPrefix: %s does not end with '/'", quoteShort(p))
	}
	if p == "/" {
		return nil
	}
	// Inside, the rules of journal names.
	if err := protocol.ValidateJournalName(p[1 : len(p)-1]); err != nil {
		return fmt.Errorf("hintPrefix: %s is not a valid key prefix (want '/', then a path with the characters of journal names, then '/'): %s",
			quoteShort(p), strings.Replace(err.Error(), "journal name", "path", 1))
	}
	return nil
}

func (s *ShardSpec) validateTxnDurations() error {
	lo, hi := s.MinTxnDuration, s.MaxTxnDuration
	switch {
	case lo < 0:
		return fmt.Errorf("minTxnDuration: %s is negative", formatDuration(lo))
	case lo > MaxTxnDuration:
		return fmt.Errorf("minTxnDuration: %s is longer than %s", formatDuration(lo), formatDuration(MaxTxnDuration))
	case hi < 0:
		return fmt.Errorf("maxTxnDuration: %s is negative", formatDuration(hi))
	case hi > MaxTxnDuration:
		return fmt.Errorf("maxTxnDuration: %s is longer than %s", formatDuration(hi), formatDuration(MaxTxnDuration))
	}
	if hi == 0 {
		hi = DefaultMaxTxnDuration
		if lo > hi {
			return fmt.Errorf("minTxnDuration: %s is longer than maxTxnDuration (unset: %s)", formatDuration(lo), formatDuration(hi))
		}
	}
	if lo > hi {
		return fmt.Errorf("minTxnDuration: %s is longer than maxTxnDuration (%s)", formatDuration(lo), formatDuration(hi))
	}
	return nil
}

func validateLabels(s labels.Set) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("labels: %w", err)
	}
	for _, l := range s {
		if l.Name == LabelID || l.Name == LabelPrefix {
			return fmt.Errorf("labels: name %q is reserved for the meta-label computed from the shard's ID", l.Name)
		}
	}
	return nil
}

// outOfRange describes v, which is outside [lo, hi].
func outOfRange(v, lo, hi int64) string {
	if v < lo {
		return fmt.Sprintf("%d is below %d", v, lo)
	}
	return fmt.Sprintf("%d is above %d", v, hi)
}

// formatDuration writes d in Go syntax without zero units: "1m", not
// "1m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// quoteShort quotes s for an error message, eliding its middle when long.
func quoteShort(s string) string {
	const max, keep = 64, 28
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q", s[:keep]+"..."+s[len(s)-keep:])
}

// shardJSON is the JSON form of a ShardSpec.
type shardJSON struct {
	ID                string                     `json:"id"`
	Sources           []sourceJSON               `json:"sources"`
	RecoveryLogPrefix string                     `json:"recoveryLogPrefix,omitempty"`
	HintPrefix        string                     `json:"hintPrefix,omitempty"`
	HintBackups       *int                       `json:"hintBackups,omitempty"`
	MinTxnDuration    string                     `json:"minTxnDuration,omitempty"`
	MaxTxnDuration    string                     `json:"maxTxnDuration,omitempty"`
	HotStandbys       int                        `json:"hotStandbys,omitempty"`
	Disable           bool                       `json:"disable,omitempty"`
	Labels            map[string]json.RawMessage `json:"labels,omitempty"`
	ReadBufferSize    int                        `json:"readBufferSize,omitempty"`
}

type sourceJSON struct {
	Journal   string `json:"journal"`
	MinOffset int64  `json:"minOffset,omitempty"`
}

// The exact field names of the JSON form, which decoding insists on
// (encoding/json alone would also take "ID" or "Sources").
var (
	shardFields  = map[string]bool{"id": true, "sources": true, "recoveryLogPrefix": true, "hintPrefix": true, "hintBackups": true, "minTxnDuration": true, "maxTxnDuration": true, "hotStandbys": true, "disable": true, "labels": true, "readBufferSize": true}
	sourceFields = map[string]bool{"journal": true, "minOffset": true}
)

// MarshalJSON returns the JSON form of s as it is (see MarshalShardSpec).
func (s ShardSpec) MarshalJSON() ([]byte, error) {
	j := shardJSON{
		ID:                s.ID,
		Sources:           make([]sourceJSON, len(s.Sources)),
		RecoveryLogPrefix: s.RecoveryLogPrefix,
		HintPrefix:        s.HintPrefix,
		HintBackups:       s.HintBackups,
		HotStandbys:       s.HotStandbys,
		Disable:           s.Disable,
		ReadBufferSize:    s.ReadBufferSize,
	}
	for i, src := range s.Sources {
		j.Sources[i] = sourceJSON(src)
	}
	if s.MinTxnDuration != 0 {
		j.MinTxnDuration = formatDuration(s.MinTxnDuration)
	}
	if s.MaxTxnDuration != 0 {
		j.MaxTxnDuration = formatDuration(s.MaxTxnDuration)
	}
	for name, values := range labelMap(s.Labels) {
		if j.Labels == nil {
			j.Labels = make(map[string]json.RawMessage)
		}
		var v any = values
		if len(values) == 1 {
			v = values[0]
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		j.Labels[name] = raw
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes the JSON form of a spec into s, strictly: unknown
// fields (by their exact names), repeated keys and trailing data are
// errors. It neither applies defaults nor validates (UnmarshalShardSpec
// does both).
func (s *ShardSpec) UnmarshalJSON(raw []byte) error {
	if err := checkJSONKeys(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var j shardJSON
	if err := dec.Decode(&j); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the spec")
	}
	out := ShardSpec{
		ID:                j.ID,
		RecoveryLogPrefix: j.RecoveryLogPrefix,
		HintPrefix:        j.HintPrefix,
		HintBackups:       j.HintBackups,
		HotStandbys:       j.HotStandbys,
		Disable:           j.Disable,
		ReadBufferSize:    j.ReadBufferSize,
	}
	for _, src := range j.Sources {
		out.Sources = append(out.Sources, Source(src))
	}
	var err error
	if out.MinTxnDuration, err = parseDuration("minTxnDuration", j.MinTxnDuration); err != nil {
		return err
	}
	if out.MaxTxnDuration, err = parseDuration("maxTxnDuration", j.MaxTxnDuration); err != nil {
		return err
	}
	for name, raw := range j.Labels {
		var values []string
		var one string
		if string(bytes.TrimSpace(raw)) == "null" {
			return fmt.Errorf("labels.%s: want a string or a list of strings", name)
		} else if err := json.Unmarshal(raw, &one); err == nil {
			values = []string{one}
		} else if err := json.Unmarshal(raw, &values); err != nil || values == nil {
			return fmt.Errorf("labels.%s: want a string or a list of strings", name)
		}
		for _, v := range values {
			out.Labels = append(out.Labels, labels.Label{Name: name, Value: v})
		}
	}
	out.Labels = sortLabels(out.Labels)
	*s = out
	return nil
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (want Go syntax such as 500ms, 1s or 1m30s)", field, s)
	}
	return d, nil
}

// checkJSONKeys walks the JSON value raw, refusing repeated keys in any
// object, and keys other than the exact field names in the spec and its
// sources.
func checkJSONKeys(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	// path: the field names leading to the current value; "" for a list
	// element.
	var walk func(path []string) error
	walk = func(path []string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		switch d {
		case '[':
			for dec.More() {
				if err := walk(append(path, "")); err != nil {
					return err
				}
			}
		case '{':
			var fields map[string]bool
			switch strings.Join(path, ".") {
			case "":
				fields = shardFields
			case "sources.":
				fields = sourceFields
			}
			seen := make(map[string]bool)
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return err
				}
				key := tok.(string)
				if seen[key] {
					return fmt.Errorf("key %q is repeated", key)
				}
				seen[key] = true
				if fields != nil && !fields[key] {
					return fmt.Errorf("unknown field %q", key)
				}
				if err := walk(append(path, key)); err != nil {
					return err
				}
			}
		}
		_, err = dec.Token() // The closing delimiter.
		return err
	}
	return walk(nil)
}

// labelMap returns the values of each label name of s.
func labelMap(s labels.Set) map[string][]string {
	if len(s) == 0 {
		return nil
	}
	m := make(map[string][]string)
	for _, l := range s {
		m[l.Name] = append(m[l.Name], l.Value)
	}
	return m
}

// sortLabels sorts s as a label set, leaving repeats for Validate.
func sortLabels(s labels.Set) labels.Set {
	if len(s) == 0 {
		return nil
	}
	slices.SortFunc(s, func(a, b labels.Label) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	return s
}

// MarshalShardSpec returns the etcd value of a shard spec: the spec with
// its defaults applied (s itself is not changed), as compact JSON with
// camelCase field names, durations in Go syntax, and labels as a map from
// name to a value (or a list of values, for a name with several):
//
//	{"id":"wordcount/part-000","sources":[{"journal":"examples/words/part-000"}],
//	 "recoveryLogPrefix":"recovery/wordcount","hintPrefix":"/quire/wordcount/hints/",
//	 "hintBackups":2,"maxTxnDuration":"1s","hotStandbys":1,"labels":{"app":"wordcount"},
//	 "readBufferSize":1024}
//
// Zero fields are omitted (minOffset, minTxnDuration, hotStandbys,
// disable), but for hintBackups, which is always written. The output is
// stable. It returns an error, naming the field, if the spec is invalid.
func MarshalShardSpec(s *ShardSpec) ([]byte, error) {
	if s == nil {
		return nil, errors.New("shard spec: missing")
	}
	d := s.WithDefaults()
	if err := d.Validate(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding shard %s: %w", d.ID, err)
	}
	return raw, nil
}

// UnmarshalShardSpec decodes an etcd value written by MarshalShardSpec (or
// by hand). It is strict: unknown fields, fields not spelled exactly,
// repeated keys and trailing data are errors. It applies defaults to the
// decoded spec and returns an error if it is then invalid.
func UnmarshalShardSpec(raw []byte) (*ShardSpec, error) {
	s := new(ShardSpec)
	if err := s.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("decoding shard spec %s: %v", quoteShort(string(raw)), err)
	}
	s.ApplyDefaults()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}
