package consumer

import (
	"context"
	"time"

	"github.com/quire-dev/quire/recoverylog"
)

// storeHints stores the recorder's hints, rotating the shard's earlier
// hints into its backups. A new primary does so right after its takeover,
// so the hints it recovered from become the first backup.
func (r *replica) storeHints(spec *ShardSpec, rec *recoverylog.Recorder) error {
	h, err := rec.Hints()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	return recoverylog.StoreHints(ctx, r.srv.cfg.Etcd, spec.HintKey(), h, spec.HintBackupCount())
}

// storeHintsEvery stores hints at once (a new primary rotates the hints
// it recovered from into the backups), then every HintInterval while the
// replica lives. A failure is logged: the hints stored before stay usable,
// only playback from them reads more of the log.
func (r *replica) storeHintsEvery(spec *ShardSpec, rec *recoverylog.Recorder) {
	t := time.NewTicker(r.srv.cfg.HintInterval)
	defer t.Stop()
	for {
		if err := r.storeHints(spec, rec); err != nil && r.ctx.Err() == nil {
			r.log.Warn("storing recovery-log hints failed", "err", err)
		}
		select {
		case <-t.C:
		case <-r.ctx.Done():
			return
		}
	}
}

// storeFinalHints stores hints as a primary stops (it moved, or the shard
// was unassigned), unless a successor has stored newer ones already.
func (r *replica) storeFinalHints(spec *ShardSpec, rec *recoverylog.Recorder) {
	if rec.Err() != nil {
		return // Fenced, or failed: a successor owns the log.
	}
	h, err := rec.Hints()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 5*time.Second)
	defer cancel()
	stored, err := recoverylog.LoadHints(ctx, r.srv.cfg.Etcd, spec.HintKey(), 0)
	if err != nil || (len(stored) != 0 && stored[0].Offset > h.Offset) {
		return
	}
	if err := recoverylog.StoreHints(ctx, r.srv.cfg.Etcd, spec.HintKey(), h, spec.HintBackupCount()); err != nil {
		r.log.Warn("storing final recovery-log hints failed", "err", err)
	}
}
