//go:build cgo && !nordma

package rdmacm

// #include "verbs_linux.h"
import "C"

// threadMallocDistance returns how far apart, in bytes, two small blocks lie that
// malloc returned on two threads (-1 if it failed). mallocarena_linux.c keeps the
// process to one malloc arena, which puts them within the heap's span: librdmacm
// (rdma-core 44.0) needs the ibv_device structures of all devices within 2 GiB of
// each other to keep its device list.
func threadMallocDistance() int64 { return int64(C.gonvmf_thread_malloc_distance()) }
