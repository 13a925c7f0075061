package message_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/message"
	"github.com/quire-dev/quire/message/internal/testpb"
)

var quiet = slog.New(slog.DiscardHandler)

// framedJournal is a journal of messages and bad frames that a test
// wrote, and what it holds.
type framedJournal struct {
	bodies        []string
	begins, ends  []int64
	bad           []int64
	newMsg        func() message.Message
	body          func(message.Message) string
	framing       message.Framing
	journal, name string
}

// writeFramedJournal writes n messages of framing f to journal, with a
// bad frame after every 97th: for JSON a line that is not JSON, for
// protobuf alternately a frame whose message does not decode and bytes
// that are no frame (a desync).
func writeFramedJournal(t *testing.T, c *client.Client, f message.Framing, journal string, n int) framedJournal {
	t.Helper()
	fj := framedJournal{framing: f, journal: journal, name: f.Name()}
	var content bytes.Buffer
	w := bufio.NewWriter(&content)
	producer, clock := message.NewProducerID(), message.NewClock(time.Now())
	for i := range n {
		body := "message " + strconv.Itoa(i)
		var m message.Message
		if f == message.JSONLines {
			m = &event{Body: body}
		} else {
			m = &testpb.Event{Kind: body}
		}
		clock.Tick()
		m.SetUUID(message.BuildUUID(producer, clock, message.OutsideTxn))
		begin := int64(content.Len() + w.Buffered())
		if err := f.Marshal(m, w); err != nil {
			t.Fatal(err)
		}
		fj.bodies = append(fj.bodies, body)
		fj.begins = append(fj.begins, begin)
		fj.ends = append(fj.ends, int64(content.Len()+w.Buffered()))
		if i%97 == 96 {
			fj.bad = append(fj.bad, int64(content.Len()+w.Buffered()))
			switch {
			case f == message.JSONLines:
				w.WriteString("{not json\n")
			case len(fj.bad)%2 == 0:
				w.WriteString("no frame here")
			default: // A frame header, and a field whose length runs past the message.
				w.Write([]byte{0xf1, 'Q', 'F', 0x01, 2, 0, 0, 0, 0x0a, 0x7f})
			}
		}
	}
	w.Flush()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Append(ctx, client.AppendRequest{Journal: journal}, bytes.NewReader(content.Bytes())); err != nil {
		t.Fatal(err)
	}
	if f == message.JSONLines {
		fj.newMsg, fj.body = newEvent, func(m message.Message) string { return m.(*event).Body }
	} else {
		fj.newMsg = func() message.Message { return &testpb.Event{} }
		fj.body = func(m message.Message) string { return m.(*testpb.Event).Kind }
	}
	return fj
}

// A Decoder returns a journal's messages in order, with their offsets,
// whatever the number of goroutines that decode them; a frame that does
// not split or decode is skipped, or reported with its journal and offset
// (and reading goes on after it).
func TestDecoderOrderAndBadFrames(t *testing.T) {
	cl := brokertest.New(t)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "events/json", "events/proto")
	journals := []framedJournal{
		writeFramedJournal(t, c, message.JSONLines, "events/json", 2000),
		writeFramedJournal(t, c, message.Protobuf, "events/proto", 2000),
	}
	for _, fj := range journals {
		for _, decoders := range []int{1, 2, 8} {
			for _, skip := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/decoders=%d/skip=%v", fj.name, decoders, skip), func(t *testing.T) {
					readFramedJournal(t, c, fj, decoders, skip)
				})
			}
		}
	}
}

