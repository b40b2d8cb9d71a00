//go:build !ceph || !linux || !cgo

package main

import "testing"

// TestRBDCluster stands for the tests of rbd namespaces against a Ceph cluster
// (rbd_ceph_test.go), which exist only in the ceph build.
func TestRBDCluster(t *testing.T) {
	t.Skip("gonvmf perf --verify on rbd namespaces needs the ceph build and a Ceph cluster: make test-ceph " +
		"(go test -tags ceph,pacific ./cmd/gonvmf/)")
}
