package soak

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// history builds a history of two writers on journal j: a's record
// acknowledged at [0, n), then b's (concurrent with a read) at [n, m).
func history(t *testing.T) (*History, []byte, []byte) {
	t.Helper()
	h := &History{}
	a, b := Record(1, 1, 3), Record(2, 1, 0)
	h.Append(1, "j", a, 0, 10, AppendOutput{0, int64(len(a))}, nil)
	h.Append(2, "j", b, 20, 40, AppendOutput{int64(len(a)), int64(len(a) + len(b))}, nil)
	h.Read(3, "j", a, 15, 30) // Before b took effect.
	return h, a, b
}

func TestCheckHolds(t *testing.T) {
	h, a, b := history(t)
	h.Read(3, "j", append(append([]byte{}, a...), b...), 50, 60)
	v := h.Check(map[string][]byte{"j": append(append([]byte{}, a...), b...)}, 100, time.Minute)
	if !v.OK() || v.Appends != 2 || v.Reads != 2 {
		t.Fatalf("verdict %+v, want it to hold, with 2 appends and 2 reads", v)
	}
}

func TestCheckFindsLossDuplicationAndTears(t *testing.T) {
	h, a, b := history(t)
	for _, tc := range []struct {
		name  string
		final []byte
		count func(*Verdict) int
	}{
		{"lost", a, func(v *Verdict) int { return v.Lost }},
		{"duplicated", bytes.Join([][]byte{a, b, b}, nil), func(v *Verdict) int { return v.Duplicated }},
		{"torn", append(append(append([]byte{}, a...), b[:5]...), '\n'), func(v *Verdict) int { return v.Torn }},
		{"moved", append(append([]byte{}, b...), a...), func(v *Verdict) int { return v.Moved }},
	} {
		v := h.Check(map[string][]byte{"j": tc.final}, 100, time.Minute)
		if v.OK() || tc.count(v) == 0 {
			t.Errorf("%s: verdict %+v, want the %s found", tc.name, v, tc.name)
		}
	}
}

// A read that misses an append acknowledged before the read began is not
// linearizable, though the final content is right.
func TestCheckFindsStaleRead(t *testing.T) {
	h, a, b := history(t)
	h.Read(3, "j", a, 50, 60) // b was acknowledged at 40.
	v := h.Check(map[string][]byte{"j": append(append([]byte{}, a...), b...)}, 100, time.Minute)
	if v.OK() || v.Linearizable != porcupine.Illegal {
		t.Fatalf("verdict %+v, want a stale read found illegal", v)
	}
}

// A failed append that the journal holds all the same took effect some
// time after its call; one it does not hold never did.
func TestCheckUnknownAppends(t *testing.T) {
	h, a, b := history(t)
	c, d := Record(4, 1, 1), Record(4, 2, 1)
	h.Append(4, "j", c, 45, 200, AppendOutput{}, errors.New("deadline exceeded"))
	h.Append(4, "j", d, 210, 300, AppendOutput{}, errors.New("deadline exceeded"))
	final := bytes.Join([][]byte{a, b, c}, nil)
	v := h.Check(map[string][]byte{"j": final}, 400, time.Minute)
	if !v.OK() || v.Unknown != 2 || v.UnknownFound != 1 {
		t.Fatalf("verdict %+v, want it to hold, with 2 unknown appends of which 1 found", v)
	}
}

// A gap (offsets the journal skips, read as NUL bytes) holding no
// acknowledged append is counted, not a violation: it is an append no one
// was told of, whose bytes were lost. Reads before and after it hold.
// One where an acknowledged append was is a loss.
func TestCheckGaps(t *testing.T) {
	h, a, b := history(t)
	gap := make([]byte, 7)
	c := Record(4, 1, 0)
	at := int64(len(a) + len(b) + len(gap))
	h.Append(4, "j", c, 50, 60, AppendOutput{at, at + int64(len(c))}, nil)
	final := bytes.Join([][]byte{a, b, gap, c}, nil)
	h.Read(3, "j", final, 70, 80)
	v := h.Check(map[string][]byte{"j": final}, 100, time.Minute)
	if !v.OK() || v.Gaps != 1 || v.GapBytes != 7 || v.Appends != 3 {
		t.Fatalf("verdict %+v, want it to hold, with 3 appends and a gap of 7 bytes", v)
	}

	lostInGap := bytes.Join([][]byte{a, make([]byte, len(b)), c}, nil)
	h, a, _ = history(t)
	at = int64(len(lostInGap) - len(c))
	h.Append(4, "j", c, 50, 60, AppendOutput{at, at + int64(len(c))}, nil)
	if v := h.Check(map[string][]byte{"j": lostInGap}, 100, time.Minute); v.OK() || v.Lost != 1 {
		t.Fatalf("verdict %+v, want the acknowledged append in the gap lost", v)
	}
}

func TestParseRecord(t *testing.T) {
	for _, line := range []string{"", "w01-00000001\n", "w01-0000000a x\n", "w01-00000001 xy\n", "w01-00000001 x"} {
		if _, _, ok := parseRecord([]byte(line)); ok {
			t.Errorf("parseRecord(%q) ok, want refused", line)
		}
	}
	if w, s, ok := parseRecord(Record(7, 42, 5)); !ok || w != 7 || s != 42 {
		t.Errorf("parseRecord(Record(7, 42, 5)) = %d, %d, %v", w, s, ok)
	}
}

func FuzzParseRecord(f *testing.F) {
	f.Add(Record(1, 2, 3))
	f.Add([]byte("w01-00000001 \n"))
	f.Fuzz(func(t *testing.T, line []byte) {
		if w, s, ok := parseRecord(line); ok && !bytes.Equal(Record(w, s, len(line)-len(Record(0, 0, 0))), line) {
			t.Errorf("parseRecord(%q) = %d, %d, but Record makes %q", line, w, s, Record(w, s, len(line)-14))
		}
	})
}

// A run that stops before its check leaves what it recorded, failed
// appends marked.
func TestUncheckedHistoryIsWritten(t *testing.T) {
	h, _, _ := history(t)
	h.Append(1, "j", Record(1, 2, 0), 50, 60, AppendOutput{}, errors.New("timed out"))
	var out bytes.Buffer
	if _, err := h.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n"))
	if len(lines) != 4 || !bytes.HasSuffix(lines[3], []byte("(failed)")) || bytes.Contains(lines[0], []byte("failed")) {
		t.Fatalf("unchecked history:\n%s\nwant 4 operations, the last marked failed", out.Bytes())
	}
}
