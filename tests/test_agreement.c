/*
 * The startup agreement (coordinator/agreement.h, docs/DESIGN.md section 7) and
 * the header agreement digest (FORMAT.md R-AGREE-1): files or rows missing
 * on one rank, headers that differ, dropped parents, empty ranks, malformed
 * summaries, bounds, two real rank directories scanned, and thousands of
 * random records checked against a brute-force reference.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "coordinator/agreement.h"
#include "selene/selene.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORLD_MAX 4u
#define SMALL_MAX 16u

static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void rng_bytes(uint64_t *state, uint8_t *out, size_t len)
{
	for (size_t i = 0; i < len; i++)
		out[i] = (uint8_t)rng_next(state);
}

/* Bytes of a synthetic record's file: page-only, and with its 8 KiB row. */
static uint64_t page_only_bytes(uint32_t tail_page_count)
{
	return 4096ull * (2 + tail_page_count);
}

static void set_row(struct rec_record_info *info, bool row_present)
{
	info->row_present = row_present;
	info->file_bytes = page_only_bytes(info->tail_page_count) +
			   (row_present ? 8192 : 0);
}

/*
 * A synthetic record at consumed tokens, named by tag, child of parent
 * (NULL: a root record), with its row; the agreement digest stands for a
 * header that every rank shares.
 */
static struct rec_record_info info_make(uint64_t consumed, uint8_t tag,
					const struct rec_record_info *parent)
{
	struct rec_record_info info;

	memset(&info, 0, sizeof(info));
	info.key.consumed = consumed;
	memset(info.key.digest.bytes, tag, REC_DIGEST_BYTES);
	if (parent)
		info.parent = parent->key;
	memset(info.bucket.bytes, tag ^ 0x33, REC_DIGEST_BYTES);
	info.first_page_index = (uint32_t)(info.parent.consumed / 64);
	info.tail_page_count = (uint32_t)(consumed / 64) - info.first_page_index;
	info.created_ns = 1000 + consumed;
	info.mtime_ns = 5000 + tag;
	memset(info.agreement.bytes, tag ^ 0xa5, REC_DIGEST_BYTES);
	set_row(&info, true);
	return info;
}

/* Every rank's summary for the small cases. */
struct world {
	struct rec_record_info records[WORLD_MAX][SMALL_MAX];
	struct rec_key held[WORLD_MAX][SMALL_MAX];
	struct coord_rank_records ranks[WORLD_MAX];
	uint32_t world_size;
};

/* Every rank holds every one of the count records. */
static void world_fill(struct world *w, uint32_t world_size,
		       const struct rec_record_info *records, size_t count)
{
	SEL_ASSERT(world_size <= WORLD_MAX && count <= SMALL_MAX);
	memset(w, 0, sizeof(*w));
	w->world_size = world_size;
	for (uint32_t r = 0; r < world_size; r++) {
		memcpy(w->records[r], records, count * sizeof(*records));
		w->ranks[r].records = w->records[r];
		w->ranks[r].count = count;
		w->ranks[r].held = w->held[r];
	}
}

static struct rec_record_info *world_find(struct world *w, uint32_t rank,
					  const struct rec_key *key)
{
	for (size_t i = 0; i < w->ranks[rank].count; i++)
		if (rec_key_equal(&w->records[rank][i].key, key))
			return &w->records[rank][i];
	fail_msg("rank %u does not hold the key at %llu", rank,
		 (unsigned long long)key->consumed);
	return NULL;
}

/* Removes key from rank's summary. */
static void world_remove(struct world *w, uint32_t rank, const struct rec_key *key)
{
	struct rec_record_info *info = world_find(w, rank, key);
	size_t i = (size_t)(info - w->records[rank]);

	memmove(info, info + 1, (w->ranks[rank].count - i - 1) * sizeof(*info));
	w->ranks[rank].count--;
}

/* rank's scan could not read key (R-DIR-7): held, out of its records. */
static void world_hold(struct world *w, uint32_t rank, const struct rec_key *key)
{
	world_remove(w, rank, key);
	w->held[rank][w->ranks[rank].held_count++] = *key;
}

static void world_decide(struct world *w, struct coord_agreement *a)
{
	assert_int_equal(coord_agreement_decide(a, w->ranks, w->world_size, SIZE_MAX), 0);
	assert_int_equal(a->world_size, w->world_size);
}

/* rank's action on its file of key. */
static enum coord_action action_of(const struct world *w,
				   const struct coord_agreement *a, uint32_t rank,
				   const struct rec_key *key)
{
	for (size_t i = 0; i < w->ranks[rank].count; i++)
		if (rec_key_equal(&w->records[rank][i].key, key))
			return coord_agreement_actions(a, rank)[i];
	fail_msg("rank %u does not hold the key at %llu", rank,
		 (unsigned long long)key->consumed);
	return COORD_ACTION_DELETE;
}

static const struct rec_record_info *agreed_find(const struct coord_agreement *a,
						 const struct rec_key *key)
{
	for (size_t i = 0; i < a->record_count; i++)
		if (rec_key_equal(&a->records[i].key, key))
			return &a->records[i];
	return NULL;
}

/* Every rank that holds key does action to it. */
static void expect_everywhere(const struct world *w, const struct coord_agreement *a,
			      const struct rec_key *key, enum coord_action action)
{
	for (uint32_t r = 0; r < w->world_size; r++)
		for (size_t i = 0; i < w->ranks[r].count; i++)
			if (rec_key_equal(&w->records[r][i].key, key))
				assert_int_equal(coord_agreement_actions(a, r)[i], action);
}

