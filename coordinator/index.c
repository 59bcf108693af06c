/*
 * The prefix index: see index.h. Nodes live in one array allocated by
 * coord_index_init; a free list, two open-hashing tables of node-id chains
 * (by key, by bucket) and an intrusive LRU list are threaded through them,
 * so nothing here allocates afterwards. This file decides nothing about
 * stores, files or transfers; it only answers what is where.
 */
#include "coordinator/index.h"

#include "common/base.h"
#include "common/limits.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Past this many nodes, 2 * nodes_max slots would not fit a uint32_t. */
#define COORD_NODES_MAX (1u << 30)

/*
 * Digests are cryptographic, so their low bytes are already uniform; the
 * consumed count is mixed in so one prefix's keys at nearby counts spread.
 */
static uint32_t key_slot(const struct coord_index *ix, const struct rec_key *key)
{
	uint64_t x = sel_get_le64(key->digest.bytes) ^
		     key->consumed * 0x9e3779b97f4a7c15ull;

	x ^= x >> 32;
	return (uint32_t)x & (ix->slots - 1);
}

/* Every endpoint in the first block shares d(0), all zeros: one slot. */
static uint32_t bucket_slot(const struct coord_index *ix,
			    const struct rec_digest *bucket)
{
	uint64_t x = sel_get_le64(bucket->bytes);

	x ^= x >> 32;
	return (uint32_t)x & (ix->slots - 1);
}

int coord_index_init(struct coord_index *ix, uint32_t nodes_max,
		     uint32_t page_tokens)
{
	uint32_t slots = 1;

	memset(ix, 0, sizeof(*ix));
	ix->free_head = COORD_NONE;
	sel_idlist_init(&ix->lru, NULL, 0);
	if (nodes_max == 0 || nodes_max > COORD_NODES_MAX || page_tokens == 0 ||
	    page_tokens > REC_PAGE_TOKENS_MAX)
		return -EINVAL;
	while (slots < 2 * nodes_max)
		slots <<= 1;
	ix->nodes = calloc(nodes_max, sizeof(*ix->nodes));
	ix->key_heads = malloc(slots * sizeof(*ix->key_heads));
	ix->bucket_heads = malloc(slots * sizeof(*ix->bucket_heads));
	if (!ix->nodes || !ix->key_heads || !ix->bucket_heads) {
		coord_index_destroy(ix);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < slots; i++)
		ix->key_heads[i] = ix->bucket_heads[i] = COORD_NONE;
	/* Lowest id on top, so a fresh index hands out ids in order. */
	for (uint32_t i = nodes_max; i-- > 0;) {
		ix->nodes[i].hash_next = ix->free_head;
		ix->free_head = i;
	}
	sel_idlist_init(&ix->lru, &ix->nodes[0].lru, sizeof(ix->nodes[0]));
	ix->nodes_max = nodes_max;
	ix->slots = slots;
	ix->page_tokens = page_tokens;
	return 0;
}

void coord_index_destroy(struct coord_index *ix)
{
	free(ix->nodes);
	free(ix->key_heads);
	free(ix->bucket_heads);
	memset(ix, 0, sizeof(*ix));
	ix->free_head = COORD_NONE;
	sel_idlist_init(&ix->lru, NULL, 0);
}

uint32_t coord_index_find(const struct coord_index *ix, const struct rec_key *key)
{
	uint32_t id = ix->key_heads[key_slot(ix, key)];

	while (id != COORD_NONE && !rec_key_equal(&ix->nodes[id].key, key))
		id = ix->nodes[id].hash_next;
	return id;
}

/*
 * Links id into the access order after every node whose tick is at most
 * its own, and advances the clock to it. A fresh tick is past every other,
 * so the common cases (now, or a scan's records oldest first) stop at the
 * tail without walking.
 */
static void lru_place(struct coord_index *ix, uint32_t id, uint64_t access_tick)
{
	uint32_t after = ix->lru.tail;

	while (after != COORD_NONE && ix->nodes[after].access_tick > access_tick)
		after = ix->nodes[after].lru.prev;
	ix->nodes[id].access_tick = access_tick;
	sel_idlist_insert_after(&ix->lru, after, id);
	if (access_tick > ix->tick)
		ix->tick = access_tick;
}

