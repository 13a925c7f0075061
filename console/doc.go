// Package console serves Quire's web console: a live view of a whole
// deployment in the browser — etcd, the brokers and their journals, each
// consumer application's processes and shards, where the allocator placed
// every replica, and what it would move if a member left or joined.
//
// The console reads what the servers themselves read. It finds the fleets
// under a prefix of etcd (package internal/fleet), mirrors each in a
// keyspace, exactly as its members do, and decodes it with its owner's
// decoders. What etcd does not hold it samples once a second: the write
// head of every journal (through the brokers) and the read-through offsets
// of every shard's primary (through the consumer processes), from which it
// derives append rates, lag in bytes and in time, and recent failovers.
//
// A browser loads one page, embedded in the binary (no build step and no
// network beyond the server it came from), and follows a stream of
// server-sent events: the whole view, each time a keyspace changes or a
// sample is taken. Journal content, specs and fragments come from the HTTP
// gateway (package gateway) on the same address, and carry the operator's
// token, if one is given, as every gateway request does.
//
// The console is read-only unless Config.Actions is set. Its actions
// (unassigning a FAILED shard, applying an edited journal spec) are POST
// requests that must come from the console's own origin (cross-site
// requests are refused) and are carried out with the caller's token, never
// the console's own, so that a server authorizes them by the caller's
// capabilities.
package console