/* A header of g for a record at 640 tokens after a parent at 200. */
static void header_make(struct rec_header *h, const struct rec_geometry *g)
{
	struct rec_identity ns;
	struct rec_key key = { .consumed = 640 }, parent = { .consumed = 200 };
	struct rec_digest bucket;

	tu_identities(NULL, &ns);
	memset(key.digest.bytes, 0x11, REC_DIGEST_BYTES);
	memset(parent.digest.bytes, 0x22, REC_DIGEST_BYTES);
	memset(bucket.bytes, 0x33, REC_DIGEST_BYTES);
	assert_int_equal(rec_header_init(h, g, &ns, &key, &parent, &bucket, 3, 7,
					 1700000000000000000ull), 0);
}

/* R-AGREE-1: two ranks' headers of one record have equal digests. */
static void test_agreement_digest_equal_across_ranks(void **state)
{
	struct rec_geometry g0, g1;
	struct rec_header h0, h1, decoded;
	struct rec_digest d0, d1, dd;
	uint8_t buf[REC_HEADER_BYTES];
	char why[256];

	(void)state;
	tu_geometry(&g0, 64, 3, 4096, 8192, 0, 2);
	tu_geometry(&g1, 64, 3, 4096, 8192, 1, 2);
	header_make(&h0, &g0);
	header_make(&h1, &g1);
	h0.row_checksum = 0x1234;
	h1.row_checksum = 0x9876;
	assert_false(rec_digest_equal(&h0.fingerprint, &h1.fingerprint));
	assert_int_not_equal(h0.first_rank, h1.first_rank);
	rec_header_agreement_digest(&h0, &d0);
	rec_header_agreement_digest(&h1, &d1);
	assert_true(rec_digest_equal(&d0, &d1));
	/* The scan digests the header it decoded: the same bytes. */
	rec_header_encode(&h1, buf);
	assert_int_equal(rec_header_decode(buf, &decoded, why, sizeof(why)), 0);
	assert_int_not_equal(decoded.header_checksum, 0);
	rec_header_agreement_digest(&decoded, &dd);
	assert_true(rec_digest_equal(&d0, &dd));
	assert_false(rec_digest_is_zero(&d0));
}

/* Changes field number field of h; false past the last field. */
static bool header_mutate(struct rec_header *h, int field)
{
	switch (field) {
	case 0: h->version++; break;
	case 1: h->flags = REC_FLAG_REPLICATED_ROW; break;
	case 2: h->namespace_id.bytes[5] ^= 1; break;
	case 3: h->key.consumed++; break;
	case 4: h->key.digest.bytes[15] ^= 0x80; break;
	case 5: h->parent.consumed++; break;
	case 6: h->parent.digest.bytes[0] ^= 1; break;
	case 7: h->bucket.bytes[7] ^= 4; break;
	case 8: h->page_tokens *= 2; break;
	case 9: h->tail_page_count++; break;
	case 10: h->first_page_index++; break;
	case 11: h->rank_count = 2; break;
	case 12: h->world_size++; break;
	case 13: h->plane_count--; break;
	case 14: h->page_stride += 4096; break;
	case 15: h->checksum_offset += 4096; break;
	case 16: h->page_offset += 4096; break;
	case 17: h->row_offset += 4096; break;
	case 18: h->row_length += 4096; break;
	case 19: h->created_ns++; break;
	case 20: h->table[0]++; break;
	case 21: h->table[2] *= 2; break;
	case 22: h->table[h->plane_count]++; break; /* row bytes */
	default: return false;
	}
	return true;
}

/* R-AGREE-1: any field but the four rank-specific ones changes the digest. */
static void test_agreement_digest_covers_other_fields(void **state)
{
	struct rec_geometry g;
	struct rec_header h, changed;
	struct rec_digest base, d;
	int field;

	(void)state;
	tu_geometry(&g, 64, 3, 4096, 8192, 0, 4);
	header_make(&h, &g);
	rec_header_agreement_digest(&h, &base);
	/* The four fields that differ between ranks leave it alone. */
	changed = h;
	memset(changed.fingerprint.bytes, 0xee, REC_DIGEST_BYTES);
	changed.first_rank = 3;
	changed.row_checksum = ~0ull;
	changed.header_checksum = 42;
	rec_header_agreement_digest(&changed, &d);
	assert_true(rec_digest_equal(&base, &d));
	for (field = 0;; field++) {
		changed = h;
		if (!header_mutate(&changed, field))
			break;
		rec_header_agreement_digest(&changed, &d);
		if (rec_digest_equal(&base, &d))
			fail_msg("field %d does not change the agreement digest", field);
	}
	assert_int_equal(field, 23);
}

