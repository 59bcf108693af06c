/*
 * RDMA for pool claims (libibverbs): the device probe, the registration
 * plan for the slots an instance lends, the endpoint exchange as bytes the
 * pool protocol carries, one reliable-connected queue pair per rank
 * connection posting RDMA WRITEs and polling their completions, and the
 * fallback rule. This file is the contract the pool manager and client
 * call; it knows nothing of the pool protocol's frames, and puts and
 * control never use it (they stay on TCP).
 *
 * libibverbs is loaded with dlopen("libibverbs.so.1") on first use, as the
 * CUDA driver is (shard/device_cuda.c): a host without it, or a build
 * without infiniband/verbs.h, gets "not available, because ..." from the
 * probe and every claim takes the stream path.
 *
 * Roles: the instance rank LENDS slots (its staging, registered for remote
 * writes) and the manager WRITES into them from its own registered memory
 * (its arena). Each end opens a link on its memory, sends its endpoint
 * (pool_rdma_endpoint_encode) over its TCP connection, connects with the
 * other end's, and the manager posts writes naming (slot, offset).
 * pool/RDMA.md specifies the rules (R-RDMA-n) and the endpoint's bytes.
 */
#ifndef SELENE_POOL_RDMA_H
#define SELENE_POOL_RDMA_H

#include "common/limits.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the probe found: a usable port, or why there is none. */
struct pool_rdma_probe {
	bool available;
	char device_name[POOL_RDMA_DEVICE_NAME_BYTES];
	uint8_t port_num;         /* the first active port, 1-based */
	bool ethernet;            /* RoCE (GIDs route) rather than InfiniBand (LIDs) */
	uint32_t mtu_bytes;       /* the port's active MTU: 256 .. 4096 */
	uint16_t lid;
	uint8_t gid[16];
	uint32_t gid_index;
	uint64_t max_mr_bytes;    /* the device's largest memory region */
	uint32_t max_mr_count;    /* regions the device holds at once */
	uint32_t max_message_bytes; /* the port's largest message */
	char why[256];            /* when !available: the reason, one line */
};

/*
 * Looks for a verbs device with an active port: device_name NULL takes the
 * first device that has one. Always fills *out; returns 0 whether or not a
 * device was found (out->available says which, out->why says why not).
 * Never logs: the caller decides (pool_rdma_fallback_note).
 */
int pool_rdma_probe(const char *device_name, struct pool_rdma_probe *out);

/* The slots an instance lends, laid out over as few memory regions as the device allows. */
struct pool_rdma_plan {
	uint64_t slot_bytes;
	uint32_t slot_count;
	uint64_t total_bytes;       /* slot_bytes * slot_count */
	uint32_t slots_per_region;  /* every region but the last holds this many */
	uint32_t region_count;
};

/*
 * Plans slot_count slots of slot_bytes each (a multiple of 4096, at most
 * POOL_RDMA_SLOT_BYTES_MAX; count at most POOL_RDMA_SLOTS_MAX) against the
 * device's limits, memory_budget_bytes (what the instance allows the pool's
 * staging) and memlock_bytes (RLIMIT_MEMLOCK: registration pins the pages;
 * UINT64_MAX for unlimited). Registers nothing. Returns 0 with *out filled;
 * -EINVAL for a malformed request, SEL_ETOOBIG when the memory or the device
 * does not allow it; why (nonempty on error) says which limit and by how much.
 */
int pool_rdma_plan(const struct pool_rdma_probe *device, uint64_t slot_bytes,
		   uint32_t slot_count, uint64_t memory_budget_bytes,
		   uint64_t memlock_bytes, struct pool_rdma_plan *out, char *why,
		   size_t why_size);

/* RLIMIT_MEMLOCK's soft limit in bytes (UINT64_MAX: unlimited). */
uint64_t pool_rdma_memlock_bytes(void);

/* One registered region as the far end sees it. */
struct pool_rdma_region {
	uint64_t address;
	uint64_t bytes;
	uint32_t rkey;
};

/*
 * What one end tells the other to connect (pool/rdma.c's comment gives the
 * byte layout). A writer's endpoint has slot_count 0 and no regions; a
 * lender's lists its regions, which together hold slot_count slots of
 * slot_bytes, in order.
 */
struct pool_rdma_endpoint {
	uint32_t qp_num; /* 24 bits */
	uint32_t psn;    /* 24 bits */
	uint16_t lid;
	bool ethernet;
	uint32_t mtu_bytes;
	uint8_t gid[16];
	uint64_t slot_bytes;
	uint32_t slot_count;
	uint32_t region_count;
	struct pool_rdma_region regions[POOL_RDMA_REGIONS_MAX];
};

/*
 * Writes e into buf (size at least POOL_RDMA_ENDPOINT_BYTES_MAX). Returns
 * the bytes written, or -EINVAL when e breaks a rule decode checks.
 */
int pool_rdma_endpoint_encode(const struct pool_rdma_endpoint *e, uint8_t *buf,
			      size_t size);

/*
 * Reads an endpoint from exactly len bytes received from the far end.
 * Returns 0, or SEL_EPROTO for anything malformed (length, magic, version,
 * reserved bytes, out-of-range fields, regions that do not hold the slots);
 * why says which.
 */
int pool_rdma_endpoint_decode(const uint8_t *buf, size_t len,
			      struct pool_rdma_endpoint *out, char *why,
			      size_t why_size);

