package fragment

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quire-dev/quire/fragment/storeurl"
)

// tempPrefix begins the names of a file store's temporary files, which
// List skips without complaint.
const tempPrefix = ".tmp-"

// fileStore is a Store in a directory of the local file system (which may
// be a network file system mounted locally). Fragment f is the file
// ROOT/f.Name().
type fileStore struct {
	root string // Absolute and clean.
	url  string
}

func openFileStore(u storeurl.URL) (*fileStore, error) {
	if err := os.MkdirAll(u.Root, 0o755); err != nil {
		return nil, fmt.Errorf("store URL %q: creating directory: %w", u.String(), err)
	}
	return &fileStore{root: u.Root, url: u.String()}, nil
}

func (s *fileStore) URL() string { return s.url }

func (s *fileStore) path(f Fragment) string {
	return filepath.Join(s.root, filepath.FromSlash(f.Name()))
}

func (s *fileStore) List(ctx context.Context, journal string, fn func(Fragment) error) error {
	if err := ValidateJournal(journal); err != nil {
		return fmt.Errorf("listing %s: %w", s.url, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dir := filepath.Join(s.root, filepath.FromSlash(journal))
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // A journal with no fragments.
	} else if err != nil {
		return fmt.Errorf("listing journal %q in %s: %w", journal, s.url, err)
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		if e.IsDir() {
			continue // The directory of a journal named journal/....
		}
		if strings.HasPrefix(name, tempPrefix) {
			slog.Debug("fragment store: skipping temporary file", "store", s.url, "journal", journal, "file", name)
			continue
		}
		f, err := ParseName(journal + "/" + name)
		if err != nil {
			slog.Warn("fragment store: skipping file that is not a fragment", "store", s.url, "journal", journal, "file", name, "err", err)
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // Removed since ReadDir.
		} else if err != nil {
			return fmt.Errorf("listing journal %q in %s: %w", journal, s.url, err)
		}
		f.ModTime, f.Store = info.ModTime(), s.url
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

func (s *fileStore) Persist(ctx context.Context, f Fragment, content io.Reader) (err error) {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	final := s.path(f)
	if _, err := os.Stat(final); err == nil {
		return nil // Already persisted: names are content addressed.
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	dir := filepath.Dir(final)
	if err := s.mkdirAll(dir); err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+filepath.Base(final)+"-*")
	if err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := writeCompressed(&ctxWriter{ctx: ctx, w: tmp}, f, content); err != nil {
		return fmt.Errorf("persisting to %s: %w", s.url, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("persisting %s to %s: syncing: %w", f.Name(), s.url, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	// A concurrent Persist of the same fragment may have renamed first;
	// its file has the same content, so replacing it changes nothing.
	if err := os.Rename(tmp.Name(), final); err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("persisting %s to %s: %w", f.Name(), s.url, err)
	}
	return nil
}

// mkdirAll creates dir, a directory beneath the store's root, and any
// missing parents, syncing the parent of each directory it creates so the
// new entries are durable.
func (s *fileStore) mkdirAll(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir && len(parent) > len(s.root) {
		if err := s.mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return d.Close()
}

func (s *fileStore) Open(ctx context.Context, f Fragment) (io.ReadCloser, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("opening from %s: %w", s.url, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	file, err := os.Open(s.path(f))
	if err != nil {
		return nil, fmt.Errorf("opening %s from %s: %w", f.Name(), s.url, err)
	}
	return openVerified(f, file)
}

func (s *fileStore) Remove(ctx context.Context, f Fragment) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("removing from %s: %w", s.url, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Remove(s.path(f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s from %s: %w", f.Name(), s.url, err)
	}
	return nil
}

// SignURL returns the file:// URL of f's file. It does not expire.
func (s *fileStore) SignURL(ctx context.Context, f Fragment, ttl time.Duration) (string, error) {
	if err := f.Validate(); err != nil {
		return "", fmt.Errorf("signing a URL in %s: %w", s.url, err)
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(s.path(f))}).String(), nil
}

// ctxWriter fails writes once its context is done, so a long Persist stops
// soon after its context is cancelled.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c *ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// The objects of Probe: files beneath the root, written as fragments are
// (a temporary file, synced, then renamed).

func (s *fileStore) objectPath(name string) string {
	return filepath.Join(s.root, filepath.FromSlash(name))
}

func (s *fileStore) putObject(ctx context.Context, name string, data []byte) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	final := s.objectPath(name)
	dir := filepath.Dir(final)
	if err := s.mkdirAll(dir); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, tempPrefix+filepath.Base(final)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), final)
}

func (s *fileStore) getObject(ctx context.Context, name string, limit int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(s.objectPath(name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = errTooLarge
	}
	return data, err
}

func (s *fileStore) listObjects(ctx context.Context, dir string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.objectPath(dir))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), tempPrefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (s *fileStore) removeObject(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Remove(s.objectPath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
