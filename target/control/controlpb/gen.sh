#!/bin/sh
# gen.sh regenerates control.pb.go and control_grpc.pb.go from control.proto, with the
# protobuf runtime version go.mod pins and a pinned protoc-gen-go-grpc. It needs protoc
# (Debian: apt-get install protobuf-compiler) and the Go module proxy.
set -eu
cd "$(dirname "$0")"
command -v protoc >/dev/null || { echo "gen.sh: protoc not found: apt-get install protobuf-compiler" >&2; exit 1; }
GRPC_GEN_VERSION=v1.6.2
PROTOBUF_VERSION=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOBUF_VERSION"
GOBIN=$bin go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$GRPC_GEN_VERSION"
PATH=$bin:$PATH protoc --go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative control.proto
echo "gen.sh: regenerated $(pwd)/control.pb.go and control_grpc.pb.go"
