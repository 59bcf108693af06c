/*
 * The startup agreement (coordinator/agreement.h): every rank's records
 * sorted together by key and merged, so each key's listings lie side by
 * side in rank order; then the scan's tree rules (R-DIR-5, R-DIR-6) over
 * the keys held everywhere. Not the wire summary, not applying the actions.
 */
#include "coordinator/agreement.h"

#include "common/base.h"
#include "common/limits.h"
#include "selene/selene.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AGREE_NONE SIZE_MAX

/* One rank's listing of one record. */
struct agree_ref {
	const struct rec_record_info *info;
	uint32_t rank;
	uint32_t index; /* in the rank's summary; < REC_DIR_RECORDS_MAX */
};

/* A key held everywhere, while its fate is decided. */
struct agree_group {
	size_t first_ref;    /* its world_size refs, in rank order */
	size_t parent;       /* group index of its parent, or AGREE_NONE */
	uint64_t file_bytes; /* the smallest among ranks */
	uint32_t child_count;
	bool row_everywhere;
	bool keep;
};

struct agree_state {
	const struct coord_rank_records *ranks;
	uint32_t world_size;
	struct agree_ref *refs;
	size_t ref_count;
	struct agree_group *groups;
	size_t group_count;
	size_t group_max; /* the fewest records any rank holds */
	struct coord_agreement *out;
};

static int compare_keys(const struct rec_key *a, const struct rec_key *b)
{
	if (a->consumed != b->consumed)
		return a->consumed < b->consumed ? -1 : 1;
	return memcmp(a->digest.bytes, b->digest.bytes, REC_DIGEST_BYTES);
}

