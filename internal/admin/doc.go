// Package admin serves a process's HTTP admin endpoint: one address
// (--admin HOST:PORT) for what the infrastructure around a server asks of
// it, as opposed to what clients ask (gRPC).
//
//   - /metrics: Prometheus metrics of the default registry.
//   - /healthz: liveness. 200 while the process answers HTTP at all; a
//     probe that fails it should restart the process.
//   - /readyz: readiness. 200 once the server is announced in etcd under
//     its own lease, its view of etcd loaded, serving, and not draining;
//     503 otherwise, with the reason in the body. A load balancer or an
//     orchestrator stops sending work to a server that is not ready, and
//     a rolling restart waits for it; a process that drains says so at
//     once, before its drain ends.
//   - /debug/pprof/: Go's profiles, only when asked for (Options.Pprof):
//     they expose the process's internals to whoever reaches the address.
//
// Every answer is plain text, one line, so that `quire health URL` and
// curl can print it.
package admin
