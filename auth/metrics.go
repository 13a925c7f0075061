package auth

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	denied = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_auth_denied_total",
		Help: "Requests refused by authorization, by the capability they lacked (empty for a missing or invalid token) and the reason: missing, malformed, invalid, capability, selector.",
	}, []string{"capability", "reason"})
	acceptedOpen = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "quire_auth_rollout_accepted_total",
		Help: "Requests accepted without a token in rollout mode, by method: the clients still to be given tokens.",
	}, []string{"method"})
)
