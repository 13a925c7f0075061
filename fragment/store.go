package fragment

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/url"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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
	// which it does atomically; a mismatch is an error and leaves nothing
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
	// an S3 store, and a file:// URL for a file store.
	SignURL(ctx context.Context, f Fragment, ttl time.Duration) (string, error)
}

// ErrCorrupt is wrapped by errors reading a fragment whose stored content
// does not match its name.
var ErrCorrupt = errors.New("fragment content does not match its name")

// Open opens the store at rawURL, which is one of:
//
//	file:///abs/path/
//	s3://bucket/prefix/?endpoint=host:port&region=REGION&insecure=true
//
// A file store's directory is created if missing. An S3 store's
// credentials come from the environment variables AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), else from the shared
// credentials file (AWS_SHARED_CREDENTIALS_FILE, or ~/.aws/credentials, with
// AWS_PROFILE), else from the instance's IAM role. All of an S3 store's
// query parameters are optional: endpoint is the host[:port] of an
// S3-compatible service, addressed path-style (bucket in the path), and
// region its region; insecure=true uses http rather than https. Opening an
// S3 store makes no request. Errors name the part of the URL that is wrong.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := parseStoreURL(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.scheme {
	case "file":
		return openFileStore(u)
	default:
		return openS3Store(u)
	}
}

// ValidateURL returns an error naming what is wrong with store URL rawURL,
// if anything, without opening the store. See Open.
func ValidateURL(rawURL string) error {
	_, err := parseStoreURL(rawURL)
	return err
}

// storeURL is a parsed store URL.
type storeURL struct {
	scheme string // "file" or "s3"
	// file
	root string // absolute, clean directory
	// s3
	bucket, prefix   string // prefix is "" or ends with "/"
	endpoint, region string
	insecure         bool
}

// String returns the canonical form of u, which parses back to u. Its
// parts were validated to need no escaping.
func (u storeURL) String() string {
	if u.scheme == "file" {
		return "file://" + strings.TrimSuffix(filepath.ToSlash(u.root), "/") + "/"
	}
	var q []string // In the sorted order of url.Values.Encode.
	if u.endpoint != "" {
		q = append(q, "endpoint="+u.endpoint)
	}
	if u.insecure {
		q = append(q, "insecure=true")
	}
	if u.region != "" {
		q = append(q, "region="+u.region)
	}
	s := "s3://" + u.bucket + "/" + u.prefix
	if len(q) > 0 {
		s += "?" + strings.Join(q, "&")
	}
	return s
}

// MaxURLLen is the maximum length of a store URL, in bytes.
const MaxURLLen = 2048

func parseStoreURL(rawURL string) (storeURL, error) {
	bad := func(format string, args ...any) (storeURL, error) {
		return storeURL{}, fmt.Errorf("store URL %q: %s", rawURL, fmt.Sprintf(format, args...))
	}
	switch {
	case rawURL == "":
		return storeURL{}, errors.New("store URL is empty")
	case len(rawURL) > MaxURLLen:
		return storeURL{}, fmt.Errorf("store URL %.32q… is %d bytes long; the maximum is %d", rawURL, len(rawURL), MaxURLLen)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return bad("not a URL: %v", err)
	}
	switch {
	case u.Scheme == "":
		return bad("has no scheme (want file:// or s3://)")
	case u.Scheme != "file" && u.Scheme != "s3":
		return bad("scheme %q is not file or s3", u.Scheme)
	case u.Opaque != "":
		return bad("is not of the form %s://…", u.Scheme)
	case u.User != nil:
		return bad("has user information; credentials do not belong in a store URL")
	case u.Fragment != "" || strings.Contains(rawURL, "#"):
		return bad("has a #fragment")
	case strings.Contains(rawURL, "%"):
		return bad("has %%-escapes; store paths are plain")
	case u.RawPath != "":
		return bad("path %q has characters that need escaping", u.Path)
	}
	if u.Scheme == "file" {
		return parseFileURL(u, bad)
	}
	return parseS3URL(u, bad)
}

