//go:build !ceph || !linux || !cgo

package backend

import (
	"fmt"
	"time"
)

// RBDAvailable reports whether this build has the rbd backend (the ceph build).
const RBDAvailable = false

func openRBD(s Spec) (Backend, error) {
	if err := s.RBD.check(s); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("backend: rbd image %s: %w", s.RBD.Name(), ErrNeedsCephBuild)
}

// ringExt is the part of a Ring that completes rbd requests: nothing without the ceph
// build.
type ringExt struct{}

func (*ringExt) ready() bool          { return false }
func (*ringExt) reap() int            { return 0 }
func (*ringExt) inFlight() int        { return 0 }
func (*ringExt) close(time.Time) bool { return true }
