/*
 * The fake verbs device (tests/fake_verbs.h): pool/rdma.c runs every path
 * of its own against it, and the pool manager and client run RDMA claims
 * through it (tests/test_rdma.c, tests/test_pool.c). What it cannot prove
 * is that a real device and driver accept the same calls:
 * test_rdma_loopback_write does that where a device exists.
 */
#include "tests/fake_verbs.h"

#ifdef SEL_HAVE_VERBS_H

#include "common/base.h"
#include "pool/rdma_verbs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * A fake verbs device for the tests: libibverbs' table replaced
 * (pool/rdma_verbs.h) by functions that keep queue pairs, memory regions
 * and completion queues in memory and carry out an RDMA WRITE as the
 * hardware would check it (the local key and range, the connected far
 * queue pair, the remote key, its range and remote-write access) with a
 * memcpy. pool/rdma.c runs every path of its own against it: the probe,
 * registration over several regions, the queue pair's states, posting,
 * polling, failed completions and the unwinding of a failed open. What it
 * cannot prove is that a real device and driver accept the same calls:
 * test_rdma_loopback_write does that where a device exists.
 */

struct fake_mr {
	struct ibv_mr mr;
	int access;
};

struct fake_qp {
	struct ibv_qp qp;
	uint32_t dest_qp_num;
	int access;
	int max_send_sge;
};

struct fake_cq {
	struct ibv_cq cq;
	struct ibv_wc wc[FAKE_CQ_DEPTH];
	uint64_t visible_ns[FAKE_CQ_DEPTH]; /* when each completion may be polled */
	uint32_t head, tail;
};

struct fake_verbs_state fake;
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;

static bool fake_fails(void)
{
	if (++fake.acquisitions != fake.fail_at)
		return false;
	errno = ENOMEM;
	return true;
}

/* The list is made once (fake_verbs_install): callers read it unlocked. */
static struct ibv_device **fake_get_device_list_unlocked(int *count)
{
	*count = 1;
	return fake.list;
}

static void fake_free_device_list(struct ibv_device **list)
{
	(void)list;
}

static const char *fake_get_device_name(struct ibv_device *device)
{
	return device->name;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_poll_cq(struct ibv_cq *cq, int entries, struct ibv_wc *wc);

static struct ibv_context *fake_open_device_unlocked(struct ibv_device *device)
{
	struct ibv_context *ctx;

	if (fake_fails())
		return NULL;
	ctx = calloc(1, sizeof(*ctx));
	SEL_ASSERT(ctx);
	ctx->device = device;
	ctx->ops.post_send = fake_post_send;
	ctx->ops.poll_cq = fake_poll_cq;
	fake.live++;
	return ctx;
}

static int fake_close_device_unlocked(struct ibv_context *ctx)
{
	free(ctx);
	fake.live--;
	return 0;
}

static int fake_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	(void)ctx;
	memset(attr, 0, sizeof(*attr));
	attr->phys_port_cnt = 2;
	attr->max_mr_size = fake.max_mr_size;
	attr->max_mr = 1024;
	return 0;
}

/* Port 1 is down; port 2 is active (the probe must skip the first). */
static int fake_query_port(struct ibv_context *ctx, uint8_t port,
			   struct _compat_ibv_port_attr *compat)
{
	struct ibv_port_attr *attr = (struct ibv_port_attr *)compat;

	(void)ctx;
	attr->state = port == 2 ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
	attr->active_mtu = IBV_MTU_1024;
	attr->gid_tbl_len = 3;
	attr->max_msg_sz = 1u << 30;
	attr->lid = fake.ethernet ? 0 : 0x17;
	attr->link_layer = fake.ethernet ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
	return 0;
}

/* GID 0 empty, 1 link-local, 2 IPv4-mapped (RoCE v2 over IPv4). */
static int fake_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	(void)ctx;
	(void)port;
	memset(gid, 0, sizeof(*gid));
	if (index == 1) {
		gid->raw[0] = 0xfe;
		gid->raw[1] = 0x80;
		gid->raw[15] = 9;
	} else if (index == 2) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		gid->raw[12] = 10;
		gid->raw[15] = 1;
	}
	return 0;
}

static struct ibv_pd *fake_alloc_pd_unlocked(struct ibv_context *ctx)
{
	struct ibv_pd *pd;

	if (fake_fails())
		return NULL;
	pd = calloc(1, sizeof(*pd));
	SEL_ASSERT(pd);
	pd->context = ctx;
	fake.live++;
	return pd;
}

static int fake_dealloc_pd_unlocked(struct ibv_pd *pd)
{
	free(pd);
	fake.live--;
	return 0;
}

