package client

import (
	"bytes"
	"io"
	"testing"
)

func TestChunkPoolClasses(t *testing.T) {
	if maxPooledChunk < MaxChunkSize {
		t.Errorf("chunks are pooled up to %d bytes, want up to MaxChunkSize (%d)", maxPooledChunk, MaxChunkSize)
	}
	for _, tc := range []struct{ n, cap int }{
		{0, 512}, {1, 512}, {512, 512}, {513, 1024}, {1025, 2048}, {2048, 2048},
		{2049, 4096}, {64 << 10, 64 << 10}, {64<<10 + 1, 128 << 10},
		{MaxChunkSize, MaxChunkSize}, {MaxChunkSize + 1, MaxChunkSize + 1},
	} {
		b := getChunk(tc.n)
		if len(b) != tc.n || cap(b) != tc.cap {
			t.Errorf("getChunk(%d): len %d cap %d, want len %d cap %d", tc.n, len(b), cap(b), tc.n, tc.cap)
		}
		putChunk(b)
	}
	putChunk(make([]byte, 100, 700)) // Not a pooled size: dropped, not pooled.
	if b := getChunk(600); cap(b) != 1024 {
		t.Errorf("getChunk(600) has cap %d, want 1024", cap(b))
	}
}

// Released chunks serve later contents, which read as their own.
func TestReleasedChunksServeLaterContent(t *testing.T) {
	for i := range 100 {
		n := 1 + i*37
		if i%4 == 3 { // Large enough for the pools of the largest chunks.
			n = 64<<10 + i*9973
		}
		want := bytes.Repeat([]byte{byte('a' + i%26)}, n)
		c := contentOf(bytes.NewReader(want), 0)
		var got []byte
		for {
			chunk, err := c.next(1 << 10)
			if err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			got = append(got, chunk...)
		}
		// A retry reads it again, from the start.
		if err := c.rewind(); err != nil {
			t.Fatal(err)
		}
		again, _ := c.next(1 << 20)
		if !bytes.Equal(got, want) || !bytes.HasPrefix(want, again) || len(again) == 0 {
			t.Fatalf("content %d read back as %d bytes (%d again), want %d", i, len(got), len(again), len(want))
		}
		c.release()
	}
}
