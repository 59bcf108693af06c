/*
 * The slab pool (docs/DESIGN.md section 6, seed 2.5): one 4 KiB-aligned anonymous
 * mapping of equal slots, one page record each; rows span several slots
 * whose pieces need not be contiguous. Allocation never blocks: a request
 * the free list cannot satisfy fails at once. Registration with a device is
 * a separate step (shard_slab_register) so CPU tests need no driver.
 * Thread-safe: a mutex guards the free list for the few instructions it
 * takes to pop or push indices.
 *
 * Where a slot's page planes lie (shard_slab_layout; staging's and the warm
 * tier's one arithmetic): slots [0, grouped_slots) lie in groups of
 * group_slots (G), plane-major within a group: plane p of slot g*G + j at
 * base + g*G*slot_bytes + G*off[p] + j*stride, off[p] being the plane's
 * offset in a page record and stride every plane's bytes, so plane p of
 * consecutive slots of one group is one range of memory, as plane p of
 * consecutive device pages is. Every other slot (all of them where G is 1)
 * is a page record in one piece at base + slot*slot_bytes, plane p at
 * off[p]. Addresses come from shard_slab_page, shard_slab_plane and
 * shard_slab_spread; nothing else computes them.
 */
#ifndef SELENE_SHARD_SLAB_H
#define SELENE_SHARD_SLAB_H

#include "common/limits.h"
#include "record/format.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shard_device;

struct shard_slab_pool {
	uint8_t *base;          /* the mapping, slot_count * slot_bytes */
	uint64_t slot_bytes;    /* a multiple of 4 KiB */
	uint32_t slot_count;
	uint32_t *free_slots;   /* stack of free slot indices */
	uint32_t free_count;
	uint32_t reserved_count; /* free slots held back for intake */
	uint64_t exhausted;     /* requests refused for lack of slots */
	struct shard_device *registered; /* device the mapping is registered with */
	pthread_mutex_t lock;
	/* The layout (above; shard_slab_layout): one plane of slot_bytes, G = 1 by default. */
	uint32_t group_slots;   /* G */
	uint32_t grouped_slots; /* slots [0, this) lie in groups: a multiple of G */
	uint32_t plane_count;
	uint64_t plane_stride;  /* G > 1: every plane's bytes; else slot_bytes */
	uint64_t plane_offset[REC_PAGE_PLANES_MAX]; /* within a page record */
};

/* A set of slots taken together: a window of pages, or a row's pieces. */
struct shard_slab_lease {
	uint32_t *slots; /* caller-owned array of capacity entries */
	uint32_t count;
	uint32_t capacity;
};

/*
 * Maps slot_count slots of slot_bytes (rounded up to 4 KiB), populated and
 * advised for transparent huge pages, each one plane of slot_bytes in one
 * piece (G = 1) until shard_slab_layout says otherwise. Returns 0 or a
 * negative errno.
 */
int shard_slab_init(struct shard_slab_pool *pool, uint64_t slot_bytes,
		    uint32_t slot_count);

/* Unmaps the pool; it must be unregistered first (asserted). */
void shard_slab_destroy(struct shard_slab_pool *pool);

/*
 * Holds count free slots back for intake: ordinary allocations can no
 * longer take them; shard_slab_alloc_intake can. Returns 0 or
 * SEL_EQUEUEFULL when fewer than count unreserved slots are free.
 */
int shard_slab_reserve_intake(struct shard_slab_pool *pool, uint32_t count);

/*
 * Takes count slots into lease (appending; capacity must allow it) from the
 * unreserved free slots, or, for intake, from all free slots. Returns 0, or
 * SEL_EQUEUEFULL (and takes nothing) when too few are free. Never blocks.
 */
int shard_slab_alloc(struct shard_slab_pool *pool, uint32_t count,
		     struct shard_slab_lease *lease);
int shard_slab_alloc_intake(struct shard_slab_pool *pool, uint32_t count,
			    struct shard_slab_lease *lease);

/*
 * Returns every slot of lease to the pool and empties it; the next request
 * of lease's count takes the same slots in the same order (free slots are
 * a stack, the lease's first slot on top).
 */
void shard_slab_release(struct shard_slab_pool *pool,
			struct shard_slab_lease *lease);

/* Slots needed for bytes (a row spans several). */
uint32_t shard_slab_slots_for(const struct shard_slab_pool *pool,
			      uint64_t bytes);

/* Slot's bytes in one piece: for pools of one plane and G = 1 (a bench's buffer). */
static inline uint8_t *shard_slab_slot(const struct shard_slab_pool *pool,
				       uint32_t slot)
{
	return pool->base + (uint64_t)slot * pool->slot_bytes;
}