/* By key, then rank, then position: a key's listings in rank order. */
static int compare_refs(const void *a, const void *b)
{
	const struct agree_ref *x = a, *y = b;
	int c = compare_keys(&x->info->key, &y->info->key);

	if (c)
		return c;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* R-DIR-4 as the scan orders its records: oldest mtime first, then key. */
static int compare_access(const void *a, const void *b)
{
	const struct rec_record_info *x = a, *y = b;

	if (x->mtime_ns != y->mtime_ns)
		return x->mtime_ns < y->mtime_ns ? -1 : 1;
	return compare_keys(&x->key, &y->key);
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

/* Rule 1: one key's count listings (sorted by rank) are each rank's, once. */
static bool held_everywhere(const struct agree_ref *refs, size_t count,
			    uint32_t world_size)
{
	if (count != world_size)
		return false;
	for (uint32_t r = 0; r < world_size; r++)
		if (refs[r].rank != r || !same_header(refs[0].info, refs[r].info))
			return false;
	return true;
}

static void set_action(struct agree_state *s, const struct agree_ref *ref,
		       enum coord_action action)
{
	s->out->actions[s->out->action_first[ref->rank] + ref->index] = action;
}

static size_t find_group(const struct agree_state *s, const struct rec_key *key)
{
	size_t lo = 0, hi = s->group_count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = compare_keys(&s->refs[s->groups[mid].first_ref].info->key, key);

		if (c == 0)
			return mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return AGREE_NONE;
}

/* A group for the key held everywhere whose listings start at first_ref. */
static void group_add(struct agree_state *s, size_t first_ref)
{
	struct agree_group *g;

	/* Each rank lists the key once, so no rank has fewer records. */
	SEL_ASSERT(s->group_count < s->group_max);
	g = &s->groups[s->group_count++];
	*g = (struct agree_group){
		.first_ref = first_ref, .parent = AGREE_NONE,
		.row_everywhere = true, .file_bytes = UINT64_MAX,
	};
	for (uint32_t r = 0; r < s->world_size; r++) {
		const struct rec_record_info *info = s->refs[first_ref + r].info;

		g->row_everywhere = g->row_everywhere && info->row_present;
		if (info->file_bytes < g->file_bytes)
			g->file_bytes = info->file_bytes;
	}
}

/* Sorts every listing by key and makes one group per key held everywhere. */
static void agree_merge(struct agree_state *s)
{
	size_t n = 0;

	for (uint32_t r = 0; r < s->world_size; r++)
		for (size_t i = 0; i < s->ranks[r].count; i++)
			s->refs[n++] = (struct agree_ref){
				.info = &s->ranks[r].records[i], .rank = r,
				.index = (uint32_t)i,
			};
	SEL_ASSERT(n == s->ref_count);
	if (n > 1)
		qsort(s->refs, n, sizeof(s->refs[0]), compare_refs);
	for (size_t i = 0, end; i < n; i = end) {
		const struct rec_key *key = &s->refs[i].info->key;

		for (end = i + 1; end < n; end++)
			if (compare_keys(&s->refs[end].info->key, key))
				break;
		s->out->key_count++;
		if (!held_everywhere(&s->refs[i], end - i, s->world_size)) {
			s->out->disagreed++;
			for (size_t j = i; j < end; j++)
				set_action(s, &s->refs[j], COORD_ACTION_DELETE);
			continue;
		}
		group_add(s, i);
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
	for (size_t i = 0; i < s->group_count; i++) {
		struct agree_group *g = &s->groups[i];
		const struct rec_record_info *info = s->refs[g->first_ref].info;

		if (info->parent.consumed == 0) {
			g->keep = true;
			continue;
		}
		g->parent = find_group(s, &info->parent);
		g->keep = g->parent < i && s->groups[g->parent].keep;
		if (g->keep)
			s->groups[g->parent].child_count++;
		else
			s->out->orphans_dropped++;
	}
	for (size_t i = s->group_count; i-- > 0;) {
		struct agree_group *g = &s->groups[i];

		if (!g->keep || g->row_everywhere || g->child_count > 0)
			continue;
		g->keep = false;
		s->out->page_only_dropped++;
		if (g->parent != AGREE_NONE)
			s->groups[g->parent].child_count--;
	}
}

/* Rule 5, and the agreed records, rank zero's info as every rank agrees. */
static void agree_collect(struct agree_state *s)
{
	struct coord_agreement *out = s->out;

	for (size_t i = 0; i < s->group_count; i++) {
		const struct agree_group *g = &s->groups[i];
		const struct agree_ref *refs = &s->refs[g->first_ref];
		bool truncated = false;

		for (uint32_t r = 0; r < s->world_size; r++) {
			bool row_goes = !g->row_everywhere && refs[r].info->row_present;
			enum coord_action action = COORD_ACTION_DELETE;

			if (g->keep)
				action = row_goes ? COORD_ACTION_TRUNCATE_ROW :
						    COORD_ACTION_KEEP;
			truncated = truncated || action == COORD_ACTION_TRUNCATE_ROW;
			set_action(s, &refs[r], action);
		}
		if (!g->keep)
			continue;
		out->rows_dropped += truncated;
		out->records[out->record_count] = *refs[0].info;
		out->records[out->record_count].row_present = g->row_everywhere;
		out->records[out->record_count].file_bytes = g->file_bytes;
		out->record_count++;
	}
	if (out->record_count > 1)
		qsort(out->records, out->record_count, sizeof(out->records[0]),
		      compare_access);
}

/* Checks the bounds and sizes the arrays: every listing, and groups. */
static int agree_alloc(struct agree_state *s)
{
	struct coord_agreement *out = s->out;

	out->action_first = alloc_array(s->world_size + 1ull, sizeof(size_t));
	if (!out->action_first)
		return -ENOMEM;
	for (uint32_t r = 0; r < s->world_size; r++) {
		SEL_ASSERT(s->ranks[r].records || s->ranks[r].count == 0);
		if (s->ranks[r].count > REC_DIR_RECORDS_MAX)
			return SEL_ETOOBIG;
		out->action_first[r] = s->ref_count;
		s->ref_count += s->ranks[r].count;
		if (r == 0 || s->ranks[r].count < s->group_max)
			s->group_max = s->ranks[r].count;
	}
	out->action_first[s->world_size] = s->ref_count;
	/* A key held everywhere is held by the rank with the fewest records. */
	s->refs = alloc_array(s->ref_count, sizeof(*s->refs));
	s->groups = alloc_array(s->group_max, sizeof(*s->groups));
	out->actions = alloc_array(s->ref_count, sizeof(*out->actions));
	out->records = alloc_array(s->group_max, sizeof(*out->records));
	if (!s->refs || !s->groups || !out->actions || !out->records)
		return -ENOMEM;
	return 0;
}

int coord_agreement_decide(struct coord_agreement *out,
			   const struct coord_rank_records *ranks,
			   uint32_t world_size)
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
		agree_collect(&s);
	}
	free(s.groups);
	free(s.refs);
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
