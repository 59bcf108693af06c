/*
 * RDMA for pool claims: libibverbs loaded with dlopen, a device probe, the
 * registration plan, the endpoint codec, one RC queue pair per link, RDMA
 * WRITE posting and completion polling, and the fallback rule (pool/rdma.h
 * is the contract). Not the pool protocol: the endpoint's bytes travel in
 * whatever frame the manager and client choose.
 *
 * pool/RDMA.md is the specification; its rule numbers (R-RDMA-n) are
 * cited where the code enforces them.
 */
#include "pool/rdma.h"

#include "common/base.h"
#include "common/log.h"
#include "selene/selene.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define ENDPOINT_MAGIC 0x4d445253u /* "SRDM" */
#define ENDPOINT_VERSION 1u
#define ENDPOINT_FIXED_BYTES 56u
#define ENDPOINT_REGION_BYTES 24u
#define ENDPOINT_FLAG_ETHERNET 1u
#define PSN_MASK 0xffffffu

_Static_assert(ENDPOINT_FIXED_BYTES + ENDPOINT_REGION_BYTES * POOL_RDMA_REGIONS_MAX ==
		       POOL_RDMA_ENDPOINT_BYTES_MAX,
	       "POOL_RDMA_ENDPOINT_BYTES_MAX matches the layout");

