package fragment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/quire-dev/quire/fragment/storeurl"
)

// defaultS3Endpoint is the endpoint of an S3 store whose URL names none.
const defaultS3Endpoint = "s3.amazonaws.com"

// maxSignTTL is the longest validity of an S3 presigned URL, and of a
// GCS V4-signed one.
const maxSignTTL = 7 * 24 * time.Hour

// checkSign checks the arguments of an object store's SignURL: a valid
// fragment, and a ttl between one second and maxSignTTL.
func checkSign(store string, f Fragment, ttl time.Duration) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("signing a URL in %s: %w", store, err)
	}
	if ttl < time.Second || ttl > maxSignTTL {
		return fmt.Errorf("signing a URL for %s in %s: ttl %v is not between 1s and %v", f.Name(), store, ttl, maxSignTTL)
	}
	return nil
}

// s3Store is a Store in a bucket of an S3-compatible service. Fragment f is
// the object PREFIX + f.Name().
type s3Store struct {
	client *minio.Client
	bucket string
	prefix string // "" or ends with "/".
	url    string
}

func openS3Store(u storeurl.URL) (*s3Store, error) {
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{},
	})
	opts := &minio.Options{
		Creds:        creds,
		Secure:       !u.Insecure,
		Region:       u.Region,
		BucketLookup: minio.BucketLookupAuto,
	}
	endpoint := u.Endpoint
	if endpoint == "" {
		endpoint = defaultS3Endpoint
	} else {
		opts.BucketLookup = minio.BucketLookupPath
	}
	client, err := minio.New(endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("store URL %q: %w", u.String(), err)
	}
	return &s3Store{client: client, bucket: u.Bucket, prefix: u.Prefix, url: u.String()}, nil
}

func (s *s3Store) URL() string { return s.url }

func (s *s3Store) key(f Fragment) string { return s.prefix + f.Name() }

// notExist wraps err with fs.ErrNotExist if it reports a missing object.
func notExist(err error) error {
	switch minio.ToErrorResponse(err).Code {
	case minio.NoSuchKey, "NotFound":
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return err
}

func (s *s3Store) List(ctx context.Context, journal string, fn func(Fragment) error) error {
	if err := ValidateJournal(journal); err != nil {
		return fmt.Errorf("listing %s: %w", s.url, err)
	}
	// Cancelling ctx stops the listing's goroutine, which closes the
	// channel; draining it waits for that.
	ctx, cancel := context.WithCancel(ctx)
	objects := s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{
		Prefix:    s.prefix + journal + "/",
		Recursive: false, // Sub-journals' objects come back as common prefixes.
	})
	defer func() {
		cancel()
		for range objects {
		}
	}()
	for obj := range objects {
		if obj.Err != nil {
			return fmt.Errorf("listing journal %q in %s: %w", journal, s.url, obj.Err)
		}
		if strings.HasSuffix(obj.Key, "/") {
			continue // The common prefix of a journal named journal/....
		}
		f, err := ParseName(strings.TrimPrefix(obj.Key, s.prefix))
		if err != nil {
			slog.Warn("fragment store: skipping object that is not a fragment", "store", s.url, "journal", journal, "key", obj.Key, "err", err)
			continue
		}
		f.ModTime, f.Store = obj.LastModified, s.url
		if err := fn(f); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Persist compresses and verifies f's content into a temporary file, then
// uploads it with a single PUT, so the object appears whole or not at all.
// A fragment stored with S3 is limited to the 5 GiB of a single PUT.
func (s *s3Store) Persist(ctx context.Context, f Fragment, content io.Reader) (err error) {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	key := s.key(f)
	if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); err == nil {
		return nil // Already persisted: names are content addressed.
	} else if err = notExist(err); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("persisting %s to %s: checking whether it exists: %w", f.Name(), s.url, err)
	}
	tmp, err := os.CreateTemp("", "quire-fragment-*")
	if err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	if err := writeCompressed(&ctxWriter{ctx: ctx, w: tmp}, f, content); err != nil {
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	_, err = s.client.PutObject(ctx, s.bucket, key, tmp, size, minio.PutObjectOptions{
		ContentType:      "application/octet-stream",
		DisableMultipart: true,
	})
	if err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	return nil
}

// Open reads the object under ctx: cancelling ctx fails the reader's
// subsequent reads.
func (s *s3Store) Open(ctx context.Context, f Fragment) (io.ReadCloser, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("opening from %s: %w", s.url, err)
	}
	core := minio.Core{Client: s.client}
	body, _, _, err := core.GetObject(ctx, s.bucket, s.key(f), minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("opening %s from %s: %w", f.Name(), s.url, notExist(err))
	}
	return openVerified(f, body)
}

func (s *s3Store) Remove(ctx context.Context, f Fragment) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("removing from %s: %w", s.url, err)
	}
	err := s.client.RemoveObject(ctx, s.bucket, s.key(f), minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(notExist(err), fs.ErrNotExist) {
		return fmt.Errorf("removing %s from %s: %w", f.Name(), s.url, err)
	}
	return nil
}

// SignURL returns a presigned GET URL of f's object, valid for ttl, which
// must be between one second and seven days. It does not check that the
// object exists.
func (s *s3Store) SignURL(ctx context.Context, f Fragment, ttl time.Duration) (string, error) {
	if err := checkSign(s.url, f, ttl); err != nil {
		return "", err
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, s.key(f), ttl, nil)
	if err != nil {
		return "", fmt.Errorf("signing a URL for %s in %s: %w", f.Name(), s.url, err)
	}
	return u.String(), nil
}

// The objects of Probe: objects beneath the prefix, written with a single
// PUT as fragments are.

func (s *s3Store) putObject(ctx context.Context, name string, data []byte) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+name, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: true})
	return err
}

func (s *s3Store) getObject(ctx context.Context, name string, limit int64) ([]byte, error) {
	core := minio.Core{Client: s.client}
	body, _, _, err := core.GetObject(ctx, s.bucket, s.prefix+name, minio.GetObjectOptions{})
	if err != nil {
		return nil, notExist(err)
	}
	defer body.Close()
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = errTooLarge
	}
	return data, err
}

func (s *s3Store) listObjects(ctx context.Context, dir string) ([]string, error) {
	// As in List: cancelling ctx stops the listing's goroutine, and
	// draining the channel waits for it.
	ctx, cancel := context.WithCancel(ctx)
	prefix := s.prefix + dir + "/"
	objects := s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix})
	defer func() {
		cancel()
		for range objects {
		}
	}()
	var names []string
	for obj := range objects {
		if obj.Err != nil {
			return nil, obj.Err
		}
		if base := strings.TrimPrefix(obj.Key, prefix); base != "" && !strings.HasSuffix(base, "/") {
			names = append(names, base)
		}
	}
	return names, ctx.Err()
}

func (s *s3Store) removeObject(ctx context.Context, name string) error {
	err := s.client.RemoveObject(ctx, s.bucket, s.prefix+name, minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(notExist(err), fs.ErrNotExist) {
		return err
	}
	return nil
}
