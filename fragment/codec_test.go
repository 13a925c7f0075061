package fragment

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
)

var allCodecs = []Codec{None, Gzip, Zstd, Snappy}

func TestCodecNames(t *testing.T) {
	for _, tc := range []struct {
		c         Codec
		name, ext string
	}{
		{None, "none", ".raw"},
		{Gzip, "gzip", ".gz"},
		{Zstd, "zstd", ".zst"},
		{Snappy, "snappy", ".sz"},
	} {
		if got := tc.c.String(); got != tc.name {
			t.Errorf("Codec(%d).String() = %q, want %q", tc.c, got, tc.name)
		}
		if got := tc.c.Extension(); got != tc.ext {
			t.Errorf("%v.Extension() = %q, want %q", tc.c, got, tc.ext)
		}
		if got, err := ParseCodec(tc.name); err != nil || got != tc.c {
			t.Errorf("ParseCodec(%q) = %v, %v; want %v", tc.name, got, err, tc.c)
		}
	}
	if got := Codec(7).String(); got != "Codec(7)" {
		t.Errorf("Codec(7).String() = %q", got)
	}
	if got := Codec(7).Extension(); got != "" {
		t.Errorf("Codec(7).Extension() = %q", got)
	}
}

func TestParseCodecErrors(t *testing.T) {
	for _, s := range []string{"", "GZIP", "gz", "zstd ", "lz4", "Codec(1)"} {
		_, err := ParseCodec(s)
		if err == nil || !strings.Contains(err.Error(), "unknown codec") {
			t.Errorf("ParseCodec(%q) = %v, want an unknown codec error", s, err)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 300_000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	inputs := map[string][]byte{
		"empty":  nil,
		"short":  []byte("hello"),
		"text":   bytes.Repeat([]byte(`{"user":"ada","event":"click","n":12345}`+"\n"), 50_000),
		"random": random,
	}
	for _, c := range allCodecs {
		for name, in := range inputs {
			t.Run(c.String()+"/"+name, func(t *testing.T) {
				var buf bytes.Buffer
				w, err := c.NewWriter(&buf)
				if err != nil {
					t.Fatal(err)
				}
				// Write in uneven pieces.
				for rest := in; len(rest) > 0; {
					n := min(len(rest), 1+rng.IntN(70_000))
					if _, err := w.Write(rest[:n]); err != nil {
						t.Fatal(err)
					}
					rest = rest[n:]
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if c != None && name == "text" && buf.Len() > len(in)/4 {
					t.Errorf("%v compressed %d bytes of text to %d", c, len(in), buf.Len())
				}
				r, err := c.NewReader(&buf)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, in) {
					t.Fatalf("round trip of %d bytes gave %d different bytes", len(in), len(got))
				}
			})
		}
	}
}

func TestCodecInvalid(t *testing.T) {
	if _, err := Codec(9).NewWriter(io.Discard); err == nil {
		t.Error("Codec(9).NewWriter succeeded")
	}
	if _, err := Codec(9).NewReader(strings.NewReader("")); err == nil {
		t.Error("Codec(9).NewReader succeeded")
	}
}

// TestCodecGarbage checks that each codec's reader fails, and does not
// panic, on input that its writer did not produce.
func TestCodecGarbage(t *testing.T) {
	garbage := []byte("this is not a compressed stream of any kind, just some text\n")
	for _, c := range []Codec{Gzip, Zstd, Snappy} {
		r, err := c.NewReader(bytes.NewReader(garbage))
		if err != nil {
			continue // A bad header is reported early.
		}
		if _, err := io.ReadAll(r); err == nil {
			t.Errorf("%v read garbage without error", c)
		}
		r.Close()
	}
}
