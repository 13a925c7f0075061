// Package hostport checks the host:port addresses given to Quire's
// commands, so that a bad one is refused before anything starts, with the
// flag and the value that were wrong.
package hostport

import (
	"fmt"
	"net"
	"strconv"
)

// Check reports whether addr, the value of flag, is host:port with a port
// from lo (0, where 0 picks a free port, or 1) to 65535.
func Check(flag, addr string, lo int) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q: want host:port: %w", flag, addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < lo || p > 65535 {
		return fmt.Errorf("%s %q: port %q is not a number from %d to 65535", flag, addr, port, lo)
	}
	return nil
}
