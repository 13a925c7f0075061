// Package auth is Quire's authorization: capability tokens, the keys that
// sign and verify them, and their enforcement in servers.
//
// A token is a JWT (Ed25519 or HMAC-SHA256) whose Claims grant a
// Capability over the journals or shards that a label selector matches,
// to a subject, until an expiry. Servers hold Keys, which only verify
// (Ed25519 public keys), and re-read their files when they change, so
// keys rotate without a restart; a SigningKey mints tokens.
//
// An Authorizer's interceptors verify the token of every RPC (all but the
// gRPC health service's) and put who made it in the request's context;
// handlers then Require a capability over each journal or shard they
// touch, before any content moves, or filter a List with Allows. The nil
// Authorizer allows everything. In rollout mode a request without a token
// is served, and logged.
//
// Clients send a TokenSource's token with DialOptions. A server that
// passes a request on to a peer uses ForwardCaller, so that the peer
// authorizes the original caller and never the server; WithToken and
// CallerDialOptions do the same for a gateway whose callers bring their
// tokens over HTTP; Internal marks a server's in-process calls made on its
// own behalf.
package auth
