package recoverylog

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	appendsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_recoverylog_appends_total", Help: "Appends of recorded ops committed to recovery logs."})
	appendedBytes = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_recoverylog_appended_bytes_total", Help: "Bytes of recorded ops committed to recovery logs."})
	retriedAppends = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_recoverylog_appends_found_committed_total",
		Help: "Appends thought to have failed that the recorder found committed in the log when their retry was refused (the journal's primary changed as they committed)."})
	syncSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "quire_recoverylog_sync_seconds", Help: "Time a sync of a recorded file waited for the recovery log.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)})
	recorderFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_recoverylog_recorder_failures_total",
		Help: "Recorders stopped by a failed append: fenced (another recorder took over the log) or failed."},
		[]string{"reason"})
	playedBytes = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_recoverylog_played_bytes_total", Help: "Recovery-log bytes read by players."})
	gapsCrossed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_recoverylog_gaps_crossed_total",
		Help: "Gaps that players crossed in recovery logs: the frames of an append never acknowledged, lost with the one replica that held them. The ops after each follow those before it."})
	skippedBytes = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_recoverylog_skipped_bytes_total", Help: "Recovery-log bytes that players skipped, as their hints allowed."})
)

// Every reason's series exists from the start, so that alerts and rates on
// one (reason="failed") have a series to follow before its first failure.
func init() {
	for _, reason := range []string{"failed", "fenced"} {
		recorderFailures.WithLabelValues(reason)
	}
}
