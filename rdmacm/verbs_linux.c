//go:build cgo && !nordma

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <arpa/inet.h>
#include "verbs_linux.h"

static int errno_or(int fallback) { return errno ? errno : fallback; }

static int64_t post_result(int err, int posted)
{
	return ((int64_t)err << 32) | (uint32_t)posted;
}

static int64_t post_send_chain(struct ibv_qp *qp, gonvmf_send_wr *wrs, int n, uint32_t max_inline)
{
	struct ibv_send_wr chain[GONVMF_POST_CHUNK];
	int done = 0;

	while (done < n) {
		int k = n - done, i, err = 0;
		if (k > GONVMF_POST_CHUNK)
			k = GONVMF_POST_CHUNK;
		for (i = 0; i < k; i++) {
			gonvmf_send_wr *g = &wrs[done + i];
			struct ibv_send_wr *w = &chain[i];
			unsigned int flags = g->flags;
			if (g->num_sge > GONVMF_MAX_SGE || (g->opcode > IBV_WR_RDMA_READ && g->opcode != IBV_WR_SEND_WITH_INV)) {
				err = EINVAL;
				break;
			}
			memset(w, 0, sizeof *w);
			w->wr_id = g->id;
			w->sg_list = g->sgl; /* caller's memory, read during this call only */
			w->num_sge = (int)g->num_sge;
			w->opcode = (enum ibv_wr_opcode)g->opcode;
			switch (g->opcode) {
			case IBV_WR_SEND_WITH_IMM:
				w->imm_data = htobe32(g->imm);
				/* fallthrough */
			case IBV_WR_SEND:
				break;
			case IBV_WR_SEND_WITH_INV:
				w->invalidate_rkey = g->imm;
				break;
			case IBV_WR_RDMA_WRITE_WITH_IMM:
				w->imm_data = htobe32(g->imm);
				/* fallthrough */
			default: /* RDMA WRITE, RDMA READ */
				w->wr.rdma.remote_addr = g->remote_addr;
				w->wr.rdma.rkey = g->rkey;
				break;
			}
			if (max_inline && g->opcode != IBV_WR_RDMA_READ && !(flags & IBV_SEND_INLINE)) {
				uint64_t total = 0;
				for (uint32_t s = 0; s < g->num_sge; s++)
					total += g->sgl[s].length;
				if (total <= max_inline)
					flags |= IBV_SEND_INLINE;
			}
			w->send_flags = flags;
			w->next = &chain[i + 1];
		}
		if (i > 0) {
			struct ibv_send_wr *bad = NULL;
			int rc;
			chain[i - 1].next = NULL;
			rc = ibv_post_send(qp, chain, &bad);
			if (rc) {
				int idx = 0;
				if (bad >= chain && bad < chain + i)
					idx = (int)(bad - chain);
				return post_result(rc, done + idx);
			}
		}
		done += i;
		if (err)
			return post_result(err, done);
	}
	return post_result(0, done);
}

/* post_recv_chain posts receives to srq when it is set, else to qp's own receive queue. */
static int64_t post_recv_chain(struct ibv_qp *qp, struct ibv_srq *srq, gonvmf_recv_wr *wrs, int n)
{
	struct ibv_recv_wr chain[GONVMF_POST_CHUNK];
	int done = 0;

	while (done < n) {
		int k = n - done, i, err = 0;
		if (k > GONVMF_POST_CHUNK)
			k = GONVMF_POST_CHUNK;
		for (i = 0; i < k; i++) {
			gonvmf_recv_wr *g = &wrs[done + i];
			if (g->num_sge > GONVMF_MAX_RECV_SGE) {
				err = EINVAL;
				break;
			}
			chain[i].wr_id = g->id;
			chain[i].sg_list = g->sgl;
			chain[i].num_sge = (int)g->num_sge;
			chain[i].next = &chain[i + 1];
		}
		if (i > 0) {
			struct ibv_recv_wr *bad = NULL;
			int rc;
			chain[i - 1].next = NULL;
			rc = srq ? ibv_post_srq_recv(srq, chain, &bad) : ibv_post_recv(qp, chain, &bad);
			if (rc) {
				int idx = 0;
				if (bad >= chain && bad < chain + i)
					idx = (int)(bad - chain);
				return post_result(rc, done + idx);
			}
		}
		done += i;
		if (err)
			return post_result(err, done);
	}
	return post_result(0, done);
}

