package message_test

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quire-dev/quire/message"
)

func TestUUIDRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		var p message.ProducerID
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		c := message.Clock(rng.Uint64())
		f := message.Flags(rng.IntN(0x400))

		u := message.BuildUUID(p, c, f)
		if got := u.ProducerID(); got != p {
			t.Fatalf("BuildUUID(%x, %#x, %#x).ProducerID() = %x", p, c, f, got)
		}
		if got := u.Clock(); got != c {
			t.Fatalf("BuildUUID(%x, %#x, %#x).Clock() = %#x", p, c, f, got)
		}
		if got := u.Flags(); got != f {
			t.Fatalf("BuildUUID(%x, %#x, %#x).Flags() = %#x", p, c, f, got)
		}
		if u.IsZero() {
			t.Fatalf("BuildUUID(%x, %#x, %#x).IsZero()", p, c, f)
		}
		s := u.String()
		parsed, err := message.ParseUUID(s)
		if err != nil || parsed != u {
			t.Fatalf("ParseUUID(%q) = %v, %v; want %v", s, parsed, err, u)
		}
		if upper, err := message.ParseUUID(strings.ToUpper(s)); err != nil || upper != u {
			t.Fatalf("ParseUUID(%q) = %v, %v; want %v", strings.ToUpper(s), upper, err, u)
		}
	}
}

// TestUUIDKnownVector checks the layout against the version 1 example of
// RFC 9562 (appendix A.1): 2022-02-22 19:22:22 UTC, clock sequence
// 0x33c8, node 9f:6b:de:ce:d8:46.
func TestUUIDKnownVector(t *testing.T) {
	u, err := message.ParseUUID("C232AB00-9414-11EC-B3C8-9F6BDECED846")
	if err != nil {
		t.Fatal(err)
	}
	const ts, seq = 0x1EC9414C232AB00, 0x33c8
	if want := message.Clock(ts<<4 | seq>>10); u.Clock() != want {
		t.Errorf("Clock() = %#x, want %#x", u.Clock(), want)
	}
	if want := message.Flags(seq & 0x3ff); u.Flags() != want {
		t.Errorf("Flags() = %#x, want %#x", u.Flags(), want)
	}
	if want := (message.ProducerID{0x9f, 0x6b, 0xde, 0xce, 0xd8, 0x46}); u.ProducerID() != want {
		t.Errorf("ProducerID() = %x, want %x", u.ProducerID(), want)
	}
	if want := time.Date(2022, 2, 22, 19, 22, 22, 0, time.UTC); !u.Clock().Time().Equal(want) {
		t.Errorf("Clock().Time() = %v, want %v", u.Clock().Time(), want)
	}
	if got, want := u.String(), "c232ab00-9414-11ec-b3c8-9f6bdeced846"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := message.BuildUUID(u.ProducerID(), u.Clock(), u.Flags()); got != u {
		t.Errorf("BuildUUID of its parts = %v, want %v", got, u)
	}
}

func TestUUIDOrderFollowsClock(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := message.NewProducerID()
	clocks := make([]message.Clock, 1000)
	for i := range clocks {
		clocks[i] = message.Clock(rng.Uint64())
	}
	clocks = append(clocks, 0, 1, 15, 16, 17, 1<<63, ^message.Clock(0))
	slices.Sort(clocks)
	uuids := make([]message.UUID, len(clocks))
	for i, c := range clocks {
		uuids[i] = message.BuildUUID(p, c, message.Flags(i&0x3ff))
	}
	for i := 1; i < len(uuids); i++ {
		if a, b := uuids[i-1].Clock(), uuids[i].Clock(); a > b || (a == b) != (clocks[i-1] == clocks[i]) {
			t.Fatalf("clocks %#x then %#x built UUIDs with clocks %#x then %#x", clocks[i-1], clocks[i], a, b)
		}
	}
}

