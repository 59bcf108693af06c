/* A rank's warm tier: see warm.h. */
#include "shard/warm.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "selene/selene.h"
#include "record/disk.h"
#include "shard/device.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * G for shape (warm.h): planes of one size, a multiple of 4 KiB
 * (shard_slab_group_slots), a row in at most REC_DISK_BUFFERS_MAX of
 * them, and a group within one registration chunk; else 1.
 */
static uint32_t group_slots_for(const struct shard_warm_shape *shape, uint64_t slot_bytes)
{
	uint64_t unit = shape->plane_bytes[0], g = shape->group_slots_max;

	if (shard_slab_group_slots(shape->plane_bytes, shape->plane_count, 2) == 1)
		return 1;
	if ((shape->row_bytes + unit - 1) / unit > REC_DISK_BUFFERS_MAX)
		return 1;
	if (g > shape->slot_count)
		g = shape->slot_count;
	if (g > SHARD_WARM_REGISTER_CHUNK_BYTES / slot_bytes)
		g = SHARD_WARM_REGISTER_CHUNK_BYTES / slot_bytes;
	return g ? (uint32_t)g : 1;
}

int shard_warm_init(struct shard_warm *w, const struct shard_warm_shape *shape)
{
	uint32_t buckets = 1, slot_count = shape->slot_count, group_slots;
	uint64_t slot_bytes = 0;
	int ret;

	memset(w, 0, sizeof(*w));
	if (shape->plane_count == 0 || shape->plane_count > REC_PAGE_PLANES_MAX ||
	    shape->row_bytes == 0 || shape->group_slots_max == 0)
		return -EINVAL;
	for (uint32_t p = 0; p < shape->plane_count; p++) {
		if (shape->plane_bytes[p] == 0 || shape->plane_bytes[p] > REC_UNIT_BYTES_MAX)
			return -EINVAL;
		slot_bytes += sel_align_up(shape->plane_bytes[p], SEL_BLOCK_BYTES);
	}
	group_slots = slot_count ? group_slots_for(shape, slot_bytes) : 1;
	slot_count -= slot_count % group_slots;
	if (slot_count == 0)
		return -EINVAL;
	ret = shard_slab_init(&w->pool, slot_bytes, slot_count);
	if (ret)
		return ret;
	/* Every slot in a group: the tier is whole groups. */
	shard_slab_layout(&w->pool, shape->plane_bytes, shape->plane_count, group_slots,
			  slot_count);
	while (buckets < slot_count && buckets < (1u << 31))
		buckets <<= 1;
	w->row_bytes = shape->row_bytes;
	w->row_piece_count = (uint32_t)((shape->row_bytes + slot_bytes - 1) / slot_bytes);
	w->scratch_capacity = shape->pages_max + w->row_piece_count;
	w->next = malloc((size_t)slot_count * sizeof(*w->next));
	w->scratch = malloc((size_t)w->scratch_capacity * sizeof(*w->scratch));
	w->entries = calloc(slot_count, sizeof(*w->entries));
	w->buckets = malloc((size_t)buckets * sizeof(*w->buckets));
	if (!w->next || !w->scratch || !w->entries || !w->buckets) {
		shard_warm_destroy(w);
		return -ENOMEM;
	}
	w->bucket_mask = buckets - 1;
	w->register_chunk_bytes = SHARD_WARM_REGISTER_CHUNK_BYTES;
	for (uint32_t i = 0; i < buckets; i++)
		w->buckets[i] = SHARD_WARM_NONE;
	for (uint32_t i = 0; i < slot_count; i++) {
		w->next[i] = SHARD_WARM_NONE;
		w->entries[i].free_next = i + 1 < slot_count ? i + 1 : SHARD_WARM_NONE;
	}
	w->free_entry = 0;
	w->walk_entry = SHARD_WARM_NONE;
	w->stats.slots_total = slot_count;
	return 0;
}

static void warm_unregister(struct shard_warm *w)
{
	for (uint32_t c = 0; c < w->chunks_registered; c++)
		w->registered->ops->unregister_host(w->registered,
						    w->pool.base + (uint64_t)c * w->chunk_bytes);
	w->chunks_registered = 0;
	w->registered = NULL;
}

void shard_warm_destroy(struct shard_warm *w)
{
	if (w->registered)
		warm_unregister(w);
	if (w->pool.base)
		shard_slab_destroy(&w->pool);
	free(w->next);
	free(w->scratch);
	free(w->entries);
	free(w->buckets);
	memset(w, 0, sizeof(*w));
}

