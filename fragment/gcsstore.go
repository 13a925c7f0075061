package fragment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/quire-dev/quire/fragment/storeurl"
)

// gcsAttempts bounds the SDK's tries of one request (with its backoff
// of 1 s, doubling: about 7 s before it gives up).
const gcsAttempts = 4

// gcsStore is a Store in a Google Cloud Storage bucket. Fragment f is the
// object PREFIX + f.Name().
type gcsStore struct {
	client *storage.Client
	bucket *storage.BucketHandle
	name   string // the bucket's
	prefix string // "" or ends with "/".
	url    string
	// emulator is the endpoint of an emulator spoken to over plain http,
	// with no credentials (insecure=true); "" for Google's service.
	emulator string
}

func openGCSStore(ctx context.Context, u storeurl.URL) (*gcsStore, error) {
	var opts []option.ClientOption
	switch {
	case u.Endpoint != "" && u.Insecure:
		// Plain http carries no credentials: an emulator's endpoint.
		opts = append(opts, option.WithEndpoint("http://"+u.Endpoint+"/storage/v1/"), option.WithoutAuthentication())
	case u.Endpoint != "":
		opts = append(opts, option.WithEndpoint("https://"+u.Endpoint+"/storage/v1/"))
	}
	// The client outlives ctx (stores are opened once and kept), and its
	// credentials refresh their tokens under the context they were made
	// with.
	client, err := storage.NewClient(context.WithoutCancel(ctx), opts...)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", u.String(), err)
	}
	// The SDK retries until the context ends; brokers retry persisting
	// and listing themselves, and a read falls back to a broker sooner.
	client.SetRetry(storage.WithMaxAttempts(gcsAttempts))
	s := &gcsStore{client: client, bucket: client.Bucket(u.Bucket), name: u.Bucket, prefix: u.Prefix, url: u.String()}
	if u.Insecure {
		s.emulator = u.Endpoint
	}
	return s, nil
}

func (s *gcsStore) URL() string { return s.url }

func (s *gcsStore) key(f Fragment) string { return s.prefix + f.Name() }

// gcsNotExist wraps err with fs.ErrNotExist if it reports a missing
// object.
func gcsNotExist(err error) error {
	var gerr *googleapi.Error
	if errors.Is(err, storage.ErrObjectNotExist) || errors.As(err, &gerr) && gerr.Code == http.StatusNotFound {
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return err
}

func (s *gcsStore) List(ctx context.Context, journal string, fn func(Fragment) error) error {
	if err := ValidateJournal(journal); err != nil {
		return fmt.Errorf("listing %s: %w", s.url, err)
	}
	// With a delimiter, sub-journals' objects come back as prefixes.
	it := s.bucket.Objects(ctx, &storage.Query{Prefix: s.prefix + journal + "/", Delimiter: "/"})
	for {
		obj, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return nil
		} else if err != nil {
			return fmt.Errorf("listing journal %q in %s: %w", journal, s.url, err)
		}
		if obj.Name == "" {
			continue // The prefix of a journal named journal/....
		}
		f, err := ParseName(strings.TrimPrefix(obj.Name, s.prefix))
		if err != nil {
			slog.Warn("fragment store: skipping object that is not a fragment", "store", s.url, "journal", journal, "key", obj.Name, "err", err)
			continue
		}
		f.ModTime, f.Store = obj.Updated, s.url
		if err := fn(f); err != nil {
			return err
		}
	}
}

// Persist compresses and verifies f's content as it uploads it, under the
// condition that no object has its name. An object appears only once its
// upload completes; a content that does not verify cancels the upload
// first, leaving nothing.
func (s *gcsStore) Persist(ctx context.Context, f Fragment, content io.Reader) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	obj := s.bucket.Object(s.key(f))
	if _, err := obj.Attrs(ctx); err == nil {
		return nil // Already persisted: names are content addressed.
	} else if err = gcsNotExist(err); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("persisting %s to %s: checking whether it exists: %w", f.Name(), s.url, err)
	}
	upload, cancel := context.WithCancel(ctx)
	defer cancel()
	w := obj.If(storage.Conditions{DoesNotExist: true}).NewWriter(upload)
	w.ContentType = "application/octet-stream"
	if err := writeCompressed(w, f, content); err != nil {
		cancel() // Before Close: the upload is abandoned, not completed.
		w.Close()
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	err := w.Close()
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == http.StatusPreconditionFailed {
		return nil // Another broker persisted it meanwhile.
	} else if err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	return nil
}

// Open reads the object under ctx: cancelling ctx fails the reader's
// subsequent reads.
func (s *gcsStore) Open(ctx context.Context, f Fragment) (io.ReadCloser, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("opening from %s: %w", s.url, err)
	}
	// The stored bytes as they are: the codec, not the transport,
	// decompresses them.
	body, err := s.bucket.Object(s.key(f)).ReadCompressed(true).NewReader(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening %s from %s: %w", f.Name(), s.url, gcsNotExist(err))
	}
	return openVerified(f, body)
}

func (s *gcsStore) Remove(ctx context.Context, f Fragment) error {
	return removeWith(ctx, s.url, f, s.removeObject)
}

// SignURL returns a V4-signed GET URL of f's object, valid for ttl, which
// must be between one second and seven days, signed with the credentials
// the store was opened with (a service account's key, or, on Google's
// machines, the IAM signBlob of their service account). An emulator
// (insecure=true) takes no credentials, so its URL is the object's own,
// unsigned. It does not check that the object exists.
func (s *gcsStore) SignURL(ctx context.Context, f Fragment, ttl time.Duration) (string, error) {
	if err := checkSign(s.url, f, ttl); err != nil {
		return "", err
	}
	if s.emulator != "" {
		u := url.URL{Scheme: "http", Host: s.emulator, Path: "/" + s.name + "/" + s.key(f)}
		return u.String(), nil
	}
	u, err := s.bucket.SignedURL(s.key(f), &storage.SignedURLOptions{
		Method: http.MethodGet, Expires: time.Now().Add(ttl), Scheme: storage.SigningSchemeV4})
	if err != nil {
		return "", fmt.Errorf("signing a URL for %s in %s: %w", f.Name(), s.url, err)
	}
	return u, nil
}

// The objects of Probe: objects beneath the prefix, written whole.

func (s *gcsStore) putObject(ctx context.Context, name string, data []byte) error {
	w := s.bucket.Object(s.prefix + name).NewWriter(ctx)
	w.ContentType = "application/octet-stream"
	if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

func (s *gcsStore) getObject(ctx context.Context, name string, limit int64) ([]byte, error) {
	body, err := s.bucket.Object(s.prefix + name).ReadCompressed(true).NewReader(ctx)
	if err != nil {
		return nil, gcsNotExist(err)
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = errTooLarge
	}
	return data, err
}

func (s *gcsStore) listObjects(ctx context.Context, dir string) ([]string, error) {
	prefix := s.prefix + dir + "/"
	it := s.bucket.Objects(ctx, &storage.Query{Prefix: prefix, Delimiter: "/"})
	var names []string
	for {
		obj, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return names, nil
		} else if err != nil {
			return nil, err
		}
		if base := strings.TrimPrefix(obj.Name, prefix); obj.Name != "" && base != "" {
			names = append(names, base)
		}
	}
}

func (s *gcsStore) removeObject(ctx context.Context, name string) error {
	err := s.bucket.Object(s.prefix + name).Delete(ctx)
	if err != nil && !errors.Is(gcsNotExist(err), fs.ErrNotExist) {
		return err
	}
	return nil
}
