package protocol

// Regenerate protocol.pb.go and protocol_grpc.pb.go with
//
//	go generate ./protocol/
//
// which needs protoc (Debian: apt-get install protobuf-compiler) and the
// two Go plugins, pinned to the versions the generated code was made with:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.5.1
//
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative protocol.proto shard.proto
