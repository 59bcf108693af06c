/* The slab pool: see slab.h. */
#include "shard/slab.h"

#include "common/base.h"
#include "common/limits.h"
#include "common/log.h"
#include "selene/selene.h"
#include "shard/device.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

/*
 * Maps bytes at a 2 MiB boundary, advised for transparent huge pages before
 * it is populated, so the pages are huge from the start: O_DIRECT pins and
 * the copy engines' page walks then touch 512 times fewer pages. Populated
 * now (MADV_POPULATE_WRITE, or MAP_POPULATE where that is missing) so no
 * fault ever lands in a transfer.
 */
static int slab_map(struct shard_slab_pool *pool, uint64_t bytes)
{
	const uint64_t huge = 2ull << 20;
	uint64_t span = bytes + huge;
	uint8_t *raw, *base;

	raw = mmap(NULL, (size_t)span, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (raw == MAP_FAILED)
		return -errno;
	base = (uint8_t *)sel_align_up((uintptr_t)raw, huge);
	if (base > raw)
		munmap(raw, (size_t)(base - raw));
	if (raw + span > base + bytes)
		munmap(base + bytes, (size_t)(raw + span - (base + bytes)));
	madvise(base, (size_t)bytes, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	if (madvise(base, (size_t)bytes, MADV_POPULATE_WRITE) == 0) {
		pool->base = base;
		return 0;
	}
#endif
	memset(base, 0, (size_t)bytes);
	pool->base = base;
	return 0;
}

int shard_slab_init(struct shard_slab_pool *pool, uint64_t slot_bytes,
		    uint32_t slot_count)
{
	uint64_t bytes;
	int ret;

	memset(pool, 0, sizeof(*pool));
	slot_bytes = sel_align_up(slot_bytes, SEL_BLOCK_BYTES);
	if (slot_bytes == 0 || slot_count == 0 ||
	    !sel_mul_u64(slot_bytes, slot_count, &bytes) || bytes > (1ull << 46))
		return -EINVAL;
	ret = slab_map(pool, bytes);
	if (ret)
		return ret;
	pool->free_slots = malloc(slot_count * sizeof(uint32_t));
	if (!pool->free_slots) {
		munmap(pool->base, (size_t)bytes);
		pool->base = NULL;
		return -ENOMEM;
	}
	pool->slot_bytes = slot_bytes;
	pool->slot_count = slot_count;
	/* Lowest index on top, so a fresh pool hands out slots in order. */
	for (uint32_t i = 0; i < slot_count; i++)
		pool->free_slots[i] = slot_count - 1 - i;
	pool->free_count = slot_count;
	pthread_mutex_init(&pool->lock, NULL);
	return 0;
}

void shard_slab_destroy(struct shard_slab_pool *pool)
{
	if (!pool->base)
		return;
	SEL_ASSERT(!pool->registered);
	munmap(pool->base, (size_t)(pool->slot_bytes * pool->slot_count));
	free(pool->free_slots);
	pthread_mutex_destroy(&pool->lock);
	memset(pool, 0, sizeof(*pool));
}

int shard_slab_reserve_intake(struct shard_slab_pool *pool, uint32_t count)
{
	int ret = 0;

	pthread_mutex_lock(&pool->lock);
	if (pool->free_count - pool->reserved_count < count)
		ret = SEL_EQUEUEFULL;
	else
		pool->reserved_count += count;
	pthread_mutex_unlock(&pool->lock);
	return ret;
}

static int slab_take(struct shard_slab_pool *pool, uint32_t count,
		     struct shard_slab_lease *lease, bool intake)
{
	uint32_t available;

	SEL_ASSERT(lease->count + count <= lease->capacity);
	pthread_mutex_lock(&pool->lock);
	available = pool->free_count - (intake ? 0 : pool->reserved_count);
	if (available < count) {
		pool->exhausted++;
		pthread_mutex_unlock(&pool->lock);
		return SEL_EQUEUEFULL;
	}
	for (uint32_t i = 0; i < count; i++)
		lease->slots[lease->count++] = pool->free_slots[--pool->free_count];
	if (intake) {
		/* Intake draws down its reservation first. */
		uint32_t from_reserve = count < pool->reserved_count ?
						count : pool->reserved_count;

		pool->reserved_count -= from_reserve;
	}
	pthread_mutex_unlock(&pool->lock);
	return 0;
}

int shard_slab_alloc(struct shard_slab_pool *pool, uint32_t count,
		     struct shard_slab_lease *lease)
{
	return slab_take(pool, count, lease, false);
}

int shard_slab_alloc_intake(struct shard_slab_pool *pool, uint32_t count,
			    struct shard_slab_lease *lease)
{
	return slab_take(pool, count, lease, true);
}

void shard_slab_release(struct shard_slab_pool *pool,
			struct shard_slab_lease *lease)
{
	pthread_mutex_lock(&pool->lock);
	for (uint32_t i = 0; i < lease->count; i++) {
		SEL_ASSERT(lease->slots[i] < pool->slot_count);
		SEL_ASSERT(pool->free_count < pool->slot_count);
		pool->free_slots[pool->free_count++] = lease->slots[i];
	}
	pthread_mutex_unlock(&pool->lock);
	lease->count = 0;
}

uint32_t shard_slab_slots_for(const struct shard_slab_pool *pool,
			      uint64_t bytes)
{
	return (uint32_t)((bytes + pool->slot_bytes - 1) / pool->slot_bytes);
}

int shard_slab_register(struct shard_slab_pool *pool, struct shard_device *dev)
{
	int ret;

	SEL_ASSERT(!pool->registered);
	ret = dev->ops->register_host(dev, pool->base,
				      pool->slot_bytes * pool->slot_count);
	if (ret == 0)
		pool->registered = dev;
	return ret;
}

void shard_slab_unregister(struct shard_slab_pool *pool)
{
	if (!pool->registered)
		return;
	pool->registered->ops->unregister_host(pool->registered, pool->base);
	pool->registered = NULL;
}

uint32_t shard_slab_free_count(struct shard_slab_pool *pool)
{
	uint32_t n;

	pthread_mutex_lock(&pool->lock);
	n = pool->free_count;
	pthread_mutex_unlock(&pool->lock);
	return n;
}
