//go:build !ceph || !linux || !cgo

package backend

import (
	"errors"
	"strings"
	"testing"
)

// TestRBDNeedsCephBuild: without the ceph build, an rbd namespace says which build it needs.
func TestRBDNeedsCephBuild(t *testing.T) {
	if RBDAvailable {
		t.Fatal("RBDAvailable in a build without the rbd backend")
	}
	_, err := Open(Spec{Kind: KindRBD, RBD: RBDSpec{Pool: "rbd", Image: "vol1"}})
	if !errors.Is(err, ErrNeedsCephBuild) {
		t.Fatalf("Open(rbd) = %v, want ErrNeedsCephBuild", err)
	}
	for _, w := range []string{"rbd/vol1", "make build-ceph", "-tags ceph,pacific"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	// A spec that could never work is reported as such first.
	if _, err := Open(Spec{Kind: KindRBD, RBD: RBDSpec{Image: "vol1"}}); err == nil || !strings.Contains(err.Error(), "needs a pool") {
		t.Errorf("Open(rbd without a pool) = %v, want the missing pool named", err)
	}
}

// TestRBDCluster stands for the rbd backend's tests against a Ceph cluster
// (rbd_ceph_test.go), which exist only in the ceph build.
func TestRBDCluster(t *testing.T) {
	t.Skip("the rbd backend's tests against a Ceph cluster need the ceph build: make test-ceph " +
		"(go test -tags ceph,pacific ./backend/, with librbd-dev, librados-dev and the ceph-mon/mgr/osd packages)")
}
