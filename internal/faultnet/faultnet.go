// Package faultnet partitions in-process servers in tests: a Switch
// carries a server's connections (its listeners' proxies, its outbound
// dials) and cuts them all at once, as a network partition would, until
// it is healed. Cut closes the connections, as a peer that resets them
// would; Blackhole keeps them open but lets no byte through, as a
// machine that froze or a network that drops packets would.
package faultnet

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
)

// ErrCut is the error of a dial through a cut Switch.
var ErrCut = errors.New("faultnet: partitioned")

// Switch is a set of connections that are cut together. The zero Switch
// is connected.
type Switch struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	// holed, if not nil, is open while the switch is blackholed, and
	// closed when it heals.
	holed chan struct{}
}

// Blackhole stops the bytes of the switch's connections, and the dials
// through it, without closing them, until Heal.
func (s *Switch) Blackhole() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holed == nil {
		s.holed = make(chan struct{})
	}
}

// pass waits until the switch lets bytes through, and tells whether it
// does (rather than stop being closed).
func (s *Switch) pass(stop <-chan struct{}) bool {
	s.mu.Lock()
	holed := s.holed
	s.mu.Unlock()
	if holed == nil {
		return true
	}
	select {
	case <-holed:
		return true
	case <-stop:
		return false
	}
}

// Cut closes the switch's connections, and refuses new ones until Heal.
// It ends a blackhole: what waited on it fails.
func (s *Switch) Cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	if s.holed != nil {
		close(s.holed)
		s.holed = nil
	}
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// Heal lets connections be made again, and bytes through.
func (s *Switch) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = false
	if s.holed != nil {
		close(s.holed)
		s.holed = nil
	}
}

// track adds c to the switch's connections, or closes it if the switch is
// cut, and tells which.
func (s *Switch) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		c.Close()
		return false
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Switch) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// Dial dials addr over TCP through the switch (for grpc.WithContextDialer).
// While the switch is blackholed, it waits.
func (s *Switch) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if !s.pass(ctx.Done()) {
		return nil, ctx.Err()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !s.track(c) {
		return nil, ErrCut
	}
	return &gatedConn{Conn: c, s: s, closed: make(chan struct{})}, nil
}

// gatedConn is a connection dialed through a switch: while it is
// blackholed, its reads and writes wait.
type gatedConn struct {
	net.Conn
	s         *Switch
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *gatedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.s.pass(c.closed) {
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if !c.s.pass(c.closed) {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

func (c *gatedConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// Proxy listens on a loopback port and forwards each connection to
// target through the switch. It returns the port's address; it stops
// when the test ends.
func (s *Switch) Proxy(t testing.TB, target string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		lis.Close()
		s.Cut() // Ends the forwarding of connections still open.
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return // Closed at the test's end.
			}
			wg.Go(func() { s.forward(in, target) })
		}
	})
	return lis.Addr().String()
}

// forward copies between in and a new connection to target until either
// ends or the switch is cut; while it is blackholed, bytes wait.
func (s *Switch) forward(in net.Conn, target string) {
	if !s.track(in) {
		return
	}
	defer s.untrack(in)
	defer in.Close()
	out, err := s.Dial(context.Background(), target)
	if err != nil {
		return
	}
	defer s.untrack(out)
	defer out.Close()
	stop := make(chan struct{})
	var once sync.Once
	end := func() {
		once.Do(func() {
			close(stop)
			in.Close()
			out.Close()
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.copy(out, in, stop); end() })
	wg.Go(func() { s.copy(in, out, stop); end() })
	wg.Wait()
}

// copy copies src to dst, each read's bytes once the switch lets them
// through, until either fails or stop is closed.
func (s *Switch) copy(dst, src net.Conn, stop <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !s.pass(stop) {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			s.pass(stop) // Nor does a close pass a blackhole.
			return
		}
	}
}

// Links cuts the connections between pairs of named nodes, leaving each
// node's others alone: a partial partition. A node dials through its
// Dialer; the node a dial reaches is the one Named for its address. The
// zero Links cuts nothing.
type Links struct {
	mu     sync.Mutex
	names  map[string]string               // address → node
	cut    map[[2]string]bool              // pairs, in order
	oneWay map[[2]string]bool              // from, to
	conns  map[[2]string]map[net.Conn]bool // open, per pair
}

// pair is the key of the link between nodes a and b.
func pair(a, b string) [2]string { return [2]string{min(a, b), max(a, b)} }

// Name makes dials to addr reach node.
func (l *Links) Name(addr, node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = map[string]string{}
	}
	l.names[addr] = node
}

// Cut closes the connections between a and b, and refuses new ones until
// Heal.
func (l *Links) Cut(a, b string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut == nil {
		l.cut = map[[2]string]bool{}
	}
	l.cut[pair(a, b)] = true
	for c := range l.conns[pair(a, b)] {
		c.Close()
	}
	delete(l.conns, pair(a, b))
}

// Heal lets a and b connect again.
func (l *Links) Heal(a, b string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.cut, pair(a, b))
	delete(l.oneWay, [2]string{a, b})
	delete(l.oneWay, [2]string{b, a})
}

// CutOneWay closes the connections between from and to, and refuses new
// ones that from dials to to until Heal; to may dial from. So a firewall
// rule that drops one direction's new connections behaves.
func (l *Links) CutOneWay(from, to string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.oneWay == nil {
		l.oneWay = map[[2]string]bool{}
	}
	l.oneWay[[2]string{from, to}] = true
	for c := range l.conns[pair(from, to)] {
		c.Close()
	}
	delete(l.conns, pair(from, to))
}

// Dialer returns the dial function of node from (for
// grpc.WithContextDialer), which dials through next.
func (l *Links) Dialer(from string, next func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		l.mu.Lock()
		key := pair(from, l.names[addr])
		refused := l.cut[key] || l.oneWay[[2]string{from, l.names[addr]}]
		l.mu.Unlock()
		if refused {
			return nil, ErrCut
		}
		c, err := next(ctx, addr)
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.cut[key] { // Cut while dialing.
			c.Close()
			return nil, ErrCut
		}
		if l.conns == nil {
			l.conns = map[[2]string]map[net.Conn]bool{}
		}
		if l.conns[key] == nil {
			l.conns[key] = map[net.Conn]bool{}
		}
		l.conns[key][c] = true
		return &linkConn{Conn: c, untrack: func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.conns[key], c)
		}}, nil
	}
}

// linkConn is a connection of Links, forgotten once closed.
type linkConn struct {
	net.Conn
	untrack func()
}

func (c *linkConn) Close() error {
	c.untrack()
	return c.Conn.Close()
}