int coord_index_insert(struct coord_index *ix, const struct coord_node_spec *spec,
		       uint32_t *id)
{
	bool root = !spec->parent || spec->parent->consumed == 0;
	uint32_t parent_id = COORD_NONE, new_id, key_at, bucket_at;
	struct coord_node *n;

	SEL_ASSERT(spec->key.consumed > 0);
	SEL_ASSERT(root || spec->parent->consumed < spec->key.consumed);
	SEL_ASSERT(spec->state <= COORD_CONDEMNED);
	if (coord_index_find(ix, &spec->key) != COORD_NONE)
		return -EEXIST;
	if (!root) {
		parent_id = coord_index_find(ix, spec->parent);
		if (parent_id == COORD_NONE)
			return -ENOENT;
	}
	if (ix->free_head == COORD_NONE)
		return SEL_EQUEUEFULL;
	new_id = ix->free_head;
	n = &ix->nodes[new_id];
	ix->free_head = n->hash_next;
	memset(n, 0, sizeof(*n));
	n->key = spec->key;
	if (!root)
		n->parent = *spec->parent;
	n->parent_id = parent_id;
	n->bucket = spec->bucket;
	n->first_page_index = spec->first_page_index;
	n->tail_page_count = spec->tail_page_count;
	n->bytes = spec->bytes;
	n->created_ns = spec->created_ns;
	n->state = spec->state;
	n->row_present = spec->row_present;
	n->parent_proven = !root && spec->parent_proven;
	n->in_use = true;
	key_at = key_slot(ix, &n->key);
	bucket_at = bucket_slot(ix, &n->bucket);
	n->hash_next = ix->key_heads[key_at];
	ix->key_heads[key_at] = new_id;
	n->bucket_next = ix->bucket_heads[bucket_at];
	ix->bucket_heads[bucket_at] = new_id;
	lru_place(ix, new_id, spec->access_tick ? spec->access_tick : ix->tick + 1);
	if (parent_id != COORD_NONE)
		ix->nodes[parent_id].child_count++;
	ix->node_count++;
	*id = new_id;
	return 0;
}

/* Unlinks id from a key or bucket chain starting at head; asserts it is there. */
static void chain_unlink(struct coord_index *ix, uint32_t *head, uint32_t id,
			 bool by_bucket)
{
	uint32_t *link = head;

	while (*link != id) {
		SEL_ASSERT(*link != COORD_NONE);
		link = by_bucket ? &ix->nodes[*link].bucket_next :
				   &ix->nodes[*link].hash_next;
	}
	*link = by_bucket ? ix->nodes[id].bucket_next : ix->nodes[id].hash_next;
}

void coord_index_remove(struct coord_index *ix, uint32_t id)
{
	struct coord_node *n = &ix->nodes[id];

	SEL_ASSERT(id < ix->nodes_max && n->in_use);
	SEL_ASSERT(n->child_count == 0);
	chain_unlink(ix, &ix->key_heads[key_slot(ix, &n->key)], id, false);
	chain_unlink(ix, &ix->bucket_heads[bucket_slot(ix, &n->bucket)], id, true);
	sel_idlist_remove(&ix->lru, id);
	if (n->parent_id != COORD_NONE) {
		SEL_ASSERT(ix->nodes[n->parent_id].child_count > 0);
		ix->nodes[n->parent_id].child_count--;
	}
	n->in_use = false;
	n->bucket_next = COORD_NONE;
	n->hash_next = ix->free_head;
	ix->free_head = id;
	ix->node_count--;
}

void coord_index_touch(struct coord_index *ix, uint32_t id)
{
	SEL_ASSERT(id < ix->nodes_max && ix->nodes[id].in_use);
	sel_idlist_remove(&ix->lru, id);
	lru_place(ix, id, ix->tick + 1);
}

void coord_index_pin(struct coord_index *ix, uint32_t id)
{
	SEL_ASSERT(id < ix->nodes_max && ix->nodes[id].in_use);
	SEL_ASSERT(ix->nodes[id].pins < UINT32_MAX);
	ix->nodes[id].pins++;
}

