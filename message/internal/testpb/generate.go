// Package testpb holds protobuf message types for the message package's
// tests and benchmarks, defined as an application would define them:
// Event with vtprotobuf's generated methods (which the proto framing
// uses), PlainEvent, the same fields, without them.
//
// Regenerate the .pb.go files with
//
//	go generate ./message/internal/testpb/
//
// which needs protoc and protoc-gen-go, as protocol/generate.go says, and
// protoc-gen-go-vtproto, at the version of the vtprotobuf module that
// go.mod requires:
//
//	go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.1-0.20240319094008-0393e58bdf10
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-vtproto_out=. --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size event.proto
//go:generate protoc --go_out=. --go_opt=paths=source_relative plain.proto
package testpb
