// Package soak runs Quire's multi-host cluster (deploy/compose) through
// faults chosen at random from a seed, while workloads whose every
// outcome is recorded run through them, and checks afterwards that
// nothing acknowledged was lost or duplicated:
//
//   - writers append records to journals, and readers read them whole;
//     the history of calls and outcomes is checked for linearizability
//     against a model of an append-only log (Log) with porcupine, and
//     the journals' final content for every acknowledged record at its
//     acknowledged range, exactly once, and nothing torn or foreign;
//   - the word count counts words published in transactions, and each
//     count is compared with the exact number acknowledged.
//
// The faults are those of a fleet: processes killed and restarted
// (brokers, consumer processes, an etcd member), frozen for longer than
// a lease, drained, cut from their peers, from etcd or from a zone, in
// one direction or both, on a lossy slow link, and a broker's spool disk
// full. See docs/reliability.md for how to run it and its figures:
//
//	go test ./test/soak -run Soak -soak.cycles=200 -soak.seed=N
package soak