void coord_index_unpin(struct coord_index *ix, uint32_t id)
{
	SEL_ASSERT(id < ix->nodes_max && ix->nodes[id].in_use);
	SEL_ASSERT(ix->nodes[id].pins > 0);
	ix->nodes[id].pins--;
}

/*
 * Whether candidate (whose key is h's) is feasible over resident: its
 * parent links, followed while a node's count exceeds resident, reach a
 * parent at or below resident (or the root) through READY nodes only,
 * within COORD_CHAIN_MAX, and every parent reached is h's own (its key is
 * h's key at its count). Headers and the scan cache are checksummed but
 * not signed: a parent link that names another conversation's record
 * would otherwise restore that conversation's pages as this one's. Fills
 * out when it is.
 *
 * A link is hashed once: h has candidate's key, and each node reached has
 * h's key too (checked, or by the proven link above it), so a parent that
 * has h's key proves the link for every history with the node's key
 * (keys chain over every earlier block, R-KEY-5 and R-KEY-6: equal keys
 * at a count mean equal tokens before it). The link is marked proven and
 * the walk after that costs no hash; a link that fails is never marked.
 */
static enum coord_chain lookup_chain(struct coord_index *ix, const struct rec_history *h,
				     uint32_t candidate, uint64_t resident,
				     struct coord_lookup *out)
{
	const uint64_t pt = ix->page_tokens;
	uint64_t pages = 0, stop = 0, skip;
	uint32_t count = 0, id = candidate;

	for (;;) {
		struct coord_node *n = &ix->nodes[id];
		const struct coord_node *parent;
		struct rec_key expect;

		if (n->state != COORD_READY)
			return COORD_CHAIN_UNSETTLED;
		if (count == COORD_CHAIN_MAX)
			return COORD_CHAIN_BROKEN;
		out->chain[count++] = id;
		pages += n->tail_page_count;
		if (n->parent.consumed == 0)
			break;
		if (n->parent_id == COORD_NONE)
			return COORD_CHAIN_BROKEN;
		parent = &ix->nodes[n->parent_id];
		if (parent->key.consumed == 0 || parent->key.consumed >= n->key.consumed)
			return COORD_CHAIN_BROKEN;
		if (!n->parent_proven) {
			rec_history_key_at(h, parent->key.consumed, &expect);
			if (!rec_key_equal(&expect, &parent->key))
				return COORD_CHAIN_BROKEN;
			n->parent_proven = true;
		}
		if (parent->key.consumed <= resident) {
			stop = parent->key.consumed;
			break;
		}
		id = n->parent_id;
	}
	/*
	 * Consistent tail counts telescope to c / pt - stop / pt, which is at
	 * least skip because c > resident; anything else is a corrupt chain
	 * and restores nothing rather than wrong pages.
	 */
	skip = resident / pt - stop / pt;
	if (pages < skip || pages - skip > UINT32_MAX)
		return COORD_CHAIN_BROKEN;
	for (uint32_t i = 0, j = count - 1; i < j; i++, j--) {
		uint32_t t = out->chain[i];

		out->chain[i] = out->chain[j];
		out->chain[j] = t;
	}
	out->chain_count = count;
	out->skip_pages = (uint32_t)skip;
	out->page_count = (uint32_t)(pages - skip);
	out->consumed = ix->nodes[candidate].key.consumed;
	out->parent_consumed = stop;
	return COORD_CHAIN_OK;
}

/*
 * Probes block b's bucket. A block holds 64 endpoints and keys are unique
 * in the index, so at most one node per endpoint can match the history:
 * the matches go into a 64-entry array indexed by offset in the block,
 * which is already their order by consumed count, and each endpoint's key
 * is hashed at most once however many nodes share the bucket.
 */
