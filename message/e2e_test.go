package message_test

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/etcdtest"
	"github.com/quire-dev/quire/message"
)

func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }

// event is the application's message type of these tests.
type event struct {
	UUID message.UUID `json:"uuid"`
	Body string       `json:"body,omitempty"`
}

func (e *event) GetUUID() message.UUID                     { return e.UUID }
func (e *event) SetUUID(u message.UUID)                    { e.UUID = u }
func (e *event) NewAcknowledgement(string) message.Message { return &event{} }
func newEvent() message.Message                            { return &event{} }
func newAck(string) message.Message                        { return &event{} }

// committed reads journal's committed messages to the write head.
func committed(t *testing.T, c *client.Client, journal string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: journal, Framing: message.JSONLines, New: newEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("reading %s: %v", journal, err)
		}
		out = append(out, d.Message.(*event).Body)
	}
}

func wait(t *testing.T, hs ...*client.AppendHandle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, h := range hs {
		if _, err := h.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A producer that crashes between its uncommitted writes and their
// acknowledgement leaves nothing visible; its successor rolls the
// transaction back by writing its predecessor's last acknowledgements, and
// then exactly the messages it acknowledges appear.
func TestTransactionsThroughBrokers(t *testing.T) {
	cl := brokertest.New(t)
	b := cl.Start("b1")
	c := cl.Client(b)
	cl.Journals(c, 1, "events/a", "events/b")
	ctx := context.Background()
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	defer appender.Close()
	producer := message.NewProducerID()

	p := message.NewPublisher(appender, message.JSONLines, producer, message.NewClock(time.Now()))
	h0, _ := p.PublishCommitted(ctx, "events/a", &event{Body: "standalone"})
	h1, _ := p.PublishUncommitted(ctx, "events/a", &event{Body: "a1"})
	h2, _ := p.PublishUncommitted(ctx, "events/b", &event{Body: "b1"})
	wait(t, h0, h1, h2)
	if got := committed(t, c, "events/a"); !slices.Equal(got, []string{"standalone"}) {
		t.Fatalf("before the acknowledgement, events/a shows %q", got)
	}
	intents, err := p.BuildAckIntents(newAck)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PublishUncommitted(ctx, "events/a", &event{Body: "too early"}); !errors.Is(err, message.ErrAckPending) {
		t.Fatalf("publishing before the acknowledgements are written: %v, want ErrAckPending", err)
	}
	// (A consumer stores intents with its state here.)
	hs, err := p.WriteAckIntents(ctx, intents)
	if err != nil {
		t.Fatal(err)
	}
	wait(t, hs...)

	// The next transaction, then a crash before its acknowledgements.
	h3, _ := p.PublishUncommitted(ctx, "events/a", &event{Body: "doomed-a"})
	h4, _ := p.PublishUncommitted(ctx, "events/b", &event{Body: "doomed-b"})
	wait(t, h3, h4)
	if got := committed(t, c, "events/a"); !slices.Equal(got, []string{"standalone", "a1"}) {
		t.Fatalf("after a crash mid-transaction, events/a shows %q", got)
	}
	if got := committed(t, c, "events/b"); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("after a crash mid-transaction, events/b shows %q", got)
	}

	// The successor: same producer, restored from the last checkpoint.
	s := message.NewPublisher(appender, message.JSONLines, producer, p.Clock())
	hs, err = s.WriteAckIntents(ctx, intents) // Rolls the doomed transaction back.
	if err != nil {
		t.Fatal(err)
	}
	h5, _ := s.PublishUncommitted(ctx, "events/a", &event{Body: "a2"})
	wait(t, append(hs, h5)...)
	intents, err = s.BuildAckIntents(newAck)
	if err != nil {
		t.Fatal(err)
	}
	hs, _ = s.WriteAckIntents(ctx, intents)
	wait(t, hs...)
	if got := committed(t, c, "events/a"); !slices.Equal(got, []string{"standalone", "a1", "a2"}) {
		t.Fatalf("after the successor's transaction, events/a shows %q", got)
	}
	if got := committed(t, c, "events/b"); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("after the successor's transaction, events/b shows %q", got)
	}
}

