//go:build cgo && !nordma

package rdmacm

import "testing"

// TestOneMallocArena pins the work-around for rdma-core 44.0's device list
// (mallocarena_linux.c): memory malloc'd on another thread comes from the same
// arena, within 2 GiB, not from a per-thread arena elsewhere in the address space.
func TestOneMallocArena(t *testing.T) {
	for i := 0; i < 4; i++ {
		d := threadMallocDistance()
		if d < 0 {
			t.Fatal("malloc or pthread_create failed")
		}
		if d >= 1<<31 {
			t.Fatalf("blocks malloc'd on two threads are %#x bytes apart, want < 2 GiB: the process has more than one malloc arena", d)
		}
	}
}
