/*
 * The startup agreement (coordinator/agreement.h): every rank's listings
 * merged through a hash of keys, rank by rank, so each key learns whether
 * ranks 0 .. W-1 each listed it once with the same header; then the scan's
 * tree rules (R-DIR-5, R-DIR-6) over the keys listed everywhere, sorted by
 * key, and the index's capacity; keys a rank holds unread are left in
 * place everywhere (R-AGREE-2). Not the wire summary, not applying the
 * actions.
 */
#include "coordinator/agreement.h"

#include "common/base.h"
#include "common/limits.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AGREE_NONE UINT32_MAX

/*
 * One distinct key among every rank's listings, while they are merged.
 * Listings arrive rank by rank, so the key is listed everywhere exactly when
 * the r-th listing of it comes from rank r, for r = 0 .. world_size - 1,
 * each with rank zero's header.
 */
struct agree_key {
	struct rec_key key;                  /* a copy: probes read no listing */
	const struct rec_record_info *first; /* the first listing: rank zero's when everywhere */
	uint64_t file_bytes;                 /* the smallest among its listings */
	uint32_t listings;
	uint32_t group;                      /* its group once everywhere; AGREE_NONE before */
	bool everywhere;                     /* so far: rank r's listing was the r-th */
	bool row_everywhere;
	bool row_anywhere;
	bool protect;                        /* rule 7: left in place, unindexed */
};

/* A key listed everywhere, while its fate is decided; groups sort by key. */
struct agree_group {
	const struct rec_key *sort_key; /* its key, rank zero's listing's */
	uint32_t key;    /* index into keys */
	uint32_t parent; /* group index of its parent, or AGREE_NONE */
	uint32_t child_count;
	bool keep;
	bool shelters; /* the parent of a key rule 7 holds */
};

/* A hash slot: a key's index and its hash's top bits, checked first. */
struct agree_slot {
	uint32_t key; /* AGREE_NONE: empty */
	uint32_t tag;
};

struct agree_state {
	const struct coord_rank_records *ranks;
	uint32_t world_size;
	size_t ref_count;      /* listings in all ranks */
	size_t held_count;     /* keys held unread, every rank's together (rule 7) */
	bool any_protect;      /* some key is held (rule 7) */
	bool unknown_parent;   /* a held key no rank read: its parent unknown */
	uint32_t *ref_keys;    /* each listing's key, rank-major like actions */
	struct agree_key *keys;
	uint32_t key_count;
	struct agree_slot *slots; /* open addressing over keys */
	uint64_t slot_mask;
	uint64_t hash_seed;
	struct agree_group *groups;
	uint32_t group_count;
	size_t group_max;      /* the fewest records any rank holds */
	struct coord_agreement *out;
};

/* R-DIR-4 as the scan orders its records: oldest mtime first, then key. */
static int compare_access(const void *a, const void *b)
{
	const struct rec_record_info *x = a, *y = b;

	if (x->mtime_ns != y->mtime_ns)
		return x->mtime_ns < y->mtime_ns ? -1 : 1;
	return rec_key_compare(&x->key, &y->key);
}

static void *alloc_array(size_t count, size_t size)
{
	if (count == 0)
		count = 1;
	if (count > SIZE_MAX / size)
		return NULL;
	return malloc(count * size);
}

/*
 * Rule 1: the header fields a summary carries, beyond the key, agree. The
 * creation time is not among them on the wire: the agreement digest covers
 * it (R-AGREE-1).
 */
