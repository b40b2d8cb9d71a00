package rdmacm

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// capIPCLock is CAP_IPC_LOCK's bit in the capability sets.
const capIPCLock = 14

// rlimInfinity is RLIM_INFINITY on Linux.
const rlimInfinity = ^uint64(0)

// checkMemlock is CheckMemlock's decision, separated for tests: may a
// process with RLIMIT_MEMLOCK limit, locked bytes already locked/pinned
// and CAP_IPC_LOCK or not lock n more bytes?
func checkMemlock(limit, locked, n uint64, capIPCLock bool) error {
	if capIPCLock || limit == rlimInfinity {
		return nil
	}
	if need := locked + n; need > limit {
		return &MemlockError{Limit: limit, Need: need}
	}
	return nil
}

type procStatus struct {
	vmLck, vmPin uint64 // bytes
	capEff       uint64
}

// readProcStatus reads the fields CheckMemlock needs from
// /proc/self/status; missing fields are 0.
func readProcStatus() procStatus {
	var st procStatus
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return st
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "VmLck", "VmPin":
			n, _ := strconv.ParseUint(strings.TrimSuffix(v, " kB"), 10, 64)
			if k == "VmLck" {
				st.vmLck = n << 10
			} else {
				st.vmPin = n << 10
			}
		case "CapEff":
			st.capEff, _ = strconv.ParseUint(v, 16, 64)
		}
	}
	return st
}