/* R-AGREE-1: the scans of two rank directories give one record equal digests. */
static void test_agreement_scan_digests_agree(void **state)
{
	char *base = tu_make_temp_dir("agreement");
	struct rec_geometry g[2];
	struct rec_dir *dir[2];
	struct rec_scan scan[2];
	struct tu_record rec[2], child[2];
	struct coord_rank_records ranks[2];
	struct coord_agreement a;

	(void)state;
	sel_log_set_level(SEL_LOG_ERROR);
	for (uint32_t r = 0; r < 2; r++) {
		tu_geometry(&g[r], 64, 2, 4096, 8192, r, 2);
		dir[r] = tu_dir_open(base, &g[r], false);
		/* Each rank's payload differs, and so its row checksum. */
		tu_record_make(&rec[r], &g[r], 7, 300, NULL, 100 + r);
		tu_record_make(&child[r], &g[r], 7, 700, &rec[r], 200 + r);
		assert_int_equal(tu_record_write(dir[r], &rec[r], 0), 0);
		assert_int_equal(tu_record_write(dir[r], &child[r], 0), 0);
		assert_int_equal(rec_dir_scan(dir[r], &scan[r]), 0);
		assert_int_equal(scan[r].record_count, 2);
		ranks[r] = (struct coord_rank_records){ .records = scan[r].records,
							.count = scan[r].record_count };
	}
	for (size_t i = 0; i < 2; i++) {
		const struct rec_record_info *x = &scan[0].records[i];
		const struct rec_record_info *y = &scan[1].records[0];

		if (!rec_key_equal(&x->key, &y->key))
			y = &scan[1].records[1];
		assert_true(rec_key_equal(&x->key, &y->key));
		assert_true(rec_digest_equal(&x->agreement, &y->agreement));
	}
	assert_false(rec_digest_equal(&scan[0].records[0].agreement,
				      &scan[0].records[1].agreement));
	assert_int_equal(coord_agreement_decide(&a, ranks, 2, SIZE_MAX), 0);
	assert_int_equal(a.record_count, 2);
	for (uint32_t r = 0; r < 2; r++)
		for (size_t i = 0; i < 2; i++)
			assert_int_equal(coord_agreement_actions(&a, r)[i],
					 COORD_ACTION_KEEP);
	coord_agreement_destroy(&a);
	for (uint32_t r = 0; r < 2; r++) {
		rec_scan_free(&scan[r]);
		tu_record_free(&rec[r]);
		tu_record_free(&child[r]);
		rec_dir_close(dir[r]);
	}
	sel_log_set_level(SEL_LOG_INFO);
	tu_remove_tree(base);
}

/* A file missing on one rank is deleted everywhere, with its descendants. */
static void test_agreement_file_missing_on_one_rank(void **state)
{
	struct rec_record_info rs[5];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* root A */
	rs[1] = info_make(300, 2, &rs[0]); /* B, missing on rank 2 */
	rs[2] = info_make(500, 3, &rs[1]); /* C, child of B */
	rs[3] = info_make(700, 4, &rs[2]); /* D, grandchild of B */
	rs[4] = info_make(400, 5, &rs[0]); /* E, sibling of B */
	world_fill(&w, 3, rs, 5);
	world_remove(&w, 2, &rs[1].key);
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 2);
	assert_non_null(agreed_find(&a, &rs[0].key));
	assert_non_null(agreed_find(&a, &rs[4].key));
	for (int i = 1; i <= 3; i++) {
		assert_null(agreed_find(&a, &rs[i].key));
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_DELETE);
	}
	expect_everywhere(&w, &a, &rs[0].key, COORD_ACTION_KEEP);
	expect_everywhere(&w, &a, &rs[4].key, COORD_ACTION_KEEP);
	assert_int_equal(a.key_count, 5);
	assert_int_equal(a.disagreed, 1);
	assert_int_equal(a.orphans_dropped, 2);
	assert_int_equal(a.page_only_dropped, 0);
	coord_agreement_destroy(&a);
}

/*
 * A row missing on one rank: kept page-only where it has children (the
 * others truncate), dropped everywhere where that leaves it childless,
 * and a page-only parent left childless goes with it.
 */
static void test_agreement_row_missing_on_one_rank(void **state)
{
	struct rec_record_info rs[6];
	const struct rec_record_info *agreed;
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* A: row missing on rank 1 */
	rs[1] = info_make(300, 2, &rs[0]); /* B: child of A, rows everywhere */
	rs[2] = info_make(200, 3, NULL);   /* L: leaf, row missing on rank 0 */
	rs[3] = info_make(150, 4, NULL);   /* P: row missing on rank 2 */
	rs[4] = info_make(450, 5, &rs[3]); /* Q: P's only child, row missing on 1 */
	rs[5] = info_make(600, 6, &rs[4]); /* R: Q's child, page-only everywhere */
	world_fill(&w, 3, rs, 6);
	for (uint32_t r = 0; r < 3; r++)
		set_row(world_find(&w, r, &rs[5].key), false);
	set_row(world_find(&w, 1, &rs[0].key), false);
	set_row(world_find(&w, 0, &rs[2].key), false);
	set_row(world_find(&w, 2, &rs[3].key), false);
	set_row(world_find(&w, 1, &rs[4].key), false);
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 2);
	agreed = agreed_find(&a, &rs[0].key);
	assert_non_null(agreed);
	assert_false(agreed->row_present);
	assert_int_equal(agreed->file_bytes, page_only_bytes(rs[0].tail_page_count));
	assert_int_equal(action_of(&w, &a, 0, &rs[0].key), COORD_ACTION_TRUNCATE_ROW);
	assert_int_equal(action_of(&w, &a, 1, &rs[0].key), COORD_ACTION_KEEP);
	assert_int_equal(action_of(&w, &a, 2, &rs[0].key), COORD_ACTION_TRUNCATE_ROW);
	agreed = agreed_find(&a, &rs[1].key);
	assert_non_null(agreed);
	assert_true(agreed->row_present);
	assert_int_equal(agreed->file_bytes, rs[1].file_bytes);
	expect_everywhere(&w, &a, &rs[1].key, COORD_ACTION_KEEP);
	for (int i = 2; i <= 5; i++) {
		assert_null(agreed_find(&a, &rs[i].key));
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_DELETE);
	}
	assert_int_equal(a.disagreed, 0);
	assert_int_equal(a.orphans_dropped, 0);
	assert_int_equal(a.page_only_dropped, 4);
	assert_int_equal(a.rows_dropped, 1);
	coord_agreement_destroy(&a);
}

