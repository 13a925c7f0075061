package store

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var sqliteRewriteSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
	Name:    "quire_store_sqlite_rewrite_seconds",
	Help:    "Time SQLite stores took to rewrite their database into a new file, bounding the recovery log a new primary plays (SQLiteOptions.RewriteAfter); the commit that triggered each took that much longer.",
	Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)})