func TestBuildUUIDPanicsOnWideFlags(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("BuildUUID with flags 0x400 did not panic")
		}
	}()
	message.BuildUUID(message.ProducerID{}, 0, 0x400)
}

func TestNewProducerID(t *testing.T) {
	seen := make(map[message.ProducerID]bool)
	for range 100 {
		p := message.NewProducerID()
		if p[0]&1 == 0 {
			t.Fatalf("NewProducerID() = %x, without the multicast bit", p)
		}
		if seen[p] {
			t.Fatalf("NewProducerID() returned %x twice", p)
		}
		seen[p] = true
	}
}

func TestParseUUIDErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "has length 0, want 36"},
		{"short", "c232ab00-9414-11ec-b3c8-9f6bdeced84", "has length 35"},
		{"long", "c232ab00-9414-11ec-b3c8-9f6bdeced8460", "has length 37"},
		{"very long", strings.Repeat("a", 100), "has length 100"},
		{"braces", "{c232ab00-9414-11ec-b3c8-9f6bdeced8}", `at offset 8, want "-"`},
		{"no dashes", "c232ab0009414011ec0b3c809f6bdeced846", `"0" at offset 8, want "-"`},
		{"misplaced dash", "c232ab00-94141-1ec-b3c8-9f6bdeced846", `at offset 13, want "-"`},
		{"bad hex", "c232ab00-9414-11ec-b3c8-9f6bdeced84g", `"g" at offset 35, want a hex digit`},
		{"bad high hex", "x232ab00-9414-11ec-b3c8-9f6bdeced846", `"x" at offset 0, want a hex digit`},
		{"space", "c232ab00-9414-11ec-b3c8-9f6bdeced 46", `" " at offset 33, want a hex digit`},
		{"non-ASCII", "c232ab00-9414-11ec-b3c8-9f6bdeced8é", `"\xc3" at offset 34, want a hex digit`},
		{"version 4", "c232ab00-9414-41ec-b3c8-9f6bdeced846", "is version 4, want 1"},
		{"version 0", "c232ab00-9414-01ec-b3c8-9f6bdeced846", "is version 0, want 1"},
		{"NCS variant", "c232ab00-9414-11ec-33c8-9f6bdeced846", `not of the RFC 4122 variant (its variant digit is "3")`},
		{"Microsoft variant", "c232ab00-9414-11ec-c3c8-9f6bdeced846", "not of the RFC 4122 variant"},
		{"nil UUID", "00000000-0000-0000-0000-000000000000", "is version 0, want 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := message.ParseUUID(tc.in)
			if err == nil {
				t.Fatalf("ParseUUID(%q) = %v, want an error", tc.in, u)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseUUID(%q) error %q does not contain %q", tc.in, err, tc.want)
			}
			if !u.IsZero() {
				t.Errorf("ParseUUID(%q) = %v with an error, want the zero UUID", tc.in, u)
			}
		})
	}
}

