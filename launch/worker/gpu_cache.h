/*
 * The reference worker's GPU prefix cache (docs/DESIGN.md section 8), the part a
 * serving engine would own: which page ids and state slots of the device
 * hold which checkpoints, with LRU eviction. It hands out ids only; the
 * bytes live on the device and are the worker's business.
 *
 * Page ids are reference counted: every cached checkpoint holds its chain's
 * pages (chains share their common prefix), and the request being served
 * holds the pages it is building. A page returns to the free list when its
 * last holder lets go. Each checkpoint owns one state slot. A pinned
 * checkpoint (a store still copying from it) is never evicted.
 */
#ifndef SELENE_LAUNCH_GPU_CACHE_H
#define SELENE_LAUNCH_GPU_CACHE_H

#include <stdbool.h>
#include <stdint.h>

struct launch_gpu_checkpoint {
	bool live;
	uint64_t consumed;       /* tokens */
	uint64_t prefix_hash;    /* of the prompt's first consumed tokens */
	uint32_t page_count;     /* consumed / page_tokens */
	uint32_t *page_ids;      /* page_count; owned */
	uint32_t slot;           /* the state row */
	uint32_t pins;
	uint64_t used_at;        /* LRU clock */
	uint64_t store_id;       /* the publication in flight, 0 for none */
};

struct launch_gpu_cache {
	uint32_t page_tokens, page_count, row_count;
	uint32_t *page_refs;                /* page_count */
	uint32_t *free_pages, free_page_count;
	uint32_t *free_rows, free_row_count;
	struct launch_gpu_checkpoint *checkpoints; /* row_count: each holds a slot */
	uint64_t clock;
	uint64_t evictions;
};

/* Returns 0 or -ENOMEM (-EINVAL for a zero count); end with launch_gpu_cache_destroy. */
int launch_gpu_cache_init(struct launch_gpu_cache *c, uint32_t page_tokens, uint32_t page_count,
			  uint32_t row_count);
void launch_gpu_cache_destroy(struct launch_gpu_cache *c);

/* The prompt's hash at consumed tokens, for lookups. */
typedef uint64_t (*launch_gpu_cache_hash_fn)(const void *prompt, uint64_t consumed);

/*
 * The deepest live checkpoint that is a prefix of a prompt of limit tokens
 * (hash_at agrees at its count), or NULL. Touches it.
 */
struct launch_gpu_checkpoint *launch_gpu_cache_lookup(struct launch_gpu_cache *c, uint64_t limit,
						      launch_gpu_cache_hash_fn hash_at, const void *prompt);

/* The caller takes, or lets go of, a reference on each of count ids. */
void launch_gpu_cache_hold(struct launch_gpu_cache *c, const uint32_t *ids, uint32_t count);
void launch_gpu_cache_release(struct launch_gpu_cache *c, const uint32_t *ids, uint32_t count);

/*
 * count free page ids into ids, held by the caller, evicting the least
 * recently used unpinned checkpoints as needed. Returns 0; -EAGAIN when
 * only pinned checkpoints stand in the way (wait for a store, then try
 * again); -ENOSPC when the device cannot hold them at all. Takes nothing on
 * failure.
 */
int launch_gpu_cache_alloc_pages(struct launch_gpu_cache *c, uint32_t count, uint32_t *ids);

/* One free state slot, owned by the caller until inserted; as above. */
int launch_gpu_cache_alloc_row(struct launch_gpu_cache *c, uint32_t *slot);
void launch_gpu_cache_free_row(struct launch_gpu_cache *c, uint32_t slot);

/*
 * Caches the checkpoint of consumed tokens whose chain is ids
 * (consumed / page_tokens of them; it takes its own references) and whose
 * row is slot (ownership passes). Returns it, or NULL without memory (the
 * slot is then freed).
 */
struct launch_gpu_checkpoint *launch_gpu_cache_insert(struct launch_gpu_cache *c, uint64_t consumed,
						      uint64_t prefix_hash, const uint32_t *ids,
						      uint32_t slot);

/* The live checkpoint whose publication is store_id, or NULL. */
struct launch_gpu_checkpoint *launch_gpu_cache_find_store(struct launch_gpu_cache *c,
							 uint64_t store_id);

uint32_t launch_gpu_cache_checkpoint_count(const struct launch_gpu_cache *c);

#endif
