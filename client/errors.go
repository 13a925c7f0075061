package client

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quire-dev/quire/protocol"
)

// Errors that a broker's response statuses map to. Errors returned by the
// client wrap them, so callers test with errors.Is; errors.As with a
// *StatusError gives the journal, the status and the broker's header.
var (
	ErrJournalNotFound       = errors.New("journal not found")
	ErrNoPrimary             = errors.New("journal has no primary broker")
	ErrNotPrimary            = errors.New("broker is not the journal's primary")
	ErrNotReplica            = errors.New("broker is not a replica of the journal")
	ErrInsufficientReplicas  = errors.New("journal has fewer brokers than its replication")
	ErrOffsetNotYetAvailable = errors.New("offset not yet available")
	ErrWrongAppendOffset     = errors.New("append offset is not the journal's write head")
	ErrRegisterMismatch      = errors.New("journal registers do not match the append's selector")
	ErrNotAllowed            = errors.New("journal access forbids the request")
	ErrRevisionMismatch      = errors.New("expected mod revision did not hold")
	ErrUnexpectedStatus      = errors.New("unexpected response status")
)

// ErrClosed is returned by operations on a closed Client or Appender.
var ErrClosed = errors.New("client: closed")

// ErrOffsetJump is matched (with errors.Is) by every *OffsetJumpError.
var ErrOffsetJump = errors.New("offset jump")

// ErrNotReplayable is wrapped by an Append error that was transient but
// could not be retried, because the content was neither an io.Seeker nor
// small enough to buffer (see Config.MaxAppendBuffer).
var ErrNotReplayable = errors.New("content cannot be replayed for a retry")

var statusErrors = map[protocol.Status]error{
	protocol.Status_JOURNAL_NOT_FOUND:        ErrJournalNotFound,
	protocol.Status_NO_PRIMARY:               ErrNoPrimary,
	protocol.Status_NOT_PRIMARY:              ErrNotPrimary,
	protocol.Status_NOT_REPLICA:              ErrNotReplica,
	protocol.Status_INSUFFICIENT_REPLICAS:    ErrInsufficientReplicas,
	protocol.Status_OFFSET_NOT_YET_AVAILABLE: ErrOffsetNotYetAvailable,
	protocol.Status_WRONG_APPEND_OFFSET:      ErrWrongAppendOffset,
	protocol.Status_REGISTER_MISMATCH:        ErrRegisterMismatch,
	protocol.Status_NOT_ALLOWED:              ErrNotAllowed,
	protocol.Status_REVISION_MISMATCH:        ErrRevisionMismatch,
}

// StatusError is a response whose status was not OK.
type StatusError struct {
	Op      string // "append", "read", "list", "apply" or "list fragments"
	Journal string // Empty for list and apply.
	Status  protocol.Status
	Detail  string           // What the client asked for, where it helps: "offset 42".
	Header  *protocol.Header // The answering broker's header, if it sent one.
}

func (e *StatusError) Error() string {
	s := "client: " + e.Op
	if e.Journal != "" {
		s += fmt.Sprintf(" journal %q", e.Journal)
	}
	s += ": " + e.Status.String()
	if err, ok := statusErrors[e.Status]; ok {
		s += " (" + err.Error() + ")"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if id := e.Header.GetProcessId(); id != nil {
		s += fmt.Sprintf(" [broker %s#%s]", id.GetZone(), id.GetSuffix())
	}
	return s
}

// Is reports whether target is the sentinel error of e's status.
func (e *StatusError) Is(target error) bool {
	if err, ok := statusErrors[e.Status]; ok {
		return err == target
	}
	return target == ErrUnexpectedStatus
}

// OffsetJumpError reports that a Reader skipped the journal's content in
// [From, To), which is no longer stored (removed by retention, typically).
// The Reader continues at To on its next Read; the error is informational.
type OffsetJumpError struct {
	Journal  string
	From, To int64
}

func (e *OffsetJumpError) Error() string {
	return fmt.Sprintf("client: read journal %q: offset jumped from %d to %d: content in between is not available",
		e.Journal, e.From, e.To)
}

// Is makes errors.Is(err, ErrOffsetJump) true.
func (e *OffsetJumpError) Is(target error) bool { return target == ErrOffsetJump }

// isTransientStatus reports whether a request answered with s may succeed
// if retried later, against the same or another broker.
func isTransientStatus(s protocol.Status) bool {
	switch s {
	case protocol.Status_NO_PRIMARY, protocol.Status_INSUFFICIENT_REPLICAS,
		protocol.Status_NOT_PRIMARY, protocol.Status_NOT_REPLICA,
		protocol.Status_WRONG_ROUTE, protocol.Status_PROPOSAL_MISMATCH:
		return true
	}
	return false
}

// isTransientCode reports whether an RPC failure may succeed against
// another broker or later: the broker is unreachable, or the stream broke.
// Failures of the caller's own context are never transient.
func isTransientCode(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Internal:
		// Internal is how gRPC reports a stream reset mid-way.
		return true
	case codes.Canceled, codes.DeadlineExceeded:
		// The context is live, so a broker (or a proxy) gave up, not us.
		return true
	}
	return false
}

// ctxError returns ctx's error if ctx is done, else err. gRPC reports a
// cancelled call as a status error; callers are better served by the
// context's own error, which errors.Is matches against context.Canceled.
func ctxError(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}
