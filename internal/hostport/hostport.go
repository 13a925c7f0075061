// Package hostport checks the host:port addresses given to Quire's
// commands, so that a bad one is refused before anything starts, with the
// flag and the value that were wrong.
package hostport

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Check reports whether addr, the value of flag, is host:port with a port
// from lo (0, where 0 picks a free port, or 1) to 65535.
func Check(flag, addr string, lo int) error {
	if err := check(addr, lo); err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	return nil
}

func check(addr string, lo int) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < lo || p > 65535 {
		return fmt.Errorf("port %q is not a number from %d to 65535", port, lo)
	}
	return nil
}

// Split returns the addresses of a comma-separated list, each trimmed of
// white space.
func Split(list string) []string {
	var out []string
	for _, a := range strings.Split(list, ",") {
		out = append(out, strings.TrimSpace(a))
	}
	return out
}

// CheckList reports whether list, the value of flag, is one or more
// host:port addresses separated by commas, each with a port from 1.
func CheckList(flag, list string) error {
	if strings.TrimSpace(list) == "" {
		return fmt.Errorf("%s is empty", flag)
	}
	for _, a := range Split(list) {
		if a == "" {
			return fmt.Errorf("%s %q: an address is empty", flag, list)
		}
		if err := Check(flag, a, 1); err != nil {
			return err
		}
	}
	return nil
}

// CheckEtcd reports whether list, the value of flag, is one or more etcd
// endpoints separated by commas, each host:port, http://host:port or
// https://host:port: etcd's client takes all three (host:port is http,
// or https when the client has TLS).
func CheckEtcd(flag, list string) error {
	if strings.TrimSpace(list) == "" {
		return fmt.Errorf("%s is empty", flag)
	}
	for _, e := range Split(list) {
		if e == "" {
			return fmt.Errorf("%s %q: an endpoint is empty", flag, list)
		}
		addr := e
		if scheme, rest, ok := strings.Cut(e, "://"); ok {
			if scheme != "http" && scheme != "https" {
				return fmt.Errorf("%s %q: endpoint %q: want http:// or https://, or no scheme", flag, list, e)
			}
			addr = strings.TrimSuffix(rest, "/")
		}
		if err := check(addr, 1); err != nil {
			return fmt.Errorf("%s %q: endpoint %q: want host:port, http://host:port or https://host:port: %w", flag, list, e, err)
		}
	}
	return nil
}