enum pool_rdma_role {
	POOL_RDMA_LENDER, /* memory is slots the far end writes into */
	POOL_RDMA_WRITER, /* memory is the source the writes read from */
};

struct pool_rdma_memory;
struct pool_rdma_link;

/*
 * Opens the probed device and registers memory on it (bytes long; for a
 * lender, laid out as plan says, plan->total_bytes long; for a writer, in
 * regions of the device's largest, at most POOL_RDMA_REGIONS_MAX), once,
 * for any number of links (pool_rdma_link_open_on): a manager registers
 * its arena once, not per connection. memory stays the caller's and must
 * outlive it. plan is required for a lender, ignored for a writer.
 * Returns 0 with *out, or a negative errno with why (-ENODEV: no device).
 * Not safe to share between threads.
 */
int pool_rdma_memory_open(const struct pool_rdma_probe *device, enum pool_rdma_role role,
			  void *memory, uint64_t bytes, const struct pool_rdma_plan *plan,
			  struct pool_rdma_memory **out, char *why, size_t why_size);

/* Deregisters and closes the device; every link on it closed first. NULL: nothing. */
void pool_rdma_memory_close(struct pool_rdma_memory *mem);

/*
 * Makes a reliable-connected queue pair in INIT on mem, for the role mem
 * was opened with. Returns 0 with *out, or a negative errno with why.
 */
int pool_rdma_link_open_on(struct pool_rdma_memory *mem, struct pool_rdma_link **out,
			   char *why, size_t why_size);

/*
 * pool_rdma_memory_open and pool_rdma_link_open_on in one: a link with
 * memory of its own, deregistered when the link closes.
 */
int pool_rdma_link_open(const struct pool_rdma_probe *device,
			enum pool_rdma_role role, void *memory, uint64_t bytes,
			const struct pool_rdma_plan *plan,
			struct pool_rdma_link **out, char *why, size_t why_size);

/* This end's endpoint, to encode and send. */
void pool_rdma_link_endpoint(const struct pool_rdma_link *link,
			     struct pool_rdma_endpoint *out);

/*
 * Moves the queue pair to ready-to-send towards the far end's endpoint
 * (a writer must be given a lender's, and a lender a writer's). Returns 0,
 * or a negative errno with why; a failed link is poisoned.
 */
int pool_rdma_link_connect(struct pool_rdma_link *link,
			   const struct pool_rdma_endpoint *remote, char *why,
			   size_t why_size);

/*
 * Writer only: posts one RDMA WRITE of bytes from source_offset of the
 * link's memory into slot at slot_offset of the far end's slots (the write
 * must lie inside that slot). wr_id comes back from pool_rdma_link_poll.
 * Returns 0; SEL_EQUEUEFULL with POOL_RDMA_WRITES_IN_FLIGHT_MAX posted and
 * not yet polled; -EINVAL for a write outside the memory or the slot, or
 * whose source spans more than POOL_RDMA_WRITE_SGES_MAX of the writer's
 * memory regions;
 * SEL_ESTOPPED once the link failed.
 */
int pool_rdma_link_write(struct pool_rdma_link *link, uint64_t source_offset,
			 uint32_t slot, uint64_t slot_offset, uint64_t bytes,
			 uint64_t wr_id);

/*
 * Waits up to timeout_ms for completions of posted writes, storing up to
 * max of their wr_ids in done. Returns how many completed (0 at the
 * timeout), or -EIO when one failed (the link is poisoned: every later call
 * returns SEL_ESTOPPED) with the reason in pool_rdma_link_why.
 */
int pool_rdma_link_poll(struct pool_rdma_link *link, uint64_t *done,
			uint32_t max, int timeout_ms);

/* Writes posted and not yet completed. */
uint32_t pool_rdma_link_in_flight(const struct pool_rdma_link *link);

/* Why the link failed ("" while it has not); valid until the link closes. */
const char *pool_rdma_link_why(const struct pool_rdma_link *link);

/*
 * Destroys the queue pair (and, for pool_rdma_link_open's, deregisters and
 * closes the device). NULL: nothing.
 */
void pool_rdma_link_close(struct pool_rdma_link *link);

/*
 * The fallback rule, one per manager or instance: RDMA is used while no
 * reason to stop has been noted; the first reason (no device, a refused
 * plan, a failed connect, one failed transfer) turns it off for good and is
 * logged once as a warning; later reasons are counted, not logged. Safe to
 * call from any thread.
 */
struct pool_rdma_fallback {
	pthread_mutex_t lock;
	bool off;
	uint64_t reasons_count;
	char reason[256];
};

void pool_rdma_fallback_init(struct pool_rdma_fallback *fb);
void pool_rdma_fallback_destroy(struct pool_rdma_fallback *fb);

/* True while transfers may use RDMA. */
bool pool_rdma_fallback_allows(struct pool_rdma_fallback *fb);

/*
 * Notes a reason to use the stream path. Returns true for the call that
 * turned RDMA off (and logged), false for every later one.
 */
bool pool_rdma_fallback_note(struct pool_rdma_fallback *fb, const char *reason);

/*
 * Applies the rule to a probe: notes probe->why when no device was found.
 * Returns pool_rdma_fallback_allows after.
 */
bool pool_rdma_fallback_probe(struct pool_rdma_fallback *fb,
			      const struct pool_rdma_probe *probe);

#endif