static bool lookup_block(struct coord_index *ix, const struct rec_history *h,
			 uint64_t b, uint64_t resident, struct coord_lookup *out)
{
	const struct rec_digest *bucket = &h->blocks[b];
	uint64_t base = b * REC_BLOCK_TOKENS;
	uint64_t lo = resident + 1 > base ? resident + 1 : base;
	uint64_t hi = base + REC_BLOCK_TOKENS - 1 < h->token_count ?
		      base + REC_BLOCK_TOKENS - 1 : h->token_count;
	uint32_t match[REC_BLOCK_TOKENS];
	struct rec_key keys[REC_BLOCK_TOKENS];
	uint64_t hashed = 0, matched = 0;
	uint32_t head;

	if (lo > hi)
		return false;
	/*
	 * Most blocks of a long history hold no stored endpoint: one load of
	 * the bucket table answers for them (a miss walks every block down to
	 * the resident one, so this is the cost that grows with the history).
	 */
	head = ix->bucket_heads[bucket_slot(ix, bucket)];
	if (head == COORD_NONE)
		return false;
	for (uint32_t id = head; id != COORD_NONE; id = ix->nodes[id].bucket_next) {
		const struct coord_node *n = &ix->nodes[id];
		uint64_t c = n->key.consumed, off = c - base;

		/* The cheap tests first: the root bucket holds every conversation. */
		if (c < lo || c > hi || n->state != COORD_READY || !n->row_present ||
		    !rec_digest_equal(&n->bucket, bucket))
			continue;
		if (!(hashed >> off & 1)) {
			rec_history_key_at(h, c, &keys[off]);
			hashed |= 1ull << off;
		}
		if (!rec_key_equal(&keys[off], &n->key))
			continue;
		SEL_ASSERT(!(matched >> off & 1));
		match[off] = id;
		matched |= 1ull << off;
	}
	for (uint64_t off = hi - base + 1; matched && off-- > lo - base;)
		if ((matched >> off & 1) &&
		    lookup_chain(ix, h, match[off], resident, out) == COORD_CHAIN_OK)
			return true;
	return false;
}

enum coord_chain coord_index_chain(struct coord_index *ix, const struct rec_history *h,
				   uint32_t id, struct coord_lookup *scratch)
{
	struct rec_key key;

	SEL_ASSERT(id < ix->nodes_max && ix->nodes[id].in_use);
	SEL_ASSERT(ix->nodes[id].key.consumed <= h->token_count);
	/* The walk marks links proven: only from a node that has h's key. */
	rec_history_key_at(h, ix->nodes[id].key.consumed, &key);
	SEL_ASSERT(rec_key_equal(&key, &ix->nodes[id].key));
	return lookup_chain(ix, h, id, 0, scratch);
}

bool coord_index_lookup(struct coord_index *ix, const struct rec_history *h,
			uint64_t resident, struct coord_lookup *out)
{
	uint64_t first = resident / REC_BLOCK_TOKENS;

	out->chain_count = 0;
	if (resident >= h->token_count)
		return false;
	/* Longest first: the first feasible candidate is the deepest one. */
	for (uint64_t b = h->token_count / REC_BLOCK_TOKENS + 1; b-- > first;)
		if (lookup_block(ix, h, b, resident, out))
			return true;
	return false;
}

/* The least recent unpinned READY node with child_count children that passes. */
static uint32_t victim_pass(const struct coord_index *ix, uint32_t child_count,
			    bool need_row, coord_evictable_fn evictable, void *ctx)
{
	for (uint32_t id = ix->lru.head; id != COORD_NONE; id = ix->nodes[id].lru.next) {
		const struct coord_node *n = &ix->nodes[id];

		if (n->child_count != child_count || n->pins || n->state != COORD_READY ||
		    (need_row && !n->row_present))
			continue;
		if (!evictable || evictable(n, ctx))
			return id;
	}
	return COORD_NONE;
}

uint32_t coord_index_victim(const struct coord_index *ix, coord_evictable_fn evictable,
			    void *ctx, bool *compact)
{
	uint32_t id = victim_pass(ix, 0, false, evictable, ctx);

	*compact = false;
	if (id != COORD_NONE)
		return id;
	id = victim_pass(ix, 1, true, evictable, ctx);
	*compact = id != COORD_NONE;
	return id;
}