static struct ibv_mr *fake_reg_mr_unlocked(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct fake_mr *m;

	if (length > fake.max_mr_size) {
		errno = EINVAL;
		return NULL;
	}
	if (fake_fails())
		return NULL;
	m = calloc(1, sizeof(*m));
	SEL_ASSERT(m);
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.lkey = ++fake.next_key;
	m->mr.rkey = ++fake.next_key | 0x80000000u;
	m->access = access;
	for (int i = 0; i < FAKE_OBJECTS_MAX; i++)
		if (!fake.mrs[i]) {
			fake.mrs[i] = m;
			fake.live++;
			return &m->mr;
		}
	SEL_ASSERT(!"fake: too many memory regions");
	return NULL;
}

static int fake_dereg_mr_unlocked(struct ibv_mr *mr)
{
	for (int i = 0; i < FAKE_OBJECTS_MAX; i++)
		if (fake.mrs[i] == (struct fake_mr *)mr)
			fake.mrs[i] = NULL;
	free(mr);
	fake.live--;
	return 0;
}

static struct ibv_cq *fake_create_cq_unlocked(struct ibv_context *ctx, int cqe, void *user,
				     struct ibv_comp_channel *channel, int vector)
{
	struct fake_cq *c;

	(void)user;
	(void)channel;
	(void)vector;
	if (cqe > FAKE_CQ_DEPTH || fake_fails())
		return NULL;
	c = calloc(1, sizeof(*c));
	SEL_ASSERT(c);
	c->cq.context = ctx;
	c->cq.cqe = cqe;
	fake.live++;
	return &c->cq;
}

static int fake_destroy_cq_unlocked(struct ibv_cq *cq)
{
	free(cq);
	fake.live--;
	return 0;
}

static struct ibv_qp *fake_create_qp_unlocked(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	static uint32_t next_qp_num = 0x100;
	struct fake_qp *q;

	SEL_ASSERT(attr->qp_type == IBV_QPT_RC && attr->send_cq);
	if (fake_fails())
		return NULL;
	q = calloc(1, sizeof(*q));
	SEL_ASSERT(q);
	q->qp.context = pd->context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.qp_num = next_qp_num++;
	q->qp.qp_type = IBV_QPT_RC;
	q->qp.state = IBV_QPS_RESET;
	q->max_send_sge = (int)attr->cap.max_send_sge;
	for (int i = 0; i < FAKE_OBJECTS_MAX; i++)
		if (!fake.qps[i]) {
			fake.qps[i] = q;
			fake.live++;
			return &q->qp;
		}
	SEL_ASSERT(!"fake: too many queue pairs");
	return NULL;
}

static int fake_destroy_qp_unlocked(struct ibv_qp *qp)
{
	for (int i = 0; i < FAKE_OBJECTS_MAX; i++)
		if (fake.qps[i] == (struct fake_qp *)qp)
			fake.qps[i] = NULL;
	free(qp);
	fake.live--;
	return 0;
}

/* RESET -> INIT -> RTR -> RTS, each with the attributes a device requires. */
static int fake_modify_qp_unlocked(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct fake_qp *q = (struct fake_qp *)qp;

	if (fake_fails())
		return ENOMEM;
	switch (attr->qp_state) {
	case IBV_QPS_INIT:
		if (qp->state != IBV_QPS_RESET || !(mask & IBV_QP_PORT) || attr->port_num != 2)
			return EINVAL;
		q->access = attr->qp_access_flags;
		break;
	case IBV_QPS_RTR:
		if (qp->state != IBV_QPS_INIT || !(mask & IBV_QP_DEST_QPN) || !(mask & IBV_QP_AV) ||
		    attr->path_mtu != IBV_MTU_1024 ||
		    (fake.ethernet && (!attr->ah_attr.is_global || attr->ah_attr.grh.sgid_index != 2)) ||
		    (!fake.ethernet && attr->ah_attr.dlid != 0x17))
			return EINVAL;
		q->dest_qp_num = attr->dest_qp_num;
		break;
	case IBV_QPS_RTS:
		if (qp->state != IBV_QPS_RTR || !(mask & IBV_QP_SQ_PSN))
			return EINVAL;
		break;
	default:
		return EINVAL;
	}
	qp->state = attr->qp_state;
	return 0;
}

static const char *fake_wc_status_str(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS: return "success";
	case IBV_WC_LOC_PROT_ERR: return "local protection error";
	case IBV_WC_REM_ACCESS_ERR: return "remote access error";
	case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
	default: return "other error";
	}
}

static struct fake_mr *fake_mr_by(uint32_t key, bool remote)
{
	for (int i = 0; i < FAKE_OBJECTS_MAX; i++)
		if (fake.mrs[i] && (remote ? fake.mrs[i]->mr.rkey : fake.mrs[i]->mr.lkey) == key)
			return fake.mrs[i];
	return NULL;
}

