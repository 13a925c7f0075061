package fragment

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ProbeDir is the directory, beneath a store's root (an S3 store's
// prefix), that holds health probes. Its name begins with '!', which no
// journal name contains, so no journal's directory is ever ProbeDir: the
// brokers list the fragments of journals by their directories and never
// see a probe, and a probe can never be taken for a fragment (nor a
// fragment be removed as a probe). '!' is one of the characters S3 names
// safe in object keys.
const ProbeDir = "!quire-store-health"

// probeSuffix ends every probe's name; a probe's name is
// UNIX_NANOS-RANDOM.probe.
const probeSuffix = ".probe"

// staleProbe is the age past which Probe removes the probes it lists
// (left behind by a process that died between writing and removing one).
const staleProbe = time.Hour

// ProbeStep is a step of Probe, in the order they run.
type ProbeStep int

const (
	ProbeWrite ProbeStep = iota + 1
	ProbeRead
	ProbeList
	ProbeDelete
)

func (s ProbeStep) String() string {
	switch s {
	case ProbeWrite:
		return "write"
	case ProbeRead:
		return "read"
	case ProbeList:
		return "list"
	case ProbeDelete:
		return "delete"
	}
	return "step " + strconv.Itoa(int(s))
}

// StepTime is a step that passed, and how long it took.
type StepTime struct {
	Step    ProbeStep
	Latency time.Duration
}

// ProbeResult is the outcome of Probe: the steps that passed, in order,
// and the first that failed (zero if none did) with its error.
type ProbeResult struct {
	Passed []StepTime
	Failed ProbeStep
	Err    error
}

// OK tells whether every step passed.
func (r ProbeResult) OK() bool { return r.Err == nil }

// objects are the plain-object operations of a store that Probe uses: the
// same calls (a file's write and rename, a PUT, a GET, a listing, a
// removal) that persisting, reading, listing and pruning fragments make,
// on names that are not fragments'.
type objects interface {
	putObject(ctx context.Context, name string, data []byte) error
	getObject(ctx context.Context, name string, limit int64) ([]byte, error)
	// listObjects returns the base names of the objects directly in dir.
	listObjects(ctx context.Context, dir string) ([]string, error)
	removeObject(ctx context.Context, name string) error
}

// Probe checks that s can be written, read, listed and deleted: it writes
// a small object of random content under ProbeDir, reads it back and
// compares, lists ProbeDir (which must hold it), and removes it. It stops
// at the first step that fails, except that once the probe is written it
// always tries to remove it. Listing also removes the probes it finds
// that are older than an hour. from says who probes, in the probe's
// content, for whoever finds one left behind.
func Probe(ctx context.Context, s Store, from string) ProbeResult {
	o, ok := s.(objects)
	if !ok {
		return ProbeResult{Failed: ProbeWrite, Err: fmt.Errorf("store %s (%T) cannot be probed", s.URL(), s)}
	}
	var nonce [16]byte
	crand.Read(nonce[:]) // Never fails.
	now := time.Now()
	base := strconv.FormatInt(now.UnixNano(), 10) + "-" + hex.EncodeToString(nonce[:]) + probeSuffix
	name := ProbeDir + "/" + base
	data := fmt.Appendf(nil, "quire store health probe by %s at %s: %x\n", from, now.UTC().Format(time.RFC3339Nano), nonce)

	var res ProbeResult
	step := func(st ProbeStep, fn func() error) bool {
		t0 := time.Now()
		if err := fn(); err != nil {
			if res.Err == nil {
				res.Failed, res.Err = st, fmt.Errorf("%s %s in %s: %w", st, name, s.URL(), err)
			}
			return false
		}
		res.Passed = append(res.Passed, StepTime{st, time.Since(t0)})
		return true
	}
	if !step(ProbeWrite, func() error { return o.putObject(ctx, name, data) }) {
		// A write that failed may have left the object: remove it, quietly.
		o.removeObject(ctx, name)
		return res
	}
	_ = step(ProbeRead, func() error {
		got, err := o.getObject(ctx, name, int64(len(data))+1)
		if err == nil && !bytes.Equal(got, data) {
			err = fmt.Errorf("read back %d bytes that differ from the %d written", len(got), len(data))
		}
		return err
	}) && step(ProbeList, func() error {
		names, err := o.listObjects(ctx, ProbeDir)
		if err != nil {
			return err
		}
		removeStale(ctx, o, names, now)
		if !slices.Contains(names, base) {
			return fmt.Errorf("the listing of %d objects in %s lacks the probe just written", len(names), ProbeDir)
		}
		return nil
	})
	step(ProbeDelete, func() error { return o.removeObject(ctx, name) })
	return res
}

// removeStale removes, best effort, the probes among names written more
// than staleProbe before now.
func removeStale(ctx context.Context, o objects, names []string, now time.Time) {
	for _, n := range names {
		stamp, _, ok := strings.Cut(n, "-")
		if !ok || !strings.HasSuffix(n, probeSuffix) {
			continue
		}
		nanos, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil || now.Sub(time.Unix(0, nanos)) < staleProbe {
			continue
		}
		_ = o.removeObject(ctx, ProbeDir+"/"+n)
	}
}

// errTooLarge is the error of an object larger than a probe can be.
var errTooLarge = errors.New("the object is larger than the probe written")
