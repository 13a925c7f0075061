// Package gctune sets the garbage collector of a broker from the memory
// it may use.
//
// A broker keeps little on its heap: spools are files, and the buffers of
// appends and replication are pooled. Yet each small append still
// allocates a few kilobytes (its messages, its content as received), so
// under load Go's default GOGC of 100 collects several times a second,
// and each collection's marking takes a share of the processors that the
// appends' tail latency shows. A broker therefore sets GOGC to Percent,
// collecting about a quarter as often, under a soft memory limit of Ratio
// of its cgroup's memory (or, outside a limited cgroup, the machine's):
// past the limit the runtime collects as often as it must to stay under
// it, so a heap that grows large costs collections, not memory beyond
// what GOGC=100 would have let it take.
//
// GOGC and GOMEMLIMIT in the environment win over both. AUTOMEMLIMIT sets
// another share of the memory, or, off, leaves the limit unset; then GOGC
// stays Go's default, as it does when the memory cannot be learned.
package gctune