int shard_warm_register(struct shard_warm *w, struct shard_device *dev)
{
	uint64_t total = w->pool.slot_bytes * w->pool.slot_count;
	uint64_t group_bytes = w->pool.slot_bytes * w->pool.group_slots;
	uint64_t slots_per_chunk = w->register_chunk_bytes / group_bytes * w->pool.group_slots;
	uint64_t start = sel_monotonic_ns();

	SEL_ASSERT(!w->registered && slots_per_chunk > 0);
	w->chunk_bytes = slots_per_chunk * w->pool.slot_bytes;
	w->registered = dev;
	for (uint64_t at = 0; at < total; at += w->chunk_bytes) {
		uint64_t bytes = total - at < w->chunk_bytes ? total - at : w->chunk_bytes;
		int ret = SEL_FAILPOINT(SEL_FP_WARM_REGISTER);

		if (ret >= 0)
			ret = dev->ops->register_host(dev, w->pool.base + at, bytes);

		if (ret) {
			warm_unregister(w);
			return ret;
		}
		w->chunks_registered++;
	}
	w->stats.register_ns = sel_monotonic_ns() - start;
	w->stats.register_chunks = w->chunks_registered;
	return 0;
}

uint32_t shard_warm_slots_for(const struct shard_warm *w, uint32_t tail_pages, bool row)
{
	return tail_pages + (row ? w->row_piece_count : 0);
}

static uint32_t bucket_of(const struct shard_warm *w, const struct rec_key *key)
{
	uint32_t h;

	memcpy(&h, key->digest.bytes, sizeof(h));
	return (h ^ (uint32_t)key->consumed) & w->bucket_mask;
}

/* Links slots[0, count) into a chain; returns its head. */
static uint32_t link_slots(struct shard_warm *w, const uint32_t *slots, uint32_t count)
{
	for (uint32_t i = 0; i + 1 < count; i++)
		w->next[slots[i]] = slots[i + 1];
	if (count)
		w->next[slots[count - 1]] = SHARD_WARM_NONE;
	return count ? slots[0] : SHARD_WARM_NONE;
}

/* Gives a chain's slots back to the pool. */
static uint32_t release_chain(struct shard_warm *w, uint32_t head)
{
	struct shard_slab_lease lease = { .slots = w->scratch,
					  .capacity = w->scratch_capacity };
	uint32_t n = 0;

	for (uint32_t s = head; s != SHARD_WARM_NONE; s = w->next[s]) {
		SEL_ASSERT(lease.count < lease.capacity);
		lease.slots[lease.count++] = s;
	}
	n = lease.count;
	shard_slab_release(&w->pool, &lease);
	return n;
}

/* Takes an entry and need slots for key, or NONE (counting *fallbacks). */
static uint32_t reserve(struct shard_warm *w, const struct rec_key *key,
			uint32_t first_page_index, uint32_t tail_pages, bool row,
			uint64_t *fallbacks)
{
	struct shard_slab_lease lease = { .slots = w->scratch,
					  .capacity = w->scratch_capacity };
	uint32_t need = shard_warm_slots_for(w, tail_pages, row), e;
	struct shard_warm_entry *entry;

	if (need == 0 || need > w->scratch_capacity || w->free_entry == SHARD_WARM_NONE ||
	    shard_slab_alloc(&w->pool, need, &lease) != 0) {
		pthread_mutex_lock(&w->pool.lock);
		(*fallbacks)++;
		pthread_mutex_unlock(&w->pool.lock);
		return SHARD_WARM_NONE;
	}
	e = w->free_entry;
	entry = &w->entries[e];
	w->free_entry = entry->free_next;
	*entry = (struct shard_warm_entry){
		.key = *key, .first_page_index = first_page_index,
		.tail_page_count = tail_pages,
		.page_first = link_slots(w, lease.slots, tail_pages),
		.row_first = link_slots(w, lease.slots + tail_pages,
					row ? w->row_piece_count : 0),
		.hash_next = SHARD_WARM_NONE, .free_next = SHARD_WARM_NONE,
	};
	pthread_mutex_lock(&w->pool.lock);
	w->stats.slots_used += need;
	pthread_mutex_unlock(&w->pool.lock);
	return e;
}

uint32_t shard_warm_reserve(struct shard_warm *w, const struct rec_key *key,
			    uint32_t first_page_index, uint32_t tail_pages)
{
	return reserve(w, key, first_page_index, tail_pages, true, &w->stats.store_fallbacks);
}

uint32_t shard_warm_reserve_read(struct shard_warm *w, const struct rec_key *key,
				 uint32_t first_page_index, uint32_t tail_pages, bool row)
{
	return reserve(w, key, first_page_index, tail_pages, row, &w->stats.read_fallbacks);
}

