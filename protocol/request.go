package protocol

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/labels"
)

// InvalidArgument returns err as a gRPC status error with code
// InvalidArgument and err's message, which names the offending field: the
// reply of a broker to a malformed request. It returns nil for a nil err.
func InvalidArgument(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// MaxPageLimit is the largest FragmentsRequest.pageLimit.
const MaxPageLimit = 10000

// MaxProcessIDTokenLength is the longest zone or suffix of a ProcessID, in
// bytes, as for allocator member keys.
const MaxProcessIDTokenLength = 512

// Validate checks that id names an allocator member: zone and suffix are
// each 1 to 512 bytes of printable ASCII or UTF-8 other than space, without
// '#' or '/' (the separators of member keys).
func (id *ProcessID) Validate() error { return id.validate("") }

func (id *ProcessID) validate(path string) error {
	if id == nil {
		return fmt.Errorf("%s: missing", orName(path, "process ID"))
	}
	if err := validateToken(fieldPath(path, "zone"), id.Zone); err != nil {
		return err
	}
	return validateToken(fieldPath(path, "suffix"), id.Suffix)
}

// validateToken applies the allocator's rules for zones and suffixes
// (allocator.ValidateToken); it is repeated here so that the protocol does
// not depend on the allocator and its etcd client.
func validateToken(path, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s: empty", path)
	case len(s) > MaxProcessIDTokenLength:
		return fmt.Errorf("%s: %s is %d bytes, longer than %d", path, quoteShort(s), len(s), MaxProcessIDTokenLength)
	case strings.ContainsAny(s, "#/"):
		return fmt.Errorf("%s: %q contains '#' or '/'", path, s)
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("%s: %q contains a space or control character", path, s)
		}
	}
	return nil
}

// Validate checks a Route: its members are valid and distinct; endpoints
// are either absent or one per member, none empty; revision is not
// negative. An empty route (no primary) is valid.
func (r *Route) Validate() error { return r.validate("") }

func (r *Route) validate(path string) error {
	if r == nil {
		return fmt.Errorf("%s: missing", orName(path, "route"))
	}
	for i, m := range r.Members {
		p := fmt.Sprintf("%s[%d]", fieldPath(path, "members"), i)
		if err := m.validate(p); err != nil {
			return err
		}
		for j := range i {
			if o := r.Members[j]; o.Zone == m.Zone && o.Suffix == m.Suffix {
				return fmt.Errorf("%s: %s#%s repeats members[%d]", p, m.Zone, m.Suffix, j)
			}
		}
	}
	if n := len(r.Endpoints); n != 0 && n != len(r.Members) {
		return fmt.Errorf("%s: %d endpoints for %d members", fieldPath(path, "endpoints"), n, len(r.Members))
	}
	for i, e := range r.Endpoints {
		if e == "" {
			return fmt.Errorf("%s[%d]: empty", fieldPath(path, "endpoints"), i)
		}
	}
	if r.Revision < 0 {
		return fmt.Errorf("%s: %d is negative", fieldPath(path, "revision"), r.Revision)
	}
	return nil
}

// Validate checks a Header: processId, if set, is valid, and so is route;
// revision is not negative.
func (h *Header) Validate() error { return h.validate("") }

func (h *Header) validate(path string) error {
	if h == nil {
		return fmt.Errorf("%s: missing", orName(path, "header"))
	}
	if h.ProcessId != nil {
		if err := h.ProcessId.validate(fieldPath(path, "processId")); err != nil {
			return err
		}
	}
	if h.Route != nil {
		if err := h.Route.validate(fieldPath(path, "route")); err != nil {
			return err
		}
	}
	if h.Revision < 0 {
		return fmt.Errorf("%s: %d is negative", fieldPath(path, "revision"), h.Revision)
	}
	return nil
}

// validateOptionalHeader validates h if it is set.
func validateOptionalHeader(h *Header) error {
	if h == nil {
		return nil
	}
	return h.validate("header")
}

// Validate checks a Fragment: journal is a valid name; 0 <= begin <= end;
// sum is empty or a SHA-256 (32 bytes); codec is known; store, if set, is a
// valid store URL; modTime is not negative, and is set only with store.
func (f *Fragment) Validate() error { return f.validate("") }

