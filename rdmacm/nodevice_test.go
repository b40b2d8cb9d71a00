package rdmacm_test

import (
	"errors"
	"testing"

	"github.com/gonvmf/gonvmf/rdmacm"
)

// TestNoDevice: where there is no RDMA device (the build machines) or no
// RDMA support in the build, the entry points say so with ErrNoDevice or
// ErrNotSupported instead of failing obscurely.
func TestNoDevice(t *testing.T) {
	if _, err := rdmacm.Devices(); err == nil {
		t.Skip("this machine has an RDMA device")
	}
	okErr := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, rdmacm.ErrNoDevice) && !errors.Is(err, rdmacm.ErrNotSupported) {
			t.Errorf("%s: %v, want ErrNoDevice or ErrNotSupported", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	_, err := rdmacm.Devices()
	okErr("Devices", err)
	_, err = rdmacm.OpenDevice("")
	okErr("OpenDevice", err)
	ch, err := rdmacm.NewEventChannel()
	if err == nil {
		ch.Close()
		t.Skip("rdma_cm works without a verbs device here")
	}
	okErr("NewEventChannel", err)
}
