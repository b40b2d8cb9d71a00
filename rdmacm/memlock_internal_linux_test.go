package rdmacm

import "testing"

// TestCapIPCLockEffective: capget(2) and /proc/self/status must agree on
// CAP_IPC_LOCK, since CheckMemlock trusts the first and falls back to the second.
func TestCapIPCLockEffective(t *testing.T) {
	st := readProcStatus()
	if st.capEff == 0 && !capIPCLockEffective() {
		t.Log("no effective capabilities (or no CapEff line): both say no")
		return
	}
	want := st.capEff&(1<<capIPCLock) != 0
	if got := capIPCLockEffective(); got != want {
		t.Errorf("capIPCLockEffective() = %v, /proc/self/status CapEff %#x says %v", got, st.capEff, want)
	}
}