func (f *Fragment) validate(path string) error {
	if f == nil {
		return fmt.Errorf("%s: missing", orName(path, "fragment"))
	}
	if err := ValidateJournalName(f.Journal); err != nil {
		return fmt.Errorf("%s: %w", fieldPath(path, "journal"), err)
	}
	if f.Begin < 0 {
		return fmt.Errorf("%s: %d is negative", fieldPath(path, "begin"), f.Begin)
	}
	if f.End < f.Begin {
		return fmt.Errorf("%s: %d is before begin %d", fieldPath(path, "end"), f.End, f.Begin)
	}
	if n := len(f.Sum); n != 0 && n != sha256.Size {
		return fmt.Errorf("%s: %d bytes, not a SHA-256 (%d bytes)", fieldPath(path, "sum"), n, sha256.Size)
	}
	if err := validateCodec(fieldPath(path, "codec"), f.Codec); err != nil {
		return err
	}
	if f.Store != "" {
		if err := ValidateStoreURL(f.Store); err != nil {
			return fmt.Errorf("%s: %w", fieldPath(path, "store"), err)
		}
	}
	switch {
	case f.ModTime < 0:
		return fmt.Errorf("%s: %d is negative", fieldPath(path, "modTime"), f.ModTime)
	case f.ModTime != 0 && f.Store == "":
		return fmt.Errorf("%s: %d is set but store is empty (a spooled fragment has no modTime)", fieldPath(path, "modTime"), f.ModTime)
	}
	return nil
}

// ValidateLabels checks a list of labels as a label set: every name and
// value valid (see package labels), sorted by name then value, no label
// repeated. Errors name the entry as path[i], such as
// `registers[2]: invalid label name "bad name": …`.
func ValidateLabels(path string, ls []*Label) error { return validateLabels(path, ls, false) }

// Validate checks the first message of an Append stream: header, if set,
// is valid; journal is a valid name; offset, if set, is not negative;
// checkRegisters, if set, is a valid selector; unionRegisters and
// subtractRegisters are valid label sets; content is empty (content
// follows in later messages).
func (r *AppendRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if err := validateOptionalHeader(r.Header); err != nil {
		return err
	}
	if err := ValidateJournalName(r.Journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if r.Offset != nil && *r.Offset < 0 {
		return fmt.Errorf("offset: %d is negative", *r.Offset)
	}
	if r.CheckRegisters != "" {
		if _, err := labels.ParseSelector(r.CheckRegisters); err != nil {
			return fmt.Errorf("checkRegisters: %w", err)
		}
	}
	if err := ValidateLabels("unionRegisters", r.UnionRegisters); err != nil {
		return err
	}
	if err := ValidateLabels("subtractRegisters", r.SubtractRegisters); err != nil {
		return err
	}
	if err := checkNotWriterRegisters("unionRegisters", r.UnionRegisters); err != nil {
		return err
	}
	if err := checkNotWriterRegisters("subtractRegisters", r.SubtractRegisters); err != nil {
		return err
	}
	return validateWriter(r.Writer, r.Sequence)
}

// WriterRegisterPrefix begins the names of the registers in which brokers
// keep writers' last appends (see AppendRequest.writer): appends may not
// set or remove them, or a retry could commit twice.
const WriterRegisterPrefix = "quire.writer/"

func checkNotWriterRegisters(field string, ls []*Label) error {
	for i, l := range ls {
		if strings.HasPrefix(l.Name, WriterRegisterPrefix) {
			return fmt.Errorf("%s[%d]: %q: registers named %s… are the brokers' own", field, i, l.Name, WriterRegisterPrefix)
		}
	}
	return nil
}

// MaxWriterLen is the longest writer name of an append.
const MaxWriterLen = 64

// validateWriter checks an append's identity: none, or a writer name of
// letters, digits, '-' and '_', and a sequence number above 0.
func validateWriter(writer string, seq uint64) error {
	switch {
	case writer == "" && seq == 0:
		return nil
	case writer == "":
		return fmt.Errorf("sequence: %d given without a writer", seq)
	case len(writer) > MaxWriterLen:
		return fmt.Errorf("writer: %d bytes, longer than %d", len(writer), MaxWriterLen)
	case seq == 0:
		return fmt.Errorf("sequence: 0 for writer %q: want 1 or more", writer)
	}
	for i := 0; i < len(writer); i++ {
		c := writer[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("writer: %q has %q at byte %d: want letters, digits, '-' and '_'", writer, c, i)
		}
	}
	return nil
}

// ValidateContent checks a message of an Append stream after the first:
// it carries content and the commit flag (an empty one commits), nothing
// else.
func (r *AppendRequest) ValidateContent() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	switch {
	case r.Header != nil:
		return fmt.Errorf("header: set after the first message")
	case r.Journal != "":
		return fmt.Errorf("journal: %q set after the first message", r.Journal)
	case r.DoNotProxy || r.Offset != nil || r.CheckRegisters != "" ||
		len(r.UnionRegisters) != 0 || len(r.SubtractRegisters) != 0 || r.Writer != "" || r.Sequence != 0:
		return fmt.Errorf("request: fields other than content and commit set after the first message")
	}
	return nil
}

