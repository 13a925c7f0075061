// Package client is the Go client of Quire's brokers: it appends to
// journals, synchronously or in batches, reads them, and lists and
// changes their specs.
//
//	c, err := client.New(ctx, client.Config{Broker: "localhost:8080", Zone: "us-east-1a"})
//	...
//	defer c.Close()
//	commit, err := c.Append(ctx, client.AppendRequest{Journal: "clicks/part-000"}, bytes.NewReader(data))
//	r := c.NewReader(ctx, client.ReadRequest{Journal: "clicks/part-000", Block: true})
//	_, err = io.Copy(dst, r)
//
// # Routing
//
// Any broker accepts any request and proxies it to a broker that can
// serve it: the journal's primary for an append, one of its replicas for a
// read. Proxying costs a hop, so the client learns where journals live. Every
// response carries a header with the journal's route, its brokers (the
// primary first) and their endpoints, and the client caches the newest
// route per journal; List responses fill the cache too.
//
// With a route cached, the client sends appends to the primary and reads
// to a replica in its own zone (Config.Zone), else to the primary, and asks
// the broker not to proxy (do_not_proxy). A broker that is no longer the
// primary or a replica answers NOT_PRIMARY or NOT_REPLICA with its own,
// newer, route, and the client retries at once where that route says.
// Without a route, requests go to Config.Broker (the first of its brokers,
// if it lists several), which proxies them; its answer teaches the client
// the route. A route that names an unreachable broker is forgotten, and
// the request is retried on another broker, avoiding those that just
// failed: the configured brokers in order, then any broker the client has
// seen in a route, each of which proxies. With Config.Logger set, the
// client warns while requests wait for an unreachable broker.
//
// The client keeps one gRPC connection per broker endpoint, for the life
// of the Client.
//
// # Retries
//
// Failures that may pass are retried with capped exponential backoff
// (Config.Backoff to Config.MaxBackoff, jittered) until the request's
// context is done: a journal without a primary (NO_PRIMARY) or with too
// few brokers (INSUFFICIENT_REPLICAS), unreachable brokers and broken
// streams (gRPC Unavailable and the like). Failures that are answers are
// returned, as errors that wrap ErrJournalNotFound, ErrWrongAppendOffset,
// ErrRegisterMismatch, ErrNotAllowed or ErrRevisionMismatch, for
// errors.Is, and that are *StatusError, for errors.As; messages name the
// journal and what was asked of it. Malformed requests are refused before
// they are sent where the client can tell, and otherwise fail with the
// broker's InvalidArgument error, which names the field.
//
// A retried append sends its content again, from the start. The client can
// do so if the content is an io.Seeker, or has been at most
// Config.MaxAppendBuffer bytes when the attempt failed (it keeps what it
// read, to replay); otherwise the error wraps ErrNotReplayable and the
// append is not retried. An attempt that fails before the broker received
// its commit message appends nothing. One whose stream breaks after that
// may have committed; its retry carries the same writer name (the
// Client's) and sequence number, and the broker answers it with the
// committed range, appending nothing. Brokers hold that for the latest 16
// writers of each journal, and for the greatest sequence number a writer
// committed: a writer's appends to one journal made one at a time commit
// once; concurrent ones are ordered by offset (AppendRequest.Offset) to be
// sure. Messages with UUIDs are exactly once regardless.
//
// Appends of at most one chunk to a journal whose primary the client knows
// share the client's one Appends stream to that broker (see
// protocol.proto); their retries are as above.
//
// A Reader whose stream breaks opens another at the offset after the last
// byte it received, on another replica if the broker is unreachable, so it
// returns every byte once and in order. Apply is not retried: the caller
// should List and decide again.
//
// # Appender
//
// An Appender batches small records: it collects the records for each
// journal, and sends them as one Append when the journal has no append in
// flight (after Linger, if set), or when the batch reaches MaxBatchBytes.
// One append in flight per journal keeps the journal's records in the
// order Append was called; each record's AppendHandle reports its own
// range, computed from its batch's commit and its place in the batch. The
// records held from Append until their batch completes are bounded by
// MaxBufferedBytes: Append blocks while they are at the bound. Close sends
// what is queued and waits for every batch; the Appender's goroutines, one
// per journal with records queued, have exited when it returns.
//
// # Reads
//
// A Reader is an io.Reader over a journal from an offset (-1 is the write
// head). It follows the journal across fragments and brokers. Read returns
// io.EOF at ReadRequest.EndOffset, and at the write head unless the read
// blocks. When content was removed (by retention) the broker continues the
// read after it, and Read reports the gap once, as an *OffsetJumpError
// with the offsets from and to; ReadRequest.SkipGaps skips gaps silently.
//
// # Direct reads
//
// Content persisted to fragment stores is read from the stores directly,
// so that reading a journal's history (a backfill, a recovery log's
// playback) loads the stores rather than the brokers that serve appends.
// A Reader asks for direct reads (protocol.ReadRequest.Direct); a broker
// whose read reaches a persisted fragment answers with the fragment and a
// URL of it, a presigned URL for an object store or a file:// URL for a
// file store, and ends the stream. The Reader fetches the URL (with
// Config.HTTPClient, or an http.Client of its own, under its context),
// decompresses it with the fragment's codec, and returns its content from
// the Reader's offset to the fragment's end, verifying its length and
// SHA-256 before it returns the last chunk; then it asks a broker again
// from there. Content not yet persisted comes from brokers, as ever.
//
// Whatever fails in fetching a fragment (retention removed it since the
// broker listed it, the store is out of reach, a file store is not
// mounted where the client runs, its content does not match), the Reader
// reads that fragment through a broker instead, which serves it, or finds
// it gone and continues past it: Read then reports the same gap, and
// returns the same content, as a read through brokers. Config.Logger is
// told of such fallbacks, at most every UnreachableWarnInterval.
//
// A fetch that fails other than for want of the fragment (the store is
// out of reach, or refuses) has the Client read that store's fragments
// through brokers for StoreHoldOff before it tries again.
// Config.ReadThroughBrokers (every read) and ReadRequest.ThroughBrokers
// (one read) have brokers serve all content: for a client that cannot
// reach the stores, which otherwise pays a failed attempt now and then.
//
// # Metrics
//
// The package registers Prometheus counters with the default registry,
// named quire_client_*: appends, append bytes and retries; appender records
// and batches; read streams, bytes, retries and offset jumps; direct reads
// of fragments (by result: ok, or fallback to brokers) and their bytes.
package client
