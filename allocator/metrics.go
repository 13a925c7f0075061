package allocator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics of the allocator. The gauges are the leader's view of its last
// solve, and zero in every other member (allocator.stopLeading).
var (
	membersGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_allocator_members", Help: "Members of the fleet at the last solve.",
	})
	itemsGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_allocator_items", Help: "Items of the fleet at the last solve.",
	})
	desiredSlotsGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_allocator_desired_slots", Help: "Sum of item replications at the last solve.",
	})
	unattainableSlotsGauge = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "quire_allocator_unattainable_slots", Help: "Desired slots the last solve could not assign (too few members, zones or limits).",
	})
	solveSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "quire_allocator_solve_seconds",
		Help:    "Time to solve the placement problem.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	convergeRounds = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_allocator_converge_rounds_total", Help: "Converge rounds committed by the leader.",
	})
	assignmentsAdded = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_allocator_assignments_added_total", Help: "Assignments created.",
	})
	assignmentsRemoved = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_allocator_assignments_removed_total", Help: "Assignments removed.",
	})
	assignmentsMoved = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_allocator_assignments_moved_total", Help: "Assignments moved to another slot (primary hand-offs and promotions).",
	})
	txnsFailed = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_allocator_txn_conflicts_total", Help: "Allocator transactions whose compares failed (a concurrent change); the round is recomputed.",
	})
)

// Metrics of this process as a member.
var (
	drainsGivenUp = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_allocator_drains_given_up_total", Help: "Drains of this process that timed out and gave up the items no other member took (MemberConfig.DrainTimeout).",
	})
	resignations = promauto.NewCounter(prometheus.CounterOpts{
		Name: "quire_allocator_resignations_total", Help: "Times this process resigned its membership (MemberConfig.Resign).",
	})
)