/* A different header on one rank: deleted everywhere, with its children. */
static void test_agreement_different_header_on_one_rank(void **state)
{
	struct rec_record_info rs[4];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* digest differs on rank 3 */
	rs[1] = info_make(300, 2, &rs[0]);
	rs[2] = info_make(120, 3, NULL);   /* digest equal, parent differs on 0 */
	rs[3] = info_make(140, 4, NULL);   /* creation time differs on rank 1 */
	world_fill(&w, 4, rs, 4);
	world_find(&w, 3, &rs[0].key)->agreement.bytes[9] ^= 1;
	world_find(&w, 0, &rs[2].key)->parent = rs[0].key;
	/* a different creation time shows in the agreement digest (R-AGREE-1) */
	world_find(&w, 1, &rs[3].key)->agreement.bytes[0] ^= 2;
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 0);
	for (int i = 0; i < 4; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_DELETE);
	assert_int_equal(a.disagreed, 3);
	assert_int_equal(a.orphans_dropped, 1);
	coord_agreement_destroy(&a);
}

/* A parent that is dropped takes its children and theirs on every rank. */
static void test_agreement_dropped_parent_takes_children(void **state)
{
	struct rec_record_info rs[6];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* root, kept */
	rs[1] = info_make(200, 2, &rs[0]); /* missing on every rank */
	rs[2] = info_make(300, 3, &rs[1]);
	rs[3] = info_make(400, 4, &rs[1]);
	rs[4] = info_make(500, 5, &rs[3]);
	rs[5] = info_make(600, 6, &rs[0]); /* kept */
	world_fill(&w, 2, rs, 6);
	for (uint32_t r = 0; r < 2; r++)
		world_remove(&w, r, &rs[1].key);
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 2);
	expect_everywhere(&w, &a, &rs[0].key, COORD_ACTION_KEEP);
	expect_everywhere(&w, &a, &rs[5].key, COORD_ACTION_KEEP);
	for (int i = 2; i <= 4; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_DELETE);
	assert_int_equal(a.key_count, 5);
	assert_int_equal(a.disagreed, 0);
	assert_int_equal(a.orphans_dropped, 3);
	coord_agreement_destroy(&a);
}

/*
 * Rule 6: past records_max, the least recently used leaves go (rank zero's
 * mtime), and a page-only parent with them once childless; a parent whose
 * last child went is a leaf in its turn. Their files go on every rank.
 */
static void test_agreement_records_max(void **state)
{
	struct rec_record_info rs[6];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* root */
	rs[1] = info_make(200, 2, &rs[0]); /* its child */
	rs[2] = info_make(300, 3, NULL);   /* a root leaf, the oldest */
	rs[3] = info_make(400, 4, NULL);   /* a page-only root */
	rs[4] = info_make(500, 5, &rs[3]); /* its only child */
	rs[5] = info_make(600, 6, NULL);   /* the newest */
	set_row(&rs[3], false);
	rs[0].mtime_ns = 10;
	rs[1].mtime_ns = 50;
	rs[2].mtime_ns = 5;
	rs[3].mtime_ns = 1; /* oldest of all, but not a leaf */
	rs[4].mtime_ns = 20;
	rs[5].mtime_ns = 100;
	world_fill(&w, 2, rs, 6);
	/* no limit and a limit that holds them all: all kept */
	assert_int_equal(coord_agreement_decide(&a, w.ranks, 2, 6), 0);
	assert_int_equal(a.record_count, 6);
	assert_int_equal(a.capacity_dropped, 0);
	coord_agreement_destroy(&a);
	/* 3: the oldest leaf (300), then 500, which takes its page-only parent */
	assert_int_equal(coord_agreement_decide(&a, w.ranks, 2, 3), 0);
	assert_int_equal(a.record_count, 3);
	assert_int_equal(a.capacity_dropped, 2);
	assert_int_equal(a.page_only_dropped, 1);
	for (int i = 2; i <= 4; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_DELETE);
	expect_everywhere(&w, &a, &rs[0].key, COORD_ACTION_KEEP);
	expect_everywhere(&w, &a, &rs[1].key, COORD_ACTION_KEEP);
	expect_everywhere(&w, &a, &rs[5].key, COORD_ACTION_KEEP);
	coord_agreement_destroy(&a);
	/* 1: then 200, which leaves 100 a leaf (it has its row): then 100 */
	assert_int_equal(coord_agreement_decide(&a, w.ranks, 2, 1), 0);
	assert_int_equal(a.record_count, 1);
	assert_int_equal(a.capacity_dropped, 4);
	assert_true(rec_key_equal(&a.records[0].key, &rs[5].key));
	for (int i = 0; i <= 4; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_DELETE);
	coord_agreement_destroy(&a);
}

/*
 * Rule 7 (R-AGREE-2): a record one rank could not read (each rank in turn)
 * is neither agreed nor deleted anywhere, nor is its child (held there too,
 * as the scan holds it) nor a grandchild that rank could read; a sibling
 * and an unrelated record are decided as ever. Nothing is counted
 * disagreed.
 */
static void test_agreement_held_on_one_rank_deletes_nowhere(void **state)
{
	struct rec_record_info rs[5];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* root A */
	rs[1] = info_make(300, 2, &rs[0]); /* B: unreadable on rank r */
	rs[2] = info_make(500, 3, &rs[1]); /* C, child of B: held with it there */
	rs[3] = info_make(700, 4, &rs[2]); /* D, grandchild: read on rank r */
	rs[4] = info_make(400, 5, NULL);   /* E, unrelated */
	for (uint32_t r = 0; r < 3; r++) {
		world_fill(&w, 3, rs, 5);
		world_hold(&w, r, &rs[1].key);
		world_hold(&w, r, &rs[2].key);
		world_decide(&w, &a);
		assert_int_equal(a.record_count, 2);
		assert_non_null(agreed_find(&a, &rs[0].key));
		assert_non_null(agreed_find(&a, &rs[4].key));
		for (int i = 1; i <= 3; i++) {
			assert_null(agreed_find(&a, &rs[i].key));
			expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_KEEP);
		}
		expect_everywhere(&w, &a, &rs[0].key, COORD_ACTION_KEEP);
		expect_everywhere(&w, &a, &rs[4].key, COORD_ACTION_KEEP);
		assert_int_equal(a.key_count, 5);
		assert_int_equal(a.held, 3);
		assert_int_equal(a.disagreed, 0);
		assert_int_equal(a.orphans_dropped + a.page_only_dropped, 0);
		coord_agreement_destroy(&a);
		/* the next start reads it everywhere: all five agreed */
		world_fill(&w, 3, rs, 5);
		world_decide(&w, &a);
		assert_int_equal(a.record_count, 5);
		coord_agreement_destroy(&a);
	}
}

