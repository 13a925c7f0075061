// Package rpcmetrics counts and times the RPCs that a Quire server
// handles, as Prometheus metrics on the default registry, through
// go-grpc-middleware's Prometheus provider:
//
//	grpc_server_started_total{grpc_service, grpc_method, grpc_type}
//	grpc_server_handled_total{…, grpc_code}
//	grpc_server_msg_received_total, grpc_server_msg_sent_total
//	grpc_server_handling_seconds (a histogram)
//
// so that an operator sees, per RPC, its rate, its errors by code and
// its latency, on brokers and consumer processes alike.
package rpcmetrics
