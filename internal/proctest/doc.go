// Package proctest runs the project's binaries as separate operating
// system processes, for tests of what only processes show: a process
// killed with SIGKILL keeps its etcd lease until it expires, one frozen
// with SIGSTOP comes back with stale state, one drained with SIGTERM must
// hand its work over and exit, and every request between them crosses a
// real socket. In-process fleets (internal/brokertest,
// internal/consumertest) cancel a context where a process would die, and
// so cannot show these.
//
// A test binary builds the binaries it needs once (Binaries: go build
// -trimpath into a temporary directory, without -race so that a fleet of
// processes fits on a small machine), and the package's TestMain removes
// them (Main). Start runs a binary with its standard output and error in a
// log file under the test's temporary directory, and the tail of each log
// is printed if the test fails. Every process started is killed and
// waited for when the test ends, whatever happens. StartEtcd runs a real
// etcd server from etcd's own module (internal/cmd/etcd), on free
// loopback ports with a fresh data directory.
//
// Processes are observed from outside, as an operator would: through
// their RPCs and the keys they keep in etcd. Await polls such a condition
// with a short tick until a deadline, since no event reaches the test
// when another process changes its state.
package proctest