/*
 * Rule 7 (R-AGREE-2) beside rules 1, 2 and 4: a held key that another rank
 * lacks, or holds with another header, or without its row, is kept as it is
 * (not deleted, not truncated); a page-only parent whose only child is held
 * is left in place rather than dropped; a key held on every rank is left.
 */
static void test_agreement_held_overrides_drops(void **state)
{
	struct rec_record_info rs[5];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* P, page-only root */
	rs[1] = info_make(300, 2, &rs[0]); /* Q, its only child: held on rank 1 */
	rs[2] = info_make(400, 3, NULL);   /* R: held on rank 0, missing on rank 2 */
	rs[3] = info_make(500, 4, NULL);   /* S: held on rank 2, row gone on rank 1,
					      another header on rank 0 */
	rs[4] = info_make(600, 5, NULL);   /* T: held on every rank */
	set_row(&rs[0], false);
	world_fill(&w, 3, rs, 5);
	world_hold(&w, 1, &rs[1].key);
	world_hold(&w, 0, &rs[2].key);
	world_remove(&w, 2, &rs[2].key);
	world_hold(&w, 2, &rs[3].key);
	set_row(world_find(&w, 1, &rs[3].key), false);
	world_find(&w, 0, &rs[3].key)->agreement.bytes[0] ^= 1;
	for (uint32_t r = 0; r < 3; r++)
		world_hold(&w, r, &rs[4].key);
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 0);
	for (int i = 0; i < 5; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_KEEP);
	assert_int_equal(a.held, 5);
	assert_int_equal(a.disagreed + a.page_only_dropped + a.rows_dropped, 0);
	coord_agreement_destroy(&a);
}

/*
 * Rule 7 (R-AGREE-2) beside rule 6: past records_max, the parent of a held
 * key is left in place rather than deleted, and so is every leaf while a
 * held key's parent is unknown (no rank read it); other leaves go as ever.
 */
static void test_agreement_held_beside_records_max(void **state)
{
	struct rec_record_info rs[4];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);   /* X, the oldest leaf once Y is held */
	rs[1] = info_make(300, 2, &rs[0]); /* Y: held on rank 1, read on rank 0 */
	rs[2] = info_make(400, 3, NULL);   /* Z, an older leaf than W */
	rs[3] = info_make(500, 4, NULL);   /* W, the newest */
	rs[0].mtime_ns = 1;
	rs[2].mtime_ns = 2;
	rs[3].mtime_ns = 3;
	world_fill(&w, 2, rs, 4);
	world_hold(&w, 1, &rs[1].key);
	assert_int_equal(coord_agreement_decide(&a, w.ranks, 2, 1), 0);
	assert_int_equal(a.record_count, 1);
	assert_true(rec_key_equal(&a.records[0].key, &rs[3].key));
	expect_everywhere(&w, &a, &rs[0].key, COORD_ACTION_KEEP); /* shelters Y */
	expect_everywhere(&w, &a, &rs[1].key, COORD_ACTION_KEEP);
	expect_everywhere(&w, &a, &rs[2].key, COORD_ACTION_DELETE);
	assert_int_equal(a.capacity_dropped, 1);
	assert_int_equal(a.held, 2);
	coord_agreement_destroy(&a);
	/* Y unread everywhere: its parent unknown, no leaf is deleted */
	world_hold(&w, 0, &rs[1].key);
	assert_int_equal(coord_agreement_decide(&a, w.ranks, 2, 1), 0);
	assert_int_equal(a.record_count, 1);
	for (int i = 0; i < 3; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_KEEP);
	assert_int_equal(a.capacity_dropped, 0);
	assert_int_equal(a.held, 3);
	coord_agreement_destroy(&a);
}

/* Every rank empty: nothing agreed, nothing to do. */
static void test_agreement_all_ranks_empty(void **state)
{
	struct coord_rank_records ranks[4] = { { .records = NULL } };
	struct coord_agreement a;

	(void)state;
	assert_int_equal(coord_agreement_decide(&a, ranks, 4, SIZE_MAX), 0);
	assert_int_equal(a.record_count, 0);
	assert_int_equal(a.key_count, 0);
	assert_int_equal(a.disagreed, 0);
	coord_agreement_destroy(&a);
}

/* One rank empty (a fresh disk): every other rank deletes everything. */
static void test_agreement_one_rank_empty(void **state)
{
	struct rec_record_info rs[3];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);
	rs[1] = info_make(300, 2, &rs[0]);
	rs[2] = info_make(90, 3, NULL);
	world_fill(&w, 3, rs, 3);
	w.ranks[1] = (struct coord_rank_records){ .records = NULL };
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 0);
	for (int i = 0; i < 3; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_DELETE);
	assert_int_equal(a.key_count, 3);
	assert_int_equal(a.disagreed, 3);
	coord_agreement_destroy(&a);
}