int64_t gonvmf_post_send(uintptr_t qp, gonvmf_send_wr *wrs, int n, uint32_t max_inline)
{
	return post_send_chain((struct ibv_qp *)qp, wrs, n, max_inline);
}

int64_t gonvmf_post_recv(uintptr_t qp, gonvmf_recv_wr *wrs, int n)
{
	return post_recv_chain((struct ibv_qp *)qp, NULL, wrs, n);
}

int64_t gonvmf_post_srq_recv(uintptr_t srq, gonvmf_recv_wr *wrs, int n)
{
	return post_recv_chain(NULL, (struct ibv_srq *)srq, wrs, n);
}

struct ibv_srq *gonvmf_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t max_sge, uint32_t *got_wr, int *err)
{
	struct ibv_srq_init_attr a;
	struct ibv_srq *srq;

	memset(&a, 0, sizeof a);
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	errno = 0;
	srq = ibv_create_srq(pd, &a);
	if (!srq) {
		*err = errno_or(EIO);
		return NULL;
	}
	*got_wr = a.attr.max_wr;
	return srq;
}

/* Receives, then sends, in one call from Go. On failure *failed_send says which chain
 * stopped (0: the receives, and no send was posted; 1: the sends). */
int64_t gonvmf_post(uintptr_t h, gonvmf_recv_wr *recvs, int nr, gonvmf_send_wr *sends, int ns,
		    uint32_t max_inline, int *failed_send)
{
	struct ibv_qp *qp = (struct ibv_qp *)h;
	int64_t r;

	*failed_send = 0;
	if (nr > 0) {
		r = post_recv_chain(qp, NULL, recvs, nr);
		if (r >> 32)
			return r;
	}
	if (ns > 0) {
		*failed_send = 1;
		return post_send_chain(qp, sends, ns, max_inline);
	}
	return post_result(0, 0);
}

int gonvmf_poll_cq(uintptr_t cq, struct ibv_wc *wc, int n)
{
	int rc = ibv_poll_cq((struct ibv_cq *)cq, n, wc);
	if (rc < 0)
		return -EIO;
	return rc;
}

int gonvmf_req_notify_cq(uintptr_t cq, int solicited_only)
{
	return ibv_req_notify_cq((struct ibv_cq *)cq, solicited_only);
}

int gonvmf_get_cq_event(struct ibv_comp_channel *ch)
{
	struct ibv_cq *cq;
	void *ctx;

	errno = 0;
	if (ibv_get_cq_event(ch, &cq, &ctx)) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno_or(EIO);
	}
	ibv_ack_cq_events(cq, 1);
	return 1;
}

int gonvmf_wait_cq(struct ibv_comp_channel *ch, int wake_fd, int timeout_ms)
{
	struct pollfd p[2];
	struct timespec deadline, now;
	int rc, r = 0, deadline_set = 0;

	p[0].fd = ch->fd;
	p[0].events = POLLIN;
	p[0].revents = 0;
	p[1].fd = wake_fd;
	p[1].events = POLLIN;
	p[1].revents = 0;
	for (;;) {
		rc = poll(p, 2, timeout_ms);
		if (rc >= 0)
			break;
		if (errno != EINTR)
			return -errno_or(EIO);
		/* A signal is no reason to return early: wait out the rest of the timeout. */
		if (timeout_ms > 0) {
			if (!deadline_set) {
				clock_gettime(CLOCK_MONOTONIC, &deadline);
				deadline.tv_sec += timeout_ms / 1000;
				deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
				deadline_set = 1;
			}
			clock_gettime(CLOCK_MONOTONIC, &now);
			long long left = (long long)(deadline.tv_sec - now.tv_sec) * 1000 +
					 (deadline.tv_nsec - now.tv_nsec) / 1000000;
			if (left <= 0)
				return 0;
			timeout_ms = (int)left;
		}
	}
	if (p[1].revents & POLLIN) {
		uint64_t v;
		if (read(wake_fd, &v, sizeof(v)) == sizeof(v) || errno == EAGAIN)
			r |= 2;
	}
	if (p[0].revents & (POLLIN | POLLERR | POLLHUP)) {
		rc = gonvmf_get_cq_event(ch);
		if (rc < 0)
			return rc;
		if (rc > 0)
			r |= 1;
	}
	return r;
}

