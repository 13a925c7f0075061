// Package benchpb holds the protobuf message of `quire bench messages
// --framing proto`, with vtprotobuf's generated methods, as an
// application that wants the proto framing's speed defines its messages.
//
// Regenerate the .pb.go files with
//
//	go generate ./cmd/quire/internal/benchpb/
//
// which needs the tools that message/internal/testpb/generate.go names.
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size bench.proto
package benchpb
