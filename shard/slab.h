/*
 * The slab pool (docs/DESIGN.md section 6, seed 2.5): one 4 KiB-aligned anonymous
 * mapping of equal slots, one page record each; rows span several slots
 * whose pieces need not be contiguous. Allocation never blocks: a request
 * the free list cannot satisfy fails at once. Registration with a device is
 * a separate step (shard_slab_register) so CPU tests need no driver.
 * Thread-safe: a mutex guards the free list for the few instructions it
 * takes to pop or push indices.
 */
#ifndef SELENE_SHARD_SLAB_H
#define SELENE_SHARD_SLAB_H

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
};

/* A set of slots taken together: a window of pages, or a row's pieces. */
struct shard_slab_lease {
	uint32_t *slots; /* caller-owned array of capacity entries */
	uint32_t count;
	uint32_t capacity;
};

/*
 * Maps slot_count slots of slot_bytes (rounded up to 4 KiB), populated and
 * advised for transparent huge pages. Returns 0 or a negative errno.
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

static inline uint8_t *shard_slab_slot(const struct shard_slab_pool *pool,
				       uint32_t slot)
{
	return pool->base + (uint64_t)slot * pool->slot_bytes;
}

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