// A reader that checkpoints and restarts from the checkpoint continues
// exactly: nothing twice, nothing missed.
func TestReaderResumesFromCheckpoint(t *testing.T) {
	cl := brokertest.New(t)
	b := cl.Start("b1")
	c := cl.Client(b)
	cl.Journals(c, 1, "events/resume")
	ctx := context.Background()
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	defer appender.Close()
	p := message.NewPublisher(appender, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now()))
	var want []string
	publish := func(n int) {
		var hs []*client.AppendHandle
		for range n {
			body := string(rune('a' + len(want)%26))
			want = append(want, body)
			h, err := p.PublishCommitted(ctx, "events/resume", &event{Body: body})
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		wait(t, hs...)
	}
	publish(10)
	var got []string
	var cp message.Checkpoint
	for round := range 3 {
		r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: "events/resume", Framing: message.JSONLines,
			New: newEvent, Checkpoint: cp})
		if err != nil {
			t.Fatal(err)
		}
		for {
			d, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.Message.(*event).Body)
		}
		if cp, err = r.Checkpoint(); err != nil {
			t.Fatal(err)
		}
		r.Close()
		publish(5 + round)
	}
	if !slices.Equal(got, want[:len(got)]) || len(got) != 10+5+6 {
		t.Fatalf("read across restarts %q, want %q", got, want[:10+5+6])
	}
}

// A Reader that does not block returns io.EOF at the write head and goes
// on from there at its next call; a blocking one delivers messages as they
// are published, until its context ends.
func TestReaderTail(t *testing.T) {
	cl := brokertest.New(t)
	c := cl.Client(cl.Start("b1"))
	cl.Journals(c, 1, "events/tail")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	defer appender.Close()
	p := message.NewPublisher(appender, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now()))
	publish := func(body string) {
		h, err := p.PublishCommitted(ctx, "events/tail", &event{Body: body})
		if err != nil {
			t.Fatal(err)
		}
		wait(t, h)
	}

	// Not blocking: io.EOF at the write head, then what came since.
	r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: "events/tail", Framing: message.JSONLines, New: newEvent})
	if err != nil {
		t.Fatal(err)
	}
	publish("one")
	if d, err := r.Next(); err != nil || d.Message.(*event).Body != "one" {
		t.Fatalf("first Next: %v, %v; want one", d.Message, err)
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("Next at the write head: %v, want io.EOF", err)
	}
	publish("two")
	if d, err := r.Next(); err != nil || d.Message.(*event).Body != "two" {
		t.Fatalf("Next after io.EOF and a publish: %v, %v; want two", d.Message, err)
	}
	r.Close()

	// Blocking: Next waits for the next message, until its context ends.
	tailCtx, stop := context.WithCancel(ctx)
	tail, err := message.NewReader(tailCtx, c, message.ReaderConfig{Journal: "events/tail", Framing: message.JSONLines, New: newEvent, Block: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"one", "two"} {
		if d, err := tail.Next(); err != nil || d.Message.(*event).Body != want {
			t.Fatalf("tail: %v, %v; want %s", d.Message, err, want)
		}
	}
	got := make(chan error, 1)
	go func() {
		d, err := tail.Next()
		if err == nil && d.Message.(*event).Body != "three" {
			err = errors.New("got " + d.Message.(*event).Body + ", want three")
		}
		got <- err
	}()
	publish("three")
	if err := <-got; err != nil {
		t.Fatalf("tail, waiting for three: %v", err)
	}
	go func() { _, err := tail.Next(); got <- err }()
	stop()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Next waiting when its context ended: %v, want context.Canceled", err)
	}
	tail.Close()
}

// A ReaderConfig without a Framing reads JSON lines (it used to panic on
// its first frame).
func TestReaderDefaultsToJSONLines(t *testing.T) {
	cl := brokertest.New(t)
	b := cl.Start("b1")
	c := cl.Client(b)
	cl.Journals(c, 1, "events/plain")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	appender := c.NewAppender(ctx, client.AppenderConfig{})
	defer appender.Close()
	p := message.NewPublisher(appender, message.JSONLines, message.NewProducerID(), message.NewClock(time.Now()))
	h, err := p.PublishCommitted(ctx, "events/plain", &event{Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, h)
	r, err := message.NewReader(ctx, c, message.ReaderConfig{Journal: "events/plain", New: newEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := r.Next()
	if err != nil || d.Message.(*event).Body != "hello" {
		t.Fatalf("Next() = %+v, %v; want the event", d, err)
	}
}