/* One rank alone keeps its scan as it is, oldest mtime first. */
static void test_agreement_single_rank_keeps_scan(void **state)
{
	struct rec_record_info rs[4];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 9, NULL);
	rs[1] = info_make(300, 2, &rs[0]);
	rs[2] = info_make(500, 5, &rs[1]);
	rs[3] = info_make(64, 1, NULL);
	set_row(&rs[1], false); /* page-only with a child: kept */
	world_fill(&w, 1, rs, 4);
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 4);
	for (int i = 0; i < 4; i++)
		expect_everywhere(&w, &a, &rs[i].key, COORD_ACTION_KEEP);
	for (size_t i = 1; i < a.record_count; i++)
		assert_true(a.records[i - 1].mtime_ns < a.records[i].mtime_ns);
	assert_false(agreed_find(&a, &rs[1].key)->row_present);
	assert_int_equal(a.rows_dropped, 0);
	coord_agreement_destroy(&a);
}

/* A summary that lists a key twice, or a parent not before its child. */
static void test_agreement_malformed_summaries(void **state)
{
	struct rec_record_info rs[3];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(100, 1, NULL);
	rs[1] = info_make(300, 2, NULL);
	rs[2] = info_make(200, 3, NULL);
	rs[2].parent = rs[1].key; /* names a parent with more tokens */
	world_fill(&w, 3, rs, 3);
	/* Rank 1 lists rs[0] twice and rank 2 not at all: three listings. */
	w.records[1][3] = rs[0];
	w.ranks[1].count = 4;
	world_remove(&w, 2, &rs[0].key);
	world_decide(&w, &a);
	assert_int_equal(a.record_count, 1);
	assert_non_null(agreed_find(&a, &rs[1].key));
	expect_everywhere(&w, &a, &rs[0].key, COORD_ACTION_DELETE);
	expect_everywhere(&w, &a, &rs[1].key, COORD_ACTION_KEEP);
	expect_everywhere(&w, &a, &rs[2].key, COORD_ACTION_DELETE);
	assert_int_equal(a.key_count, 3);
	assert_int_equal(a.disagreed, 1);
	assert_int_equal(a.orphans_dropped, 1);
	coord_agreement_destroy(&a);
}

/*
 * Keys that differ only in their consumed count (one digest, three token
 * counts: a hash of the digest alone would put them together) stay three
 * keys: the one missing on a rank goes, with its child.
 */
static void test_agreement_same_digest_other_counts(void **state)
{
	struct rec_record_info rs[3];
	struct coord_agreement a;
	struct world w;

	(void)state;
	rs[0] = info_make(64, 7, NULL);
	rs[1] = info_make(128, 7, &rs[0]);
	rs[2] = info_make(192, 7, &rs[1]);
	world_fill(&w, 3, rs, 3);
	world_remove(&w, 1, &rs[1].key);
	world_decide(&w, &a);
	assert_int_equal(a.key_count, 3);
	assert_int_equal(a.disagreed, 1);
	assert_int_equal(a.orphans_dropped, 1);
	assert_int_equal(a.record_count, 1);
	assert_non_null(agreed_find(&a, &rs[0].key));
	expect_everywhere(&w, &a, &rs[0].key, COORD_ACTION_KEEP);
	expect_everywhere(&w, &a, &rs[1].key, COORD_ACTION_DELETE);
	expect_everywhere(&w, &a, &rs[2].key, COORD_ACTION_DELETE);
	coord_agreement_destroy(&a);
}

/*
 * Past REC_WORLD_SIZE_MAX ranks, REC_DIR_RECORDS_MAX records on a rank, or
 * 2^31 records in all: SEL_ETOOBIG.
 */
static void test_agreement_bounds(void **state)
{
	struct rec_record_info one = info_make(64, 1, NULL);
	struct coord_rank_records ranks[2] = {
		{ .records = &one, .count = 1 },
		{ .records = &one, .count = (size_t)REC_DIR_RECORDS_MAX + 1 },
	};
	struct coord_agreement a;

	(void)state;
	assert_int_equal(coord_agreement_decide(&a, ranks, 2, SIZE_MAX), SEL_ETOOBIG);
	assert_null(a.records);
	assert_null(a.actions);
	assert_int_equal(coord_agreement_decide(&a, ranks, REC_WORLD_SIZE_MAX + 1, SIZE_MAX),
			 SEL_ETOOBIG);
	/* 128 full ranks: 2^31 listings in all, refused before any is read. */
	{
		struct coord_rank_records *full = calloc(128, sizeof(*full));

		assert_non_null(full);
		for (uint32_t r = 0; r < 128; r++)
			full[r] = (struct coord_rank_records){ .records = &one,
								.count = REC_DIR_RECORDS_MAX };
		assert_int_equal(coord_agreement_decide(&a, full, 128, SIZE_MAX), SEL_ETOOBIG);
		assert_null(a.actions);
		free(full);
	}
	coord_agreement_destroy(&a);
}

/* The random comparison: about 5,000 records on each of 4 ranks. */
#define RANDOM_RANKS 4u
#define RANDOM_MASTER 5000u
#define RANDOM_UNIVERSE (2u * RANDOM_MASTER)
#define RANDOM_LISTINGS (2u * RANDOM_MASTER)

struct random_world {
	struct rec_record_info universe[RANDOM_UNIVERSE]; /* every key, once */
	size_t parent[RANDOM_UNIVERSE];  /* universe index, SIZE_MAX: root */
	size_t universe_count;
	struct rec_record_info records[RANDOM_RANKS][RANDOM_LISTINGS];
	size_t key_of[RANDOM_RANKS][RANDOM_LISTINGS]; /* universe index */
	struct coord_rank_records ranks[RANDOM_RANKS];
};

/* The reference's verdict on one key. */
struct random_expect {
	uint32_t listings[RANDOM_RANKS];
	bool listed, everywhere, row_all, row_some, alive_tree, alive;
	uint64_t min_bytes;
};

