// Package freeport finds free loopback TCP ports for tests that must name
// a port before the server that binds it starts (etcd, a child process, a
// command's --listen flag).
//
// A port found free by listening on port 0 comes from the kernel's
// ephemeral range, from which every other listener on port 0 and every
// outbound connection of the machine also take theirs: with test
// packages running in parallel, one of them often takes it before the
// server binds it. So ports are chosen at random below that range (Linux
// starts it at 32768), where only another freeport may pick them, and
// never twice in one process.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
)

// low and high bound the ports chosen, [low, high).
const low, high = 20000, 32768

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Find returns a loopback port that was free a moment ago, and that Find
// did not return before in this process.
func Find() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port := low + rand.IntN(high-low)
		if handed[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		handed[port] = true
		return port, nil
	}
	return 0, errors.New("freeport: 1000 loopback ports tried, none free")
}

// Port returns Find's port, or fails t.
func Port(t testing.TB) int {
	t.Helper()
	port, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	return port
}
