package fragment

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// benchFragmentLen is the length of the benchmarks' fragments.
const benchFragmentLen = 16 << 20

// BenchmarkPersist measures Persist of a 16 MiB fragment of JSON lines to
// a file store on the test's temporary directory, fsyncs included, with
// each codec. MB/s is of uncompressed content.
func BenchmarkPersist(b *testing.B) {
	content := testContent(benchFragmentLen, 1)
	for _, c := range allCodecs {
		b.Run(c.String(), func(b *testing.B) {
			root := b.TempDir()
			s, err := Open(context.Background(), "file://"+root+"/")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.SetBytes(benchFragmentLen)
			var stored int64
			for i := 0; b.Loop(); i++ {
				f := fragmentOf("bench", int64(i)*benchFragmentLen, content, c)
				if err := s.Persist(ctx, f, bytes.NewReader(content)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if fi, err := os.Stat(filepath.Join(root, f.Name())); err != nil {
					b.Fatal(err)
				} else {
					stored = fi.Size()
				}
				if err := s.Remove(ctx, f); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(stored)/benchFragmentLen, "stored/content")
		})
	}
}

// BenchmarkOpen measures reading a 16 MiB fragment back from a file store
// (decompressing and verifying it) with each codec. MB/s is of
// uncompressed content.
func BenchmarkOpen(b *testing.B) {
	content := testContent(benchFragmentLen, 1)
	for _, c := range allCodecs {
		b.Run(c.String(), func(b *testing.B) {
			s, err := Open(context.Background(), "file://"+b.TempDir()+"/")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			f := fragmentOf("bench", 0, content, c)
			if err := s.Persist(ctx, f, bytes.NewReader(content)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(benchFragmentLen)
			for b.Loop() {
				r, err := s.Open(ctx, f)
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, r); err != nil || n != benchFragmentLen {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				if err := r.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