static void random_push(struct random_world *w, uint32_t r, size_t u,
			const struct rec_record_info *info, uint64_t *rng)
{
	size_t n = w->ranks[r].count++;

	SEL_ASSERT(n < RANDOM_LISTINGS);
	w->records[r][n] = *info;
	w->records[r][n].mtime_ns = rng_next(rng) % 1000000;
	w->key_of[r][n] = u;
}

/* One universe record; parent is a universe index or SIZE_MAX. */
static size_t random_universe_add(struct random_world *w, uint64_t consumed,
				  size_t parent, uint64_t *rng)
{
	size_t u = w->universe_count++;
	struct rec_record_info *info = &w->universe[u];

	SEL_ASSERT(u < RANDOM_UNIVERSE);
	memset(info, 0, sizeof(*info));
	info->key.consumed = consumed;
	rng_bytes(rng, info->key.digest.bytes, REC_DIGEST_BYTES);
	if (parent != SIZE_MAX)
		info->parent = w->universe[parent].key;
	w->parent[u] = parent;
	rng_bytes(rng, info->bucket.bytes, REC_DIGEST_BYTES);
	rng_bytes(rng, info->agreement.bytes, REC_DIGEST_BYTES);
	info->first_page_index = (uint32_t)(info->parent.consumed / 64);
	info->tail_page_count = (uint32_t)(consumed / 64) - info->first_page_index;
	info->created_ns = rng_next(rng);
	set_row(info, rng_next(rng) % 100 >= 3);
	return u;
}

/* One rank's listing of universe record u, perhaps damaged or missing. */
static void random_listing(struct random_world *w, uint32_t r, size_t u,
			   uint64_t *rng)
{
	struct rec_record_info info = w->universe[u];
	uint64_t roll = rng_next(rng) % 1000;

	if (roll < 8)
		return; /* the file is missing here */
	if (roll < 30)
		set_row(&info, false);
	else if (roll < 36)
		info.agreement.bytes[rng_next(rng) % REC_DIGEST_BYTES] ^= 1;
	else if (roll < 39)
		info.agreement.bytes[0] ^= 0x80; /* e.g. another creation time */
	else if (roll < 41)
		info.parent.digest.bytes[0] ^= 0x40;
	else if (roll < 43)
		random_push(w, r, u, &info, rng); /* listed twice */
	else if (roll < 48) {
		/* A key only this rank holds, a child of this one. */
		size_t extra = random_universe_add(w, info.key.consumed + 1 +
						   rng_next(rng) % 300, u, rng);

		random_push(w, r, extra, &w->universe[extra], rng);
	}
	random_push(w, r, u, &info, rng);
}

static void random_generate(struct random_world *w, uint64_t *rng)
{
	memset(w, 0, sizeof(*w));
	/* Three keys per consumed count; parents come from smaller counts. */
	for (size_t i = 0; i < RANDOM_MASTER; i++) {
		size_t parent = SIZE_MAX, below = 3 * (i / 3);

		if (below > 0 && rng_next(rng) % 5 != 0)
			parent = rng_next(rng) % below;
		random_universe_add(w, 1000 * (1 + i / 3), parent, rng);
	}
	for (uint32_t r = 0; r < RANDOM_RANKS; r++) {
		w->ranks[r].records = w->records[r];
		for (size_t u = 0; u < RANDOM_MASTER; u++)
			random_listing(w, r, u, rng);
		/* A scan lists by mtime, not by key: shuffle. */
		for (size_t i = w->ranks[r].count; i > 1; i--) {
			size_t j = rng_next(rng) % i;
			struct rec_record_info t = w->records[r][i - 1];
			size_t k = w->key_of[r][i - 1];

			w->records[r][i - 1] = w->records[r][j];
			w->key_of[r][i - 1] = w->key_of[r][j];
			w->records[r][j] = t;
			w->key_of[r][j] = k;
		}
	}
}

/* Listed everywhere: one listing per rank, each with rank zero's header. */
static void reference_everywhere(const struct random_world *w, struct random_expect *e)
{
	const struct rec_record_info *first[RANDOM_RANKS] = { NULL };

	for (size_t u = 0; u < w->universe_count; u++)
		e[u] = (struct random_expect){ .everywhere = true, .row_all = true,
					       .min_bytes = UINT64_MAX };
	for (uint32_t r = 0; r < RANDOM_RANKS; r++)
		for (size_t i = 0; i < w->ranks[r].count; i++) {
			struct random_expect *x = &e[w->key_of[r][i]];
			const struct rec_record_info *info = &w->records[r][i];

			x->listings[r]++;
			x->listed = true;
			x->row_all = x->row_all && info->row_present;
			x->row_some = x->row_some || info->row_present;
			if (info->file_bytes < x->min_bytes)
				x->min_bytes = info->file_bytes;
		}
	for (size_t u = 0; u < w->universe_count; u++) {
		for (uint32_t r = 0; r < RANDOM_RANKS; r++) {
			first[r] = NULL;
			for (size_t i = 0; i < w->ranks[r].count && !first[r]; i++)
				if (w->key_of[r][i] == u)
					first[r] = &w->records[r][i];
		}
		for (uint32_t r = 0; r < RANDOM_RANKS; r++)
			e[u].everywhere = e[u].everywhere && e[u].listings[r] == 1 &&
				    memcmp(&first[r]->agreement, &first[0]->agreement,
					   REC_DIGEST_BYTES) == 0 &&
				    rec_key_equal(&first[r]->parent, &first[0]->parent);
		e[u].row_all = e[u].row_all && e[u].everywhere;
	}
}

