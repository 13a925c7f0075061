package client

import (
	"context"
	crand "crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quire-dev/quire/internal/backoff"
	"github.com/quire-dev/quire/internal/rpcbuf"
	"github.com/quire-dev/quire/protocol"
)

// Defaults of Config.
const (
	DefaultMaxAppendBuffer = 4 << 20
	DefaultChunkSize       = 256 << 10
	DefaultBackoff         = 20 * time.Millisecond
	DefaultMaxBackoff      = 2 * time.Second
	// MaxChunkSize is the largest content chunk the client sends.
	MaxChunkSize = 1 << 20
)

// Config configures a Client.
type Config struct {
	// Broker is the gRPC target ("host:port") of any broker, or of several,
	// comma-separated ("b1:7700,b2:7700"). Requests go there until the
	// client has learned a journal's route: to the first, and on to the
	// next while one is unreachable.
	Broker string
	// Zone is the client's zone. Reads prefer a replica in it.
	Zone string
	// Logger, if set, is told (at warn, at most every
	// UnreachableWarnInterval) while requests wait for an unreachable
	// broker, with its address and the error. Nil logs nothing.
	Logger *slog.Logger
	// DialOptions are added after the client's defaults, which are only
	// insecure transport credentials; later options override them.
	DialOptions []grpc.DialOption
	// MaxAppendBuffer bounds the content of an Append that the client
	// keeps in memory so it can replay it for a retry, when the content is
	// not an io.Seeker. Zero means DefaultMaxAppendBuffer; a negative value
	// disables buffering.
	MaxAppendBuffer int
	// ChunkSize is the size of the content messages of an Append. Zero
	// means DefaultChunkSize; it is capped at MaxChunkSize.
	ChunkSize int
	// Backoff is the first delay between retries, and MaxBackoff the
	// largest; delays double between the two. Zeros mean DefaultBackoff
	// and DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
	// ReadThroughBrokers has brokers serve Readers all content, even
	// content persisted to fragment stores, which Readers otherwise fetch
	// from the stores themselves (see "Direct reads" in the package
	// documentation): for clients that cannot reach the stores.
	ReadThroughBrokers bool
	// HTTPClient fetches persisted fragments from the URLs that brokers
	// sign (direct reads of object stores): set it for a store whose TLS
	// needs a CA of its own, or a proxy. Nil uses a client that the Client
	// owns.
	HTTPClient *http.Client
}

// UnreachableWarnInterval is the least time between a Client's warnings
// of unreachable brokers (Config.Logger): a client retrying every few
// milliseconds says so once, not every time.
const UnreachableWarnInterval = 5 * time.Second

func (cfg *Config) withDefaults() (Config, error) {
	c := *cfg
	if strings.TrimSpace(c.Broker) == "" {
		return c, errors.New("client: config: Broker is empty")
	}
	for _, b := range strings.Split(c.Broker, ",") {
		if strings.TrimSpace(b) == "" {
			return c, fmt.Errorf("client: config: Broker %q: a broker is empty", c.Broker)
		}
	}
	if c.MaxAppendBuffer == 0 {
		c.MaxAppendBuffer = DefaultMaxAppendBuffer
	}
	if c.ChunkSize <= 0 {
		c.ChunkSize = DefaultChunkSize
	}
	c.ChunkSize = min(c.ChunkSize, MaxChunkSize)
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.Backoff)
	return c, nil
}

// Client is a client of a fleet of brokers. It is safe for concurrent use.
type Client struct {
	cfg    Config
	router *router
	pool   *pool
	// nextWarn is when, in Unix nanoseconds, the next warning of an
	// unreachable broker may be logged.
	nextWarn atomic.Int64
	// writers name the client's appends, and sequence numbers them:
	// brokers recognize a retry of an append that committed by the two.
	writers  *writers
	sequence atomic.Uint64
	// direct fetches fragments for direct reads (direct.go).
	direct *directFetcher
	// streams carry appends of one message (appends.go).
	streams *appendStreams
}

// New returns a Client of the brokers reachable through cfg.Broker. It
// does not contact a broker: connections are made on first use. ctx is
// only checked for cancellation.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	opts := append(append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, rpcbuf.DialOptions()...), c.DialOptions...)
	return &Client{
		cfg:     c,
		router:  newRouter(splitBrokers(c.Broker), c.Zone),
		pool:    &pool{opts: opts, conns: make(map[string]*grpc.ClientConn)},
		writers: newWriters(newWriterName()),
		direct:  newDirectFetcher(c.HTTPClient),
		streams: newAppendStreams(),
	}, nil
}

// newWriterName is a random writer name: 128 bits, in base 32, which no
// other client picks.
func newWriterName() string {
	var b [16]byte
	crand.Read(b[:]) // Never fails.
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

func splitBrokers(list string) []string {
	var out []string
	for _, b := range strings.Split(list, ",") {
		out = append(out, strings.TrimSpace(b))
	}
	return out
}

// warnUnreachable logs, at most every UnreachableWarnInterval, that a
// request waits for the broker at endpoint, which is unreachable. Other
// failures are answers or pass at once, and are not logged.
func (c *Client) warnUnreachable(op, journal, endpoint string, err error) {
	if c.cfg.Logger == nil || status.Code(err) != codes.Unavailable {
		return
	}
	now, next := time.Now().UnixNano(), c.nextWarn.Load()
	if now < next || !c.nextWarn.CompareAndSwap(next, now+int64(UnreachableWarnInterval)) {
		return
	}
	c.cfg.Logger.Warn("waiting for a broker: unreachable; retrying", "broker", endpoint, "op", op,
		"journal", journal, "err", err)
}

// Close closes the client's connections. Requests in flight fail.
func (c *Client) Close() error {
	c.direct.close()
	c.streams.close()
	return c.pool.close()
}

// Route returns a copy of the client's cached route of journal, or nil if
// it has none.
func (c *Client) Route(journal string) *protocol.Route {
	if rt := c.router.route(journal); rt != nil {
		return proto.CloneOf(rt)
	}
	return nil
}

// journal returns a client of the broker at endpoint.
func (c *Client) journal(endpoint string) (protocol.JournalClient, error) {
	conn, err := c.pool.get(endpoint)
	if err != nil {
		return nil, err
	}
	return protocol.NewJournalClient(conn), nil
}

// pool holds one connection per broker endpoint.
type pool struct {
	opts []grpc.DialOption

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func (p *pool) get(endpoint string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if cc, ok := p.conns[endpoint]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(endpoint, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("client: connect to broker %q: %w", endpoint, err)
	}
	p.conns[endpoint] = cc
	return cc, nil
}

func (p *pool) close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for ep, cc := range p.conns {
		if err := cc.Close(); err != nil {
			errs = append(errs, fmt.Errorf("client: close connection to %q: %w", ep, err))
		}
	}
	p.conns = nil
	return errors.Join(errs...)
}

func (c *Client) newBackoff() *backoff.Backoff {
	return backoff.New(c.cfg.Backoff, c.cfg.MaxBackoff)
}
