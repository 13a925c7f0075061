package auth

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// A Capability is a set of rights, one bit each. A token grants the union
// of its capabilities over the journals or shards its selector matches.
type Capability uint32

// The rights Quire's servers check. LIST and APPLY mean the same for
// journals and for shards.
const (
	// List lists journals or shards, and their specs and fragments.
	List Capability = 1 << iota
	// Read reads a journal's content.
	Read
	// Append appends to a journal.
	Append
	// Apply creates, updates and deletes journal or shard specs.
	Apply
	// Replicate takes part in a journal's replication: the right brokers
	// hold to replicate to each other.
	Replicate
	// Stat asks a shard for its status, its read-through offsets and its
	// recovery-log hints.
	Stat
	// Unassign removes a shard's assignments, so that it is assigned anew.
	Unassign
)

// All is every capability Quire's servers check: an operator's, or a
// development cluster's own.
const All = List | Read | Append | Apply | Replicate | Stat | Unassign

// FirstApplicationBit is the lowest bit left to applications: bits
// FirstApplicationBit to 31 are theirs, written APP16 to APP31, for an
// application's own RPCs to check with Require.
const FirstApplicationBit = 16

var capabilityNames = []struct {
	c    Capability
	name string
}{
	{List, "LIST"}, {Read, "READ"}, {Append, "APPEND"}, {Apply, "APPLY"},
	{Replicate, "REPLICATE"}, {Stat, "STAT"}, {Unassign, "UNASSIGN"},
}

// ApplicationBit returns the application's capability bit n, which must be
// FirstApplicationBit to 31.
func ApplicationBit(n int) Capability {
	if n < FirstApplicationBit || n > 31 {
		panic(fmt.Sprintf("auth: application capability bit %d is outside %d to 31", n, FirstApplicationBit))
	}
	return 1 << n
}

// String writes c's names in bit order, separated by commas: "READ,APPEND".
func (c Capability) String() string {
	return strings.Join(c.Names(), ",")
}

// Names returns c's names in bit order.
func (c Capability) Names() []string {
	var out []string
	for rest := c; rest != 0; rest &= rest - 1 {
		out = append(out, bitName(bits.TrailingZeros32(uint32(rest))))
	}
	return out
}

func bitName(bit int) string {
	if bit < len(capabilityNames) {
		return capabilityNames[bit].name
	}
	if bit >= FirstApplicationBit {
		return "APP" + strconv.Itoa(bit)
	}
	return "BIT" + strconv.Itoa(bit) // reserved to Quire; never granted by ParseCapability.
}

// Has tells whether c holds every right of want.
func (c Capability) Has(want Capability) bool { return c&want == want }

// ParseCapability parses a comma-separated list of names such as
// "READ,APPEND" or "LIST,APP16". Names are case-insensitive; surrounding
// white space is ignored; an empty list is an error, as is an unknown name.
func ParseCapability(text string) (Capability, error) {
	var c Capability
	for _, part := range strings.Split(text, ",") {
		name := strings.ToUpper(strings.TrimSpace(part))
		bit, err := parseName(name)
		if err != nil {
			return 0, fmt.Errorf("capability %q: %w", text, err)
		}
		c |= bit
	}
	return c, nil
}

func parseName(name string) (Capability, error) {
	for _, n := range capabilityNames {
		if n.name == name {
			return n.c, nil
		}
	}
	if digits, ok := strings.CutPrefix(name, "APP"); ok {
		n, err := strconv.Atoi(digits)
		if err == nil && n >= FirstApplicationBit && n <= 31 && digits == strconv.Itoa(n) {
			return 1 << n, nil
		}
	}
	if name == "" {
		return 0, fmt.Errorf("an empty name (want names such as READ,APPEND)")
	}
	return 0, fmt.Errorf("unknown name %q (want LIST, READ, APPEND, APPLY, REPLICATE, STAT, UNASSIGN, or APP%d to APP31)", name, FirstApplicationBit)
}