/* The tree rules by fixed points, straight from their definitions. */
static void reference_tree(const struct random_world *w, struct random_expect *e)
{
	bool changed = true;

	for (size_t u = 0; u < w->universe_count; u++)
		e[u].alive_tree = e[u].everywhere;
	while (changed) {
		changed = false;
		for (size_t u = 0; u < w->universe_count; u++) {
			size_t p = w->parent[u];
			bool alive = e[u].everywhere && (p == SIZE_MAX || e[p].alive_tree);

			changed = changed || alive != e[u].alive_tree;
			e[u].alive_tree = alive;
		}
	}
	for (size_t u = 0; u < w->universe_count; u++)
		e[u].alive = e[u].alive_tree;
	for (changed = true; changed;) {
		changed = false;
		for (size_t u = 0; u < w->universe_count; u++) {
			bool child = false;

			if (!e[u].alive || e[u].row_all)
				continue;
			for (size_t c = 0; c < w->universe_count && !child; c++)
				child = e[c].alive && w->parent[c] == u;
			if (!child) {
				e[u].alive = false;
				changed = true;
			}
		}
	}
}

static void random_check(const struct random_world *w, const struct random_expect *e,
			 const struct coord_agreement *a)
{
	uint64_t keys = 0, disagreed = 0, orphans = 0, page_only = 0, alive = 0;
	uint64_t rows = 0;

	for (size_t u = 0; u < w->universe_count; u++) {
		keys += e[u].listed;
		disagreed += e[u].listed && !e[u].everywhere;
		orphans += e[u].everywhere && !e[u].alive_tree;
		page_only += e[u].alive_tree && !e[u].alive;
		alive += e[u].alive;
		rows += e[u].alive && !e[u].row_all && e[u].row_some;
	}
	assert_int_equal(a->key_count, keys);
	assert_int_equal(a->disagreed, disagreed);
	assert_int_equal(a->orphans_dropped, orphans);
	assert_int_equal(a->page_only_dropped, page_only);
	assert_int_equal(a->rows_dropped, rows);
	assert_int_equal(a->record_count, alive);
	for (uint32_t r = 0; r < RANDOM_RANKS; r++)
		for (size_t i = 0; i < w->ranks[r].count; i++) {
			const struct random_expect *x = &e[w->key_of[r][i]];
			enum coord_action want = COORD_ACTION_DELETE;

			if (x->alive)
				want = !x->row_all && w->records[r][i].row_present ?
					       COORD_ACTION_TRUNCATE_ROW :
					       COORD_ACTION_KEEP;
			assert_int_equal(coord_agreement_actions(a, r)[i], want);
		}
	for (size_t i = 0; i < a->record_count; i++) {
		const struct rec_record_info *got = &a->records[i];
		size_t u = 0;

		while (u < w->universe_count &&
		       !rec_key_equal(&w->universe[u].key, &got->key))
			u++;
		assert_true(u < w->universe_count && e[u].alive);
		assert_int_equal(got->row_present, e[u].row_all);
		assert_int_equal(got->file_bytes, e[u].min_bytes);
		if (i > 0)
			assert_true(a->records[i - 1].mtime_ns <= got->mtime_ns);
	}
}

/* Thousands of random records on 4 ranks: the brute-force reference agrees. */
static void test_agreement_random_matches_brute_force(void **state)
{
	struct random_world *w = malloc(sizeof(*w));
	struct random_expect *e = malloc(RANDOM_UNIVERSE * sizeof(*e));
	const char *env = getenv("SELENE_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : sel_realtime_ns();
	uint64_t rng = seed;
	struct coord_agreement a;

	(void)state;
	assert_non_null(w);
	assert_non_null(e);
	printf("seed %llu (SELENE_TEST_SEED=%llu repeats it)\n",
	       (unsigned long long)seed, (unsigned long long)seed);
	for (int round = 0; round < 2; round++) {
		random_generate(w, &rng);
		assert_int_equal(coord_agreement_decide(&a, w->ranks, RANDOM_RANKS, SIZE_MAX), 0);
		reference_everywhere(w, e);
		reference_tree(w, e);
		random_check(w, e, &a);
		printf("round %d: %zu keys, %zu agreed, %llu disagreed, %llu orphaned, "
		       "%llu page-only, %llu rows dropped\n", round,
		       w->universe_count, a.record_count,
		       (unsigned long long)a.disagreed,
		       (unsigned long long)a.orphans_dropped,
		       (unsigned long long)a.page_only_dropped,
		       (unsigned long long)a.rows_dropped);
		coord_agreement_destroy(&a);
	}
	free(e);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_agreement_digest_equal_across_ranks),
		cmocka_unit_test(test_agreement_digest_covers_other_fields),
		cmocka_unit_test(test_agreement_scan_digests_agree),
		cmocka_unit_test(test_agreement_file_missing_on_one_rank),
		cmocka_unit_test(test_agreement_row_missing_on_one_rank),
		cmocka_unit_test(test_agreement_different_header_on_one_rank),
		cmocka_unit_test(test_agreement_dropped_parent_takes_children),
		cmocka_unit_test(test_agreement_records_max),
		cmocka_unit_test(test_agreement_held_on_one_rank_deletes_nowhere),
		cmocka_unit_test(test_agreement_held_overrides_drops),
		cmocka_unit_test(test_agreement_held_beside_records_max),
		cmocka_unit_test(test_agreement_all_ranks_empty),
		cmocka_unit_test(test_agreement_one_rank_empty),
		cmocka_unit_test(test_agreement_single_rank_keeps_scan),
		cmocka_unit_test(test_agreement_malformed_summaries),
		cmocka_unit_test(test_agreement_same_digest_other_counts),
		cmocka_unit_test(test_agreement_bounds),
		cmocka_unit_test(test_agreement_random_matches_brute_force),
	};

	return cmocka_run_group_tests_name("agreement", tests, NULL, NULL);
}
