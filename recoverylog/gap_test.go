package recoverylog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/internal/brokertest"
)

// gappedLog makes journal hold a recorder's ops, then a gap of lost
// bytes, then the frames of after: what the log of a recorder whose last
// append committed on one replica only, since lost with its disk, looks
// like once the next recorder appended (the primary rolled past the lost
// bytes). The first of after's frames is restored to the store behind the
// brokers' back, and the rest appended at its end, which moves the write
// head there. It returns the recorder's last op and where the gap begins.
func gappedLog(t *testing.T, c *brokertest.Cluster, cl *client.Client, journal string, lost int, after func(last Op) [][]byte) (Op, int64) {
	t.Helper()
	dir := t.TempDir()
	rec := newRecorder(t, cl, journal, dir, "r1", nil)
	if err := writeFile(rec, filepath.Join(dir, "f"), "data", true); err != nil {
		t.Fatal(err)
	}
	ops, _ := readOps(t, cl, journal)
	last, gap := ops[len(ops)-1], rec.FSM().Offset
	frames := after(last)

	ctx := testContext(t)
	store, err := fragment.Open(ctx, c.Store)
	if err != nil {
		t.Fatal(err)
	}
	begin := gap + int64(lost)
	f := fragment.Fragment{Journal: journal, Begin: begin, End: begin + int64(len(frames[0])),
		Sum: sha256.Sum256(frames[0]), Codec: fragment.None}
	if err := store.Persist(ctx, f, bytes.NewReader(frames[0])); err != nil {
		t.Fatal(err)
	}
	at := f.End
	for _, frame := range frames[1:] {
		if _, err := cl.Append(ctx, client.AppendRequest{Journal: journal, Offset: &at}, bytes.NewReader(frame)); err != nil {
			t.Fatal(err)
		}
		at += int64(len(frame))
	}
	return last, gap
}

// A player crosses a gap in the log whose ops were never acknowledged:
// the ops after it follow from those before it. The directory it plays
// holds nothing of the lost ops, and a recorder that takes over from it
// appends ops that a later player, crossing the same gap, applies too.
func TestPlaybackCrossesAGapOfAnUnacknowledgedAppend(t *testing.T) {
	const journal = "recovery/gapped"
	c := brokertest.New(t)
	cl := c.Client(c.Start("b1"))
	c.Journals(cl, 1, journal)
	lost := AppendOp(nil, &Op{Kind: KindCreate, Seq: 3, Author: "r1", Node: 3, Path: "lost"})
	_, gap := gappedLog(t, c, cl, journal, len(lost), func(last Op) [][]byte {
		if last.Seq != 2 {
			t.Fatalf("the recorder's last op is #%d, want #2", last.Seq)
		}
		return [][]byte{
			AppendOp(AppendOp(nil, &Op{Kind: KindCreate, Seq: 3, Author: "r2", Node: 3, Path: "g"}),
				&Op{Kind: KindWrite, Seq: 4, Author: "r2", Node: 3, Data: []byte("after the gap")}),
			AppendOp(nil, &Op{Kind: KindWrite, Seq: 5, Author: "r2", Node: 3, Offset: 13, Data: []byte("!")}),
		}
	})

	crossed := testutil.ToFloat64(gapsCrossed)
	dir, p := play(t, cl, journal)
	if got := testutil.ToFloat64(gapsCrossed) - crossed; got != 1 {
		t.Errorf("quire_recoverylog_gaps_crossed_total rose by %v, want 1", got)
	}
	if p.FSM().LastSeq != 5 {
		t.Errorf("played to op #%d, want #5", p.FSM().LastSeq)
	}
	want := map[string]string{"f": "data", "g": "after the gap!"}
	sameFiles(t, dir, want)

	// A recorder takes over at the write head, past the gap.
	rec := newRecorder(t, cl, journal, dir, "r3", p.FSM())
	if err := writeFile(rec, filepath.Join(dir, "h"), "later", true); err != nil {
		t.Fatal(err)
	}
	want["h"] = "later"
	dir, p = play(t, cl, journal)
	sameFiles(t, dir, want)
	if p.Progress().Offset <= gap {
		t.Errorf("played to offset %d, want past the gap at %d", p.Progress().Offset, gap)
	}
}

// A gap whose ops the next ones depend on (they do not follow from the
// ops before it) fails playback, naming the gap and the op that does not
// follow, which is not applied.
func TestPlaybackStopsAtAGapTheNextOpDoesNotFollow(t *testing.T) {
	const journal = "recovery/gapped-acknowledged"
	c := brokertest.New(t)
	cl := c.Client(c.Start("b1"))
	c.Journals(cl, 1, journal)
	lost := AppendOp(nil, &Op{Kind: KindCreate, Seq: 3, Author: "r1", Node: 3, Path: "lost"})
	_, gap := gappedLog(t, c, cl, journal, len(lost), func(Op) [][]byte {
		return [][]byte{
			AppendOp(nil, &Op{Kind: KindWrite, Seq: 4, Author: "r1", Node: 3, Data: []byte("depends on #3")}),
			AppendOp(nil, &Op{Kind: KindWrite, Seq: 5, Author: "r1", Node: 3, Offset: 13, Data: []byte("!")}),
		}
	})
	p, err := NewPlayer(PlayerConfig{Client: cl, Journal: journal, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Play(testContext(t))
	var opErr *OpError
	wantGap := fmt.Sprintf("the gap [%d, %d)", gap, gap+int64(len(lost)))
	if !errors.As(err, &opErr) || !strings.Contains(err.Error(), wantGap) || !strings.Contains(err.Error(), "sequence number 4") {
		t.Fatalf("playback: %v; want an error naming op #4 and %s", err, wantGap)
	}
	if got := p.FSM().LastSeq; got != 2 {
		t.Errorf("played to op #%d, want #2 (the op after the gap not applied)", got)
	}
}

// sameFiles checks that dir holds exactly the files of want.
func sameFiles(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		got[e.Name()] = string(b)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("played files %v, want %v", got, want)
	}
}
