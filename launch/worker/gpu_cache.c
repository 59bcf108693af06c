/*
 * The worker's GPU prefix cache (launch/worker/gpu_cache.h). Checkpoints live in an
 * array with one entry per state slot; lookups and eviction scan it, which
 * is fine at a worker's few thousand slots and keeps the code obvious.
 */
#include "launch/worker/gpu_cache.h"

#include "common/base.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int launch_gpu_cache_init(struct launch_gpu_cache *c, uint32_t page_tokens, uint32_t page_count,
			  uint32_t row_count)
{
	memset(c, 0, sizeof(*c));
	if (!page_tokens || !page_count || !row_count)
		return -EINVAL;
	c->page_tokens = page_tokens;
	c->page_count = page_count;
	c->row_count = row_count;
	c->page_refs = calloc(page_count, sizeof(*c->page_refs));
	c->free_pages = malloc(page_count * sizeof(*c->free_pages));
	c->free_rows = malloc(row_count * sizeof(*c->free_rows));
	c->checkpoints = calloc(row_count, sizeof(*c->checkpoints));
	if (!c->page_refs || !c->free_pages || !c->free_rows || !c->checkpoints) {
		launch_gpu_cache_destroy(c);
		return -ENOMEM;
	}
	/* lowest ids first, for readable traces */
	for (uint32_t i = 0; i < page_count; i++)
		c->free_pages[i] = page_count - 1 - i;
	for (uint32_t i = 0; i < row_count; i++)
		c->free_rows[i] = row_count - 1 - i;
	c->free_page_count = page_count;
	c->free_row_count = row_count;
	return 0;
}

void launch_gpu_cache_destroy(struct launch_gpu_cache *c)
{
	if (c->checkpoints)
		for (uint32_t i = 0; i < c->row_count; i++)
			free(c->checkpoints[i].page_ids);
	free(c->checkpoints);
	free(c->page_refs);
	free(c->free_pages);
	free(c->free_rows);
	memset(c, 0, sizeof(*c));
}

struct launch_gpu_checkpoint *launch_gpu_cache_lookup(struct launch_gpu_cache *c, uint64_t limit,
						      launch_gpu_cache_hash_fn hash_at, const void *prompt)
{
	struct launch_gpu_checkpoint *best = NULL;

	for (uint32_t i = 0; i < c->row_count; i++) {
		struct launch_gpu_checkpoint *k = &c->checkpoints[i];

		if (k->live && k->consumed <= limit && (!best || k->consumed > best->consumed) &&
		    hash_at(prompt, k->consumed) == k->prefix_hash)
			best = k;
	}
	if (best)
		best->used_at = ++c->clock;
	return best;
}

void launch_gpu_cache_hold(struct launch_gpu_cache *c, const uint32_t *ids, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		SEL_ASSERT(ids[i] < c->page_count && c->page_refs[ids[i]] > 0);
		c->page_refs[ids[i]]++;
	}
}

void launch_gpu_cache_release(struct launch_gpu_cache *c, const uint32_t *ids, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		SEL_ASSERT(ids[i] < c->page_count && c->page_refs[ids[i]] > 0);
		if (--c->page_refs[ids[i]] == 0)
			c->free_pages[c->free_page_count++] = ids[i];
	}
}

static void evict(struct launch_gpu_cache *c, struct launch_gpu_checkpoint *k)
{
	SEL_ASSERT(k->live && k->pins == 0);
	launch_gpu_cache_release(c, k->page_ids, k->page_count);
	launch_gpu_cache_free_row(c, k->slot);
	free(k->page_ids);
	memset(k, 0, sizeof(*k));
	c->evictions++;
}

/* Evicts the least recently used unpinned checkpoint; false when none. */
static bool evict_one(struct launch_gpu_cache *c, bool *pinned_seen)
{
	struct launch_gpu_checkpoint *victim = NULL;

	for (uint32_t i = 0; i < c->row_count; i++) {
		struct launch_gpu_checkpoint *k = &c->checkpoints[i];

		if (!k->live)
			continue;
		if (k->pins) {
			*pinned_seen = true;
			continue;
		}
		if (!victim || k->used_at < victim->used_at)
			victim = k;
	}
	if (!victim)
		return false;
	evict(c, victim);
	return true;
}

int launch_gpu_cache_alloc_pages(struct launch_gpu_cache *c, uint32_t count, uint32_t *ids)
{
	bool pinned_seen = false;

	if (count > c->page_count)
		return -ENOSPC;
	while (c->free_page_count < count)
		if (!evict_one(c, &pinned_seen))
			return pinned_seen ? -EAGAIN : -ENOSPC;
	for (uint32_t i = 0; i < count; i++) {
		ids[i] = c->free_pages[--c->free_page_count];
		SEL_ASSERT(c->page_refs[ids[i]] == 0);
		c->page_refs[ids[i]] = 1;
	}
	return 0;
}

int launch_gpu_cache_alloc_row(struct launch_gpu_cache *c, uint32_t *slot)
{
	bool pinned_seen = false;

	while (c->free_row_count == 0)
		if (!evict_one(c, &pinned_seen))
			return pinned_seen ? -EAGAIN : -ENOSPC;
	*slot = c->free_rows[--c->free_row_count];
	return 0;
}

void launch_gpu_cache_free_row(struct launch_gpu_cache *c, uint32_t slot)
{
	SEL_ASSERT(slot < c->row_count && c->free_row_count < c->row_count);
	c->free_rows[c->free_row_count++] = slot;
}

struct launch_gpu_checkpoint *launch_gpu_cache_insert(struct launch_gpu_cache *c, uint64_t consumed,
						      uint64_t prefix_hash, const uint32_t *ids,
						      uint32_t slot)
{
	uint32_t pages = (uint32_t)(consumed / c->page_tokens);
	struct launch_gpu_checkpoint *k = &c->checkpoints[slot];

	/* a slot holds one checkpoint, so the entry indexed by it is free */
	SEL_ASSERT(slot < c->row_count && !k->live);
	k->page_ids = malloc((pages ? pages : 1) * sizeof(uint32_t));
	if (!k->page_ids) {
		launch_gpu_cache_free_row(c, slot);
		return NULL;
	}
	memcpy(k->page_ids, ids, pages * sizeof(uint32_t));
	launch_gpu_cache_hold(c, ids, pages);
	k->live = true;
	k->consumed = consumed;
	k->prefix_hash = prefix_hash;
	k->page_count = pages;
	k->slot = slot;
	k->pins = 0;
	k->store_id = 0;
	k->used_at = ++c->clock;
	return k;
}

struct launch_gpu_checkpoint *launch_gpu_cache_find_store(struct launch_gpu_cache *c,
							 uint64_t store_id)
{
	for (uint32_t i = 0; i < c->row_count; i++)
		if (c->checkpoints[i].live && c->checkpoints[i].store_id == store_id)
			return &c->checkpoints[i];
	return NULL;
}

uint32_t launch_gpu_cache_checkpoint_count(const struct launch_gpu_cache *c)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->row_count; i++)
		n += c->checkpoints[i].live;
	return n;
}