struct ibv_cq *gonvmf_create_cq(struct ibv_context *ctx, int cqe, uintptr_t handle,
				struct ibv_comp_channel *ch, int *err)
{
	struct ibv_cq *cq;

	errno = 0;
	cq = ibv_create_cq(ctx, cqe, (void *)handle, ch, 0);
	if (!cq)
		*err = errno_or(EIO);
	return cq;
}

struct ibv_mr *gonvmf_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, int *err)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(pd, addr, len, access);
	if (!mr)
		*err = errno_or(EIO);
	return mr;
}

int gonvmf_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *out)
{
	return ibv_query_port(ctx, port, out);
}

int gonvmf_query_gids(struct ibv_context *ctx, uint8_t port, struct ibv_gid_entry *out, int max)
{
	struct ibv_device_attr da;
	struct ibv_gid_entry *all;
	size_t total = 0;
	ssize_t n;
	int i, cnt = 0, rc;

	rc = ibv_query_device(ctx, &da);
	if (rc)
		return -rc;
	for (i = 1; i <= da.phys_port_cnt; i++) {
		struct ibv_port_attr pa;
		if (ibv_query_port(ctx, i, &pa) == 0)
			total += pa.gid_tbl_len;
	}
	if (total == 0)
		return 0;
	all = calloc(total, sizeof *all);
	if (!all)
		return -ENOMEM;
	n = ibv_query_gid_table(ctx, all, total, 0);
	if (n < 0) {
		free(all);
		return (int)n;
	}
	for (i = 0; i < n && cnt < max; i++)
		if (all[i].port_num == port)
			out[cnt++] = all[i];
	free(all);
	return cnt;
}

int gonvmf_get_async_event(struct ibv_context *ctx, gonvmf_async_event *out)
{
	struct ibv_async_event ev;

	errno = 0;
	if (ibv_get_async_event(ctx, &ev)) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno_or(EIO);
	}
	memset(out, 0, sizeof *out);
	out->type = ev.event_type;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		if (ev.element.qp)
			out->qp_num = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_CQ_ERR:
		if (ev.element.cq)
			out->cq_handle = (uintptr_t)ev.element.cq->cq_context;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 1;
}

/* gonvmf_cm_device returns librdmacm's context of the device called name
 * (the first device if name is empty) and, in *ref, a list holding
 * librdmacm's reference to that device alone, for gonvmf_cm_device_put.
 * librdmacm closes the context of a removed device once nothing references
 * it (at its next look at the device list: rdma_get_devices, a connection
 * request): the reference keeps the context, which the caller's PDs, CQs
 * and MRs live on, open until the caller has closed them. rdma_free_devices
 * drops the reference of each device its NULL-terminated, malloc'd list
 * names, then frees the list. */
struct ibv_context *gonvmf_cm_device(const char *name, struct ibv_context ***ref, int *err)
{
	struct ibv_context **list, **keep, *found = NULL;
	int n = 0, i, at = -1;

	errno = 0;
	list = rdma_get_devices(&n);
	if (!list) {
		*err = errno_or(ENODEV);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		if (!name[0] || strcmp(ibv_get_device_name(list[i]->device), name) == 0) {
			found = list[i];
			at = i;
			break;
		}
	}
	if (!found) {
		rdma_free_devices(list);
		*err = ENODEV;
		return NULL;
	}
	keep = malloc(2 * sizeof *keep);
	if (!keep) {
		rdma_free_devices(list);
		*err = ENOMEM;
		return NULL;
	}
	keep[0] = found;
	keep[1] = NULL;
	for (i = at; i < n; i++) /* the others' references go now */
		list[i] = list[i + 1];
	rdma_free_devices(list);
	*ref = keep;
	return found;
}

/* gonvmf_cm_device_put drops the reference gonvmf_cm_device took and looks
 * at the device list (gonvmf_cm_rescan), which closes the context now if the
 * device was removed. */
void gonvmf_cm_device_put(struct ibv_context **ref)
{
	rdma_free_devices(ref);
	(void)gonvmf_cm_rescan();
}

