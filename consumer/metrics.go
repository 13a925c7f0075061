package consumer

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	replicaFailures = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_consumer_replica_failures_total", Help: "Shard replicas that failed (status FAILED)."})
	replicasUnassigned = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_consumer_failed_replicas_unassigned_total", Help: "FAILED replicas that their process unassigned (Config.UnassignFailedAfter)."})
	sourceLag = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quire_consumer_source_lag_bytes",
		Help: "Bytes of a source of a primary shard that are written but not yet read through by a committed transaction: the source's write head, as last read, less the shard's committed read-through offset.",
	}, []string{"shard", "journal"})
	producersPruned = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_consumer_producers_pruned_total", Help: "Producers that shards' checkpoints forgot, idle past Config.ProducerPruneHorizon."})
	txnsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_consumer_txns_total", Help: "Shard transactions committed."})
	messagesTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_consumer_messages_total", Help: "Committed messages consumed by shards."})
	badFrames = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_consumer_bad_frames_total", Help: "Frames of shards' sources that were not messages (they did not decode), passed over."})
	txnDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "quire_consumer_txn_seconds", Help: "Time from a transaction's first message to its commit's resolution.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
)