func TestUUIDText(t *testing.T) {
	u := message.BuildUUID(message.NewProducerID(), message.NewClock(time.Now()), message.AckTxn)
	for _, tc := range []struct {
		name string
		in   message.UUID
	}{
		{"built", u},
		{"zero", message.UUID{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(map[string]message.UUID{"uuid": tc.in})
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"uuid":"` + tc.in.String() + `"}`; string(b) != want {
				t.Errorf("json.Marshal = %s, want %s", b, want)
			}
			var out map[string]message.UUID
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatal(err)
			}
			if out["uuid"] != tc.in {
				t.Errorf("round trip of %v through JSON gave %v", tc.in, out["uuid"])
			}
		})
	}
	var v message.UUID
	if err := v.UnmarshalText([]byte("c232ab00-9414-41ec-b3c8-9f6bdeced846")); err == nil {
		t.Error("UnmarshalText of a version 4 UUID succeeded")
	}
	if b, _ := u.AppendText([]byte("x")); string(b) != "x"+u.String() {
		t.Errorf("AppendText = %q", b)
	}
}

func TestClockUpdateNeverGoesBack(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	for _, tc := range []struct {
		name  string
		start message.Clock
		at    time.Time
		want  message.Clock
	}{
		{"from zero", 0, base, message.NewClock(base)},
		{"later", message.NewClock(base), base.Add(time.Second), message.NewClock(base.Add(time.Second))},
		{"earlier", message.NewClock(base), base.Add(-time.Hour), message.NewClock(base)},
		{"same tick keeps counter", message.NewClock(base) + 3, base.Add(50 * time.Nanosecond), message.NewClock(base) + 3},
		{"next tick resets counter", message.NewClock(base) + 3, base.Add(100 * time.Nanosecond), message.NewClock(base) + 16},
		{"counter ahead of time", message.NewClock(base) + 40, base.Add(100 * time.Nanosecond), message.NewClock(base) + 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.start
			c.Update(tc.at)
			if c != tc.want {
				t.Errorf("Clock(%#x).Update(%v) = %#x, want %#x", tc.start, tc.at, c, tc.want)
			}
		})
	}

	// A wall clock that wanders back and forth never moves the clock back.
	rng := rand.New(rand.NewPCG(5, 6))
	var c message.Clock
	now := base
	for range 10000 {
		now = now.Add(time.Duration(rng.IntN(2000)-1000) * time.Nanosecond)
		prev := c
		c.Update(now)
		c.Tick()
		if c <= prev {
			t.Fatalf("Update(%v) and Tick took the clock from %#x to %#x", now, prev, c)
		}
	}
}

func TestClockTickCarries(t *testing.T) {
	start := message.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := start
	for i := 1; i <= 15; i++ {
		c.Tick()
		if !c.Time().Equal(start.Time()) {
			t.Fatalf("after %d ticks Time() = %v, want %v", i, c.Time(), start.Time())
		}
	}
	c.Tick()
	if want := start.Time().Add(100 * time.Nanosecond); !c.Time().Equal(want) || c != start+16 {
		t.Errorf("after 16 ticks: clock %#x at %v, want %#x at %v", c, c.Time(), start+16, want)
	}
	u := message.BuildUUID(message.ProducerID{}, c, message.OutsideTxn)
	if u.Clock() != c {
		t.Errorf("UUID of clock %#x has clock %#x", c, u.Clock())
	}
}

func TestClockTime(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"now", time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC), time.Date(2026, 5, 6, 7, 8, 9, 123456700, time.UTC)},
		{"unix epoch", time.Unix(0, 0), time.Unix(0, 0)},
		{"before unix epoch", time.Date(1900, 1, 1, 0, 0, 0, 999, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 900, time.UTC)},
		{"gregorian epoch", time.Date(1582, 10, 15, 0, 0, 0, 0, time.UTC), time.Date(1582, 10, 15, 0, 0, 0, 0, time.UTC)},
		{"before gregorian epoch", time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1582, 10, 15, 0, 0, 0, 0, time.UTC)},
		{"far future", time.Date(4000, 1, 1, 0, 0, 0, 100, time.UTC), time.Date(4000, 1, 1, 0, 0, 0, 100, time.UTC)},
		{"beyond 60 bits", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), message.Clock(^uint64(0) &^ 0xf).Time()},
		{"other zone", time.Date(2026, 5, 6, 7, 8, 9, 0, time.FixedZone("x", 3600)), time.Date(2026, 5, 6, 6, 8, 9, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := message.NewClock(tc.in).Time()
			if !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Errorf("NewClock(%v).Time() = %v, want %v", tc.in, got, tc.want)
			}
		})
	}

	// Random times round-trip to the 100ns.
	rng := rand.New(rand.NewPCG(7, 8))
	for range 10000 {
		in := time.Unix(0, rng.Int64())
		want := time.Unix(0, in.UnixNano()/100*100)
		if got := message.NewClock(in).Time(); !got.Equal(want) {
			t.Fatalf("NewClock(%v).Time() = %v, want %v", in, got, want)
		}
	}
}
