package spool

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
)

// Recovered is a spool a previous process left on disk, truncated to its
// last verified commit.
type Recovered struct {
	Journal   string
	Begin     int64
	End       int64
	Sum       [32]byte
	Registers string
	// Lost is the number of bytes that commit records claimed beyond End
	// but the content file did not hold intact (a machine crash before a
	// sync, or disk damage). It is zero after a process crash.
	Lost int64

	content, commits string
}

// Reader returns a reader of the recovered content [Begin, End). Close it.
func (r *Recovered) Reader() (io.ReadCloser, error) {
	f, err := os.Open(r.content)
	if err != nil {
		return nil, fmt.Errorf("opening recovered spool: %w", err)
	}
	return readCloser{io.NewSectionReader(f, 0, r.End-r.Begin), f}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Remove deletes the recovered spool's files, once its content is
// persisted.
func (r *Recovered) Remove() error {
	return errors.Join(os.Remove(r.content), os.Remove(r.commits))
}

// Recover finds the spools beneath root, in journal then offset order. Each
// is truncated to its last commit whose record is intact and whose sum
// matches the content. Spools with no intact record (a crash within
// Create) hold nothing committed and are removed.
func Recover(root string) ([]*Recovered, error) {
	dirs, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("listing spools in %s: %w", root, err)
	}
	var out []*Recovered
	for _, d := range dirs {
		journal, err := url.PathUnescape(d.Name())
		if !d.IsDir() || err != nil || url.PathEscape(journal) != d.Name() {
			continue // Not a journal's spools: a broker's quarantine, say.
		}
		rs, err := recoverJournal(root, journal)
		if err != nil {
			return out, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

func recoverJournal(root, journal string) ([]*Recovered, error) {
	entries, err := os.ReadDir(Dir(root, journal))
	if err != nil {
		return nil, fmt.Errorf("listing spools of %s: %w", journal, err)
	}
	var out []*Recovered
	for _, e := range entries {
		begin, ok := parseBegin(e.Name(), ".commits")
		if !ok {
			continue
		}
		r, err := recoverSpool(root, journal, begin)
		if err != nil {
			return out, err
		}
		if r != nil {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Begin < out[j].Begin })
	return out, nil
}

// recoverSpool verifies one spool's commits against its content.
func recoverSpool(root, journal string, begin int64) (*Recovered, error) {
	cp, lp := paths(root, journal, begin)
	log, err := os.ReadFile(lp)
	if err != nil {
		return nil, fmt.Errorf("reading spool commits %s: %w", lp, err)
	}
	content, err := os.OpenFile(cp, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, os.Remove(lp)
	} else if err != nil {
		return nil, fmt.Errorf("opening spool content %s: %w", cp, err)
	}
	defer content.Close()

	r := &Recovered{Journal: journal, Begin: begin, End: -1, content: cp, commits: lp}
	if err := r.verify(log, content); err != nil {
		return nil, err
	}
	if r.End < 0 {
		return nil, errors.Join(os.Remove(cp), os.Remove(lp))
	}
	if err := content.Truncate(r.End - begin); err != nil {
		return nil, fmt.Errorf("truncating spool %s to its last commit: %w", cp, err)
	}
	return r, nil
}

// verify hashes the content once, checking each intact record in order,
// and keeps the last record that matches.
func (r *Recovered) verify(log []byte, content io.ReaderAt) error {
	h := sha256.New()
	hashed := int64(0)
	var claimed int64
	for len(log) != 0 {
		rec, n, err := decodeRecord(log)
		if err != nil {
			break
		}
		log = log[n:]
		claimed = max(claimed, rec.end)
		rel := rec.end - r.Begin
		if rel < hashed {
			break // Records never go backwards; this one is damaged.
		}
		m, err := io.Copy(h, io.NewSectionReader(content, hashed, rel-hashed))
		hashed += m
		if err != nil {
			return fmt.Errorf("reading spool content %s: %w", r.content, err)
		}
		var sum [32]byte
		if hashed != rel || [32]byte(h.Sum(sum[:0])) != rec.sum {
			break
		}
		r.End, r.Sum, r.Registers = rec.end, rec.sum, rec.registers
	}
	if r.End >= 0 {
		r.Lost = claimed - r.End
	}
	return nil
}

// MoveTo moves the recovered spool's files into dir (created if needed),
// out of the spools that Recover finds.
func (r *Recovered) MoveTo(dir string) error {
	return moveFiles(dir, r.Journal, &r.content, &r.commits)
}

// moveFiles moves a spool's files of journal into dir (created if needed),
// under the journal's escaped name, and updates their paths.
func moveFiles(dir, journal string, paths ...*string) error {
	dir = filepath.Join(dir, url.PathEscape(journal))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("moving spool: %w", err)
	}
	for _, p := range paths {
		to := filepath.Join(dir, filepath.Base(*p))
		if err := os.Rename(*p, to); err != nil {
			return fmt.Errorf("moving spool: %w", err)
		}
		*p = to
	}
	return nil
}

// Path is where the recovered content lives, for messages.
func (r *Recovered) Path() string { return filepath.Clean(r.content) }
