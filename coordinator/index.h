/*
 * The prefix index (docs/DESIGN.md section 5, seed 2.3): rank zero's tree of
 * records keyed by prefix key, with a bucket map for lookup, pins, an LRU
 * access order, leaf-first eviction and compaction candidates. One writer at
 * a time: it has no lock of its own, and every store API call that reaches
 * it holds the store's mutex (coordinator/api.c). Nothing is allocated after
 * coord_index_init (every node comes from a preallocated array; the hash
 * tables are fixed-size open hashing over node ids).
 */
#ifndef SELENE_COORDINATOR_INDEX_H
#define SELENE_COORDINATOR_INDEX_H

#include "common/idlist.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COORD_NONE SEL_IDLIST_NONE
/* Records in one lookup chain (SHARD_CHAIN_RECORDS_MAX matches). */
#define COORD_CHAIN_MAX 4096u

enum coord_state {
	COORD_WRITING,   /* a store is in flight; not yet usable */
	COORD_READY,     /* committed on every rank */
	COORD_UNLINKING, /* an unlink is in flight; no longer usable */
	COORD_CONDEMNED, /* failed verification (or depends on one that did):
			    never used again, unlinked once nothing holds it */
};

struct coord_node {
	struct rec_key key;
	struct rec_key parent;       /* consumed 0: a root record */
	uint32_t parent_id;          /* COORD_NONE for a root record */
	struct rec_digest bucket;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	uint32_t child_count;        /* children of any state */
	uint32_t pins;
	uint64_t access_tick;        /* larger is more recent */
	uint64_t bytes;              /* on disk, per rank */
	uint64_t created_ns;         /* its header's creation time (R-REC-4) */
	enum coord_state state;
	bool row_present;
	/*
	 * The parent link is proven: a history whose key at this node's count
	 * is this node's key had the parent's key at the parent's count, so
	 * every such history has (keys chain over every block before them,
	 * R-KEY-5 and R-KEY-6). Set by the insert of a link derived from one
	 * history, or by the first lookup that checks it; a header's or the
	 * scan cache's link starts unproven. Cleared by a new insert.
	 */
	bool parent_proven;
	/* Links owned by the index. */
	uint32_t hash_next;          /* key hash chain */
	uint32_t bucket_next;        /* bucket hash chain */
	struct sel_idlink lru;       /* access order (coord_index.lru) */
	bool in_use;
};

struct coord_index {
	struct coord_node *nodes;    /* nodes_max entries */
	uint32_t nodes_max;
	uint32_t node_count;
	uint32_t free_head;          /* free node ids, chained through hash_next */
	uint32_t *key_heads;         /* key hash table, key_slots entries */
	uint32_t *bucket_heads;      /* bucket hash table, same size */
	uint32_t slots;              /* a power of two >= 2 * nodes_max */
	struct sel_idlist lru;       /* access order, least recent at the head */
	uint64_t tick;
	uint32_t page_tokens;
};

/* What a caller describes when it inserts a node. */
struct coord_node_spec {
	struct rec_key key;
	const struct rec_key *parent; /* NULL: a root record */
	struct rec_digest bucket;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	uint64_t bytes;
	uint64_t created_ns;          /* the header's creation time */
	enum coord_state state;
	bool row_present;
	bool parent_proven;           /* key and parent are one history's keys
					 (a publication), never a header's */
	uint64_t access_tick;         /* 0: now (the next tick) */
};

/* Allocates room for nodes_max nodes. Returns 0 or -ENOMEM / -EINVAL. */
int coord_index_init(struct coord_index *ix, uint32_t nodes_max,
		     uint32_t page_tokens);
void coord_index_destroy(struct coord_index *ix);

/* The node id of key, or COORD_NONE. */
uint32_t coord_index_find(const struct coord_index *ix, const struct rec_key *key);

static inline struct coord_node *coord_index_node(struct coord_index *ix,
						  uint32_t id)
{
	return &ix->nodes[id];
}

/*
 * Inserts a node. A non-root node's parent must be in the index (its
 * child count goes up). Returns 0 and *id, -EEXIST when key is present,
 * -ENOENT when the parent is missing, SEL_EQUEUEFULL when no node is free.
 */
int coord_index_insert(struct coord_index *ix, const struct coord_node_spec *spec,
		       uint32_t *id);

/* Removes a leaf (child_count 0, asserted); its parent loses a child. */
void coord_index_remove(struct coord_index *ix, uint32_t id);

/* Marks id most recently used. */
void coord_index_touch(struct coord_index *ix, uint32_t id);

void coord_index_pin(struct coord_index *ix, uint32_t id);
void coord_index_unpin(struct coord_index *ix, uint32_t id);

/* A lookup's result: the chain, root side first, and what to restore. */
struct coord_lookup {
	uint32_t chain[COORD_CHAIN_MAX]; /* node ids in ascending consumed */
	uint32_t chain_count;
	uint32_t skip_pages;  /* leading pages of the chain already resident */
	uint32_t page_count;  /* pages to restore: the chain's minus skip */
	uint64_t consumed;    /* the endpoint's consumed count */
	uint64_t parent_consumed; /* the stopping parent's (0 at the root) */
};

/* Whether a record's chain could be restored for a history (lookup_chain). */
enum coord_chain {
	COORD_CHAIN_OK,        /* every parent READY and the history's own */
	COORD_CHAIN_UNSETTLED, /* a record on it is not READY (being stored or dropped) */
	COORD_CHAIN_BROKEN,    /* a parent missing, not the history's, or counts that
				  do not fit: no restore can use it */
};

/*
 * The chain of node id (whose key is h's at its count: asserted, one hash)
 * from the root, checked as a lookup checks it, proving links as it does;
 * scratch is filled as a lookup's out.
 */
enum coord_chain coord_index_chain(struct coord_index *ix, const struct rec_history *h,
				   uint32_t id, struct coord_lookup *scratch);

/*
 * Seed 2.3, exactly: walks the history's 64-token boundaries from the
 * longest (floor(token_count / 64)) down to the block holding resident,
 * probing the bucket of each; within a bucket, candidates by descending
 * consumed count. A candidate qualifies when it is READY, has its row, its
 * consumed count c satisfies resident < c <= token_count, and
 * history.key_at(c) equals its key. It is feasible when walking its parent
 * links collects only READY nodes whose consumed count exceeds resident and
 * stops at a parent at or below resident, or at the root, and every parent
 * reached is h's own (h's key at its count: hashed once per link, then
 * the link is marked proven and never hashed again); the chain is those
 * nodes in ascending order, and skip_pages is resident / pt - parent / pt.
 * The first feasible candidate wins. Returns true and fills out, or false
 * when nothing qualifies. Does not touch; marking links proven is its
 * only write.
 */
bool coord_index_lookup(struct coord_index *ix, const struct rec_history *h,
			uint64_t resident, struct coord_lookup *out);

/* Whether a node may be evicted or compacted now, beyond pins and state. */
typedef bool (*coord_evictable_fn)(const struct coord_node *node, void *ctx);

/*
 * Leaf-first LRU (seed 2.3): the least recently used unpinned READY leaf
 * that evictable accepts; when none, the least recently used unpinned READY
 * node with exactly one child that still has its row, to compact (*compact
 * set). Returns its id, or COORD_NONE.
 */
uint32_t coord_index_victim(const struct coord_index *ix, coord_evictable_fn evictable,
			    void *ctx, bool *compact);

#endif
