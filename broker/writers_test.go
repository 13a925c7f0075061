package broker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quire-dev/quire/labels"
	"github.com/quire-dev/quire/protocol"
)

func TestWithWriterKeepsTheLatestWriters(t *testing.T) {
	regs := labels.Set{{Name: "author", Value: "z1.b1"}}
	for i := range MaxWriters + 3 {
		regs = withWriter(regs, fmt.Sprintf("w%02d", i), lastAppend{seq: 1, begin: int64(10 * i), end: int64(10*i + 10)})
	}
	// w00 to w02 were pushed out. A kept writer's next append moves it up;
	// a new writer pushes out the one whose last append is the oldest, w03.
	regs = withWriter(regs, "w05", lastAppend{seq: 2, begin: 500, end: 510})
	regs = withWriter(regs, "w19", lastAppend{seq: 1, begin: 510, end: 520})
	// An append that commits after one of a greater sequence number (the
	// writer's concurrent appends) leaves the greater in place.
	regs = withWriter(regs, "w05", lastAppend{seq: 1, begin: 520, end: 530})
	if v, ok := regs.Value("author"); !ok || v != "z1.b1" {
		t.Errorf("other registers changed: %v", regs)
	}
	n := 0
	for _, l := range regs {
		if l.Name != "author" {
			n++
		}
	}
	if n != MaxWriters {
		t.Errorf("%d writers kept, want %d: %v", n, MaxWriters, regs)
	}
	for w, want := range map[string]string{"w00": "", "w02": "", "w03": "", "w04": "1@40-50", "w05": "2@500-510", "w18": "1@180-190", "w19": "1@510-520"} {
		if got, _ := regs.Value(protocol.WriterRegisterPrefix + w); got != want {
			t.Errorf("writer %s: %q, want %q", w, got, want)
		}
	}
	if err := regs.Validate(); err != nil {
		t.Errorf("registers do not validate: %v", err)
	}
}

// A commit's registers come out as withWriter would make them, one
// append at a time, and the journal's registers they start from, which
// commits in flight share, do not change.
func TestCommitRegistersCopyOnce(t *testing.T) {
	journal := labels.Set{{Name: "author", Value: "z1.b1"}}
	for i := range MaxWriters {
		journal = withWriter(journal, fmt.Sprintf("w%02d", i), lastAppend{seq: 1, begin: int64(10 * i), end: int64(10*i + 10)})
	}
	before := slices.Clone(journal)
	appends := []struct {
		writer string
		a      lastAppend
	}{
		{"w03", lastAppend{seq: 2, begin: 160, end: 170}}, // the first change copies
		{"w04", lastAppend{seq: 2, begin: 170, end: 180}}, // in place
		{"w03", lastAppend{seq: 3, begin: 180, end: 190}}, // in place again
		{"w04", lastAppend{seq: 1, begin: 190, end: 200}}, // older: ignored
		{"w99", lastAppend{seq: 1, begin: 200, end: 210}}, // new: pushes out w00
		{"w05", lastAppend{seq: 2, begin: 210, end: 220}},
	}
	c := commitRegisters{set: journal}
	want := journal
	for _, ap := range appends {
		c.withWriter(ap.writer, ap.a)
		want = withWriter(want, ap.writer, ap.a)
		if !c.set.Equal(want) {
			t.Fatalf("after %s's %+v: %v, want %v", ap.writer, ap.a, c.set, want)
		}
	}
	if !journal.Equal(before) {
		t.Errorf("the journal's registers changed: %v, were %v", journal, before)
	}
	if v, _ := c.set.Value(protocol.WriterRegisterPrefix + "w03"); v != "3@180-190" {
		t.Errorf("w03: %q, want 3@180-190", v)
	}
}

// appendAs appends data as writer's append number seq, through b.
func appendAs(t *testing.T, b *testBroker, journal, writer string, seq uint64, data string) *protocol.AppendResponse {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := appendOnce(ctx, b, &protocol.AppendRequest{Journal: journal, Writer: writer, Sequence: seq}, []byte(data))
		cancel()
		if err == nil && !transient(resp, nil) {
			return resp
		}
		if !transient(resp, err) || time.Now().After(deadline) {
			t.Fatalf("append %d of %s to %s: %v %v", seq, writer, journal, resp, err)
		}
		time.Sleep(20 * time.Millisecond) // Retry pacing, as a client's backoff.
	}
}

