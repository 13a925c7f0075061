package fragment

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

// Codec is a compression codec with which a fragment is stored.
// The zero Codec is None.
type Codec int

const (
	// None stores content uncompressed.
	None Codec = iota
	// Gzip compresses with gzip (RFC 1952).
	Gzip
	// Zstd compresses with Zstandard (RFC 8878).
	Zstd
	// Snappy compresses with the Snappy framing format.
	Snappy

	numCodecs
)

var codecNames = [numCodecs]string{None: "none", Gzip: "gzip", Zstd: "zstd", Snappy: "snappy"}

var codecExtensions = [numCodecs]string{None: ".raw", Gzip: ".gz", Zstd: ".zst", Snappy: ".sz"}

// String returns the codec's name: "none", "gzip", "zstd" or "snappy".
func (c Codec) String() string {
	if c.valid() {
		return codecNames[c]
	}
	return fmt.Sprintf("Codec(%d)", int(c))
}

// Extension returns the file name extension of fragments stored with c,
// including its dot: ".raw", ".gz", ".zst" or ".sz".
func (c Codec) Extension() string {
	if c.valid() {
		return codecExtensions[c]
	}
	return ""
}

func (c Codec) valid() bool { return c >= 0 && c < numCodecs }

// Validate returns an error if c is not one of the defined codecs.
func (c Codec) Validate() error {
	if !c.valid() {
		return fmt.Errorf("unknown codec %d", int(c))
	}
	return nil
}

// ParseCodec returns the codec named s, as named by Codec.String.
func ParseCodec(s string) (Codec, error) {
	for c, name := range codecNames {
		if s == name {
			return Codec(c), nil
		}
	}
	return 0, fmt.Errorf("unknown codec %q (want none, gzip, zstd or snappy)", s)
}

// codecForExtension returns the codec whose Extension is ext.
func codecForExtension(ext string) (Codec, bool) {
	for c, e := range codecExtensions {
		if ext == e {
			return Codec(c), true
		}
	}
	return 0, false
}

// NewWriter returns a writer that compresses what is written to it with c
// and writes the result to w. The caller must Close it to flush the
// compressed stream; Close does not close w.
func (c Codec) NewWriter(w io.Writer) (io.WriteCloser, error) {
	switch c {
	case None:
		return nopWriteCloser{w}, nil
	case Gzip:
		return gzip.NewWriter(w), nil
	case Zstd:
		// With a concurrency of 1 the encoder compresses on the caller's
		// goroutine and starts none of its own: brokers persist many
		// fragments at once, each on its own goroutine.
		return zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
	case Snappy:
		return snappy.NewBufferedWriter(w), nil
	}
	return nil, c.Validate()
}

// NewReader returns a reader of the content that r holds compressed with c.
// Closing it releases the decompressor's resources; it does not close r.
// Errors that the stream is malformed are returned from Read (or, for a
// malformed header, from NewReader).
func (c Codec) NewReader(r io.Reader) (io.ReadCloser, error) {
	switch c {
	case None:
		return io.NopCloser(r), nil
	case Gzip:
		z, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("reading gzip header: %w", err)
		}
		return z, nil
	case Zstd:
		// With a concurrency of 1 the decoder decodes on the caller's
		// goroutine and starts none of its own.
		z, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("starting zstd decoder: %w", err)
		}
		return zstdReadCloser{z}, nil
	case Snappy:
		return io.NopCloser(snappy.NewReader(r)), nil
	}
	return nil, c.Validate()
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type zstdReadCloser struct{ *zstd.Decoder }

func (z zstdReadCloser) Close() error {
	z.Decoder.Close()
	return nil
}
