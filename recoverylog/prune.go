package recoverylog

import (
	"context"
	"fmt"

	"github.com/quire-dev/quire/client"
	"github.com/quire-dev/quire/fragment"
	"github.com/quire-dev/quire/protocol"
)

// PruneResult reports what Prune did.
type PruneResult struct {
	// Before is the offset before which the hints need no content
	// (Hints.PruneBefore): fragments ending at or before it were removed.
	Before       int64
	Removed      []fragment.Fragment
	RemovedBytes int64
	// Kept counts the fragments listed that were not removed: those that
	// reach past Before, and those not persisted yet.
	Kept int
}

// Prune removes from their fragment stores the fragments of the recovery
// log journal that hold no op that a player of h, or of any later hints
// of the log, needs: those that end at or before h.PruneBefore(). A
// fragment not persisted yet (held only by brokers' spools) is never
// removed; brokers drop removed fragments from their index when they next
// list their stores. Reads of the removed range then jump past it, which
// a player from h (or later hints) never does; a player from the start of
// the log, or from hints older than h, fails with an error naming the
// missing content.
//
// Prune lists the fragments through the brokers (client.ListFragments)
// and removes each from the store URL that lists it (fragment.Open), so
// it needs the credentials of the stores, as an operator's tool does
// (for S3, the AWS_* environment or shared credentials; see
// fragment.Open). It is safe to run again; a failure may leave some
// fragments removed and others not, and the next run removes the rest.
func Prune(ctx context.Context, cl *client.Client, journal string, h *Hints) (PruneResult, error) {
	var res PruneResult
	if h.Log != journal {
		return res, fmt.Errorf("recoverylog: prune: %w: they are hints of log %q, not %q", ErrBadHints, h.Log, journal)
	}
	if err := h.Validate(); err != nil {
		return res, fmt.Errorf("recoverylog: prune: %w", err)
	}
	res.Before = h.PruneBefore()
	infos, err := cl.ListFragments(ctx, &protocol.FragmentsRequest{Journal: journal})
	if err != nil {
		return res, fmt.Errorf("recoverylog: prune %q: %w", journal, err)
	}
	var end int64
	for _, info := range infos {
		end = max(end, info.GetFragment().GetEnd())
	}
	if end < h.Offset {
		// The listing may end short of the write head (a peer lists
		// the spool it writes only as far as the primary acknowledged
		// it): ask the write head whether the log reaches the hints'
		// offset.
		if head, err := cl.WriteHead(ctx, journal); err != nil {
			return res, fmt.Errorf("recoverylog: prune %q: %w", journal, err)
		} else if head < h.Offset {
			return res, fmt.Errorf("recoverylog: prune %q: %w: they describe the log up to offset %d, its write head is %d",
				journal, ErrBadHints, h.Offset, head)
		}
	}
	stores := map[string]fragment.Store{}
	for _, info := range infos {
		pf := info.GetFragment()
		if pf.GetStore() == "" || pf.GetEnd() > res.Before || pf.GetEnd() <= pf.GetBegin() {
			res.Kept++
			continue
		}
		f, err := toFragment(pf)
		if err != nil {
			return res, fmt.Errorf("recoverylog: prune %q: %w", journal, err)
		}
		st, ok := stores[f.Store]
		if !ok {
			if st, err = fragment.Open(ctx, f.Store); err != nil {
				return res, fmt.Errorf("recoverylog: prune %q: opening store: %w", journal, err)
			}
			stores[f.Store] = st
		}
		if err := st.Remove(ctx, f); err != nil {
			return res, fmt.Errorf("recoverylog: prune %q: removing fragment [%d, %d) from %s: %w",
				journal, f.Begin, f.End, f.Store, err)
		}
		res.Removed = append(res.Removed, f)
		res.RemovedBytes += f.Len()
	}
	return res, nil
}

// toFragment converts a listed fragment.
func toFragment(pf *protocol.Fragment) (fragment.Fragment, error) {
	f := fragment.Fragment{Journal: pf.GetJournal(), Begin: pf.GetBegin(), End: pf.GetEnd(), Store: pf.GetStore()}
	if len(pf.GetSum()) != len(f.Sum) {
		return f, fmt.Errorf("fragment [%d, %d): sum of %d bytes", f.Begin, f.End, len(pf.GetSum()))
	}
	copy(f.Sum[:], pf.GetSum())
	switch pf.GetCodec() {
	case protocol.Codec_CODEC_NONE:
		f.Codec = fragment.None
	case protocol.Codec_CODEC_GZIP:
		f.Codec = fragment.Gzip
	case protocol.Codec_CODEC_ZSTD:
		f.Codec = fragment.Zstd
	case protocol.Codec_CODEC_SNAPPY:
		f.Codec = fragment.Snappy
	default:
		return f, fmt.Errorf("fragment [%d, %d): codec %v", f.Begin, f.End, pf.GetCodec())
	}
	return f, f.Validate()
}