// An append that names its writer and sequence commits once: a retry is
// answered with the first attempt's range, appending nothing, also at a
// new primary after the one it committed at is gone.
func TestRetriedAppendCommitsOnce(t *testing.T) {
	c := newCluster(t)
	b1, b2 := c.start("b1", ""), c.start("b2", "")
	const journal = "writers/j"
	c.journal(b1, journal, 2)
	route := c.awaitRoute(b1, journal, 2)
	primary, other := b1, b2
	if route.Members[0].Suffix == "b2" {
		primary, other = b2, b1
	}

	first := appendAs(t, primary, journal, "w1", 1, "one\n")
	if first.Status != protocol.Status_OK || first.AlreadyCommitted {
		t.Fatalf("first append: %v", first)
	}
	again := appendAs(t, other, journal, "w1", 1, "one\n") // Proxied to the primary.
	if again.Status != protocol.Status_OK || !again.AlreadyCommitted ||
		again.Commit.Begin != first.Commit.Begin || again.Commit.End != first.Commit.End {
		t.Fatalf("retry: %v, want OK, already committed at [%d, %d)", again, first.Commit.Begin, first.Commit.End)
	}
	for _, resp := range []*protocol.AppendResponse{first, again} {
		if len(resp.Registers) != 0 {
			t.Errorf("an answer carries registers %v; the writers' are the brokers' own, and there are no others", resp.Registers)
		}
	}
	second := appendAs(t, primary, journal, "w1", 2, "two\n")
	if second.AlreadyCommitted || second.Commit.Begin != first.Commit.End {
		t.Fatalf("second append: %v", second)
	}
	appendAs(t, primary, journal, "w2", 1, "other\n") // Another writer's.

	// The primary goes; its peer, the new primary, knows what committed.
	c.stop(primary)
	c.awaitRoute(other, journal, 1)
	retry := appendAs(t, other, journal, "w1", 2, "two\n")
	if !retry.AlreadyCommitted || retry.Commit.Begin != second.Commit.Begin || retry.Commit.End != second.Commit.End {
		t.Fatalf("retry at the new primary: %v, want already committed at [%d, %d)", retry, second.Commit.Begin, second.Commit.End)
	}
	appendAs(t, other, journal, "w1", 3, "three\n")
	if got, want := string(c.readAll(other, journal)), "one\ntwo\nother\nthree\n"; got != want {
		t.Errorf("journal holds %q, want %q: each append once", got, want)
	}
}

func TestParseLastAppend(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want lastAppend
		ok   bool
	}{
		{"1@0-100", lastAppend{1, 0, 100}, true},
		{"18446744073709551615@9223372036854775806-9223372036854775807", lastAppend{1<<64 - 1, 1<<63 - 2, 1<<63 - 1}, true},
		{"0@0-0", lastAppend{}, true},
		{"", lastAppend{}, false},
		{"1@2", lastAppend{}, false},
		{"1-2@3", lastAppend{}, false},
		{"+1@2-3", lastAppend{}, false},
		{"01@2-3", lastAppend{}, false},
		{"1@-2-3", lastAppend{}, false},
		{"1@2-3 ", lastAppend{}, false},
		{"1@2-9223372036854775808", lastAppend{}, false}, // Past int64.
		{"18446744073709551616@2-3", lastAppend{}, false},
	} {
		got, ok := parseLastAppend(tc.v)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("parseLastAppend(%q) = %+v, %v; want %+v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// Registers come from peers and recovered spools: any value parses
// without panicking, and what parses is what value() writes.
func FuzzParseLastAppend(f *testing.F) {
	for _, v := range []string{"1@0-100", "0@0-0", "01@2-3", "1@-2-3", "+1@2-3", "1@2-9223372036854775808"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		a, ok := parseLastAppend(v)
		if ok && a.value() != v {
			t.Errorf("parseLastAppend(%q) = %+v, which writes as %q", v, a, a.value())
		}
		if ok && (a.begin < 0 || a.end < 0) {
			t.Errorf("parseLastAppend(%q) = %+v: a negative offset", v, a)
		}
	})
}
