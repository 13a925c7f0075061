// Package k8s holds Quire's Kubernetes manifests, not Go code: base/ is a
// kustomize base (etcd, brokers, the word-count consumer application and
// its setup Job, their Services and PodDisruptionBudgets) that expects an
// S3 store of the user's own, and overlays/example/ a complete trial
// cluster with a SeaweedFS store of its own; components/monitoring adds a
// PodMonitor and the alerting rules for the Prometheus Operator.
// README.md says how to apply them and what to change for production.
//
// No cluster runs where the tests do, so k8s_test.go renders them with
// kustomize's own Go API, decodes every object strictly into the
// Kubernetes API types, and checks what a cluster would only show once
// something failed: probes aimed at the ports and paths the servers serve,
// grace periods that outlast drains, disruption budgets, zones, security
// contexts, credentials, image tags and the addresses servers advertise.
package k8s
