// Package controlpb is the gonvmf control API's protocol: control.proto and the Go code
// protoc generates from it (control.pb.go, control_grpc.pb.go; regenerate with gen.sh).
// API.md is the reference. The server is package target/control; gonvmf ctl is the
// command-line client.
package controlpb
