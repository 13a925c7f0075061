// Package gateway serves journals over plain HTTP, for clients that do not
// speak gRPC: a shell script with curl, a Python service, a browser.
//
// It is a thin layer over the Go client (package client), mounted under
// /v1/ of a server's admin address, so it reads and appends exactly as
// the client does: reads follow the journal's route and retry through
// failovers, appends are idempotent and retried, and an append is all of
// a request's body or nothing of it.
//
//	GET  /v1/journals/NAME?offset=N&block=true&end=M   the journal's bytes
//	POST /v1/journals/NAME[?framing=lines]             the body, as one append
//	GET  /v1/journals?selector=S                       journals, as JSON
//	GET  /v1/specs/NAME                                a journal's spec
//	GET  /v1/fragments/NAME                            a journal's fragments
//	GET  /v1/shards?selector=S                         shards, with status
//	GET  /v1/shards/ID/stat                            a shard's status
//
// Journal names keep their slashes in the path. A read's response carries
// its offset, the write head and the fragment it began in as headers
// (Quire-Offset, Quire-Write-Head, Quire-Fragment), sent with the first
// content, or at once when the read is at the write head and does not
// block.
//
// Errors are HTTP statuses with a JSON body, {"error": "..."}: 400 for a
// bad offset, selector or name, 401 and 403 for a token refused, 404 for
// an unknown journal or shard, 413 for a body over MaxAppend, 416 for a
// read past the write head, 503 when a journal has no primary (or the
// brokers do not answer).
//
// A request's "Authorization: Bearer TOKEN" is passed on to the brokers
// and consumer processes, which authorize the caller (see package auth).
package gateway