// parseFileURL parses file:///abs/path/: a clean absolute path ending in
// "/", with no host or query.
func parseFileURL(u *url.URL, bad func(string, ...any) (storeURL, error)) (storeURL, error) {
	switch {
	case u.Host != "":
		return bad("has host %q (want file:///absolute/path/)", u.Host)
	case u.RawQuery != "" || u.ForceQuery:
		return bad("has a query; file stores take no parameters")
	case !strings.HasPrefix(u.Path, "/"):
		return bad("path %q is not absolute", u.Path)
	case !strings.HasSuffix(u.Path, "/"):
		return bad("path %q does not end in \"/\"", u.Path)
	}
	if clean := path.Clean(u.Path); clean != "/" && clean+"/" != u.Path {
		return bad("path %q is not clean (want %q)", u.Path, clean+"/")
	}
	if strings.ContainsFunc(u.Path, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return bad("path %q has a control character", u.Path)
	}
	return storeURL{scheme: "file", root: filepath.Clean(filepath.FromSlash(u.Path))}, nil
}

// parseS3URL parses s3://bucket/prefix/?query.
func parseS3URL(u *url.URL, bad func(string, ...any) (storeURL, error)) (storeURL, error) {
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return bad("bucket %q has a port (give endpoint=host:port instead)", u.Host)
	}
	su := storeURL{scheme: "s3", bucket: u.Host}
	if err := validateBucket(su.bucket); err != nil {
		return bad("%v", err)
	}
	if p := u.Path; p != "" && p != "/" {
		if !strings.HasSuffix(p, "/") {
			return bad("prefix %q does not end in \"/\"", p)
		}
		su.prefix = p[1:]
		if err := validatePrefix(strings.TrimSuffix(su.prefix, "/")); err != nil {
			return bad("%v", err)
		}
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return bad("query %q: %v", u.RawQuery, err)
	}
	for key, vals := range q {
		if len(vals) != 1 {
			return bad("query parameter %q is given %d times", key, len(vals))
		}
		val := vals[0]
		switch key {
		case "endpoint":
			if err := validateEndpoint(val); err != nil {
				return bad("endpoint %q: %v", val, err)
			}
			su.endpoint = val
		case "region":
			if val == "" || strings.ContainsFunc(val, func(r rune) bool {
				return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-')
			}) {
				return bad("region %q is not lowercase letters, digits and \"-\"", val)
			}
			su.region = val
		case "insecure":
			b, err := strconv.ParseBool(val)
			if err != nil {
				return bad("insecure %q is not a boolean", val)
			}
			su.insecure = b
		default:
			return bad("query parameter %q is unknown (want endpoint, region or insecure)", key)
		}
	}
	return su, nil
}

func validateBucket(b string) error {
	if b == "" {
		return errors.New("has no bucket (want s3://bucket/)")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q is %d characters long; want 3 to 63", b, len(b))
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && c != '-' && c != '.' {
			return fmt.Errorf("bucket %q has invalid character %q (want lowercase letters, digits, \"-\" and \".\")", b, c)
		}
		if !alnum && (i == 0 || i == len(b)-1) {
			return fmt.Errorf("bucket %q must begin and end with a letter or digit", b)
		}
	}
	return nil
}

func validatePrefix(p string) error {
	for i := 0; i < len(p); i++ {
		if !journalByte(p[i]) {
			return fmt.Errorf("prefix %q has invalid character %q (want letters, digits and -_./)", p, p[i])
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("prefix %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return nil
}

func validateEndpoint(e string) error {
	if e == "" {
		return errors.New("is empty")
	}
	host := e
	if strings.Contains(e, ":") {
		h, port, err := net.SplitHostPort(e)
		if err != nil {
			return errors.New("is not host or host:port")
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("port %q is not a number in 1-65535", port)
		}
		host = h
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool {
		return r <= ' ' || r >= 0x7f || strings.ContainsRune("/?#@%", r)
	}) {
		return fmt.Errorf("host %q is not a host name or address (want host or host:port, without a scheme)", host)
	}
	return nil
}

// writeCompressed reads f.Len() bytes of content, compresses them with
// f.Codec into dst, and verifies them against f.Sum. It returns an error
// if content is shorter or does not match.
func writeCompressed(dst io.Writer, f Fragment, content io.Reader) error {
	zw, err := f.Codec.NewWriter(dst)
	if err != nil {
		return fmt.Errorf("fragment %s: %w", f.Name(), err)
	}
	h := sha256.New()
	n, err := io.CopyN(io.MultiWriter(zw, h), content, f.Len())
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
	var sum [sha256.Size]byte
	if h.Sum(sum[:0]); sum != f.Sum {
		return fmt.Errorf("fragment %s: content has SHA-256 %x, not the fragment's", f.Name(), sum)
	}
	return nil
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
