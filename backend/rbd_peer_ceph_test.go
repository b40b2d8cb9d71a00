//go:build ceph && linux && cgo

package backend

import (
	"testing"

	"github.com/ceph/go-ceph/rados"
	"github.com/ceph/go-ceph/rbd"
	"github.com/gonvmf/gonvmf/internal/cephtest"
)

// peerImage opens rs's image as client.admin on a RADOS connection of its own: another
// gateway, or an administrator's tool, working on the same image. close (also run when t
// ends) closes the image and the connection.
func peerImage(t *testing.T, c *cephtest.Cluster, rs RBDSpec) (img *rbd.Image, close func()) {
	t.Helper()
	conn, err := rados.NewConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.ReadConfigFile(c.Conf); err != nil {
		t.Fatal(err)
	}
	if err := conn.Connect(); err != nil {
		t.Fatalf("peer: connecting as client.admin: %v", err)
	}
	ioctx, err := conn.OpenIOContext(rs.Pool)
	if err != nil {
		conn.Shutdown()
		t.Fatalf("peer: opening pool %s: %v", rs.Pool, err)
	}
	ioctx.SetNamespace(rs.Namespace)
	img, err = rbd.OpenImage(ioctx, rs.Image, rbd.NoSnapshot)
	if err != nil {
		ioctx.Destroy()
		conn.Shutdown()
		t.Fatalf("peer: opening %s: %v", rs.Name(), err)
	}
	closed := false
	close = func() {
		if closed {
			return
		}
		closed = true
		if err := img.Close(); err != nil {
			t.Errorf("peer: closing %s: %v", rs.Name(), err)
		}
		ioctx.Destroy()
		conn.Shutdown()
	}
	t.Cleanup(close)
	return img, close
}
