package client

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/status"
)

var (
	appendsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_client_appends_total",
		Help: "Appends completed, by result (ok or error); a retried append counts once.",
	}, []string{"result"})
	appendBytes = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_append_bytes_total",
		Help: "Bytes of content committed by appends.",
	})
	appendsFoundCommitted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_appends_found_committed_total",
		Help: "Retried appends that brokers answered as committed by an earlier attempt, which appended nothing again.",
	})
	appendRetries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_client_append_retries_total",
		Help: "Append attempts retried, by the status or gRPC code of the failed attempt.",
	}, []string{"reason"})
	appenderRecords = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_appender_records_total",
		Help: "Records appended through Appenders (committed or failed).",
	})
	appenderBatches = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_appender_batches_total",
		Help: "Batches (Append RPCs) sent by Appenders.",
	})
	readsTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_reads_total",
		Help: "Read streams opened, including reconnections.",
	})
	readBytes = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_read_bytes_total",
		Help: "Bytes of content received by Readers.",
	})
	readRetries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_client_read_retries_total",
		Help: "Read streams reopened after a failure, by the status or gRPC code of the failure.",
	}, []string{"reason"})
	readOffsetJumps = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_client_read_offset_jumps_total",
		Help: "Times a Reader skipped content that was no longer available.",
	})
)

// grpcCode names err's gRPC code, for metric labels.
func grpcCode(err error) string { return status.Code(err).String() }