/* Frees an entry's slots and the entry (not in a bucket any more). */
static void entry_free(struct shard_warm *w, uint32_t e)
{
	struct shard_warm_entry *entry = &w->entries[e];
	/*
	 * The row first, then the pages: the pool hands out the slots pushed
	 * last first, so the next record of this size takes these pages in
	 * order, then this row (reserve takes pages, then row).
	 */
	uint32_t n = release_chain(w, entry->row_first) + release_chain(w, entry->page_first);

	pthread_mutex_lock(&w->pool.lock);
	w->stats.slots_used -= n;
	if (entry->committed) {
		w->stats.records--;
		w->stats.bytes -= (uint64_t)n * w->pool.slot_bytes;
	}
	pthread_mutex_unlock(&w->pool.lock);
	if (w->walk_entry == e)
		w->walk_entry = SHARD_WARM_NONE;
	memset(entry, 0, sizeof(*entry));
	entry->free_next = w->free_entry;
	w->free_entry = e;
}

/* Takes key's committed entry out of its bucket; its index, or NONE. */
static uint32_t unhash(struct shard_warm *w, const struct rec_key *key)
{
	uint32_t *link = &w->buckets[bucket_of(w, key)];

	while (*link != SHARD_WARM_NONE) {
		uint32_t e = *link;

		if (rec_key_equal(&w->entries[e].key, key)) {
			*link = w->entries[e].hash_next;
			return e;
		}
		link = &w->entries[e].hash_next;
	}
	return SHARD_WARM_NONE;
}

/* Makes entry e findable; returns the bytes of its slots. */
static uint64_t commit(struct shard_warm *w, uint32_t e)
{
	struct shard_warm_entry *entry = &w->entries[e];
	uint32_t old = unhash(w, &entry->key), b = bucket_of(w, &entry->key);
	uint64_t bytes;

	if (old != SHARD_WARM_NONE)
		entry_free(w, old);
	entry->committed = true;
	entry->hash_next = w->buckets[b];
	w->buckets[b] = e;
	bytes = (uint64_t)shard_warm_slots_for(w, entry->tail_page_count,
					       entry->row_first != SHARD_WARM_NONE) *
		w->pool.slot_bytes;
	pthread_mutex_lock(&w->pool.lock);
	w->stats.records++;
	w->stats.bytes += bytes;
	pthread_mutex_unlock(&w->pool.lock);
	return bytes;
}

void shard_warm_commit(struct shard_warm *w, uint32_t e)
{
	commit(w, e);
	pthread_mutex_lock(&w->pool.lock);
	w->stats.stores++;
	pthread_mutex_unlock(&w->pool.lock);
}

void shard_warm_commit_read(struct shard_warm *w, uint32_t e)
{
	uint64_t bytes = commit(w, e);

	w->entries[e].read_in = true;
	pthread_mutex_lock(&w->pool.lock);
	w->stats.read_throughs++;
	w->stats.read_through_bytes += bytes;
	pthread_mutex_unlock(&w->pool.lock);
}

uint32_t shard_warm_row_buffers(const struct shard_warm *w, const uint32_t *row_slots,
				void **pieces, uint64_t *piece_bytes)
{
	const struct shard_slab_pool *pool = &w->pool;
	bool split = pool->group_slots > 1 && pool->plane_count > 1;
	uint64_t bytes = split ? pool->plane_stride : pool->slot_bytes;
	uint32_t count = (uint32_t)((w->row_bytes + bytes - 1) / bytes);

	SEL_ASSERT(count <= REC_DISK_BUFFERS_MAX &&
		   count <= (uint64_t)w->row_piece_count * (split ? pool->plane_count : 1));
	for (uint32_t k = 0; k < count; k++)
		pieces[k] = split ? shard_slab_plane(pool, row_slots[k / pool->plane_count],
						     k % pool->plane_count) :
				    shard_slab_page(pool, row_slots[k]);
	*piece_bytes = bytes;
	return count;
}

/* Zeroes a chain's slots: padding a failed read may have written is zero again. */
static void scrub_chain(struct shard_warm *w, uint32_t head)
{
	for (uint32_t s = head; s != SHARD_WARM_NONE; s = w->next[s])
		shard_slab_scrub(&w->pool, s);
}

void shard_warm_abort(struct shard_warm *w, uint32_t e)
{
	SEL_ASSERT(!w->entries[e].committed);
	entry_free(w, e);
}

