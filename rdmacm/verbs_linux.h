// C side of package rdmacm: small wrappers around librdmacm/libibverbs
// (macros and static inline functions cannot be called from Go directly)
// and the hot-path loops that convert Go work requests into verbs chains.
// Every function returns 0 or a positive errno unless documented otherwise;
// none of them keeps a pointer it was given after it returns.
#ifndef GONVMF_VERBS_H
#define GONVMF_VERBS_H

#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define GONVMF_MAX_SGE 16
#define GONVMF_MAX_RECV_SGE 4
// Work requests converted per ibv_post_* call (on the C stack).
#define GONVMF_POST_CHUNK 64

// Mirror of rdmacm.SendWR (checked at compile time in layout_linux.go).
typedef struct {
	uint64_t id;
	uint32_t opcode;
	uint32_t flags;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t imm;
	uint32_t num_sge;
	uint32_t pad;
	struct ibv_sge sgl[GONVMF_MAX_SGE];
} gonvmf_send_wr;

// Mirror of rdmacm.RecvWR.
typedef struct {
	uint64_t id;
	uint32_t num_sge;
	uint32_t pad;
	struct ibv_sge sgl[GONVMF_MAX_RECV_SGE];
} gonvmf_recv_wr;

// The per-I/O calls (posting, polling, arming) take their QP, SRQ or CQ as a
// uintptr_t holding its address: cgo checks every pointer argument whose
// type has pointers in it for Go memory at each call, and these objects are
// C memory, allocated and freed by libibverbs, that never moves.
//
// Posting returns the number of requests posted in the low 32 bits and the
// error that stopped the chain (0 if none) in the high 32 bits.
int64_t gonvmf_post_send(uintptr_t qp, gonvmf_send_wr *wrs, int n, uint32_t max_inline);
int64_t gonvmf_post_recv(uintptr_t qp, gonvmf_recv_wr *wrs, int n);
int64_t gonvmf_post(uintptr_t qp, gonvmf_recv_wr *recvs, int nr, gonvmf_send_wr *sends, int ns,
		    uint32_t max_inline, int *failed_send);
int64_t gonvmf_post_srq_recv(uintptr_t srq, gonvmf_recv_wr *wrs, int n);
struct ibv_srq *gonvmf_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t max_sge, uint32_t *got_wr, int *err);
// Returns the number of completions written (>= 0) or -errno.
int gonvmf_poll_cq(uintptr_t cq, struct ibv_wc *wc, int n);
int gonvmf_req_notify_cq(uintptr_t cq, int solicited_only);
// Returns 1 when an event was read and acknowledged, 0 when none is
// pending (the fd is non-blocking), -errno on error.
int gonvmf_get_cq_event(struct ibv_comp_channel *ch);
/* gonvmf_wait_cq blocks the calling thread in poll(2) on the completion
 * channel and the eventfd wake_fd for at most timeout_ms (-1: none). It
 * returns a bit set: 1 a completion event was consumed and acknowledged,
 * 2 wake_fd was signalled (and is cleared); 0 on timeout (a signal does
 * not end the wait early); a negative errno on failure. */
int gonvmf_wait_cq(struct ibv_comp_channel *ch, int wake_fd, int timeout_ms);

struct ibv_cq *gonvmf_create_cq(struct ibv_context *ctx, int cqe, uintptr_t handle,
				struct ibv_comp_channel *ch, int *err);
struct ibv_mr *gonvmf_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, int *err);
int gonvmf_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *out);
// Fills up to max GID entries of port; returns the count or -errno.
int gonvmf_query_gids(struct ibv_context *ctx, uint8_t port, struct ibv_gid_entry *out, int max);

typedef struct {
	int type;
	uint32_t qp_num;
	uintptr_t cq_handle;
	int port;
} gonvmf_async_event;
int gonvmf_get_async_event(struct ibv_context *ctx, gonvmf_async_event *out);

// The librdmacm device context with this name ("" = first), or NULL and *err.
struct ibv_context *gonvmf_cm_device(const char *name, struct ibv_context ***ref, int *err);
void gonvmf_cm_device_put(struct ibv_context **ref);
int gonvmf_cm_rescan(void);
// gonvmf_thread_malloc_distance returns the distance in bytes between a small
// block malloc'd on the calling thread and one malloc'd on a new thread, or -1
// (mallocarena_linux.c).
int64_t gonvmf_thread_malloc_distance(void);
int gonvmf_device_listed(struct ibv_context *ctx);

typedef struct {
	int family; // AF_INET, AF_INET6 or 0 (none)
	uint16_t port;
	uint8_t addr[16];
} gonvmf_addr;

typedef struct {
	int type;
	int status;
	uintptr_t id_handle;
	uintptr_t listen_handle;
	struct rdma_cm_id *id;
	uint32_t qp_num;
	uint8_t private_data_len;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count;
	uint8_t srq;
	uint8_t private_data[256];
} gonvmf_cm_event;

int gonvmf_create_id(struct rdma_event_channel *ch, uintptr_t handle, struct rdma_cm_id **out);
void gonvmf_set_id_handle(struct rdma_cm_id *id, uintptr_t handle);
int gonvmf_bind(struct rdma_cm_id *id, const gonvmf_addr *a);
int gonvmf_listen(struct rdma_cm_id *id, int backlog);
int gonvmf_resolve_addr(struct rdma_cm_id *id, const gonvmf_addr *src, const gonvmf_addr *dst, int timeout_ms);
int gonvmf_resolve_route(struct rdma_cm_id *id, int timeout_ms);
void gonvmf_get_addr(struct rdma_cm_id *id, int peer, gonvmf_addr *out);
const char *gonvmf_id_device_name(struct rdma_cm_id *id);
int gonvmf_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq,
		     struct ibv_qp_cap *cap, int sig_all, uint32_t *qp_num);
int gonvmf_destroy_qp(struct rdma_cm_id *id);
int gonvmf_connect(struct rdma_cm_id *id, int accept, const void *pdata, uint8_t pdata_len,
		   uint8_t responder_resources, uint8_t initiator_depth, uint8_t flow_control,
		   uint8_t retry_count, uint8_t rnr_retry_count);
int gonvmf_reject(struct rdma_cm_id *id, const void *pdata, uint8_t pdata_len);
int gonvmf_disconnect(struct rdma_cm_id *id);
int gonvmf_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch);
int gonvmf_destroy_id(struct rdma_cm_id *id);
// Returns 1 when an event was read (and acknowledged), 0 when none is
// pending, -errno on error.
int gonvmf_get_cm_event(struct rdma_event_channel *ch, gonvmf_cm_event *out);

#endif
