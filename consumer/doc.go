// Package consumer will hold Quire's consumer framework: shards processed by
// a Go application, with a primary and hot standby replicas per shard,
// transactions, recorded stores and shard RPCs.
//
// Today it holds shard specs: ShardSpec, its validation and defaults, its
// etcd encoding (MarshalShardSpec, UnmarshalShardSpec), and YAML shard files
// (ParseShardFile, FormatShardFile), which `quire shards apply -f` reads.
package consumer