static struct fake_qp *fake_qp_by(uint32_t qp_num)
{
	for (int i = 0; i < FAKE_OBJECTS_MAX; i++)
		if (fake.qps[i] && fake.qps[i]->qp.qp_num == qp_num)
			return fake.qps[i];
	return NULL;
}

static bool fake_inside(const struct ibv_mr *mr, uint64_t address, uint64_t bytes)
{
	uint64_t base = (uintptr_t)mr->addr;

	return address >= base && bytes <= mr->length && address - base <= mr->length - bytes;
}

/* A WRITE gathers its scatter entries, in order, into the far end's range. */
static enum ibv_wc_status fake_write(struct fake_qp *q, const struct ibv_send_wr *wr)
{
	struct fake_qp *peer = fake_qp_by(q->dest_qp_num);
	struct fake_mr *remote = fake_mr_by(wr->wr.rdma.rkey, true);
	uint64_t bytes = 0, at = wr->wr.rdma.remote_addr;

	if (++fake.writes == fake.write_fail_at) {
		/* a lost link: half the bytes landed, then the transport gave up */
		if (remote && wr->num_sge >= 1 && wr->sg_list[0].length > 1 &&
		    fake_inside(&remote->mr, at, wr->sg_list[0].length / 2))
			memcpy((void *)(uintptr_t)at, (const void *)(uintptr_t)wr->sg_list[0].addr,
			       wr->sg_list[0].length / 2);
		return IBV_WC_RETRY_EXC_ERR;
	}

	for (int i = 0; i < wr->num_sge; i++) {
		const struct ibv_sge *sge = &wr->sg_list[i];
		struct fake_mr *local = fake_mr_by(sge->lkey, false);

		if (!local || local->mr.pd != q->qp.pd ||
		    !fake_inside(&local->mr, sge->addr, sge->length))
			return IBV_WC_LOC_PROT_ERR;
		bytes += sge->length;
	}
	if (!peer || peer->dest_qp_num != q->qp.qp_num || peer->qp.state < IBV_QPS_RTR)
		return IBV_WC_RETRY_EXC_ERR;
	if (!remote || remote->mr.pd != peer->qp.pd ||
	    !(remote->access & IBV_ACCESS_REMOTE_WRITE) || !(peer->access & IBV_ACCESS_REMOTE_WRITE) ||
	    !fake_inside(&remote->mr, at, bytes))
		return IBV_WC_REM_ACCESS_ERR;
	for (int i = 0; i < wr->num_sge; i++) {
		memcpy((void *)(uintptr_t)at, (const void *)(uintptr_t)wr->sg_list[i].addr,
		       wr->sg_list[i].length);
		at += wr->sg_list[i].length;
	}
	if (fake.writes == fake.corrupt_at) /* a stray write on the fabric */
		*(uint8_t *)(uintptr_t)wr->wr.rdma.remote_addr ^= 0x5a;
	return IBV_WC_SUCCESS;
}

static int fake_post_send_unlocked(struct ibv_qp *qp, struct ibv_send_wr *wr,
				   struct ibv_send_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	struct fake_cq *cq = (struct fake_cq *)qp->send_cq;

	for (; wr; wr = wr->next) {
		struct ibv_wc *wc;

		if (qp->state != IBV_QPS_RTS || wr->opcode != IBV_WR_RDMA_WRITE ||
		    wr->num_sge < 1 || wr->num_sge > q->max_send_sge || cq->tail - cq->head >= (uint32_t)cq->cq.cqe) {
			*bad = wr;
			return EINVAL;
		}
		if (++fake.posts == fake.post_fail_at) {
			*bad = wr;
			return EIO; /* the send queue broke: nothing posted */
		}
		cq->visible_ns[cq->tail % FAKE_CQ_DEPTH] =
			sel_monotonic_ns() + (uint64_t)fake.completion_delay_ms * 1000000ull;
		wc = &cq->wc[cq->tail++ % FAKE_CQ_DEPTH];
		memset(wc, 0, sizeof(*wc));
		wc->wr_id = wr->wr_id;
		wc->opcode = IBV_WC_RDMA_WRITE;
		wc->qp_num = qp->qp_num;
		wc->status = fake_write(q, wr);
	}
	return 0;
}

static int fake_poll_cq_unlocked(struct ibv_cq *cq, int entries, struct ibv_wc *wc)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	uint64_t now = sel_monotonic_ns();
	int n = 0;

	fake.polls++;
	while (n < entries && c->head != c->tail && c->visible_ns[c->head % FAKE_CQ_DEPTH] <= now)
		wc[n++] = c->wc[c->head++ % FAKE_CQ_DEPTH];
	return n;
}

/* Every call that reads or changes the fake's state, under its lock (the manager's and clients' threads). */
static struct ibv_device **fake_get_device_list(int *count)
{
	struct ibv_device **r;