static bool same_header(const struct rec_record_info *a,
			const struct rec_record_info *b)
{
	return rec_digest_equal(&a->agreement, &b->agreement) &&
	       rec_key_equal(&a->parent, &b->parent) &&
	       rec_digest_equal(&a->bucket, &b->bucket) &&
	       a->first_page_index == b->first_page_index &&
	       a->tail_page_count == b->tail_page_count;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * A key's hash. Digests come from peers' summaries: the seed, fresh for
 * each agreement, keeps a peer from choosing keys that collide.
 */
static uint64_t key_hash(const struct agree_state *s, const struct rec_key *key)
{
	uint64_t lo = sel_get_le64(key->digest.bytes), hi = sel_get_le64(key->digest.bytes + 8);

	return mix64(lo ^ s->hash_seed) ^ mix64(hi + key->consumed * 0x9e3779b97f4a7c15ull);
}

/* The slot holding key, or the empty slot where it would go (*tag: its tag). */
static uint64_t find_slot(const struct agree_state *s, const struct rec_key *key,
			  uint32_t *tag)
{
	uint64_t hash = key_hash(s, key), slot = hash & s->slot_mask;

	*tag = (uint32_t)(hash >> 32);
	while (s->slots[slot].key != AGREE_NONE &&
	       (s->slots[slot].tag != *tag ||
		!rec_key_equal(&s->keys[s->slots[slot].key].key, key)))
		slot = (slot + 1) & s->slot_mask;
	return slot;
}

/* Index of key among the keys, or AGREE_NONE. */
static uint32_t find_key(const struct agree_state *s, const struct rec_key *key)
{
	uint32_t tag;

	return s->slots[find_slot(s, key, &tag)].key;
}

static void set_action(struct agree_state *s, uint32_t rank, size_t index,
		       enum coord_action action)
{
	s->out->actions[s->out->action_first[rank] + index] = action;
}

/* Rule 1 for one more listing, rank's, of its key (added when new). */
static uint32_t merge_listing(struct agree_state *s, uint32_t rank,
			      const struct rec_record_info *info)
{
	uint32_t tag;
	uint64_t slot = find_slot(s, &info->key, &tag);
	struct agree_key *k;

	if (s->slots[slot].key == AGREE_NONE) {
		s->slots[slot] = (struct agree_slot){ .key = s->key_count, .tag = tag };
		s->keys[s->key_count] = (struct agree_key){
			.key = info->key, .first = info, .file_bytes = UINT64_MAX,
			.group = AGREE_NONE, .everywhere = true, .row_everywhere = true,
		};
		s->key_count++;
	}
	k = &s->keys[s->slots[slot].key];
	k->everywhere = k->everywhere && k->listings == rank &&
		  (rank == 0 || same_header(k->first, info));
	k->listings++;
	k->row_everywhere = k->row_everywhere && info->row_present;
	k->row_anywhere = k->row_anywhere || info->row_present;
	if (info->file_bytes < k->file_bytes)
		k->file_bytes = info->file_bytes;
	return s->slots[slot].key;
}

/* Rule 7 (R-AGREE-2) for a key a rank lists as held (added when new, no listing). */
static void merge_held(struct agree_state *s, const struct rec_key *key)
{
	uint32_t tag;
	uint64_t slot = find_slot(s, key, &tag);

	if (s->slots[slot].key == AGREE_NONE) {
		s->slots[slot] = (struct agree_slot){ .key = s->key_count, .tag = tag };
		s->keys[s->key_count] = (struct agree_key){
			.key = *key, .file_bytes = UINT64_MAX, .group = AGREE_NONE,
		};
		s->key_count++;
	}
	s->keys[s->slots[slot].key].protect = true;
}

/* Rule 7: group g is left in place unindexed instead of kept or dropped. */
static void protect_group(struct agree_state *s, struct agree_group *g)
{
	g->keep = false;
	s->keys[g->key].protect = true;
	s->out->held++;
	if (g->parent != AGREE_NONE)
		s->groups[g->parent].shelters = true;
}

/* Groups by their key. */
static int compare_groups(const void *a, const void *b)
{
	return rec_key_compare(((const struct agree_group *)a)->sort_key,
			    ((const struct agree_group *)b)->sort_key);
}

/*
 * Every listing into the hash of keys (expected O(1) each), then one group
 * per key listed everywhere, sorted by key so that rules 3 and 4 meet a
 * parent before its children.
 */
static void agree_merge(struct agree_state *s)
{
	size_t n = 0;

	for (uint32_t r = 0; r < s->world_size; r++)
		for (size_t i = 0; i < s->ranks[r].count; i++)
			s->ref_keys[n++] = merge_listing(s, r, &s->ranks[r].records[i]);
	SEL_ASSERT(n == s->ref_count);
	for (uint32_t r = 0; r < s->world_size; r++)
		for (size_t i = 0; i < s->ranks[r].held_count; i++)
			merge_held(s, &s->ranks[r].held[i]);
	s->out->key_count = s->key_count;
	for (uint32_t k = 0; k < s->key_count; k++) {
		if (s->keys[k].protect) {
			s->any_protect = true;
			s->unknown_parent = s->unknown_parent || !s->keys[k].first;
			s->out->held++;
			continue;
		}
		if (!s->keys[k].everywhere || s->keys[k].listings != s->world_size) {
			s->keys[k].everywhere = false;
			s->out->disagreed++;
			continue;
		}
		/* Each rank lists the key once, so no rank has fewer records. */
		SEL_ASSERT(s->group_count < s->group_max);
		s->groups[s->group_count++] = (struct agree_group){
			.sort_key = &s->keys[k].key, .key = k, .parent = AGREE_NONE,
		};
	}
	if (s->group_count > 1)
		qsort(s->groups, s->group_count, sizeof(s->groups[0]), compare_groups);
	for (uint32_t g = 0; g < s->group_count; g++)
		s->keys[s->groups[g].key].group = g;
}

/*
 * Rule 7: a kept group that is the parent of a held key shelters it, so
 * rule 6 leaves it in place rather than deleting it.
 */
static void agree_shelter(struct agree_state *s)
{
	for (uint32_t k = 0; s->any_protect && k < s->key_count; k++) {
		const struct agree_key *key = &s->keys[k];
		uint32_t parent;

		if (!key->protect || !key->first || key->first->parent.consumed == 0)
			continue;
		parent = find_key(s, &key->first->parent);
		if (parent != AGREE_NONE && s->keys[parent].group != AGREE_NONE)
			s->groups[s->keys[parent].group].shelters = true;
	}
}

/*
 * Rules 3 and 4. Groups are sorted by key, and a parent's consumed count is
 * smaller than its child's (R-REC-6), so ascending, a parent is decided
 * before its children; a parent found at or after its child is malformed
 * and counts as missing. Descending, a page-only record with no kept child
 * goes, and may leave its parent childless before the parent is visited.
 */
static void agree_decide_tree(struct agree_state *s)
{
	for (uint32_t i = 0; i < s->group_count; i++) {
		struct agree_group *g = &s->groups[i];
		const struct rec_record_info *info = s->keys[g->key].first;
		uint32_t parent_key;

		if (info->parent.consumed == 0) {
			g->keep = true;
			continue;
		}
		parent_key = find_key(s, &info->parent);
		g->parent = parent_key == AGREE_NONE ? AGREE_NONE : s->keys[parent_key].group;
		if (parent_key != AGREE_NONE && s->keys[parent_key].protect) {
			protect_group(s, g); /* rule 7: its parent may be read tomorrow */
			continue;
		}
		g->keep = g->parent != AGREE_NONE && g->parent < i && s->groups[g->parent].keep;
		if (g->keep)
			s->groups[g->parent].child_count++;
		else
			s->out->orphans_dropped++;
	}
	for (uint32_t i = s->group_count; i-- > 0;) {
		struct agree_group *g = &s->groups[i];

		if (!g->keep || s->keys[g->key].row_everywhere || g->child_count > 0)
			continue;
		if (s->any_protect)
			protect_group(s, g); /* rule 7: a held key may be its child */
		else
			s->out->page_only_dropped++;
		g->keep = false;
		if (g->parent != AGREE_NONE)
			s->groups[g->parent].child_count--;
	}
	agree_shelter(s);
}

/* Whether kept leaf group a was used before b (rank zero's mtime, then key). */
static bool used_before(const struct agree_state *s, uint32_t a, uint32_t b)
{
	const struct rec_record_info *x = s->keys[s->groups[a].key].first;
	const struct rec_record_info *y = s->keys[s->groups[b].key].first;

	if (x->mtime_ns != y->mtime_ns)
		return x->mtime_ns < y->mtime_ns;
	return a < b; /* groups sort by key */
}

/* A min-heap of group indices by use: the least recently used on top. */
static void leaves_push(const struct agree_state *s, uint32_t *heap, size_t *n, uint32_t g)
{
	size_t i = (*n)++;

	while (i > 0 && used_before(s, g, heap[(i - 1) / 2])) {
		heap[i] = heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	heap[i] = g;
}

static uint32_t leaves_pop(const struct agree_state *s, uint32_t *heap, size_t *n)
{
	uint32_t top = heap[0], last = heap[--*n];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && used_before(s, heap[c + 1], heap[c]))
			c++;
		if (!used_before(s, heap[c], last))
			break;
		heap[i] = heap[c];
		i = c;
	}
	if (*n > 0)
		heap[i] = last;
	return top;
}