// Validate checks a ReadRequest: header, if set, is valid; journal is a
// valid name; offset is -1 (the write head) or more; endOffset is not
// negative, and if set and offset is not -1, beyond offset.
func (r *ReadRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if err := validateOptionalHeader(r.Header); err != nil {
		return err
	}
	if err := ValidateJournalName(r.Journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if r.Offset < -1 {
		return fmt.Errorf("offset: %d is below -1", r.Offset)
	}
	switch {
	case r.EndOffset < 0:
		return fmt.Errorf("endOffset: %d is negative", r.EndOffset)
	case r.EndOffset != 0 && r.Offset >= 0 && r.EndOffset <= r.Offset:
		return fmt.Errorf("endOffset: %d is not beyond offset %d", r.EndOffset, r.Offset)
	}
	return nil
}

// Validate checks a ListRequest: selector, if set, is a valid selector.
func (r *ListRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if r.Selector != "" {
		if _, err := labels.ParseSelector(r.Selector); err != nil {
			return fmt.Errorf("selector: %w", err)
		}
	}
	if r.WaitForRevision < 0 {
		return fmt.Errorf("waitForRevision: %d is negative", r.WaitForRevision)
	}
	return nil
}

// MaxStoreHealthStores is the most store URLs a StoreHealthRequest names.
const MaxStoreHealthStores = 100

// Validate checks a StoreHealthRequest: its header, if set, is valid; its
// selector parses; it names at most MaxStoreHealthStores stores, each a
// valid store URL, none twice.
func (r *StoreHealthRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if err := validateOptionalHeader(r.Header); err != nil {
		return err
	}
	if r.Selector != "" {
		if _, err := labels.ParseSelector(r.Selector); err != nil {
			return fmt.Errorf("selector: %w", err)
		}
	}
	if len(r.Stores) > MaxStoreHealthStores {
		return fmt.Errorf("stores: %d URLs, more than %d", len(r.Stores), MaxStoreHealthStores)
	}
	seen := make(map[string]bool, len(r.Stores))
	for i, u := range r.Stores {
		if err := ValidateStoreURL(u); err != nil {
			return fmt.Errorf("stores[%d]: %w", i, err)
		}
		if seen[u] {
			return fmt.Errorf("stores[%d]: %q is named twice", i, u)
		}
		seen[u] = true
	}
	return nil
}

// Validate checks an ApplyRequest: it has at least one change; each has
// exactly one of upsert (a valid spec) and delete (a valid journal name),
// and an expectModRevision that is not negative, and not zero for a delete
// (a deleted journal must exist); no two changes name the same journal.
// Errors name the change: "changes[1].upsert.fragment.length: -5 is
// negative". How many changes fit in one request is etcd's to say: they
// apply in one transaction, bounded by its --max-txn-ops.
func (r *ApplyRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if len(r.Changes) == 0 {
		return fmt.Errorf("changes: none")
	}
	seen := make(map[string]int, len(r.Changes))
	for i, c := range r.Changes {
		p := fmt.Sprintf("changes[%d]", i)
		name, err := c.validate(p)
		if err != nil {
			return err
		}
		if j, ok := seen[name]; ok {
			return fmt.Errorf("%s: journal %q is also changed by changes[%d]", p, name, j)
		}
		seen[name] = i
	}
	return nil
}

// validate checks a change and returns the name of the journal it changes.
func (c *ApplyRequest_Change) validate(path string) (string, error) {
	if c == nil {
		return "", fmt.Errorf("%s: missing", path)
	}
	if c.ExpectModRevision < 0 {
		return "", fmt.Errorf("%s: %d is negative", fieldPath(path, "expectModRevision"), c.ExpectModRevision)
	}
	switch {
	case c.Upsert != nil && c.Delete != "":
		return "", fmt.Errorf("%s: both upsert and delete are set", path)
	case c.Upsert != nil:
		return c.Upsert.Name, c.Upsert.validate(fieldPath(path, "upsert"))
	case c.Delete != "":
		if err := ValidateJournalName(c.Delete); err != nil {
			return "", fmt.Errorf("%s: %w", fieldPath(path, "delete"), err)
		}
		if c.ExpectModRevision == 0 {
			return "", fmt.Errorf("%s: 0 with delete; a deleted journal must exist, so give its mod revision", fieldPath(path, "expectModRevision"))
		}
		return c.Delete, nil
	}
	return "", fmt.Errorf("%s: neither upsert nor delete is set", path)
}

// Validate checks a FragmentsRequest: header, if set, is valid; journal is
// a valid name; beginModTime and endModTime are not negative, and
// endModTime, if set, is beyond beginModTime; nextPageToken is not
// negative; pageLimit is 0 (the broker's default) to MaxPageLimit;
// signatureTtl, if set, is a positive duration.
func (r *FragmentsRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if err := validateOptionalHeader(r.Header); err != nil {
		return err
	}
	if err := ValidateJournalName(r.Journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	switch {
	case r.BeginModTime < 0:
		return fmt.Errorf("beginModTime: %d is negative", r.BeginModTime)
	case r.EndModTime < 0:
		return fmt.Errorf("endModTime: %d is negative", r.EndModTime)
	case r.EndModTime != 0 && r.EndModTime <= r.BeginModTime:
		return fmt.Errorf("endModTime: %d is not beyond beginModTime %d", r.EndModTime, r.BeginModTime)
	case r.NextPageToken < 0:
		return fmt.Errorf("nextPageToken: %d is negative", r.NextPageToken)
	case r.PageLimit < 0 || r.PageLimit > MaxPageLimit:
		return fmt.Errorf("pageLimit: %s", outOfRange(int64(r.PageLimit), 0, MaxPageLimit))
	}
	if r.SignatureTtl != nil {
		if err := validateDuration("signatureTtl", r.SignatureTtl); err != nil {
			return err
		}
		if isZeroDuration(r.SignatureTtl) {
			return fmt.Errorf("signatureTtl: 0s is not positive")
		}
	}
	return nil
}

// Validate checks the first message of a Replicate stream: header is set,
// valid, and has a route with at least two members (the pipeline's: a
// primary and this replica); journal is a valid name; proposal is a valid
// fragment of journal; registers are a valid label set; content and
// contentDelta are empty.
func (r *ReplicateRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if r.Header == nil {
		return fmt.Errorf("header: missing (the first message carries the pipeline's route)")
	}
	if err := r.Header.validate("header"); err != nil {
		return err
	}
	if n := len(r.Header.GetRoute().GetMembers()); n < 2 {
		return fmt.Errorf("header.route.members: %d members; a pipeline has a primary and at least one other replica", n)
	}
	if err := ValidateJournalName(r.Journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := r.Proposal.validate("proposal"); err != nil {
		return err
	}
	if r.Proposal.Journal != r.Journal {
		return fmt.Errorf("proposal.journal: %q is not journal %q", r.Proposal.Journal, r.Journal)
	}
	if err := ValidateLabels("registers", r.Registers); err != nil {
		return err
	}
	if len(r.Content) != 0 {
		return fmt.Errorf("content: %d bytes in the first message, which carries none", len(r.Content))
	}
	if r.ContentDelta != 0 {
		return fmt.Errorf("contentDelta: %d in the first message, which carries no content", r.ContentDelta)
	}
	return nil
}

// Validate checks a SuspendRequest: its header, if set, is valid, and it
// names a valid journal.
func (r *SuspendRequest) Validate() error {
	if r == nil {
		return fmt.Errorf("request: missing")
	}
	if err := validateOptionalHeader(r.Header); err != nil {
		return err
	}
	if err := ValidateJournalName(r.Journal); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}
