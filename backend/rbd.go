package backend

import (
	"errors"
	"fmt"
	"time"
)

// RBDSpec names the Ceph RBD image of a KindRBD backend and how to reach its cluster.
//
// The rbd backend exists only in the ceph build of gonvmf (build tag `ceph`, plus
// `pacific` against Ceph 16.2 — `make build-ceph`), which links librados and librbd; the
// default build returns ErrNeedsCephBuild from Open. Every image opened with the same
// Conf, User and Keyring shares one RADOS connection (one set of monitor and OSD sessions
// and librados threads) for the life of the process's open images — unless the cluster
// blocklists its client: images opened after an operation, open or image watch saw that
// (ESHUTDOWN) get a new connection, and an open that finds it blocklisted is retried once
// on one. The images on the blocklisted client are fenced: their requests fail with
// ErrNeedsReopen (with ErrSync too when writes their cache completed were not flushed)
// and each reports it to Spec.OnNeedsReopen, until it is closed and opened again.
type RBDSpec struct {
	// Pool is the RADOS pool holding the image (required).
	Pool string
	// Namespace is the RADOS namespace inside Pool; "" is the pool's default namespace.
	Namespace string
	// Image is the image's name (required).
	Image string
	// Conf is the ceph.conf to read; "" means librados's default search ($CEPH_CONF,
	// /etc/ceph/ceph.conf, ~/.ceph/config, ./ceph.conf).
	Conf string
	// User is the client name without "client."; "" means admin.
	User string
	// Keyring is the keyring file holding User's key; "" means what ceph.conf says
	// (keyring = ..., by default /etc/ceph/ceph.client.<user>.keyring and others).
	Keyring string
	// CreateSize, when not 0, creates the image with this size in bytes if it does not
	// exist (an existing image is used as it is). 0: the image must exist.
	CreateSize uint64
	// ConnectTimeout bounds connecting to the monitors and opening the image; 0 means
	// DefaultRBDConnectTimeout. An open that needs a connection while one with the same
	// Conf, User and Keyring is being made waits for that attempt and shares its result;
	// opens of other connections do not wait for it.
	ConnectTimeout time.Duration
}

// DefaultRBDConnectTimeout bounds connecting to a Ceph cluster when RBDSpec.ConnectTimeout
// is 0.
const DefaultRBDConnectTimeout = 30 * time.Second

// ErrNeedsCephBuild: an rbd backend was asked of a gonvmf built without the ceph tag.
var ErrNeedsCephBuild = errors.New("backend rbd needs the ceph build of gonvmf: build it with `make build-ceph` " +
	"(go build -tags ceph,pacific; needs Debian's librbd-dev and librados-dev)")

// Name returns the image as the rbd tool spells it: pool/[namespace/]image.
func (r RBDSpec) Name() string {
	if r.Namespace != "" {
		return r.Pool + "/" + r.Namespace + "/" + r.Image
	}
	return r.Pool + "/" + r.Image
}

// check validates the fields every rbd open needs.
func (r RBDSpec) check(s Spec) error {
	switch {
	case r.Pool == "":
		return errors.New("backend: rbd backend needs a pool")
	case r.Image == "":
		return fmt.Errorf("backend: rbd backend in pool %q needs an image name", r.Pool)
	case s.Size != 0:
		return fmt.Errorf("backend: rbd image %s: size %d: an rbd namespace has its image's size; "+
			"create a missing image with create_size, grow one with `rbd resize`", r.Name(), s.Size)
	case r.CreateSize != 0 && s.ReadOnly:
		return fmt.Errorf("backend: rbd image %s: create_size with read_only: a read-only namespace cannot create its image", r.Name())
	}
	return nil
}