static void say(char *why, size_t why_size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(char *why, size_t why_size, const char *fmt, ...)
{
	va_list ap;

	if (!why || why_size == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(why, why_size, fmt, ap);
	va_end(ap);
}

static bool mtu_bytes_valid(uint32_t mtu)
{
	return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

static bool bytes_all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/* ---- The plan (R-RDMA-3, R-RDMA-4) ------------------------------------- */

uint64_t pool_rdma_memlock_bytes(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return (uint64_t)rl.rlim_cur;
}

int pool_rdma_plan(const struct pool_rdma_probe *device, uint64_t slot_bytes,
		   uint32_t slot_count, uint64_t memory_budget_bytes,
		   uint64_t memlock_bytes, struct pool_rdma_plan *out, char *why,
		   size_t why_size)
{
	uint64_t total, per_region, regions;

	SEL_ASSERT(device && out);
	memset(out, 0, sizeof(*out));
	if (!device->available) {
		say(why, why_size, "no RDMA device: %s", device->why);
		return -ENODEV;
	}
	if (slot_bytes == 0 || !sel_is_aligned(slot_bytes, SEL_BLOCK_BYTES)) {
		say(why, why_size, "slot bytes %" PRIu64 " is not a nonzero multiple of %u",
		    slot_bytes, SEL_BLOCK_BYTES);
		return -EINVAL;
	}
	if (slot_bytes > POOL_RDMA_SLOT_BYTES_MAX) {
		say(why, why_size, "slot bytes %" PRIu64 " is past the maximum %llu",
		    slot_bytes, POOL_RDMA_SLOT_BYTES_MAX);
		return -EINVAL;
	}
	if (slot_count == 0 || slot_count > POOL_RDMA_SLOTS_MAX) {
		say(why, why_size, "slot count %u is not in 1..%u", slot_count,
		    POOL_RDMA_SLOTS_MAX);
		return -EINVAL;
	}
	/* Both factors are bounded (2^30 * 2^12): the product cannot overflow. */
	total = slot_bytes * slot_count;
	if (total > memory_budget_bytes) {
		say(why, why_size,
		    "%u slots of %" PRIu64 " bytes need %" PRIu64
		    " bytes; the memory budget is %" PRIu64,
		    slot_count, slot_bytes, total, memory_budget_bytes);
		return SEL_ETOOBIG;
	}
	if (total > memlock_bytes) {
		say(why, why_size,
		    "registering %" PRIu64 " bytes pins them; RLIMIT_MEMLOCK allows %" PRIu64
		    " (raise it: ulimit -l, or LimitMEMLOCK= in a unit)",
		    total, memlock_bytes);
		return SEL_ETOOBIG;
	}
	if (slot_bytes > device->max_mr_bytes) {
		say(why, why_size,
		    "one slot of %" PRIu64 " bytes is larger than %s's largest memory region (%" PRIu64 ")",
		    slot_bytes, device->device_name, device->max_mr_bytes);
		return SEL_ETOOBIG;
	}
	if (slot_bytes > device->max_message_bytes) {
		say(why, why_size,
		    "one slot of %" PRIu64 " bytes is larger than %s's largest message (%u)",
		    slot_bytes, device->device_name, device->max_message_bytes);
		return SEL_ETOOBIG;
	}
	per_region = device->max_mr_bytes / slot_bytes;
	if (per_region > slot_count)
		per_region = slot_count;
	regions = (slot_count + per_region - 1) / per_region;
	if (regions > POOL_RDMA_REGIONS_MAX || regions > device->max_mr_count) {
		say(why, why_size,
		    "%" PRIu64 " bytes need %" PRIu64 " memory regions of at most %" PRIu64
		    " bytes on %s; at most %u are allowed",
		    total, regions, device->max_mr_bytes, device->device_name,
		    device->max_mr_count < POOL_RDMA_REGIONS_MAX ? device->max_mr_count
								  : POOL_RDMA_REGIONS_MAX);
		return SEL_ETOOBIG;
	}
	out->slot_bytes = slot_bytes;
	out->slot_count = slot_count;
	out->total_bytes = total;
	out->slots_per_region = (uint32_t)per_region;
	out->region_count = (uint32_t)regions;
	return 0;
}

/* ---- The endpoint codec (R-RDMA-5, R-RDMA-6) ---------------------------- */

/* The rules decode enforces, for both directions; returns NULL or the broken rule. */
static const char *endpoint_check(const struct pool_rdma_endpoint *e)
{
	uint64_t sum = 0;

	if (e->qp_num > PSN_MASK || e->qp_num == 0)
		return "queue pair number is not in 1..2^24-1";
	if (e->psn > PSN_MASK)
		return "packet sequence number is past 24 bits";
	if (!mtu_bytes_valid(e->mtu_bytes))
		return "MTU is not 256, 512, 1024, 2048 or 4096";
	if (e->ethernet && bytes_all_zero(e->gid, sizeof(e->gid)))
		return "an Ethernet (RoCE) endpoint has no GID";
	if (!e->ethernet && e->lid == 0)
		return "an InfiniBand endpoint has no LID";
	if (e->slot_count == 0) {
		if (e->slot_bytes != 0 || e->region_count != 0)
			return "a writer's endpoint lends no slots and no regions";
		return NULL;
	}
	if (e->slot_count > POOL_RDMA_SLOTS_MAX)
		return "slot count is past POOL_RDMA_SLOTS_MAX";
	if (e->slot_bytes == 0 || e->slot_bytes > POOL_RDMA_SLOT_BYTES_MAX ||
	    !sel_is_aligned(e->slot_bytes, SEL_BLOCK_BYTES))
		return "slot bytes is not a multiple of 4096 in range";
	if (e->region_count == 0 || e->region_count > POOL_RDMA_REGIONS_MAX)
		return "region count is not in 1..POOL_RDMA_REGIONS_MAX";
	for (uint32_t i = 0; i < e->region_count; i++) {
		const struct pool_rdma_region *r = &e->regions[i];

		if (r->bytes == 0 || r->bytes % e->slot_bytes != 0 ||
		    r->bytes > e->slot_bytes * POOL_RDMA_SLOTS_MAX)
			return "a region is not a whole number of slots";
		if (r->address > UINT64_MAX - r->bytes)
			return "a region wraps past the end of the address space";
		sum += r->bytes;
	}
	if (sum != e->slot_bytes * e->slot_count)
		return "the regions do not hold exactly the slots";
	return NULL;
}

int pool_rdma_endpoint_encode(const struct pool_rdma_endpoint *e, uint8_t *buf,
			      size_t size)
{
	size_t len;
	uint8_t *p;

	SEL_ASSERT(e && buf);
	if (endpoint_check(e))
		return -EINVAL;
	len = ENDPOINT_FIXED_BYTES + (size_t)ENDPOINT_REGION_BYTES * e->region_count;
	SEL_ASSERT(size >= len);
	memset(buf, 0, len);
	sel_put_le32(buf, ENDPOINT_MAGIC);
	buf[4] = (uint8_t)ENDPOINT_VERSION;
	buf[6] = e->ethernet ? ENDPOINT_FLAG_ETHERNET : 0;
	sel_put_le32(buf + 8, e->qp_num);
	sel_put_le32(buf + 12, e->psn);
	buf[16] = (uint8_t)e->lid;
	buf[17] = (uint8_t)(e->lid >> 8);
	buf[18] = (uint8_t)e->mtu_bytes;
	buf[19] = (uint8_t)(e->mtu_bytes >> 8);
	sel_put_le32(buf + 20, e->slot_count);
	sel_put_le64(buf + 24, e->slot_bytes);
	memcpy(buf + 32, e->gid, 16);
	sel_put_le32(buf + 48, e->region_count);
	p = buf + ENDPOINT_FIXED_BYTES;
	for (uint32_t i = 0; i < e->region_count; i++, p += ENDPOINT_REGION_BYTES) {
		sel_put_le64(p, e->regions[i].address);
		sel_put_le64(p + 8, e->regions[i].bytes);
		sel_put_le32(p + 16, e->regions[i].rkey);
	}
	return (int)len;
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

int pool_rdma_endpoint_decode(const uint8_t *buf, size_t len,
			      struct pool_rdma_endpoint *out, char *why,
			      size_t why_size)
{
	const uint8_t *p;
	const char *broken;
	uint16_t flags;

	SEL_ASSERT(out && (buf || len == 0));
	memset(out, 0, sizeof(*out));
	if (len < ENDPOINT_FIXED_BYTES) {
		say(why, why_size, "RDMA endpoint of %zu bytes is shorter than %u", len,
		    ENDPOINT_FIXED_BYTES);
		return SEL_EPROTO;
	}
	if (sel_get_le32(buf) != ENDPOINT_MAGIC) {
		say(why, why_size, "RDMA endpoint has a bad magic");
		return SEL_EPROTO;
	}
	if (get_le16(buf + 4) != ENDPOINT_VERSION) {
		say(why, why_size, "RDMA endpoint version %u is not %u", get_le16(buf + 4),
		    ENDPOINT_VERSION);
		return SEL_EPROTO;
	}
	flags = get_le16(buf + 6);
	if (flags & ~ENDPOINT_FLAG_ETHERNET || sel_get_le32(buf + 52) != 0) {
		say(why, why_size, "RDMA endpoint has reserved bits set");
		return SEL_EPROTO;
	}
	out->region_count = sel_get_le32(buf + 48);
	if (out->region_count > POOL_RDMA_REGIONS_MAX ||
	    len != ENDPOINT_FIXED_BYTES + (size_t)ENDPOINT_REGION_BYTES * out->region_count) {
		say(why, why_size, "RDMA endpoint of %zu bytes does not hold %u regions", len,
		    out->region_count);
		return SEL_EPROTO;
	}
	out->ethernet = flags & ENDPOINT_FLAG_ETHERNET;
	out->qp_num = sel_get_le32(buf + 8);
	out->psn = sel_get_le32(buf + 12);
	out->lid = get_le16(buf + 16);
	out->mtu_bytes = get_le16(buf + 18);
	out->slot_count = sel_get_le32(buf + 20);
	out->slot_bytes = sel_get_le64(buf + 24);
	memcpy(out->gid, buf + 32, 16);
	p = buf + ENDPOINT_FIXED_BYTES;
	for (uint32_t i = 0; i < out->region_count; i++, p += ENDPOINT_REGION_BYTES) {
		if (sel_get_le32(p + 20) != 0) {
			say(why, why_size, "RDMA endpoint region %u has reserved bits set", i);
			return SEL_EPROTO;
		}
		out->regions[i].address = sel_get_le64(p);
		out->regions[i].bytes = sel_get_le64(p + 8);
		out->regions[i].rkey = sel_get_le32(p + 16);
	}
	broken = endpoint_check(out);
	if (broken) {
		say(why, why_size, "RDMA endpoint: %s", broken);
		return SEL_EPROTO;
	}
	return 0;
}

/* ---- The fallback rule (R-RDMA-9) --------------------------------------- */

void pool_rdma_fallback_init(struct pool_rdma_fallback *fb)
{
	memset(fb, 0, sizeof(*fb));
	pthread_mutex_init(&fb->lock, NULL);
}

void pool_rdma_fallback_destroy(struct pool_rdma_fallback *fb)
{
	pthread_mutex_destroy(&fb->lock);
}

bool pool_rdma_fallback_allows(struct pool_rdma_fallback *fb)
{
	bool off;

	pthread_mutex_lock(&fb->lock);
	off = fb->off;
	pthread_mutex_unlock(&fb->lock);
	return !off;
}

bool pool_rdma_fallback_note(struct pool_rdma_fallback *fb, const char *reason)
{
	bool first;

	pthread_mutex_lock(&fb->lock);
	fb->reasons_count++;
	first = !fb->off;
	if (first) {
		fb->off = true;
		snprintf(fb->reason, sizeof(fb->reason), "%s", reason);
	}
	pthread_mutex_unlock(&fb->lock);
	/* Logged outside the lock: a host's log callback may take its own. */
	if (first)
		sel_warn("pool: RDMA is off, claims use the TCP stream: %s", reason);
	return first;
}

bool pool_rdma_fallback_probe(struct pool_rdma_fallback *fb,
			      const struct pool_rdma_probe *probe)
{
	if (!probe->available)
		pool_rdma_fallback_note(fb, probe->why[0] ? probe->why : "no RDMA device");
	return pool_rdma_fallback_allows(fb);
}

/* ---- libibverbs (R-RDMA-1, R-RDMA-2, R-RDMA-7, R-RDMA-8) --------------- */

#ifndef SEL_HAVE_VERBS_H

#define RDMA_NOT_BUILT "RDMA was not built (no infiniband/verbs.h at build time)"

/* What each opening call of a build without libibverbs's header answers. */
static int rdma_not_built(char *why, size_t why_size)
{
	say(why, why_size, RDMA_NOT_BUILT);
	return -ENODEV;
}

int pool_rdma_probe(const char *device_name, struct pool_rdma_probe *out)
{
	(void)device_name;
	memset(out, 0, sizeof(*out));
	say(out->why, sizeof(out->why), RDMA_NOT_BUILT);
	return 0;
}

int pool_rdma_link_open(const struct pool_rdma_probe *device,
			enum pool_rdma_role role, void *memory, uint64_t bytes,
			const struct pool_rdma_plan *plan,
			struct pool_rdma_link **out, char *why, size_t why_size)
{
	(void)device;
	(void)role;
	(void)memory;
	(void)bytes;
	(void)plan;
	*out = NULL;
	return rdma_not_built(why, why_size);
}

int pool_rdma_memory_open(const struct pool_rdma_probe *device, enum pool_rdma_role role,
			  void *memory, uint64_t bytes, const struct pool_rdma_plan *plan,
			  struct pool_rdma_memory **out, char *why, size_t why_size)
{
	(void)device;
	(void)role;
	(void)memory;
	(void)bytes;
	(void)plan;
	*out = NULL;
	return rdma_not_built(why, why_size);
}

void pool_rdma_memory_close(struct pool_rdma_memory *mem)
{
	(void)mem;
}

int pool_rdma_link_open_on(struct pool_rdma_memory *mem, struct pool_rdma_link **out,
			   char *why, size_t why_size)
{
	(void)mem;
	*out = NULL;
	return rdma_not_built(why, why_size);
}

void pool_rdma_link_endpoint(const struct pool_rdma_link *link,
			     struct pool_rdma_endpoint *out)
{
	(void)link;
	memset(out, 0, sizeof(*out));
}

int pool_rdma_link_connect(struct pool_rdma_link *link,
			   const struct pool_rdma_endpoint *remote, char *why,
			   size_t why_size)
{
	(void)link;
	(void)remote;
	say(why, why_size, "RDMA was not built");
	return -ENODEV;
}

int pool_rdma_link_write(struct pool_rdma_link *link, uint64_t source_offset,
			 uint32_t slot, uint64_t slot_offset, uint64_t bytes,
			 uint64_t wr_id)
{
	(void)link;
	(void)source_offset;
	(void)slot;
	(void)slot_offset;
	(void)bytes;
	(void)wr_id;
	return -ENODEV;
}

int pool_rdma_link_poll(struct pool_rdma_link *link, uint64_t *done,
			uint32_t max, int timeout_ms)
{
	(void)link;
	(void)done;
	(void)max;
	(void)timeout_ms;
	return -ENODEV;
}

uint32_t pool_rdma_link_in_flight(const struct pool_rdma_link *link)
{
	(void)link;
	return 0;
}

const char *pool_rdma_link_why(const struct pool_rdma_link *link)
{
	(void)link;
	return "RDMA was not built";
}

void pool_rdma_link_close(struct pool_rdma_link *link)
{
	(void)link;
}

#else

#include "pool/rdma_verbs.h"

#include <dlfcn.h>

static struct pool_rdma_verbs api;
static struct pool_rdma_verbs api_loaded; /* what api_load found, for an override's undo */
static char api_error[256];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static const struct {
	const char *symbol;
	size_t offset;
} api_symbols[] = {
#define SYMBOL(field, name) { name, offsetof(struct pool_rdma_verbs, field) }
	SYMBOL(get_device_list, "ibv_get_device_list"),
	SYMBOL(free_device_list, "ibv_free_device_list"),
	SYMBOL(get_device_name, "ibv_get_device_name"),
	SYMBOL(open_device, "ibv_open_device"),
	SYMBOL(close_device, "ibv_close_device"),
	SYMBOL(query_device, "ibv_query_device"),
	SYMBOL(query_port_compat, "ibv_query_port"),
	SYMBOL(query_gid, "ibv_query_gid"),
	SYMBOL(alloc_pd, "ibv_alloc_pd"),
	SYMBOL(dealloc_pd, "ibv_dealloc_pd"),
	SYMBOL(reg_mr, "ibv_reg_mr"),
	SYMBOL(dereg_mr, "ibv_dereg_mr"),
	SYMBOL(create_cq, "ibv_create_cq"),
	SYMBOL(destroy_cq, "ibv_destroy_cq"),
	SYMBOL(create_qp, "ibv_create_qp"),
	SYMBOL(destroy_qp, "ibv_destroy_qp"),
	SYMBOL(modify_qp, "ibv_modify_qp"),
	SYMBOL(wc_status_str, "ibv_wc_status_str"),
#undef SYMBOL
};

static void api_load(void)
{
	void *lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);

	if (!lib) {
		snprintf(api_error, sizeof(api_error),
			 "libibverbs.so.1 is not available: %s", dlerror());
		return;
	}
	for (size_t i = 0; i < SEL_ARRAY_SIZE(api_symbols); i++) {
		void *fn = dlsym(lib, api_symbols[i].symbol);

		if (!fn) {
			snprintf(api_error, sizeof(api_error), "libibverbs.so.1 lacks %s",
				 api_symbols[i].symbol);
			memset(&api, 0, sizeof(api));
			return;
		}
		memcpy((uint8_t *)&api + api_symbols[i].offset, &fn, sizeof(fn));
	}
	api_loaded = api;
}

void pool_rdma_verbs_override(const struct pool_rdma_verbs *fake)
{
	pthread_once(&api_once, api_load);
	api = fake ? *fake : api_loaded;
}

static bool api_ready(char *why, size_t why_size)
{
	pthread_once(&api_once, api_load);
	if (api.get_device_list)
		return true;
	say(why, why_size, "%s", api_error);
	return false;
}

/* verbs.h's inline ibv_query_port, calling through the table. */
static int query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);

	if (vctx)
		return vctx->query_port(ctx, port, attr, sizeof(*attr));
	memset(attr, 0, sizeof(*attr));
	return api.query_port_compat(ctx, port, (struct _compat_ibv_port_attr *)attr);
}

static uint32_t mtu_to_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

static enum ibv_mtu bytes_to_mtu(uint32_t bytes)
{
	enum ibv_mtu mtu = IBV_MTU_256;

	while (mtu < IBV_MTU_4096 && mtu_to_bytes(mtu) < bytes)
		mtu++;
	return mtu;
}

/*
 * The GID to route with: on RoCE prefer an IPv4-mapped entry (RoCE v2 over
 * an IPv4 network, what rxe and most fabrics use), else the first nonzero.
 */
static bool pick_gid(struct ibv_context *ctx, uint8_t port, int table_len,
		     struct pool_rdma_probe *out)
{
	static const uint8_t v4_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	bool found = false;

	for (int i = 0; i < table_len && i < 256; i++) {
		union ibv_gid gid;

		if (api.query_gid(ctx, port, i, &gid) != 0 || bytes_all_zero(gid.raw, 16))
			continue;
		if (!found || (out->ethernet && memcmp(gid.raw, v4_prefix, 12) == 0)) {
			memcpy(out->gid, gid.raw, 16);
			out->gid_index = (uint32_t)i;
			found = true;
			if (!out->ethernet || memcmp(gid.raw, v4_prefix, 12) == 0)
				break;
		}
	}
	return found;
}

/* Fills out from the first active port of an open device; false with why if none. */
static bool probe_context(struct ibv_context *ctx, const char *name,
			  struct pool_rdma_probe *out)
{
	struct ibv_device_attr dev;

	if (api.query_device(ctx, &dev) != 0) {
		say(out->why, sizeof(out->why), "%s: ibv_query_device failed: %s", name,
		    strerror(errno));
		return false;
	}
	for (uint8_t port = 1; port <= dev.phys_port_cnt; port++) {
		struct ibv_port_attr attr;

		if (query_port(ctx, port, &attr) != 0 || attr.state != IBV_PORT_ACTIVE)
			continue;
		out->port_num = port;
		out->ethernet = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
		out->mtu_bytes = mtu_to_bytes(attr.active_mtu);
		out->lid = attr.lid;
		out->max_message_bytes = attr.max_msg_sz;
		out->max_mr_bytes = dev.max_mr_size;
		out->max_mr_count = dev.max_mr > 0 ? (uint32_t)dev.max_mr : 0;
		if (!pick_gid(ctx, port, attr.gid_tbl_len, out) && out->ethernet) {
			say(out->why, sizeof(out->why), "%s port %u: RoCE with no GID", name,
			    port);
			return false;
		}
		snprintf(out->device_name, sizeof(out->device_name), "%s", name);
		return true;
	}
	say(out->why, sizeof(out->why), "%s: no active port among %u", name,
	    dev.phys_port_cnt);
	return false;
}

int pool_rdma_probe(const char *device_name, struct pool_rdma_probe *out)
{
	struct ibv_device **list;
	int count = 0;

	memset(out, 0, sizeof(*out));
	if (!api_ready(out->why, sizeof(out->why)))
		return 0;
	errno = 0;
	list = api.get_device_list(&count);
	if (!list) {
		int err = errno ? errno : ENODEV;

		say(out->why, sizeof(out->why), "no verbs device: ibv_get_device_list: %s%s",
		    strerror(err),
		    err == ENOSYS ? " (the kernel has no RDMA support: no "
				    "/sys/class/infiniband_verbs)" : "");
		return 0;
	}
	if (count == 0)
		say(out->why, sizeof(out->why),
		    "no verbs device (ibv_get_device_list found none; the kernel has no "
		    "RDMA devices in /sys/class/infiniband)");
	else if (device_name)
		say(out->why, sizeof(out->why), "no verbs device named %s", device_name);
	for (int i = 0; i < count && !out->available; i++) {
		const char *name = api.get_device_name(list[i]);
		struct ibv_context *ctx;

		if (!name || (device_name && strcmp(name, device_name) != 0))
			continue;
		ctx = api.open_device(list[i]);
		if (!ctx) {
			say(out->why, sizeof(out->why), "%s: ibv_open_device failed: %s", name,
			    strerror(errno));
			continue;
		}
		out->available = probe_context(ctx, name, out);
		api.close_device(ctx);
	}
	api.free_device_list(list);
	if (out->available)
		out->why[0] = '\0';
	return 0;
}

/* An open device with memory registered on it, shared by the links opened on it. */
struct pool_rdma_memory {
	enum pool_rdma_role role;
	struct pool_rdma_probe device;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t *memory;
	uint64_t bytes;
	struct pool_rdma_plan plan;
	struct ibv_mr *mrs[POOL_RDMA_REGIONS_MAX];
	uint32_t mr_count;
	uint64_t region_bytes; /* every region but the last is this long */
	uint32_t links;        /* open links on it */
};

struct pool_rdma_link {
	struct pool_rdma_memory *mem;
	bool owns_mem; /* opened by pool_rdma_link_open: closed with the link */
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t psn;
	struct pool_rdma_endpoint remote;
	bool connected;
	uint32_t in_flight;
	bool failed;
	char why[256];
};

static int link_fail(struct pool_rdma_link *link, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int link_fail(struct pool_rdma_link *link, int err, const char *fmt, ...)
{
	va_list ap;

	if (!link->failed) {
		va_start(ap, fmt);
		vsnprintf(link->why, sizeof(link->why), fmt, ap);
		va_end(ap);
		link->failed = true;
	}
	return err;
}

/* Registers the memory: the plan's regions for a lender, the device's largest for a writer. */
static int memory_register(struct pool_rdma_memory *mem, char *why, size_t why_size)
{
	int access = IBV_ACCESS_LOCAL_WRITE;
	uint64_t region_bytes;
	uint64_t regions;

	if (mem->role == POOL_RDMA_LENDER) {
		access |= IBV_ACCESS_REMOTE_WRITE;
		region_bytes = mem->plan.slot_bytes * mem->plan.slots_per_region;
		regions = mem->plan.region_count;
	} else {
		/* A writer's memory (the manager's arena) in regions as large as
		 * the device allows; a write whose source crosses one takes a
		 * scatter entry per region. */
		region_bytes = mem->device.max_mr_bytes & ~(uint64_t)(SEL_BLOCK_BYTES - 1);
		if (region_bytes == 0 || region_bytes > mem->bytes)
			region_bytes = mem->bytes;
		regions = (mem->bytes + region_bytes - 1) / region_bytes;
		if (regions > POOL_RDMA_REGIONS_MAX) {
			say(why, why_size,
			    "%" PRIu64 " bytes need %" PRIu64 " memory regions of at most %" PRIu64
			    " bytes on %s; at most %u are allowed",
			    mem->bytes, regions, region_bytes, mem->device.device_name,
			    POOL_RDMA_REGIONS_MAX);
			return SEL_ETOOBIG;
		}
	}
	mem->region_bytes = region_bytes;
	for (uint32_t i = 0; i < regions; i++) {
		uint64_t offset = region_bytes * i;
		uint64_t len = mem->bytes - offset < region_bytes ? mem->bytes - offset
								  : region_bytes;

		mem->mrs[i] = api.reg_mr(mem->pd, mem->memory + offset, len, access);
		if (!mem->mrs[i]) {
			say(why, why_size, "%s: registering %" PRIu64 " bytes failed: %s",
			    mem->device.device_name, len, strerror(errno));
			return errno ? -errno : -ENOMEM;
		}
		mem->mr_count++;
	}
	return 0;
}

int pool_rdma_memory_open(const struct pool_rdma_probe *device, enum pool_rdma_role role,
			  void *memory, uint64_t bytes, const struct pool_rdma_plan *plan,
			  struct pool_rdma_memory **out, char *why, size_t why_size)
{
	struct ibv_device **list = NULL;
	struct pool_rdma_memory *mem;
	int count = 0, rc;

	SEL_ASSERT(device && memory && out);
	*out = NULL;
	if (!device->available || !api_ready(why, why_size)) {
		if (!device->available)
			say(why, why_size, "no RDMA device: %s", device->why);
		return -ENODEV;
	}
	if (role == POOL_RDMA_LENDER &&
	    (!plan || plan->total_bytes != bytes || plan->region_count == 0)) {
		say(why, why_size, "a lender's memory must be its plan's %" PRIu64 " bytes",
		    plan ? plan->total_bytes : 0);
		return -EINVAL;
	}
	mem = calloc(1, sizeof(*mem));
	if (!mem)
		return -ENOMEM;
	mem->role = role;
	mem->device = *device;
	mem->memory = memory;
	mem->bytes = bytes;
	if (plan)
		mem->plan = *plan;
	list = api.get_device_list(&count);
	for (int i = 0; list && i < count && !mem->ctx; i++)
		if (strcmp(api.get_device_name(list[i]), device->device_name) == 0)
			mem->ctx = api.open_device(list[i]);
	if (list)
		api.free_device_list(list);
	if (!mem->ctx) {
		say(why, why_size, "%s: cannot open the device", device->device_name);
		rc = -ENODEV;
		goto err_free_mem;
	}
	mem->pd = api.alloc_pd(mem->ctx);
	if (!mem->pd) {
		say(why, why_size, "%s: ibv_alloc_pd failed", device->device_name);
		rc = -ENOMEM;
		goto err_close_device;
	}
	rc = memory_register(mem, why, why_size);
	if (rc)
		goto err_deregister;
	*out = mem;
	return 0;

err_deregister:
	for (uint32_t i = 0; i < mem->mr_count; i++)
		api.dereg_mr(mem->mrs[i]);
	api.dealloc_pd(mem->pd);
err_close_device:
	api.close_device(mem->ctx);
err_free_mem:
	free(mem);
	return rc;
}

void pool_rdma_memory_close(struct pool_rdma_memory *mem)
{
	if (!mem)
		return;
	SEL_ASSERT(mem->links == 0); /* its links close first */
	for (uint32_t i = 0; i < mem->mr_count; i++)
		api.dereg_mr(mem->mrs[i]);
	api.dealloc_pd(mem->pd);
	api.close_device(mem->ctx);
	free(mem);
}

static int link_to_init(struct pool_rdma_link *link, char *why, size_t why_size)
{
	struct ibv_qp_attr attr = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = link->mem->device.port_num,
		.qp_access_flags = link->mem->role == POOL_RDMA_LENDER ? IBV_ACCESS_REMOTE_WRITE : 0,
	};
	int rc = api.modify_qp(link->qp, &attr,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS);

	if (rc) {
		say(why, why_size, "%s: queue pair to INIT failed: %s",
		    link->mem->device.device_name, strerror(rc));
		return -rc;
	}
	return 0;
}

int pool_rdma_link_open_on(struct pool_rdma_memory *mem, struct pool_rdma_link **out,
			   char *why, size_t why_size)
{
	struct ibv_qp_init_attr qp_attr = { 0 };
	struct pool_rdma_link *link;
	int rc;

	SEL_ASSERT(mem && out);
	*out = NULL;
	link = calloc(1, sizeof(*link));
	if (!link)
		return -ENOMEM;
	link->mem = mem;
	link->cq = api.create_cq(mem->ctx, (int)POOL_RDMA_WRITES_IN_FLIGHT_MAX, NULL, NULL, 0);
	if (!link->cq) {
		say(why, why_size, "%s: ibv_create_cq failed: %s", mem->device.device_name,
		    strerror(errno));
		rc = -ENOMEM;
		goto err_free_link;
	}
	qp_attr.send_cq = link->cq;
	qp_attr.recv_cq = link->cq;
	qp_attr.qp_type = IBV_QPT_RC;
	qp_attr.sq_sig_all = 1;
	qp_attr.cap.max_send_wr = POOL_RDMA_WRITES_IN_FLIGHT_MAX;
	qp_attr.cap.max_recv_wr = 1;
	qp_attr.cap.max_send_sge = POOL_RDMA_WRITE_SGES_MAX;
	qp_attr.cap.max_recv_sge = 1;
	link->qp = api.create_qp(mem->pd, &qp_attr);
	if (!link->qp) {
		say(why, why_size, "%s: ibv_create_qp failed: %s", mem->device.device_name,
		    strerror(errno));
		rc = -ENOMEM;
		goto err_destroy_cq;
	}
	rc = link_to_init(link, why, why_size);
	if (rc)
		goto err_destroy_qp;
	/* Any 24-bit start works; a varied one keeps stale packets of an
	 * earlier queue pair with the same number from matching. */
	link->psn = (uint32_t)((uintptr_t)link ^ (uint64_t)time(NULL)) & PSN_MASK;
	mem->links++;
	*out = link;
	return 0;

err_destroy_qp:
	api.destroy_qp(link->qp);
err_destroy_cq:
	api.destroy_cq(link->cq);
err_free_link:
	free(link);
	return rc;
}

int pool_rdma_link_open(const struct pool_rdma_probe *device,
			enum pool_rdma_role role, void *memory, uint64_t bytes,
			const struct pool_rdma_plan *plan,
			struct pool_rdma_link **out, char *why, size_t why_size)
{
	struct pool_rdma_memory *mem;
	int rc = pool_rdma_memory_open(device, role, memory, bytes, plan, &mem, why, why_size);

	*out = NULL;
	if (rc)
		return rc;
	rc = pool_rdma_link_open_on(mem, out, why, why_size);
	if (rc) {
		pool_rdma_memory_close(mem);
		return rc;
	}
	(*out)->owns_mem = true;
	return 0;
}

void pool_rdma_link_endpoint(const struct pool_rdma_link *link,
			     struct pool_rdma_endpoint *out)
{
	memset(out, 0, sizeof(*out));
	out->qp_num = link->qp->qp_num;
	out->psn = link->psn;
	out->lid = link->mem->device.lid;
	out->ethernet = link->mem->device.ethernet;
	out->mtu_bytes = link->mem->device.mtu_bytes;
	memcpy(out->gid, link->mem->device.gid, 16);
	if (link->mem->role != POOL_RDMA_LENDER)
		return;
	out->slot_bytes = link->mem->plan.slot_bytes;
	out->slot_count = link->mem->plan.slot_count;
	out->region_count = link->mem->mr_count;
	for (uint32_t i = 0; i < link->mem->mr_count; i++) {
		out->regions[i].address = (uintptr_t)link->mem->mrs[i]->addr;
		out->regions[i].bytes = link->mem->mrs[i]->length;
		out->regions[i].rkey = link->mem->mrs[i]->rkey;
	}
}

int pool_rdma_link_connect(struct pool_rdma_link *link,
			   const struct pool_rdma_endpoint *remote, char *why,
			   size_t why_size)
{
	uint32_t mtu = remote->mtu_bytes < link->mem->device.mtu_bytes ? remote->mtu_bytes
								   : link->mem->device.mtu_bytes;
	struct ibv_qp_attr attr = { 0 };
	int rc;

	if (link->failed || link->connected) {
		say(why, why_size, "link is %s", link->failed ? "failed" : "already connected");
		return SEL_ESTOPPED;
	}
	if ((link->mem->role == POOL_RDMA_WRITER) != (remote->slot_count > 0)) {
		say(why, why_size, "a %s must connect to a %s",
		    link->mem->role == POOL_RDMA_WRITER ? "writer" : "lender",
		    link->mem->role == POOL_RDMA_WRITER ? "lender" : "writer");
		return -EINVAL;
	}
	if (remote->ethernet != link->mem->device.ethernet) {
		say(why, why_size, "link layers differ (this end %s, the far end %s)",
		    link->mem->device.ethernet ? "Ethernet" : "InfiniBand",
		    remote->ethernet ? "Ethernet" : "InfiniBand");
		return -EINVAL;
	}
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = bytes_to_mtu(mtu);
	attr.dest_qp_num = remote->qp_num;
	attr.rq_psn = remote->psn;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 12;
	attr.ah_attr.port_num = link->mem->device.port_num;
	attr.ah_attr.dlid = remote->lid;
	if (remote->ethernet) {
		attr.ah_attr.is_global = 1;
		memcpy(attr.ah_attr.grh.dgid.raw, remote->gid, 16);
		attr.ah_attr.grh.sgid_index = (uint8_t)link->mem->device.gid_index;
		attr.ah_attr.grh.hop_limit = 64;
	}
	rc = api.modify_qp(link->qp, &attr,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	if (rc) {
		link_fail(link, -rc, "queue pair to RTR failed: %s", strerror(rc));
		say(why, why_size, "%s", link->why);
		return -rc;
	}
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.timeout = 14;  /* 4.096 us * 2^14: about 67 ms per retry */
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = link->psn;
	attr.max_rd_atomic = 1;
	rc = api.modify_qp(link->qp, &attr,
			   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc) {
		link_fail(link, -rc, "queue pair to RTS failed: %s", strerror(rc));
		say(why, why_size, "%s", link->why);
		return -rc;
	}
	link->remote = *remote;
	link->connected = true;
	return 0;
}

/* Where slot lies on the far end: its region and offset there. */
static const struct pool_rdma_region *remote_slot(const struct pool_rdma_link *link,
						  uint32_t slot, uint64_t *offset)
{
	uint64_t skip = (uint64_t)slot * link->remote.slot_bytes;

	for (uint32_t i = 0; i < link->remote.region_count; i++) {
		const struct pool_rdma_region *r = &link->remote.regions[i];

		if (skip < r->bytes) {
			*offset = skip;
			return r;
		}
		skip -= r->bytes;
	}
	return NULL;
}

int pool_rdma_link_write(struct pool_rdma_link *link, uint64_t source_offset,
			 uint32_t slot, uint64_t slot_offset, uint64_t bytes,
			 uint64_t wr_id)
{
	const struct pool_rdma_region *region;
	struct ibv_send_wr wr = { 0 }, *bad = NULL;
	struct ibv_sge sge[POOL_RDMA_WRITE_SGES_MAX];
	uint64_t region_offset = 0;
	int rc;

	SEL_ASSERT(link->mem->role == POOL_RDMA_WRITER);
	if (link->failed || !link->connected)
		return SEL_ESTOPPED;
	if (bytes == 0 || slot >= link->remote.slot_count ||
	    slot_offset > link->remote.slot_bytes ||
	    bytes > link->remote.slot_bytes - slot_offset || source_offset > link->mem->bytes ||
	    bytes > link->mem->bytes - source_offset)
		return -EINVAL;
	if (link->in_flight >= POOL_RDMA_WRITES_IN_FLIGHT_MAX)
		return SEL_EQUEUEFULL;
	region = remote_slot(link, slot, &region_offset);
	SEL_ASSERT(region); /* decode proved the regions hold every slot */
	/* One scatter entry per local region the source lies in. */
	for (uint64_t at = source_offset, left = bytes; left > 0; wr.num_sge++) {
		uint64_t local = at / link->mem->region_bytes;
		uint64_t n = (local + 1) * link->mem->region_bytes - at;

		if (wr.num_sge == POOL_RDMA_WRITE_SGES_MAX)
			return -EINVAL;
		n = n < left ? n : left;
		sge[wr.num_sge].addr = (uintptr_t)(link->mem->memory + at);
		sge[wr.num_sge].length = (uint32_t)n; /* at most POOL_RDMA_SLOT_BYTES_MAX */
		sge[wr.num_sge].lkey = link->mem->mrs[local]->lkey;
		at += n;
		left -= n;
	}
	wr.wr_id = wr_id;
	wr.sg_list = sge;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = region->address + region_offset + slot_offset;
	wr.wr.rdma.rkey = region->rkey;
	rc = ibv_post_send(link->qp, &wr, &bad);
	if (rc)
		return link_fail(link, -EIO, "posting an RDMA WRITE failed: %s", strerror(rc));
	link->in_flight++;
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int pool_rdma_link_poll(struct pool_rdma_link *link, uint64_t *done,
			uint32_t max, int timeout_ms)
{
	struct ibv_wc wc[16];
	uint64_t deadline = now_ms() + (timeout_ms > 0 ? (uint64_t)timeout_ms : 0);
	uint32_t got = 0;

	if (link->failed)
		return SEL_ESTOPPED;
	while (got < max && link->in_flight > 0) {
		uint32_t want = max - got < SEL_ARRAY_SIZE(wc) ? max - got
							       : (uint32_t)SEL_ARRAY_SIZE(wc);
		int n = ibv_poll_cq(link->cq, (int)want, wc);

		if (n < 0)
			return link_fail(link, -EIO, "polling the completion queue failed");
		for (int i = 0; i < n; i++) {
			link->in_flight--;
			if (wc[i].status != IBV_WC_SUCCESS)
				return link_fail(link, -EIO, "an RDMA WRITE failed: %s",
						 api.wc_status_str(wc[i].status));
			done[got++] = wc[i].wr_id;
		}
		if (got > 0 || now_ms() >= deadline)
			break;
		if (n == 0)
			nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
	}
	return (int)got;
}

uint32_t pool_rdma_link_in_flight(const struct pool_rdma_link *link)
{
	return link->in_flight;
}

const char *pool_rdma_link_why(const struct pool_rdma_link *link)
{
	return link->why;
}

void pool_rdma_link_close(struct pool_rdma_link *link)
{
	if (!link)
		return;
	api.destroy_qp(link->qp);
	api.destroy_cq(link->cq);
	link->mem->links--;
	if (link->owns_mem)
		pool_rdma_memory_close(link->mem);
	free(link);
}

#endif
