package broker

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/quire-dev/quire/allocator"
	"github.com/quire-dev/quire/protocol"
)

// MemberSpec is a broker's allocator member spec, stored as JSON at
// ROOT/members/ZONE#SUFFIX.
type MemberSpec struct {
	Limit   int  `json:"itemLimit"`
	Exiting bool `json:"exiting,omitempty"`
	// Endpoint is the broker's gRPC address, host:port.
	Endpoint string `json:"endpoint"`
}

// ItemLimit implements allocator.MemberValue.
func (s *MemberSpec) ItemLimit() int { return s.Limit }

// IsExiting implements allocator.MemberValue.
func (s *MemberSpec) IsExiting() bool { return s.Exiting }

// Validate checks the spec.
func (s *MemberSpec) Validate() error {
	switch {
	case s.Limit < 0:
		return fmt.Errorf("itemLimit %d is negative", s.Limit)
	case s.Endpoint == "" || !strings.Contains(s.Endpoint, ":"):
		return fmt.Errorf("endpoint %q is not host:port", s.Endpoint)
	}
	return nil
}

func decodeMember(raw []byte) (allocator.MemberValue, error) {
	var s MemberSpec
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decoding broker spec %q: %w", raw, err)
	}
	return &s, s.Validate()
}

func decodeJournal(raw []byte) (allocator.ItemValue, error) {
	return protocol.UnmarshalSpec(raw)
}

// Decoders decode the brokers' keyspace: broker specs, journal specs and
// assignment values (the route a replica was last synchronized on).
var Decoders = allocator.Decoders{
	Member: decodeMember,
	Item:   decodeJournal,
}
