package protocol

import (
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Defaults and limits of JournalSpec fields: see ApplyDefaults and
// Validate.
const (
	// DefaultFragmentLength is the default fragment.length: 128 MiB.
	DefaultFragmentLength = 128 << 20
	// DefaultCodec is the default fragment.codec.
	DefaultCodec = Codec_CODEC_ZSTD
	// DefaultRefreshInterval is the default fragment.refreshInterval.
	DefaultRefreshInterval = time.Minute

	// MinReplication and MaxReplication bound replication. Every replica
	// holds each byte before it is acknowledged, so an append waits on the
	// slowest of them: more than 16 only adds latency and load.
	MinReplication = 1
	MaxReplication = 16
	// MinFragmentLength and MaxFragmentLength bound fragment.length. Tiny
	// fragments swamp the stores with objects; a fragment is spooled on a
	// broker's local disk, and must fit there.
	MinFragmentLength = 1 << 10
	MaxFragmentLength = 4 << 30
	// MinRefreshInterval is the shortest fragment.refreshInterval, lest
	// brokers list the stores continuously.
	MinRefreshInterval = time.Second
	// MaxStores is the most fragment stores a journal may name.
	MaxStores = 16
)

// ApplyDefaults sets every unset (zero) field of s to its default. Every
// field but name and replication has one:
//
//	field                      default          meaning
//	labels                     none
//	fragment.length            128 MiB          spools roll past 128 MiB
//	fragment.codec             CODEC_ZSTD       zstd compression
//	fragment.stores            none             the brokers' default store (see below)
//	fragment.refreshInterval   1m               stores are re-listed every minute
//	fragment.flushInterval     0 (off)          spools roll only by length
//	fragment.retention         0 (forever)      fragments are never removed
//	fragment.fsync             false            spools are not fsynced before acknowledging
//	access                     READ_WRITE       reads and appends allowed
//	maxAppendRate              0 (unlimited)    appends are not rate limited
//
// An empty fragment.stores is valid and means "the brokers' default
// store": a broker (or the dev cluster) is configured with a store URL
// that serves every journal that names none, and such a journal's
// fragments persist there.
//
// ApplyDefaults is idempotent, and leaves name, replication and labels
// alone. Zero flushInterval and retention are cleared to unset, so that
// specs that mean the same compare equal. Specs stored in etcd have their
// defaults applied (MarshalSpec does it), so changing a default later does
// not change existing journals.
func (s *JournalSpec) ApplyDefaults() {
	if s == nil {
		return
	}
	if s.Fragment == nil {
		s.Fragment = &JournalSpec_Fragment{}
	}
	f := s.Fragment
	if f.Length == 0 {
		f.Length = DefaultFragmentLength
	}
	if f.Codec == Codec_CODEC_UNSPECIFIED {
		f.Codec = DefaultCodec
	}
	if isZeroDuration(f.RefreshInterval) {
		f.RefreshInterval = durationpb.New(DefaultRefreshInterval)
	}
	// flushInterval and retention default to zero (off), which is kept as
	// unset so that equal specs compare equal; fsync, access and
	// maxAppendRate default to their zero values, and stores to none.
	if isZeroDuration(f.FlushInterval) {
		f.FlushInterval = nil
	}
	if isZeroDuration(f.Retention) {
		f.Retention = nil
	}
}

// WithDefaults returns a copy of s with its defaults applied.
func (s *JournalSpec) WithDefaults() *JournalSpec {
	c := proto.Clone(s).(*JournalSpec)
	c.ApplyDefaults()
	return c
}

// DesiredReplication returns the spec's replication, so that a decoded
// spec is an allocator ItemValue: none while the journal is suspended.
func (s *JournalSpec) DesiredReplication() int {
	if s.Suspended() {
		return 0
	}
	return int(s.GetReplication())
}

// Suspended tells whether the journal is suspended (see Suspension).
func (s *JournalSpec) Suspended() bool { return s.GetSuspension().GetActive() }

// Validate returns an error if s is not a valid journal spec, naming the
// first offending field by its path and quoting its value, such as
// "fragment.length: -5 is negative". Unset (zero) fields that have defaults
// are valid: Validate accepts a spec before or after ApplyDefaults.
//
// The rules: name is a valid journal name (ValidateJournalName);
// replication is 1 to 16; labels are a valid label set (sorted by name then
// value, each label once) that does not use the meta-label names "name" and
// "prefix"; fragment.length is 1 KiB to 4 GiB; codec and access are known
// values; stores are at most 16 distinct valid store URLs
// (ValidateStoreURL); refreshInterval is at least 1s; flushInterval and
// retention are not negative; maxAppendRate is not negative; a suspension's
// offset is not negative and its registers are a valid label set.
func (s *JournalSpec) Validate() error { return s.validate("") }

func (s *JournalSpec) validate(path string) error {
	if s == nil {
		return fmt.Errorf("%s: missing", orName(path, "spec"))
	}
	if err := ValidateJournalName(s.Name); err != nil {
		return fmt.Errorf("%s: %w", fieldPath(path, "name"), err)
	}
	if r := s.Replication; r < MinReplication || r > MaxReplication {
		return fmt.Errorf("%s: %s", fieldPath(path, "replication"), outOfRange(int64(r), MinReplication, MaxReplication))
	}
	if err := validateLabels(fieldPath(path, "labels"), s.Labels, true); err != nil {
		return err
	}
	if err := s.Fragment.validate(fieldPath(path, "fragment")); err != nil {
		return err
	}
	if _, ok := Access_name[int32(s.Access)]; !ok {
		return fmt.Errorf("%s: %d is not a known access", fieldPath(path, "access"), s.Access)
	}
	if s.MaxAppendRate < 0 {
		return fmt.Errorf("%s: %d is negative", fieldPath(path, "maxAppendRate"), s.MaxAppendRate)
	}
	if sp := s.Suspension; sp != nil {
		if sp.Offset < 0 {
			return fmt.Errorf("%s: %d is negative", fieldPath(path, "suspension.offset"), sp.Offset)
		}
		if err := validateLabels(fieldPath(path, "suspension.registers"), sp.Registers, false); err != nil {
			return err
		}
	}
	return nil
}

func (f *JournalSpec_Fragment) validate(path string) error {
	if f == nil {
		return nil // All defaults.
	}
	switch l := f.Length; {
	case l < 0:
		return fmt.Errorf("%s: %d is negative", fieldPath(path, "length"), l)
	case l != 0 && (l < MinFragmentLength || l > MaxFragmentLength):
		return fmt.Errorf("%s: %d is outside 1KiB to 4GiB (%d to %d)", fieldPath(path, "length"), l, MinFragmentLength, int64(MaxFragmentLength))
	}
	if err := validateCodec(fieldPath(path, "codec"), f.Codec); err != nil {
		return err
	}
	if err := validateStores(fieldPath(path, "stores"), f.Stores); err != nil {
		return err
	}
	p := fieldPath(path, "refreshInterval")
	if err := validateDuration(p, f.RefreshInterval); err != nil {
		return err
	}
	if d := f.RefreshInterval.AsDuration(); d != 0 && d < MinRefreshInterval {
		return fmt.Errorf("%s: %s is shorter than %s", p, formatDuration(d), MinRefreshInterval)
	}
	if err := validateDuration(fieldPath(path, "flushInterval"), f.FlushInterval); err != nil {
		return err
	}
	return validateDuration(fieldPath(path, "retention"), f.Retention)
}

// CodecNamed returns the codec named s: none, gzip, zstd or snappy, in
// any case, with or without the CODEC_ prefix; ok is false for any other
// name.
func CodecNamed(s string) (c Codec, ok bool) {
	name := strings.TrimPrefix(strings.ToUpper(s), "CODEC_")
	v, ok := Codec_value["CODEC_"+name]
	if !ok || v == int32(Codec_CODEC_UNSPECIFIED) {
		return 0, false
	}
	return Codec(v), true
}

func validateCodec(path string, c Codec) error {
	if _, ok := Codec_name[int32(c)]; !ok {
		return fmt.Errorf("%s: %d is not a known codec", path, c)
	}
	return nil
}

func validateStores(path string, stores []string) error {
	if len(stores) > MaxStores {
		return fmt.Errorf("%s: %d stores, more than %d", path, len(stores), MaxStores)
	}
	for i, u := range stores {
		p := fmt.Sprintf("%s[%d]", path, i)
		if err := ValidateStoreURL(u); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for j := range i {
			if stores[j] == u {
				return fmt.Errorf("%s: %q repeats %s[%d]", p, u, path, j)
			}
		}
	}
	return nil
}

// validateDuration checks that d, if set, is a valid, non-negative duration
// that a time.Duration holds.
func validateDuration(path string, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	if err := d.CheckValid(); err != nil {
		return fmt.Errorf("%s: {seconds: %d, nanos: %d} is not a valid duration", path, d.Seconds, d.Nanos)
	}
	if d.Seconds < 0 || d.Nanos < 0 {
		return fmt.Errorf("%s: %s is negative", path, formatDuration(d.AsDuration()))
	}
	if d.Seconds > math.MaxInt64/int64(time.Second)-1 {
		return fmt.Errorf("%s: %ds is too long (the most is about 292 years)", path, d.Seconds)
	}
	return nil
}

func isZeroDuration(d *durationpb.Duration) bool {
	return d == nil || d.Seconds == 0 && d.Nanos == 0
}

// outOfRange describes v, which is outside [lo, hi].
func outOfRange(v, lo, hi int64) string {
	if v < lo {
		return fmt.Sprintf("%d is below %d", v, lo)
	}
	return fmt.Sprintf("%d is above %d", v, hi)
}

// fieldPath joins a path and a field name with '.'.
func fieldPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// orName returns path, or name if path is empty (the top level).
func orName(path, name string) string {
	if path == "" {
		return name
	}
	return path
}
