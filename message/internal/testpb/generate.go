// Package testpb holds a protobuf message type for the message package's
// tests and benchmarks, defined as an application would define one.
//
// Regenerate event.pb.go with
//
//	go generate ./message/internal/testpb/
//
// which needs protoc and protoc-gen-go, as protocol/generate.go says.
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative event.proto
package testpb
