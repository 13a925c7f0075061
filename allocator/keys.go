package allocator

import (
	"fmt"
	"strconv"
	"strings"
)

// Key prefixes beneath a fleet's root.
const (
	MembersPrefix     = "members/"
	ItemsPrefix       = "items/"
	AssignmentsPrefix = "assign/"
	sep               = "#"
)

// MemberKey is the key of the member ZONE#SUFFIX under root.
func MemberKey(root, zone, suffix string) string {
	return root + MembersPrefix + zone + sep + suffix
}

// ItemKey is the key of item id under root.
func ItemKey(root, id string) string { return root + ItemsPrefix + id }

// AssignmentKey is the key of the assignment of item id to member
// ZONE#SUFFIX at slot under root.
func AssignmentKey(root, id, zone, suffix string, slot int) string {
	return root + AssignmentsPrefix + assignmentName(id, zone, suffix, slot)
}

func assignmentName(id, zone, suffix string, slot int) string {
	return id + sep + zone + sep + suffix + sep + strconv.Itoa(slot)
}

// ValidateToken checks a zone, suffix or item ID: non-empty, at most 512
// bytes, printable, with no '#' (the key separator) and, for zones and
// suffixes, no '/'.
func ValidateToken(what, s string, allowSlash bool) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > 512:
		return fmt.Errorf("%s %.20q... is %d bytes, more than 512", what, s, len(s))
	case strings.Contains(s, sep):
		return fmt.Errorf("%s %q contains %q", what, s, sep)
	case !allowSlash && strings.Contains(s, "/"):
		return fmt.Errorf("%s %q contains '/'", what, s)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%s %q contains a space or control character", what, s)
		}
	}
	return nil
}

// parseMemberName parses ZONE#SUFFIX.
func parseMemberName(name string) (zone, suffix string, err error) {
	zone, suffix, ok := strings.Cut(name, sep)
	if !ok || zone == "" || suffix == "" || strings.Contains(suffix, sep) {
		return "", "", fmt.Errorf("member key name %q is not ZONE#SUFFIX", name)
	}
	return zone, suffix, nil
}

// parseAssignmentName parses ID#ZONE#SUFFIX#SLOT.
func parseAssignmentName(name string) (id, zone, suffix string, slot int, err error) {
	parts := strings.Split(name, sep)
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", "", "", 0, fmt.Errorf("assignment key name %q is not ID#ZONE#SUFFIX#SLOT", name)
	}
	slot, err = strconv.Atoi(parts[3])
	if err != nil || slot < 0 || strconv.Itoa(slot) != parts[3] {
		return "", "", "", 0, fmt.Errorf("assignment key name %q: slot %q is not a canonical non-negative integer", name, parts[3])
	}
	return parts[0], parts[1], parts[2], slot, nil
}