/* gonvmf_device_listed reports whether ctx's device is in libibverbs' list of
 * devices (1), has left it (0), or the list cannot be had (-1). A device keeps
 * its ibv_device while it stays; a device of the same name is the same device
 * if it has the same kernel index or, where libibverbs knows no index, the
 * same GUID. A device removed and added again has a new index. */
int gonvmf_device_listed(struct ibv_context *ctx)
{
	struct ibv_device **list;
	const char *name = ibv_get_device_name(ctx->device);
	int idx = ibv_get_device_index(ctx->device);
	int n = 0, i, found = 0, li;

	list = ibv_get_device_list(&n);
	if (!list)
		return -1;
	for (i = 0; i < n && !found; i++) {
		if (list[i] == ctx->device) {
			found = 1;
			break;
		}
		if (strcmp(ibv_get_device_name(list[i]), name) != 0)
			continue;
		li = ibv_get_device_index(list[i]);
		if (idx >= 0 && li >= 0)
			found = li == idx;
		else
			found = ibv_get_device_guid(list[i]) == ibv_get_device_guid(ctx->device);
	}
	ibv_free_device_list(list);
	return found;
}

/* gonvmf_cm_rescan makes librdmacm look at the device list: it closes the
 * context of every device that has left the list and that nothing
 * references. It returns the number of devices listed (0 when there are none:
 * then librdmacm does not look). */
int gonvmf_cm_rescan(void)
{
	int n = 0;
	struct ibv_context **list = rdma_get_devices(&n);

	if (!list)
		return 0;
	rdma_free_devices(list);
	return n;
}

static socklen_t to_sockaddr(const gonvmf_addr *a, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	if (a->family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(a->port);
		memcpy(&s->sin_addr, a->addr, 4);
		return sizeof *s;
	}
	if (a->family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(a->port);
		memcpy(&s->sin6_addr, a->addr, 16);
		return sizeof *s;
	}
	return 0;
}

static void from_sockaddr(const struct sockaddr *sa, gonvmf_addr *out)
{
	memset(out, 0, sizeof *out);
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		out->family = AF_INET;
		out->port = ntohs(s->sin_port);
		memcpy(out->addr, &s->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		out->family = AF_INET6;
		out->port = ntohs(s->sin6_port);
		memcpy(out->addr, &s->sin6_addr, 16);
	}
}

int gonvmf_create_id(struct rdma_event_channel *ch, uintptr_t handle, struct rdma_cm_id **out)
{
	errno = 0;
	if (rdma_create_id(ch, out, (void *)handle, RDMA_PS_TCP))
		return errno_or(EIO);
	return 0;
}

void gonvmf_set_id_handle(struct rdma_cm_id *id, uintptr_t handle)
{
	id->context = (void *)handle;
}

int gonvmf_bind(struct rdma_cm_id *id, const gonvmf_addr *a)
{
	struct sockaddr_storage ss;

	if (!to_sockaddr(a, &ss))
		return EAFNOSUPPORT;
	if (a->family == AF_INET6) {
		/* IPv6 only, as nvmet-rdma binds: without it an IPv6 ID holds the
		 * port for IPv4 too, and an IPv4 listener on it fails to bind. */
		int one = 1;

		errno = 0;
		if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one))
			return errno_or(EIO);
	}
	errno = 0;
	if (rdma_bind_addr(id, (struct sockaddr *)&ss))
		return errno_or(EIO);
	return 0;
}

int gonvmf_listen(struct rdma_cm_id *id, int backlog)
{
	errno = 0;
	if (rdma_listen(id, backlog))
		return errno_or(EIO);
	return 0;
}

int gonvmf_resolve_addr(struct rdma_cm_id *id, const gonvmf_addr *src, const gonvmf_addr *dst, int timeout_ms)
{
	struct sockaddr_storage s, d;
	struct sockaddr *sp = NULL;

	if (!to_sockaddr(dst, &d))
		return EAFNOSUPPORT;
	if (src->family) {
		if (!to_sockaddr(src, &s))
			return EAFNOSUPPORT;
		sp = (struct sockaddr *)&s;
	}
	errno = 0;
	if (rdma_resolve_addr(id, sp, (struct sockaddr *)&d, timeout_ms))
		return errno_or(EIO);
	return 0;
}