func readFramedJournal(t *testing.T, c *client.Client, fj framedJournal, decoders int, skip bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dec := message.NewDecoder(ctx, c, message.ReaderConfig{Journal: fj.journal, Framing: fj.framing,
		New: fj.newMsg, SkipBadFrames: skip, Decoders: decoders, Logger: quiet})
	defer dec.Close()
	var got, errs int
	for {
		m, begin, end, err := dec.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			if skip || errs >= len(fj.bad) {
				t.Fatalf("Next: %v", err)
			}
			want := fmt.Sprintf("journal %s at offset %d", fj.journal, fj.bad[errs])
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("bad frame error %q does not name %q", err, want)
			}
			// Its offsets run to the next message, which a sequencing
			// reader passes over (Sequencer.Skip).
			var bad *message.BadFrameError
			if !errors.As(err, &bad) || bad.Journal != fj.journal || bad.Begin != fj.bad[errs] || begin != bad.Begin ||
				bad.End != fj.begins[got] || end != bad.End {
				t.Fatalf("bad frame error %#v at [%d, %d), want a BadFrameError at [%d, %d)", err, begin, end, fj.bad[errs], fj.begins[got])
			}
			errs++
			continue
		}
		if got == len(fj.bodies) {
			t.Fatalf("more messages than the %d written", got)
		}
		if b := fj.body(m); b != fj.bodies[got] || begin != fj.begins[got] || end != fj.ends[got] {
			t.Fatalf("message %d: %q at [%d, %d), want %q at [%d, %d)", got, b, begin, end,
				fj.bodies[got], fj.begins[got], fj.ends[got])
		}
		got++
	}
	if got != len(fj.bodies) {
		t.Fatalf("read %d messages, want %d", got, len(fj.bodies))
	}
	if !skip && errs != len(fj.bad) {
		t.Fatalf("got %d bad frame errors, want %d", errs, len(fj.bad))
	}
	if dec.Buffered() != 0 {
		t.Fatalf("Buffered is %d at the write head", dec.Buffered())
	}
}

// A Reader that skips bad frames passes over them: its checkpoint moves
// past a journal's last frame even when that is not a message, so that a
// consumer resuming from it neither reads the frame again nor lags
// behind the write head for good.
func TestReaderPassesOverBadFrames(t *testing.T) {
	cl := brokertest.New(t)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "events/bad-end")
	fj := writeFramedJournal(t, c, message.JSONLines, "events/bad-end", 97) // Ends with "{not json".
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	head, err := c.WriteHead(ctx, fj.journal)
	if err != nil {
		t.Fatal(err)
	}
	r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: fj.journal, Framing: fj.framing,
		New: fj.newMsg, SkipBadFrames: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 97 {
		if _, err := r.Next(); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}
	cp, err := r.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if len(fj.bad) != 1 || fj.bad[0] != fj.ends[96] || cp.Offset != head || cp.Read != head {
		t.Fatalf("checkpoint %+v, want offset and read %d, past the bad frame at %v", cp, head, fj.bad)
	}
}

// A panic of the application's code while decoding is returned by Next as
// an error, even when bad frames are skipped, and does not end the
// process.
func TestDecoderPanicIsAnError(t *testing.T) {
	cl := brokertest.New(t)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "events/panic")
	fj := writeFramedJournal(t, c, message.JSONLines, "events/panic", 50)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var calls atomic.Int64
	dec := message.NewDecoder(ctx, c, message.ReaderConfig{Journal: fj.journal, Framing: fj.framing, SkipBadFrames: true,
		New: func() message.Message {
			if calls.Add(1) == 10 {
				panic("application bug")
			}
			return &event{}
		}})
	defer dec.Close()
	for i := range 9 {
		if _, _, _, err := dec.Next(); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	_, begin, _, err := dec.Next()
	if err == nil || !strings.Contains(err.Error(), "panicked: application bug") || begin != fj.begins[9] {
		t.Fatalf("the message whose decoding panicked: at %d, %v; want a panic error at %d", begin, err, fj.begins[9])
	}
}

// Close stops a Decoder that waits at the write head; Next then fails.
func TestDecoderClose(t *testing.T) {
	cl := brokertest.New(t)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "events/close")
	fj := writeFramedJournal(t, c, message.JSONLines, "events/close", 3)
	dec := message.NewDecoder(context.Background(), c, message.ReaderConfig{Journal: fj.journal,
		Framing: fj.framing, New: newEvent, Block: true})
	for range 3 {
		if _, _, _, err := dec.Next(); err != nil {
			t.Fatal(err)
		}
	}
	dec.Close() // Returns once its goroutines, waiting for more, have stopped.
	if _, _, _, err := dec.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after Close: %v, want context.Canceled", err)
	}
}