void shard_warm_abort_read(struct shard_warm *w, uint32_t e)
{
	SEL_ASSERT(!w->entries[e].committed);
	scrub_chain(w, w->entries[e].page_first);
	scrub_chain(w, w->entries[e].row_first);
	entry_free(w, e);
	pthread_mutex_lock(&w->pool.lock);
	w->stats.read_failures++;
	pthread_mutex_unlock(&w->pool.lock);
}

bool shard_warm_free_reads(struct shard_warm *w, uint32_t need)
{
	for (uint32_t e = 0; e < w->pool.slot_count; e++) {
		if (w->stats.slots_total - w->stats.slots_used >= need)
			return true;
		if (!w->entries[e].committed || !w->entries[e].read_in)
			continue;
		SEL_ASSERT(unhash(w, &w->entries[e].key) == e);
		entry_free(w, e);
		pthread_mutex_lock(&w->pool.lock);
		w->stats.reads_dropped++;
		pthread_mutex_unlock(&w->pool.lock);
	}
	return w->stats.slots_total - w->stats.slots_used >= need;
}

uint32_t shard_warm_find(const struct shard_warm *w, const struct rec_key *key)
{
	if (!w->entries)
		return SHARD_WARM_NONE;
	for (uint32_t e = w->buckets[bucket_of(w, key)]; e != SHARD_WARM_NONE;
	     e = w->entries[e].hash_next)
		if (rec_key_equal(&w->entries[e].key, key))
			return e;
	return SHARD_WARM_NONE;
}

bool shard_warm_drop(struct shard_warm *w, const struct rec_key *key, bool row_only)
{
	uint32_t e;

	if (!w->entries)
		return false;
	if (row_only) {
		struct shard_warm_entry *entry;
		uint32_t n;

		e = shard_warm_find(w, key);
		if (e == SHARD_WARM_NONE)
			return false;
		entry = &w->entries[e];
		/* A record of no pages is nothing without its row. */
		if (entry->tail_page_count > 0) {
			n = release_chain(w, entry->row_first);
			entry->row_first = SHARD_WARM_NONE;
			pthread_mutex_lock(&w->pool.lock);
			w->stats.slots_used -= n;
			w->stats.bytes -= (uint64_t)n * w->pool.slot_bytes;
			pthread_mutex_unlock(&w->pool.lock);
			return true;
		}
	}
	e = unhash(w, key);
	if (e == SHARD_WARM_NONE)
		return false;
	entry_free(w, e);
	pthread_mutex_lock(&w->pool.lock);
	w->stats.drops++;
	pthread_mutex_unlock(&w->pool.lock);
	return true;
}

void shard_warm_page_slots(struct shard_warm *w, uint32_t e, uint32_t first,
			   uint32_t count, uint32_t *out)
{
	uint32_t s = w->entries[e].page_first, at = 0;

	SEL_ASSERT(first + count <= w->entries[e].tail_page_count);
	/*
	 * A record's windows come in page order: go on from where the last
	 * call stopped rather than walking the chain from its head for each
	 * window (quadratic in the record's pages).
	 */
	if (w->walk_entry == e && w->walk_page <= first) {
		s = w->walk_slot;
		at = w->walk_page;
	}
	for (; at < first; at++)
		s = w->next[s];
	for (uint32_t i = 0; i < count; i++) {
		out[i] = s;
		s = w->next[s];
	}
	w->walk_entry = e;
	w->walk_page = first + count;
	w->walk_slot = s;
}

void shard_warm_row_slots(const struct shard_warm *w, uint32_t e, uint32_t *out)
{
	uint32_t s = w->entries[e].row_first;

	for (uint32_t k = 0; k < w->row_piece_count; k++) {
		SEL_ASSERT(s != SHARD_WARM_NONE);
		out[k] = s;
		s = w->next[s];
	}
}

void shard_warm_get_stats(struct shard_warm *w, struct shard_warm_stats *out)
{
	if (!w->pool.base) {
		memset(out, 0, sizeof(*out));
		return;
	}
	pthread_mutex_lock(&w->pool.lock);
	*out = w->stats;
	pthread_mutex_unlock(&w->pool.lock);
	out->row_slots = w->row_piece_count;
}

void shard_warm_note_hit(struct shard_warm *w)
{
	pthread_mutex_lock(&w->pool.lock);
	w->stats.hits++;
	pthread_mutex_unlock(&w->pool.lock);
}

void shard_warm_note_partial(struct shard_warm *w)
{
	pthread_mutex_lock(&w->pool.lock);
	w->stats.partial_hits++;
	pthread_mutex_unlock(&w->pool.lock);
}