	pthread_mutex_lock(&fake_lock);
	r = fake_get_device_list_unlocked(count);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static struct ibv_context *fake_open_device(struct ibv_device *device)
{
	struct ibv_context * r;

	pthread_mutex_lock(&fake_lock);
	r = fake_open_device_unlocked(device);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_close_device(struct ibv_context *ctx)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_close_device_unlocked(ctx);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static struct ibv_pd *fake_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd * r;

	pthread_mutex_lock(&fake_lock);
	r = fake_alloc_pd_unlocked(ctx);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_dealloc_pd(struct ibv_pd *pd)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_dealloc_pd_unlocked(pd);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct ibv_mr * r;

	pthread_mutex_lock(&fake_lock);
	r = fake_reg_mr_unlocked(pd, addr, length, access);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_dereg_mr(struct ibv_mr *mr)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_dereg_mr_unlocked(mr);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static struct ibv_cq *fake_create_cq(struct ibv_context *ctx, int cqe, void *user, struct ibv_comp_channel *channel, int vector)
{
	struct ibv_cq * r;

	pthread_mutex_lock(&fake_lock);
	r = fake_create_cq_unlocked(ctx, cqe, user, channel, vector);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_destroy_cq(struct ibv_cq *cq)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_destroy_cq_unlocked(cq);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static struct ibv_qp *fake_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp * r;

	pthread_mutex_lock(&fake_lock);
	r = fake_create_qp_unlocked(pd, attr);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_destroy_qp(struct ibv_qp *qp)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_destroy_qp_unlocked(qp);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_modify_qp_unlocked(qp, attr, mask);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_post_send_unlocked(qp, wr, bad);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static int fake_poll_cq(struct ibv_cq *cq, int entries, struct ibv_wc *wc)
{
	int r;

	pthread_mutex_lock(&fake_lock);
	r = fake_poll_cq_unlocked(cq, entries, wc);
	pthread_mutex_unlock(&fake_lock);
	return r;
}

static const struct pool_rdma_verbs fake_verbs = {
	.get_device_list = fake_get_device_list,
	.free_device_list = fake_free_device_list,
	.get_device_name = fake_get_device_name,
	.open_device = fake_open_device,
	.close_device = fake_close_device,
	.query_device = fake_query_device,
	.query_port_compat = fake_query_port,
	.query_gid = fake_query_gid,
	.alloc_pd = fake_alloc_pd,
	.dealloc_pd = fake_dealloc_pd,
	.reg_mr = fake_reg_mr,
	.dereg_mr = fake_dereg_mr,
	.create_cq = fake_create_cq,
	.destroy_cq = fake_destroy_cq,
	.create_qp = fake_create_qp,
	.destroy_qp = fake_destroy_qp,
	.modify_qp = fake_modify_qp,
	.wc_status_str = fake_wc_status_str,
};


void fake_verbs_install(void)
{
	pthread_mutex_lock(&fake_lock);
	memset(&fake, 0, sizeof(fake));
	snprintf(fake.device.name, sizeof(fake.device.name), "fake_rxe0");
	fake.ethernet = true;
	fake.max_mr_size = 1ull << 40;
	fake.list[0] = &fake.device;
	fake.list[1] = NULL;
	pthread_mutex_unlock(&fake_lock);
	pool_rdma_verbs_override(&fake_verbs);
}

int fake_verbs_remove(void)
{
	pool_rdma_verbs_override(NULL);
	return fake_verbs_live();
}

void fake_verbs_fail_write_at(int n)
{
	pthread_mutex_lock(&fake_lock);
	fake.write_fail_at = n;
	pthread_mutex_unlock(&fake_lock);
}

void fake_verbs_post_fail_at(int n)
{
	pthread_mutex_lock(&fake_lock);
	fake.post_fail_at = n;
	pthread_mutex_unlock(&fake_lock);
}

void fake_verbs_corrupt_at(int n)
{
	pthread_mutex_lock(&fake_lock);
	fake.corrupt_at = n;
	pthread_mutex_unlock(&fake_lock);
}

void fake_verbs_delay_completions(uint32_t ms)
{
	pthread_mutex_lock(&fake_lock);
	fake.completion_delay_ms = ms;
	pthread_mutex_unlock(&fake_lock);
}

uint64_t fake_verbs_polls(void)
{
	uint64_t n;

	pthread_mutex_lock(&fake_lock);
	n = fake.polls;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

int fake_verbs_writes(void)
{
	int n;

	pthread_mutex_lock(&fake_lock);
	n = fake.writes;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

int fake_verbs_live(void)
{
	int n;

	pthread_mutex_lock(&fake_lock);
	n = fake.live;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

#else

/* Without infiniband/verbs.h there is no fake: the tests that need it skip. */
typedef int fake_verbs_unused;

#endif
