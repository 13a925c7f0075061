package message

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"
)

// ProducerID identifies a publisher of messages. It is the node field of
// the UUIDs that the publisher builds.
type ProducerID [6]byte

// NewProducerID returns a random ProducerID, read from crypto/rand. As RFC
// 4122 (section 4.5) asks of random node IDs, its multicast bit (the least
// significant bit of the first octet) is set, so that it never equals the
// MAC address of a network card.
func NewProducerID() ProducerID {
	var p ProducerID
	rand.Read(p[:]) // Never fails: see crypto/rand.Read.
	p[0] |= 0x01
	return p
}

// Clock is a producer's logical clock. Its upper 60 bits are an RFC 4122
// version 1 timestamp, the count of 100ns ticks since the start of the
// Gregorian calendar (1582-10-15 00:00:00 UTC); its lower 4 bits are a
// counter, so that up to 16 UUIDs built within one tick stay ordered.
// Clocks compare as integers: a later Clock is a larger one.
//
// A producer keeps one Clock, calls Update with the wall time and then Tick
// before building each UUID. The Clock never moves backwards, even if the
// wall clock does, so the producer's UUIDs have strictly increasing clocks.
type Clock uint64

const (
	// gregorianToUnix is the number of seconds from 1582-10-15 to
	// 1970-01-01, both at 00:00:00 UTC.
	gregorianToUnix = 12219292800
	// ticksPerSecond is the number of 100ns ticks in a second.
	ticksPerSecond = 10_000_000
	// maxTimestamp is the largest 60-bit timestamp, in the year 5236.
	maxTimestamp = 1<<60 - 1
)

// NewClock returns the Clock of time t, with a zero counter. Times before
// 1582-10-15 give the zero Clock, and times after the 60-bit timestamp
// runs out (in the year 5236) give the largest timestamp.
func NewClock(t time.Time) Clock {
	sec := t.Unix() + gregorianToUnix
	if sec < 0 {
		return 0
	}
	if uint64(sec) > maxTimestamp/ticksPerSecond {
		return Clock(maxTimestamp << 4)
	}
	ts := uint64(sec)*ticksPerSecond + uint64(t.Nanosecond())/100
	return Clock(min(ts, maxTimestamp) << 4)
}

// Update advances c to the Clock of time t, if t is later than c. It never
// moves c backwards; within c's tick it leaves the counter as it is.
func (c *Clock) Update(t time.Time) {
	if next := NewClock(t); next > *c {
		*c = next
	}
}

// Tick advances c by one: it increments the counter, which carries into
// the timestamp after 16 ticks.
func (c *Clock) Tick() { *c++ }

// Time returns the time of c's timestamp, in UTC, to the 100ns; the counter
// is ignored.
func (c Clock) Time() time.Time {
	ts := uint64(c) >> 4
	sec := int64(ts/ticksPerSecond) - gregorianToUnix
	nsec := int64(ts%ticksPerSecond) * 100
	return time.Unix(sec, nsec).UTC()
}

// Flags are the 10 bits of a UUID's clock sequence field that tell how its
// message commits.
type Flags uint16

const (
	// OutsideTxn marks a message that is not part of a transaction: it
	// commits on its own, as it is read.
	OutsideTxn Flags = 0
	// ContinueTxn marks a message that is part of a producer's
	// transaction: it is uncommitted until the producer acknowledges a
	// clock at or after its own.
	ContinueTxn Flags = 1
	// AckTxn marks an acknowledgement: it commits the producer's
	// transaction through its clock, and rolls back the producer's
	// uncommitted messages with later clocks.
	AckTxn Flags = 2

	// maxFlags is the largest value that fits in a UUID's flag bits.
	maxFlags Flags = 0x3ff
)

// UUID is an RFC 4122 version 1 UUID that identifies a message: its
// timestamp and the upper 4 bits of its clock sequence hold the producer's
// Clock, the lower 10 bits of its clock sequence hold Flags, and its node
// field holds the ProducerID.
//
// Its text form is the canonical one, 36 lowercase hex digits and dashes:
// "xxxxxxxx-xxxx-1xxx-yxxx-xxxxxxxxxxxx". It implements
// encoding.TextMarshaler and encoding.TextUnmarshaler, so it encodes as a
// JSON string.
type UUID [16]byte

// BuildUUID returns the UUID of producer p at clock c with flags f.
//
// It panics if f does not fit in 10 bits (f > 0x3ff): that is a
// programmer's error, as the flags are the constants of this package.
func BuildUUID(p ProducerID, c Clock, f Flags) UUID {
	if f > maxFlags {
		panic(fmt.Sprintf("message: UUID flags %#x do not fit in 10 bits", uint16(f)))
	}
	ts := uint64(c) >> 4
	seq := uint16(c&0xf)<<10 | uint16(f)

	var u UUID
	binary.BigEndian.PutUint32(u[0:4], uint32(ts))                   // time_low
	binary.BigEndian.PutUint16(u[4:6], uint16(ts>>32))               // time_mid
	binary.BigEndian.PutUint16(u[6:8], uint16(ts>>48)&0x0fff|0x1000) // time_hi_and_version
	binary.BigEndian.PutUint16(u[8:10], seq|0x8000)                  // variant 10, clock_seq
	copy(u[10:], p[:])                                               // node
	return u
}

