// Package wordcountpb is the word-count example's own gRPC service,
// generated from wordcount.proto.
package wordcountpb

// Regenerate wordcount.pb.go and wordcount_grpc.pb.go with
//
//	go generate ./examples/wordcount/wordcountpb/
//
// which needs protoc and the two Go plugins named in protocol/generate.go.
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative wordcount.proto
