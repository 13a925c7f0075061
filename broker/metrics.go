package broker

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	appendsCommitted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_appends_total", Help: "Appends committed by this broker as primary.",
	})
	appendCommits = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_append_commits_total", Help: "Commits of appends by this broker as primary: whole appends that wait for the journal commit together, so appends per commit grows with concurrent writers.",
	})
	appendsDeduplicated = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_appends_deduplicated_total", Help: "Retried appends that their writer had committed already: answered with their committed range, appending nothing.",
	})
	appendErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_append_errors_total", Help: "Appends that failed at this broker as primary.",
	})
	bytesAppended = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_appended_bytes_total", Help: "Bytes appended by this broker as primary.",
	})
	readErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_read_errors_total", Help: "Reads that failed at this broker (answered Unavailable, for the reader to retry).",
	})
	caughtUp = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_caught_up_bytes_total", Help: "Bytes a primary copied from a peer as it synchronized a pipeline: appends that had committed on some replicas only.",
	})
	catchUpsAbandoned = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_catch_ups_abandoned_total", Help: "Times a primary rolled past content that only peers held, after failing to copy it for 20s: it is lost if they lose it before persisting it.",
	})
	journalsSuspended = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_journals_suspended_total", Help: "Journals this broker suspended as their primary (asked to, or idle).",
	})
	journalsResumed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_journals_resumed_total", Help: "Suspended journals this broker resumed (asked to, or by an append).",
	})
	readsRedirected = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_reads_redirected_total", Help: "Reads that a replica other than the primary could not serve (content it lacks), sent to the primary with NOT_PRIMARY.",
	})
	bytesRead = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_read_bytes_total", Help: "Bytes served to readers.",
	})
	spoolsRolled = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_spools_rolled_total", Help: "Spools rolled.",
	})
	fragmentsPersisted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_fragments_persisted_total", Help: "Fragments persisted to stores.",
	})
	bytesPersisted = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_persisted_bytes_total", Help: "Bytes persisted to stores.",
	})
	persistErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_persist_errors_total", Help: "Failed attempts to persist a fragment (retried).",
	})
	persistQueueFragments = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_broker_persist_queue_fragments",
		Help: "Rolled and recovered spools waiting to be persisted: queued, in flight, or waiting to retry.",
	})
	persistQueueBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_broker_persist_queue_bytes",
		Help: "Content of the spools waiting to be persisted: bytes on this broker's disk that no fragment store holds yet, besides the spools being written.",
	})
	headsRolledForward = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_heads_rolled_forward_total", Help: "Times a primary rolled a journal's write head forward past content its stores hold (fragments restored, or quire journals reset-head).",
	})
	fragmentsPruned = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_fragments_pruned_total", Help: "Fragments removed from stores past their journal's retention.",
	})
	peersUnreached = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_broker_peers_unreached_seconds",
		Help: "How long the broker has reached none of its peers (0 while it reaches one, or has fewer than two); it resigns at its isolation timeout.",
	})
	peersCut = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_broker_peers_cut",
		Help: "Peers the broker has not reached for its isolation timeout while it reaches others, and reports cut (see cuts.go).",
	})
	spoolsQuarantined = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_spools_quarantined_total", Help: "Recovered spools kept out of their journal: other content was written at their offsets.",
	})
	storeProbes = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_broker_store_probes_total",
		Help: "Health checks of fragment stores (StoreHealth), by store URL (without its query) and outcome: ok, or the step that failed (open, write, read, list, delete).",
	}, []string{"store", "outcome"})
	spoolsRecovered = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_broker_spools_recovered_total", Help: "Spools recovered from local disk at start.",
	})
)
