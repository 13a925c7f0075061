package client_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/internal/brokertest"
	"github.com/quire-dev/quire/internal/weedtest"
	"github.com/quire-dev/quire/protocol"
)

// Against a real S3 server (SeaweedFS): Readers fetch persisted
// fragments from the presigned URLs that the broker signs, and an object
// removed after the broker listed it (a 404) is read through the broker,
// which jumps past it.
func TestDirectReadsFromS3(t *testing.T) {
	endpoint := weedtest.Start(t) // Skips without weed.
	weedtest.SetCredentials(t, weedtest.SecretKey)
	const prefix = "direct-reads/"
	c := brokertest.New(t)
	c.Store = fmt.Sprintf("s3://%s/%s?endpoint=%s&insecure=true&region=us-east-1", weedtest.Bucket, prefix, endpoint)
	b := c.Start("b1")
	cl := c.Client(b)
	const journal = "direct/s3"
	want, stored := storedJournal(t, c, cl, journal, protocol.Codec_CODEC_ZSTD)
	for _, info := range stored {
		if u := info.GetSignedUrl(); !strings.HasPrefix(u, "http://"+endpoint+"/") || !strings.Contains(u, "X-Amz-Signature=") {
			t.Fatalf("fragment [%d, %d) has signed URL %q, want a presigned URL of %s",
				info.GetFragment().GetBegin(), info.GetFragment().GetEnd(), u, endpoint)
		}
	}

	directBytes := metric(t, "quire_client_direct_read_bytes_total", nil)
	got, jumps := readJournal(t, cl, client.ReadRequest{Journal: journal, Offset: 3})
	if !bytes.Equal(got, want[3:]) || len(jumps) != 0 {
		t.Fatalf("read %d bytes with jumps %v, want the %d appended from offset 3", len(got), jumps, len(want)-3)
	}
	storedEnd := stored[len(stored)-1].GetFragment().GetEnd()
	if d := metric(t, "quire_client_direct_read_bytes_total", nil) - directBytes; d < float64(storedEnd-3) {
		t.Errorf("%v bytes were read from S3 directly, want the %d stored", d, storedEnd-3)
	}

	gone := stored[1]
	u, err := url.Parse(gone.GetSignedUrl())
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimPrefix(u.Path, "/"+weedtest.Bucket+"/")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := weedtest.Client(t, endpoint).RemoveObject(ctx, weedtest.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatalf("removing %s: %v", key, err)
	}
	begin, end := gone.GetFragment().GetBegin(), gone.GetFragment().GetEnd()
	wantJumps := []client.OffsetJumpError{{Journal: journal, From: begin, To: end}}
	fallbacks := metric(t, "quire_client_direct_reads_total", map[string]string{"result": "fallback"})
	got, jumps = readJournal(t, cl, client.ReadRequest{Journal: journal})
	if !bytes.Equal(got, slices.Concat(want[:begin], want[end:])) || !slices.Equal(jumps, wantJumps) {
		t.Fatalf("read %d bytes with jumps %v after removing [%d, %d), want %d with jumps %v",
			len(got), jumps, begin, end, len(want)-int(end-begin), wantJumps)
	}
	if d := metric(t, "quire_client_direct_reads_total", map[string]string{"result": "fallback"}) - fallbacks; d != 1 {
		t.Errorf("quire_client_direct_reads_total{result=fallback} rose by %v, want 1", d)
	}
}