/*
 * Rule 6: while more than records_max records are kept, the least recently
 * used leaf goes (rank zero's mtime), and with it each page-only ancestor
 * it leaves childless (rule 4); a parent whose last child went is a leaf
 * then, and joins the candidates.
 */
static int agree_fit(struct agree_state *s, size_t records_max)
{
	size_t kept = 0, n = 0;
	uint32_t *heap;

	for (uint32_t i = 0; i < s->group_count; i++)
		kept += s->groups[i].keep;
	if (kept <= records_max)
		return 0;
	heap = alloc_array(s->group_count, sizeof(*heap));
	if (!heap)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->group_count; i++)
		if (s->groups[i].keep && s->groups[i].child_count == 0)
			leaves_push(s, heap, &n, i);
	while (kept > records_max && n > 0) {
		uint32_t g = leaves_pop(s, heap, &n);

		if (s->groups[g].shelters || s->unknown_parent)
			protect_group(s, &s->groups[g]); /* rule 7 */
		else
			s->out->capacity_dropped++;
		s->groups[g].keep = false;
		kept--;
		for (uint32_t p = s->groups[g].parent; p != AGREE_NONE;) {
			struct agree_group *parent = &s->groups[p];

			if (--parent->child_count > 0)
				break;
			if (s->keys[parent->key].row_everywhere) {
				leaves_push(s, heap, &n, p);
				break;
			}
			if (s->any_protect)
				protect_group(s, parent); /* rule 7, as rule 4 */
			else
				s->out->page_only_dropped++;
			parent->keep = false;
			kept--;
			p = parent->parent;
		}
	}
	free(heap);
	return 0;
}

