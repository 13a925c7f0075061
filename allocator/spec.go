package allocator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quire-dev/quire/keyspace"
)

// MemberValue is implemented by decoded member specs.
type MemberValue interface {
	// ItemLimit is the most items the member may hold.
	ItemLimit() int
	// IsExiting tells whether the member is draining before it exits.
	IsExiting() bool
}

// ItemValue is implemented by decoded item specs.
type ItemValue interface {
	// DesiredReplication is the number of replicas the item wants.
	DesiredReplication() int
}

// MemberSpec is the default member spec, stored as JSON.
type MemberSpec struct {
	Limit   int  `json:"itemLimit"`
	Exiting bool `json:"exiting,omitempty"`
}

// ItemLimit implements MemberValue.
func (s MemberSpec) ItemLimit() int { return s.Limit }

// IsExiting implements MemberValue.
func (s MemberSpec) IsExiting() bool { return s.Exiting }

// Validate reports a negative limit.
func (s MemberSpec) Validate() error {
	if s.Limit < 0 {
		return fmt.Errorf("itemLimit %d is negative", s.Limit)
	}
	return nil
}

// ItemSpec is the default item spec, stored as JSON.
type ItemSpec struct {
	Replication int `json:"replication"`
}

// DesiredReplication implements ItemValue.
func (s ItemSpec) DesiredReplication() int { return s.Replication }

// Validate reports a negative replication.
func (s ItemSpec) Validate() error {
	if s.Replication < 0 {
		return fmt.Errorf("replication %d is negative", s.Replication)
	}
	return nil
}

// Decoders decode the three kinds of values of a fleet. A nil field uses the
// default: MemberSpec and ItemSpec as strict JSON, and assignment values as
// their raw string.
type Decoders struct {
	Member     func(raw []byte) (MemberValue, error)
	Item       func(raw []byte) (ItemValue, error)
	Assignment func(raw []byte) (any, error)
	// SkipOthers quietly keeps out of the mirror the keys under the root
	// that are not members, items or assignments (an owner's other keys,
	// such as a consumer application's hints), rather than logging each
	// as a decoding error.
	SkipOthers bool
}

// Member, Item and Assignment are the decoded forms of a fleet's keys, as
// held by its keyspace.
type (
	// Member is a decoded member key.
	Member struct {
		Zone, Suffix string
		Value        MemberValue
	}
	// Item is a decoded item key.
	Item struct {
		ID    string
		Value ItemValue
	}
	// Assignment is a decoded assignment key.
	Assignment struct {
		Item, Zone, Suffix string
		Slot               int
		Value              any
	}
)

// NewDecoder returns a keyspace.Decoder for a fleet rooted at root. Keys
// that are not members, items or assignments, or whose names or values do
// not parse, are reported as errors (and so kept out of the keyspace).
func NewDecoder(root string, d Decoders) keyspace.Decoder {
	if d.Member == nil {
		d.Member = DecodeMemberSpec
	}
	if d.Item == nil {
		d.Item = DecodeItemSpec
	}
	if d.Assignment == nil {
		d.Assignment = func(raw []byte) (any, error) { return string(raw), nil }
	}
	return func(kv *mvccpb.KeyValue) (any, error) {
		key := strings.TrimPrefix(string(kv.Key), root)
		switch {
		case strings.HasPrefix(key, MembersPrefix):
			return decodeMember(strings.TrimPrefix(key, MembersPrefix), kv.Value, d.Member)
		case strings.HasPrefix(key, ItemsPrefix):
			return decodeItem(strings.TrimPrefix(key, ItemsPrefix), kv.Value, d.Item)
		case strings.HasPrefix(key, AssignmentsPrefix):
			return decodeAssignment(strings.TrimPrefix(key, AssignmentsPrefix), kv.Value, d.Assignment)
		}
		if d.SkipOthers {
			return nil, keyspace.ErrSkip
		}
		return nil, fmt.Errorf("key %q is not under %s, %s or %s", kv.Key, MembersPrefix, ItemsPrefix, AssignmentsPrefix)
	}
}

func decodeMember(name string, raw []byte, dec func([]byte) (MemberValue, error)) (Member, error) {
	zone, suffix, err := parseMemberName(name)
	if err != nil {
		return Member{}, err
	}
	v, err := dec(raw)
	if err != nil {
		return Member{}, fmt.Errorf("member %s: %w", name, err)
	}
	return Member{Zone: zone, Suffix: suffix, Value: v}, nil
}

func decodeItem(id string, raw []byte, dec func([]byte) (ItemValue, error)) (Item, error) {
	if err := ValidateToken("item ID", id, true); err != nil {
		return Item{}, err
	}
	v, err := dec(raw)
	if err != nil {
		return Item{}, fmt.Errorf("item %s: %w", id, err)
	}
	return Item{ID: id, Value: v}, nil
}

func decodeAssignment(name string, raw []byte, dec func([]byte) (any, error)) (Assignment, error) {
	id, zone, suffix, slot, err := parseAssignmentName(name)
	if err != nil {
		return Assignment{}, err
	}
	v, err := dec(raw)
	if err != nil {
		return Assignment{}, fmt.Errorf("assignment %s: %w", name, err)
	}
	return Assignment{Item: id, Zone: zone, Suffix: suffix, Slot: slot, Value: v}, nil
}

// DecodeMemberSpec decodes a MemberSpec from strict JSON.
func DecodeMemberSpec(raw []byte) (MemberValue, error) {
	var s MemberSpec
	if err := strictJSON(raw, &s); err != nil {
		return nil, err
	}
	return s, s.Validate()
}

// DecodeItemSpec decodes an ItemSpec from strict JSON.
func DecodeItemSpec(raw []byte) (ItemValue, error) {
	var s ItemSpec
	if err := strictJSON(raw, &s); err != nil {
		return nil, err
	}
	return s, s.Validate()
}

func strictJSON(raw []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding %q: %w", raw, err)
	}
	if dec.More() {
		return errors.New("trailing data after JSON value")
	}
	return nil
}

// Encode returns the JSON encoding of a MemberSpec or ItemSpec.
func Encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // MemberSpec and ItemSpec always marshal.
	}
	return string(b)
}
