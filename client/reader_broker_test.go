package client_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
)

// A read from the write head whose EndOffset the journal has passed
// ends at once, through a real broker (whose first answer is the write
// head). (Its Read panicked. Found by review.)
func TestReaderFromWriteHeadPastEndOffset(t *testing.T) {
	c := brokertest.New(t)
	cl := c.Client(c.Start("b1"))
	c.Journals(cl, 1, "log/head")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.Append(ctx, client.AppendRequest{Journal: "log/head"}, bytes.NewReader([]byte("0123456789"))); err != nil {
		t.Fatal(err)
	}
	r := cl.NewReader(ctx, client.ReadRequest{Journal: "log/head", Offset: -1, EndOffset: 5})
	defer r.Close()
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read = %d, %v; want 0, io.EOF (offset %d)", n, err, r.Offset())
	}
}