/* Rule 5, and the agreed records, rank zero's info as every rank agrees. */
static void agree_collect(struct agree_state *s)
{
	struct coord_agreement *out = s->out;
	size_t n = 0;

	for (uint32_t r = 0; r < s->world_size; r++)
		for (size_t i = 0; i < s->ranks[r].count; i++) {
			const struct agree_key *k = &s->keys[s->ref_keys[n++]];
			enum coord_action action = COORD_ACTION_DELETE;

			if (k->protect)
				action = COORD_ACTION_KEEP; /* rule 7 */
			else if (k->everywhere && s->groups[k->group].keep)
				action = !k->row_everywhere && s->ranks[r].records[i].row_present ?
						 COORD_ACTION_TRUNCATE_ROW : COORD_ACTION_KEEP;
			set_action(s, r, i, action);
		}
	for (uint32_t i = 0; i < s->group_count; i++) {
		const struct agree_key *k = &s->keys[s->groups[i].key];

		if (!s->groups[i].keep)
			continue;
		out->rows_dropped += !k->row_everywhere && k->row_anywhere;
		out->records[out->record_count] = *k->first;
		out->records[out->record_count].row_present = k->row_everywhere;
		out->records[out->record_count].file_bytes = k->file_bytes;
		out->record_count++;
	}
	if (out->record_count > 1)
		qsort(out->records, out->record_count, sizeof(out->records[0]),
		      compare_access);
}

