package fragment

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/quire-dev/quire/fragment/storeurl"
)

// Store is a fragment store: a place where the fragments of journals are
// persisted by name (see Fragment.Name). A Store is safe for concurrent use.
type Store interface {
	// URL is the store's canonical URL, which Open accepts.
	URL() string

	// List calls fn for each fragment of journal in the store, in any
	// order, with ModTime and Store set. Objects under the journal's
	// directory whose names do not parse as fragment names are skipped and
	// logged, not errors. The fragments of a journal whose name extends
	// journal's (journal/sub) are not listed. List stops at, and returns,
	// the first error of fn.
	List(ctx context.Context, journal string, fn func(Fragment) error) error

	// Persist stores fragment f, compressed with f.Codec, whose uncompressed
	// content is the first f.Len() bytes read from content. The content is
	// verified against f.Sum before the stored object becomes visible,
	// which it does atomically (by its SHA-256, or by its own Verify if it
	// is a CheckedContent); a mismatch is an error and leaves nothing
	// behind. Persisting a fragment that already exists succeeds without
	// reading content or rewriting the object.
	Persist(ctx context.Context, f Fragment, content io.Reader) error

	// Open returns a reader of f's uncompressed content. The reader
	// verifies the content's length and SHA-256 as it reaches its end, and
	// returns an error wrapping ErrCorrupt from Read if they do not match f
	// or if the stored bytes do not decompress. If f is not in the store,
	// the error wraps fs.ErrNotExist. The caller must Close the reader.
	Open(ctx context.Context, f Fragment) (io.ReadCloser, error)

	// Remove deletes f from the store; removing a missing fragment is not
	// an error.
	Remove(ctx context.Context, f Fragment) error

	// SignURL returns a URL from which a client may GET f's stored
	// (compressed) bytes directly, for at least ttl: a presigned URL for
	// an S3 store, a SAS URL for an Azure store, and a file:// URL for a
	// file store.
	SignURL(ctx context.Context, f Fragment, ttl time.Duration) (string, error)
}

// ErrCorrupt is wrapped by errors reading a fragment whose stored content
// does not match its name.
var ErrCorrupt = errors.New("fragment content does not match its name")

// Open opens the store at rawURL, which is one of:
//
//	file:///abs/path/
//	s3://bucket/prefix/?endpoint=host:port&region=REGION&insecure=true
//	gs://bucket/prefix/?endpoint=host:port&insecure=true
//	azure://account/container/prefix/?endpoint=host:port&insecure=true
//
// A file store's directory is created if missing. An S3 store's
// credentials come from the environment variables AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), else from the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE, or ~/.aws/credentials, with
// AWS_PROFILE), else from the instance's IAM role. All of an S3 store's
// query parameters are optional: endpoint is the host[:port] of an
// S3-compatible service, addressed path-style (bucket in the path), and
// region its region; insecure=true uses http rather than https. Opening an
// S3 store makes no request.
//
// A GCS store (Google Cloud Storage) takes Application Default
// Credentials: GOOGLE_APPLICATION_CREDENTIALS naming a service account's
// key file, gcloud's credentials, or the service account of the machine it
// runs on; signing URLs for direct reads needs a service account (its key,
// or the IAM Credentials API's signBlob). endpoint is the host[:port] of
// another service speaking the JSON API; with insecure=true, an emulator
// spoken to over plain http, to which no credentials are sent (and whose
// direct-read URLs are the objects' own, unsigned).
//
// An Azure store (Azure Blob Storage) keeps fragments as block blobs in
// the container of the storage account, at
// https://ACCOUNT.blob.core.windows.net/. Its credentials are, in order:
// the account's shared key in AZURE_STORAGE_KEY; a SAS token in
// AZURE_STORAGE_SAS_TOKEN; else Microsoft Entra ID's
// DefaultAzureCredential (AZURE_TENANT_ID, AZURE_CLIENT_ID and a secret
// or certificate, workload identity, the machine's managed identity, the
// Azure CLI's login). URLs for direct reads carry a read-only SAS for the
// blob: signed with the shared key; the SAS token itself, if it permits
// reading; or signed with a user delegation key got with Entra ID's
// credentials. endpoint is the host[:port] of another service speaking
// the Blob API, which addresses the account path-style
// (host:port/ACCOUNT/CONTAINER/); with insecure=true, over plain http,
// which takes a shared key or a SAS token only. Opening an Azure store
// makes no request. This store has NOT been tested against Azure or any
// emulator of it: none could be run where it was written (Azurite is a
// JavaScript program, and no Go emulator could be fetched), so it says so
// in a log line, once, and should be tried on a test container first.
//
// Errors name the part of the URL that is wrong.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := storeurl.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "file":
		return openFileStore(u)
	case "gs":
		return openGCSStore(ctx, u)
	case "azure":
		return openAzureStore(u)
	default:
		return openS3Store(u)
	}
}

// MaxURLLen is the maximum length of a store URL, in bytes.
const MaxURLLen = storeurl.MaxLen

// ValidateURL returns an error naming what is wrong with store URL rawURL,
// if anything, without opening the store. See Open.
func ValidateURL(rawURL string) error {
	_, err := storeurl.Parse(rawURL)
	return err
}

// removeWith removes f from the store at storeURL with remove, which
// removes an object by its name under the store's prefix, a missing one
// being no error.
func removeWith(ctx context.Context, storeURL string, f Fragment, remove func(context.Context, string) error) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("removing from %s: %w", storeURL, err)
	}
	if err := remove(ctx, f.Name()); err != nil {
		return fmt.Errorf("removing %s from %s: %w", f.Name(), storeURL, err)
	}
	return nil
}