int gonvmf_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	errno = 0;
	if (rdma_resolve_route(id, timeout_ms))
		return errno_or(EIO);
	return 0;
}

void gonvmf_get_addr(struct rdma_cm_id *id, int peer, gonvmf_addr *out)
{
	from_sockaddr(peer ? rdma_get_peer_addr(id) : rdma_get_local_addr(id), out);
}

const char *gonvmf_id_device_name(struct rdma_cm_id *id)
{
	if (!id->verbs || !id->verbs->device)
		return "";
	return ibv_get_device_name(id->verbs->device);
}

int gonvmf_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_srq *srq,
		     struct ibv_qp_cap *cap, int sig_all, uint32_t *qp_num)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof a);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.srq = srq;
	a.cap = *cap;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = sig_all;
	errno = 0;
	if (rdma_create_qp(id, pd, &a))
		return errno_or(EIO);
	*cap = a.cap;
	*qp_num = id->qp->qp_num;
	return 0;
}

int gonvmf_destroy_qp(struct rdma_cm_id *id)
{
	int rc;

	if (!id->qp)
		return 0;
	rc = ibv_destroy_qp(id->qp);
	if (rc == 0)
		id->qp = NULL;
	return rc;
}

int gonvmf_connect(struct rdma_cm_id *id, int accept, const void *pdata, uint8_t pdata_len,
		   uint8_t responder_resources, uint8_t initiator_depth, uint8_t flow_control,
		   uint8_t retry_count, uint8_t rnr_retry_count)
{
	struct rdma_conn_param p;
	int rc;

	memset(&p, 0, sizeof p);
	p.private_data = pdata_len ? pdata : NULL;
	p.private_data_len = pdata_len;
	p.responder_resources = responder_resources;
	p.initiator_depth = initiator_depth;
	p.flow_control = flow_control;
	p.retry_count = retry_count;
	p.rnr_retry_count = rnr_retry_count;
	errno = 0;
	rc = accept ? rdma_accept(id, &p) : rdma_connect(id, &p);
	return rc ? errno_or(EIO) : 0;
}

int gonvmf_reject(struct rdma_cm_id *id, const void *pdata, uint8_t pdata_len)
{
	errno = 0;
	if (rdma_reject(id, pdata_len ? pdata : NULL, pdata_len))
		return errno_or(EIO);
	return 0;
}

int gonvmf_disconnect(struct rdma_cm_id *id)
{
	errno = 0;
	if (rdma_disconnect(id))
		return errno_or(EIO);
	return 0;
}

int gonvmf_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *ch)
{
	errno = 0;
	if (rdma_migrate_id(id, ch))
		return errno_or(EIO);
	return 0;
}

int gonvmf_destroy_id(struct rdma_cm_id *id)
{
	errno = 0;
	if (rdma_destroy_id(id))
		return errno_or(EIO);
	return 0;
}

int gonvmf_get_cm_event(struct rdma_event_channel *ch, gonvmf_cm_event *out)
{
	struct rdma_cm_event *ev;

	errno = 0;
	if (rdma_get_cm_event(ch, &ev)) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno_or(EIO);
	}
	memset(out, 0, sizeof *out);
	out->type = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->id_handle = ev->id ? (uintptr_t)ev->id->context : 0;
	out->listen_handle = ev->listen_id ? (uintptr_t)ev->listen_id->context : 0;
	if (ev->id && ev->id->qp_type != IBV_QPT_UD &&
	    ev->event != RDMA_CM_EVENT_MULTICAST_JOIN && ev->event != RDMA_CM_EVENT_MULTICAST_ERROR) {
		const struct rdma_conn_param *c = &ev->param.conn;
		out->qp_num = c->qp_num;
		out->responder_resources = c->responder_resources;
		out->initiator_depth = c->initiator_depth;
		out->flow_control = c->flow_control;
		out->retry_count = c->retry_count;
		out->rnr_retry_count = c->rnr_retry_count;
		out->srq = c->srq;
		if (c->private_data && c->private_data_len) {
			out->private_data_len = c->private_data_len;
			memcpy(out->private_data, c->private_data, c->private_data_len);
		}
	}
	rdma_ack_cm_event(ev);
	return 1;
}