// ProducerID returns the producer of u.
func (u UUID) ProducerID() ProducerID {
	return ProducerID(u[10:16])
}

// Clock returns the Clock that u was built with: its timestamp shifted
// left by 4, and its counter.
func (u UUID) Clock() Clock {
	ts := uint64(binary.BigEndian.Uint32(u[0:4])) |
		uint64(binary.BigEndian.Uint16(u[4:6]))<<32 |
		uint64(binary.BigEndian.Uint16(u[6:8])&0x0fff)<<48
	counter := uint64(u.clockSeq() >> 10)
	return Clock(ts<<4 | counter)
}

// Flags returns the flags of u.
func (u UUID) Flags() Flags {
	return Flags(u.clockSeq() & uint16(maxFlags))
}

// clockSeq returns the 14-bit clock sequence of u.
func (u UUID) clockSeq() uint16 {
	return binary.BigEndian.Uint16(u[8:10]) & 0x3fff
}

// IsZero tells whether u is the zero (nil) UUID, as of a message that has
// none.
func (u UUID) IsZero() bool { return u == UUID{} }

// uuidTextLen is the length of a UUID's canonical text.
const uuidTextLen = 36

// uuidDashes are the offsets of the dashes in a UUID's canonical text.
var uuidDashes = [4]int{8, 13, 18, 23}

const lowerHex = "0123456789abcdef"

// String returns u in canonical form, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
func (u UUID) String() string {
	var buf [uuidTextLen]byte
	return string(u.appendText(buf[:0]))
}

// appendText appends the canonical text of u to b.
func (u UUID) appendText(b []byte) []byte {
	for i, x := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, lowerHex[x>>4], lowerHex[x&0xf])
	}
	return b
}

// AppendText implements encoding.TextAppender: it appends u's canonical
// text to b.
func (u UUID) AppendText(b []byte) ([]byte, error) {
	return u.appendText(b), nil
}

// MarshalText implements encoding.TextMarshaler: it returns u's canonical
// text. The zero UUID has the nil UUID's text, all zeros.
func (u UUID) MarshalText() ([]byte, error) {
	return u.appendText(make([]byte, 0, uuidTextLen)), nil
}

// UnmarshalText implements encoding.TextUnmarshaler. It accepts what
// ParseUUID accepts, and also the nil UUID (all zeros), which gives the
// zero UUID, so that a message without a UUID round-trips.
func (u *UUID) UnmarshalText(text []byte) error {
	parsed, err := parseUUID(text, true)
	if err != nil {
		return err
	}
	*u = parsed
	return nil
}

// ParseUUID parses the canonical text of a version 1 UUID of the RFC 4122
// variant, in upper or lower case. Its error names what is wrong. It never
// panics.
func ParseUUID(s string) (UUID, error) {
	return parseUUID(s, false)
}

// parseUUID parses text as ParseUUID does; with allowNil, it also accepts
// the nil UUID. It is generic so that neither ParseUUID nor UnmarshalText
// copies its text.
func parseUUID[T string | []byte](text T, allowNil bool) (UUID, error) {
	var u UUID
	if len(text) != uuidTextLen {
		return u, fmt.Errorf("message: UUID %q has length %d, want %d", shortText(text), len(text), uuidTextLen)
	}
	var digits byte // Over 0xf if a digit is not one.
	for i, j := range uuidHexOffsets {
		hi, lo := hexValue[text[j]], hexValue[text[j+1]]
		digits |= hi | lo
		u[i] = hi<<4 | lo
	}
	if digits > 0xf || text[8] != '-' || text[13] != '-' || text[18] != '-' || text[23] != '-' {
		return UUID{}, uuidSyntaxError(text)
	}
	if allowNil && u.IsZero() {
		return u, nil
	}
	if v := u[6] >> 4; v != 1 {
		return UUID{}, fmt.Errorf("message: UUID %q is version %d, want 1", text, v)
	}
	if u[8]&0xc0 != 0x80 {
		return UUID{}, fmt.Errorf("message: UUID %q is not of the RFC 4122 variant (its variant digit is %q)", text, text[19:20])
	}
	return u, nil
}

// uuidSyntaxError returns the error of the first byte of text, a UUID's
// length, that is neither a hex digit nor a dash where one belongs.
func uuidSyntaxError[T string | []byte](text T) error {
	for _, i := range uuidDashes {
		if text[i] != '-' {
			return fmt.Errorf("message: UUID %q has %q at offset %d, want \"-\"", text, text[i:i+1], i)
		}
	}
	for _, j := range uuidHexOffsets {
		for _, k := range []int{j, j + 1} {
			if hexValue[text[k]] > 0xf {
				return fmt.Errorf("message: UUID %q has %q at offset %d, want a hex digit", text, text[k:k+1], k)
			}
		}
	}
	return nil
}

// uuidHexOffsets are the offsets in a UUID's text of the digits of its
// bytes, in order.
var uuidHexOffsets = [16]int{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// hexValue maps a hex digit to its value, and any other byte to 0xff.
var hexValue = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			t[c] = byte(c - 'A' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

// shortText returns text, cut to at most 40 bytes, for an error message.
func shortText[T string | []byte](text T) string {
	const limit = 40
	if len(text) <= limit {
		return string(text)
	}
	return string(text[:limit]) + "..."
}