/* Checks the bounds and sizes the arrays: every listing, keys and groups. */
static int agree_alloc(struct agree_state *s)
{
	struct coord_agreement *out = s->out;
	uint64_t slots = 2;

	out->action_first = alloc_array(s->world_size + 1ull, sizeof(size_t));
	if (!out->action_first)
		return -ENOMEM;
	for (uint32_t r = 0; r < s->world_size; r++) {
		SEL_ASSERT(s->ranks[r].records || s->ranks[r].count == 0);
		SEL_ASSERT(s->ranks[r].held || s->ranks[r].held_count == 0);
		if (s->ranks[r].count > REC_DIR_RECORDS_MAX ||
		    s->ranks[r].held_count > REC_DIR_RECORDS_MAX)
			return SEL_ETOOBIG;
		out->action_first[r] = s->ref_count;
		s->ref_count += s->ranks[r].count;
		s->held_count += s->ranks[r].held_count;
		if (r == 0 || s->ranks[r].count < s->group_max)
			s->group_max = s->ranks[r].count;
	}
	out->action_first[s->world_size] = s->ref_count;
	/* Key indices are u32, and the table keeps at least half its slots empty. */
	if (s->ref_count + s->held_count >= UINT32_MAX / 2)
		return SEL_ETOOBIG;
	while (slots < 2 * (uint64_t)(s->ref_count + s->held_count))
		slots *= 2;
	s->slot_mask = slots - 1;
	s->hash_seed = mix64(sel_monotonic_ns() ^ (uintptr_t)s);
	s->ref_keys = alloc_array(s->ref_count, sizeof(*s->ref_keys));
	s->keys = alloc_array(s->ref_count + s->held_count, sizeof(*s->keys));
	s->slots = alloc_array(slots, sizeof(*s->slots));
	/* A key listed everywhere is listed by the rank with the fewest records. */
	s->groups = alloc_array(s->group_max, sizeof(*s->groups));
	out->actions = alloc_array(s->ref_count, sizeof(*out->actions));
	out->records = alloc_array(s->group_max, sizeof(*out->records));
	if (!s->ref_keys || !s->keys || !s->slots || !s->groups || !out->actions ||
	    !out->records)
		return -ENOMEM;
	for (uint64_t i = 0; i < slots; i++)
		s->slots[i].key = AGREE_NONE;
	return 0;
}

int coord_agreement_decide(struct coord_agreement *out,
			   const struct coord_rank_records *ranks,
			   uint32_t world_size, size_t records_max)
{
	struct agree_state s = {
		.ranks = ranks, .world_size = world_size, .out = out,
	};
	int ret;

	SEL_ASSERT(world_size >= 1);
	memset(out, 0, sizeof(*out));
	if (world_size > REC_WORLD_SIZE_MAX)
		return SEL_ETOOBIG;
	out->world_size = world_size;
	ret = agree_alloc(&s);
	if (!ret) {
		agree_merge(&s);
		agree_decide_tree(&s);
		ret = agree_fit(&s, records_max);
	}
	if (!ret)
		agree_collect(&s);
	free(s.groups);
	free(s.slots);
	free(s.keys);
	free(s.ref_keys);
	if (ret)
		coord_agreement_destroy(out);
	return ret;
}

const enum coord_action *coord_agreement_actions(const struct coord_agreement *a,
						 uint32_t rank)
{
	SEL_ASSERT(rank < a->world_size);
	return &a->actions[a->action_first[rank]];
}

void coord_agreement_destroy(struct coord_agreement *a)
{
	free(a->records);
	free(a->actions);
	free(a->action_first);
	memset(a, 0, sizeof(*a));
}
