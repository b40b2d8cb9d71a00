package rdmacm

import "golang.org/x/sys/unix"

// capIPCLockEffective reports whether CAP_IPC_LOCK is in the process's
// effective capabilities (capget(2); false if that fails: the caller then
// reads /proc/self/status, which says it too).
func capIPCLockEffective() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3: two 32-bit halves
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[capIPCLock/32].Effective&(1<<(capIPCLock%32)) != 0
}
