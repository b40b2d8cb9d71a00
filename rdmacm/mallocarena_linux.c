//go:build cgo && !nordma

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include "verbs_linux.h"

/* One malloc arena for the process, set before main runs (and so before any
 * thread allocates). Debian 12's librdmacm (rdma-core 44.0) sorts its device
 * list with a comparison that truncates the difference of two ibv_device
 * pointers to an int (fixed in 44.12); its merge of the sorted lists then
 * compares the pointers themselves. libibverbs allocates a device's ibv_device
 * with malloc on the thread that first lists the device, and glibc gives each
 * thread an arena of its own: a device found on another thread than the
 * others lies terabytes away in the address space, the truncated sign is
 * arbitrary, and the merge drops listed devices from librdmacm's list. A
 * dropped device cannot be used by new CM IDs (ENODEV); with every device
 * dropped, the next call into librdmacm locks its global mutex twice on one
 * thread and every later call hangs. With one arena the structures lie
 * within the heap's span, where the truncated difference keeps its sign.
 * Nothing of gonvmf allocates with malloc on a hot path: the cost of one
 * arena is nil. */
__attribute__((constructor)) static void gonvmf_one_arena(void)
{
	mallopt(M_ARENA_MAX, 1);
}

static void *malloc_small(void *arg)
{
	(void)arg;
	return malloc(64);
}

int64_t gonvmf_thread_malloc_distance(void)
{
	pthread_t th;
	void *theirs = NULL, *ours = malloc(64);
	int64_t d;

	if (!ours || pthread_create(&th, NULL, malloc_small, NULL) != 0) {
		free(ours);
		return -1;
	}
	pthread_join(th, &theirs);
	if (!theirs) {
		free(ours);
		return -1;
	}
	d = (int64_t)((uintptr_t)theirs - (uintptr_t)ours);
	free(ours);
	free(theirs);
	return d < 0 ? -d : d;
}
