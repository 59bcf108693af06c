/*
 * The libibverbs functions pool/rdma.c calls, as a table: filled once from
 * libibverbs.so.1 by dlopen, or replaced by a test's fake device
 * (tests/test_rdma.c) so that every path of pool/rdma.c runs where no
 * verbs device exists. Only with infiniband/verbs.h (SEL_HAVE_VERBS_H).
 * Not for the manager or the client: pool/rdma.h is their contract.
 */
#ifndef SELENE_POOL_RDMA_VERBS_H
#define SELENE_POOL_RDMA_VERBS_H

#ifdef SEL_HAVE_VERBS_H

#include <infiniband/verbs.h>

/*
 * The exported functions, by their exported names. ibv_post_send and
 * ibv_poll_cq are inline in verbs.h (they call through the context's ops)
 * and need no symbol; ibv_query_port is inline too but falls back to its
 * exported compat symbol where the provider has no extended context, so
 * that symbol is here.
 */
struct pool_rdma_verbs {
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
	int (*query_port_compat)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *,
				    struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	const char *(*wc_status_str)(enum ibv_wc_status);
};

/*
 * Tests only: every later call of pool/rdma.c uses fake (copied) instead of
 * libibverbs; NULL goes back to libibverbs (or to "not available"). Not
 * safe while a link is open.
 */
void pool_rdma_verbs_override(const struct pool_rdma_verbs *fake);

#endif

#endif