// CheckedContent is content that can tell, more cheaply than by hashing
// it again, whether the bytes read from it are those of a SHA-256: a
// broker's spool, which hashed its content as it was written and keeps a
// CRC32C of it to check it against when it is read back. Persist calls
// Verify once it has read a fragment's content, before the stored object
// becomes visible, instead of computing the content's SHA-256.
//
// Readers of a stored fragment verify its SHA-256 all the same (see
// Store.Open), so content that passed a weaker check and was not what
// its sum says is never served.
type CheckedContent interface {
	io.Reader
	// Verify returns nil if the bytes read so far are, whole, the content
	// whose SHA-256 is sum, and an error saying what differs otherwise.
	Verify(sum [32]byte) error
}

// writeCompressed reads f.Len() bytes of content, compresses them with
// f.Codec into dst, and verifies them against f.Sum (by their SHA-256,
// or by content's Verify if it is a CheckedContent). It returns an
// error if content is shorter or does not match.
func writeCompressed(dst io.Writer, f Fragment, content io.Reader) error {
	zw, err := f.Codec.NewWriter(dst)
	if err != nil {
		return fmt.Errorf("fragment %s: %w", f.Name(), err)
	}
	checked, _ := content.(CheckedContent)
	var h hash.Hash
	w := io.Writer(zw)
	if checked == nil {
		h = sha256.New()
		w = io.MultiWriter(zw, h)
	}
	n, err := io.CopyN(w, content, f.Len())
	if err != nil {
		zw.Close()
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("fragment %s: content ends at %d of %d bytes: %w", f.Name(), n, f.Len(), err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("fragment %s: compressing with %s: %w", f.Name(), f.Codec, err)
	}
	if checked != nil {
		if err := checked.Verify(f.Sum); err != nil {
			return fmt.Errorf("fragment %s: %w", f.Name(), err)
		}
		return nil
	}
	var sum [sha256.Size]byte
	if h.Sum(sum[:0]); sum != f.Sum {
		return fmt.Errorf("fragment %s: content has SHA-256 %x, not the fragment's", f.Name(), sum)
	}
	return nil
}

// NewReader returns a reader of f's uncompressed content from body, f's
// stored bytes as fetched from elsewhere than a Store's Open (from the URL
// that SignURL gave, say): it decompresses them with f.Codec, and verifies
// the content's length and SHA-256 as Open's readers do, returning an
// error wrapping ErrCorrupt from Read if they do not match f or the bytes
// do not decompress. Closing the reader closes body.
func NewReader(f Fragment, body io.ReadCloser) (io.ReadCloser, error) {
	if err := f.Validate(); err != nil {
		body.Close()
		return nil, err
	}
	return openVerified(f, body)
}

// openVerified returns a reader of f's uncompressed content, decompressing
// body with f.Codec and verifying length and SHA-256. Closing it closes
// body. Errors that are not body's own (decompression errors, length or
// sum mismatches) wrap ErrCorrupt.
func openVerified(f Fragment, body io.ReadCloser) (io.ReadCloser, error) {
	src := &errRecorder{r: body}
	dec, err := f.Codec.NewReader(src)
	if err != nil {
		body.Close()
		return nil, corruptOrIO(f, src, err)
	}
	return &verifier{f: f, src: src, dec: dec, body: body, h: sha256.New()}, nil
}

// corruptOrIO returns err, from decompressing src, wrapped with ErrCorrupt
// unless it came from reading src.
func corruptOrIO(f Fragment, src *errRecorder, err error) error {
	if src.err != nil {
		return fmt.Errorf("reading fragment %s: %w", f.Name(), err)
	}
	return fmt.Errorf("%w: %s: decompressing %s: %w", ErrCorrupt, f.Name(), f.Codec, err)
}

// errRecorder records the first error other than io.EOF of its reader.
type errRecorder struct {
	r   io.Reader
	err error
}

func (e *errRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// verifier reads decompressed content and verifies it at its end.
type verifier struct {
	f    Fragment
	src  *errRecorder
	dec  io.ReadCloser
	body io.Closer
	h    hash.Hash
	n    int64 // Bytes returned so far.
	err  error // Sticky.
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.dec.Read(p)
	if rem := v.f.Len() - v.n; int64(n) > rem {
		n = int(rem)
		err = fmt.Errorf("%w: %s: content is longer than %d bytes", ErrCorrupt, v.f.Name(), v.f.Len())
	}
	v.n += int64(n)
	v.h.Write(p[:n])
	switch {
	case err == io.EOF:
		var sum [sha256.Size]byte
		v.h.Sum(sum[:0])
		if v.n != v.f.Len() {
			err = fmt.Errorf("%w: %s: content is %d bytes, not %d", ErrCorrupt, v.f.Name(), v.n, v.f.Len())
		} else if sum != v.f.Sum {
			err = fmt.Errorf("%w: %s: content has SHA-256 %x", ErrCorrupt, v.f.Name(), sum)
		}
	case err != nil && !errors.Is(err, ErrCorrupt):
		err = corruptOrIO(v.f, v.src, err)
	}
	v.err = err
	return n, err
}

func (v *verifier) Close() error {
	v.dec.Close()
	if v.err == nil {
		v.err = errors.New("fragment reader is closed")
	}
	return v.body.Close()
}