/*
 * G for page planes of plane_bytes: group_max where every plane has the
 * same bytes, a multiple of 4 KiB (no padding would sit between two
 * slots' planes in host memory and not on the device); else 1.
 */
uint32_t shard_slab_group_slots(const uint64_t *plane_bytes, uint32_t plane_count,
				uint32_t group_max);

/*
 * Lays pool's slots out as page records of plane_count planes of
 * plane_bytes (each 4 KiB-rounded; together slot_bytes, asserted), slots
 * [0, grouped_slots) in groups of group_slots (a multiple of it; G > 1 only
 * where shard_slab_group_slots allows it). Before any slot is used.
 */
void shard_slab_layout(struct shard_slab_pool *pool, const uint64_t *plane_bytes,
		       uint32_t plane_count, uint32_t group_slots, uint32_t grouped_slots);

/* Where slot's page record begins: its first plane (as a disk buffer). */
static inline uint8_t *shard_slab_page(const struct shard_slab_pool *pool, uint32_t slot)
{
	uint32_t g = slot / pool->group_slots, j = slot % pool->group_slots;

	if (slot >= pool->grouped_slots)
		return pool->base + (uint64_t)slot * pool->slot_bytes;
	return pool->base + (uint64_t)g * pool->group_slots * pool->slot_bytes +
	       (uint64_t)j * pool->plane_stride;
}

/* Where plane p of slot's page record lies. */
static inline uint8_t *shard_slab_plane(const struct shard_slab_pool *pool, uint32_t slot,
					uint32_t p)
{
	uint64_t g = slot < pool->grouped_slots ? pool->group_slots : 1;

	return shard_slab_page(pool, slot) + g * pool->plane_offset[p];
}

/*
 * How a grouped slot's page record lies from shard_slab_page: its planes,
 * plane p at G * off[p] (zeroed where G is 1: in one piece, slot_bytes).
 * Slots outside the groups are in one piece.
 */
static inline void shard_slab_spread(const struct shard_slab_pool *pool,
				     struct rec_page_spread *out)
{
	*out = (struct rec_page_spread){ 0 };
	if (pool->group_slots > 1 && pool->plane_count > 1)
		*out = (struct rec_page_spread){ .segment_count = pool->plane_count,
						 .segment_bytes = pool->plane_stride,
						 .pitch_bytes = pool->group_slots *
								pool->plane_stride };
}

/* Whether slot b's planes follow slot a's, each plane one range (a run). */
static inline bool shard_slab_follows(const struct shard_slab_pool *pool, uint32_t a,
				      uint32_t b)
{
	return b == a + 1 && b < pool->grouped_slots && b % pool->group_slots != 0;
}

/* Zeroes slot's page record, padding included. */
void shard_slab_scrub(struct shard_slab_pool *pool, uint32_t slot);

/* Registers the whole mapping with dev (cuMemHostRegister), and back. */
int shard_slab_register(struct shard_slab_pool *pool, struct shard_device *dev);
void shard_slab_unregister(struct shard_slab_pool *pool);

uint32_t shard_slab_free_count(struct shard_slab_pool *pool);

/*
 * Bytes of memory this process could take now, for sizing staging before
 * it is mapped: MemAvailable from /proc/meminfo, bounded by the room in its
 * memory cgroup and each ancestor (v2: memory.max - memory.current; v1:
 * memory.limit_in_bytes - memory.usage_in_bytes; the cgroup's file cache,
 * memory.stat's inactive_file and active_file or v1's total_ ones, counts
 * as room: the kernel reclaims it first). Returns 0 with *bytes (0: no
 * room), or -ENOENT when neither /proc/meminfo nor a cgroup limit can be
 * read.
 */
int shard_slab_memory_available(uint64_t *bytes);

/*
 * The one budget for host memory a rank pins: bytes more fit when they are
 * at most half of what this process could take now
 * (shard_slab_memory_available). Staging, the warm tier, a pool link's
 * claim staging and the pool manager's arena are each held to it before
 * anything is mapped or registered. Sets *available (0 when it cannot be
 * read, and then everything fits).
 */
bool shard_slab_memory_fits(uint64_t bytes, uint64_t *available);

/*
 * The same from other files, for tests: meminfo_path in /proc/meminfo's
 * format, self_cgroup_path in /proc/self/cgroup's, and cgroup_root where
 * the cgroup hierarchy is mounted (v1 controllers under cgroup_root/memory).
 */
int shard_slab_memory_available_at(const char *meminfo_path, const char *self_cgroup_path,
				   const char *cgroup_root, uint64_t *bytes);

#endif
