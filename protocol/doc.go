// Package protocol is Quire's journal protocol: the specs of journals, the
// messages of the Journal gRPC service that brokers serve, and their
// validation, defaults and encodings.
//
// The messages and the service are defined in protocol.proto, from which
// protocol.pb.go and protocol_grpc.pb.go are generated; the rest of the
// package is written by hand.
//
// # Journals
//
// A journal is a named, append-only, replicated byte stream. Its
// JournalSpec gives its name (path-like, see ValidateJournalName), its
// replication (how many brokers hold each byte before an append is
// acknowledged), its labels, how its content is cut into fragments and
// persisted to fragment stores, its access and its append rate limit.
// Every field but name and replication has a default (see
// JournalSpec.ApplyDefaults), and JournalSpec.Validate states the rules.
//
// # The Journal service
//
// A broker serves six RPCs:
//
//   - List returns the specs of the journals whose labels match a selector,
//     with their etcd revisions and current routes. Selectors also see two
//     meta-labels per journal: name=NAME and prefix=P for each path prefix
//     of the name ending in '/' (see JournalSpec.LabelSetWithMeta).
//   - Apply creates, updates and deletes specs in one etcd transaction, each
//     change conditioned on the spec's mod revision.
//   - Read streams a journal's content from an offset: from a broker's
//     spool or fragments, or, with metadataOnly, just where the content is
//     so that the client fetches it from the store itself. With direct,
//     content not yet persisted is streamed, and a read that reaches a
//     persisted fragment is answered with the fragment and its URL in the
//     store (fragmentUrl), with no content, and ends: the client reads the
//     fragment from the store, and reads on from its end. A blocking read
//     at the write head waits for appends.
//   - Append streams content to a journal's primary, which sequences it,
//     replicates it to every other broker of the route and, once all hold
//     it, commits it and answers with its offsets. An append may be
//     conditioned on the write head (offset) and on the journal's
//     registers (a label set that appends update).
//   - Appends carries many appends of one message each, tagged, to the
//     primaries of their journals, answering each under its tag as it
//     completes: clients send small appends so, on one stream per broker,
//     rather than set up an Append stream for each.
//   - Replicate is the pipeline from a primary to each other replica:
//     content, then proposals that commit it.
//   - ListFragments lists the fragments persisted to a journal's stores.
//
// Any broker accepts any request and proxies it to a broker that can serve
// it, unless the request says doNotProxy.
//
// # Status and errors
//
// A well-formed request that the broker cannot satisfy is answered with a
// Status other than OK (JOURNAL_NOT_FOUND, NOT_PRIMARY, WRONG_APPEND_OFFSET
// and so on) in its response, and an error-free RPC. A malformed request
// fails the RPC with gRPC's InvalidArgument code and a message naming the
// offending field by its path and quoting its value, such as
// "offset: -2 is below -1" or "changes[1].upsert.fragment.length: -5 is
// negative". The Validate methods of the requests produce such errors and
// InvalidArgument turns them into gRPC errors. Field paths use the fields'
// JSON names (lowerCamelCase), as spec files and etcd values do.
//
// # Specs in etcd
//
// Journals are the items of the brokers' allocator fleet: a spec is stored
// under the brokers' root at items/NAME (for example
// /quire/brokers/items/examples/words/part-000), as the spec's protobuf JSON
// with its defaults applied, so that `etcdctl get --prefix` shows it
// readably. MarshalSpec and UnmarshalSpec are that encoding; a decoded
// *JournalSpec is an allocator.ItemValue (DesiredReplication is its
// replication). The protocol does not import the allocator: it is used by
// clients too, which need no etcd client.
//
// # Spec files
//
// ParseSpecFile and FormatSpecFile read and write the YAML form of a list
// of specs that the quire command's `journals apply`, `journals list` and
// `journals edit` use; see ParseSpecFile for the format.
//
// # Regenerating
//
// After changing protocol.proto, regenerate the Go code with
//
//	go generate ./protocol/
//
// which runs protoc with the protoc-gen-go and protoc-gen-go-grpc plugins,
// at the versions given in generate.go.
package protocol
