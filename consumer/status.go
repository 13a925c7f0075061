package consumer

import (
	"encoding/json"
	"fmt"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/protocol"
)

// Status is a replica's state, kept in the value of its assignment as
// JSON: {"code":"PRIMARY"}, {"code":"FAILED","error":"..."}. A new
// assignment's value is empty: IDLE.
type Status struct {
	Code  protocol.ReplicaCode
	Error string
}

type statusJSON struct {
	Code  string `json:"code"`
	Error string `json:"error,omitempty"`
}

// String returns the code, and the error of a FAILED status.
func (s Status) String() string {
	if s.Error != "" {
		return s.Code.String() + ": " + s.Error
	}
	return s.Code.String()
}

// encode returns the assignment value of s.
func (s Status) encode() string {
	b, _ := json.Marshal(statusJSON{Code: s.Code.String(), Error: s.Error})
	return string(b)
}

// decodeStatus decodes an assignment value: empty is IDLE.
func decodeStatus(raw []byte) (any, error) {
	if len(raw) == 0 {
		return Status{}, nil
	}
	var j statusJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("replica status %q: %w", raw, err)
	}
	code, ok := protocol.ReplicaCode_value[j.Code]
	if !ok {
		return nil, fmt.Errorf("replica status %q: unknown code %q", raw, j.Code)
	}
	return Status{Code: protocol.ReplicaCode(code), Error: j.Error}, nil
}

func statusOf(a allocator.AssignmentKV) Status {
	s, _ := a.Value.(Status)
	return s
}

// Ready is the allocator's ReadyFunc for shards: a replica is ready once
// it could take over, that is, a standby tailing the recovery log or the
// primary.
func Ready(a allocator.AssignmentKV, _ []allocator.AssignmentKV) bool {
	c := statusOf(a).Code
	return c == protocol.ReplicaCode_STANDBY || c == protocol.ReplicaCode_PRIMARY
}

// combine returns a shard's status from its replicas' (slot order): FAILED
// if any failed, else the primary's if it is PRIMARY, else the most
// advanced of the replicas' codes.
func combine(replicas []Status) Status {
	var best Status
	for i, r := range replicas {
		switch {
		case r.Code == protocol.ReplicaCode_FAILED:
			return r
		case i == 0 && r.Code == protocol.ReplicaCode_PRIMARY:
			best = r
		case best.Code != protocol.ReplicaCode_PRIMARY && r.Code > best.Code && r.Code != protocol.ReplicaCode_PRIMARY:
			best = r
		}
	}
	return best
}

// Decoders are the allocator decoders of a consumer application's
// keyspace: member specs as the allocator's, shard specs, and statuses.
var Decoders = allocator.Decoders{
	Member: decodeMemberSpec,
	Item: func(raw []byte) (allocator.ItemValue, error) {
		return UnmarshalShardSpec(raw)
	},
	Assignment: decodeStatus,
	SkipOthers: true, // Hints, typically.
}

// MemberSpec is a consumer process's allocator member spec, stored as
// JSON at ROOT/members/ZONE#SUFFIX: its shard limit, whether it is
// draining, and the endpoint of its Shard service.
type MemberSpec struct {
	Limit    int    `json:"itemLimit"`
	Exiting  bool   `json:"exiting,omitempty"`
	Endpoint string `json:"endpoint"`
}

// ItemLimit implements allocator.MemberValue.
func (s *MemberSpec) ItemLimit() int { return s.Limit }

// IsExiting implements allocator.MemberValue.
func (s *MemberSpec) IsExiting() bool { return s.Exiting }

func decodeMemberSpec(raw []byte) (allocator.MemberValue, error) {
	var s MemberSpec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("consumer member spec %q: %w", raw, err)
	}
	if s.Limit < 0 {
		return nil, fmt.Errorf("consumer member spec %q: itemLimit %d is negative", raw, s.Limit)
	}
	return &s, nil
}
