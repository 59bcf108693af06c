/*
 * The prefix index (coordinator/index.h, seed 2.3 and its step 4
 * acceptance): lookup over real prefix keys and buckets with 64-, 128- and
 * 256-token pages, feasibility, page-only nodes, node states, LRU and
 * leaf-first victims, compaction candidates, insert errors, id reuse, and a
 * random comparison against a brute-force search over every node.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "coordinator/index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint32_t page_sizes[] = { 64, 128, 256 };

/* One lookup result is 16 KiB: shared by the tests rather than on the stack. */
static struct coord_lookup result;

/*
 * A history of length tokens: the first split from seed_a, the rest from
 * seed_b, so two histories with the same seed_a share split tokens. One seed
 * and any lengths give prefixes of one sequence.
 */
static void history_fork(struct rec_history *h, uint64_t seed_a, uint64_t split,
			 uint64_t seed_b, uint64_t length)
{
	struct rec_identity model;
	uint32_t *tokens = calloc(length + 1, sizeof(uint32_t));

	assert_non_null(tokens);
	if (split > length)
		split = length;
	tu_identities(&model, NULL);
	tu_tokens(tokens, split, seed_a);
	tu_tokens(tokens + split, length - split, seed_b);
	assert_int_equal(rec_history_init(h, &model, tokens, length), 0);
	free(tokens);
}

static void history_make(struct rec_history *h, uint64_t seed, uint64_t length)
{
	history_fork(h, seed, length, seed, length);
}

/*
 * A spec for the node at consumed c of h, child of the node at parent_c
 * (0: a root record holding its whole chain); parent must outlive spec.
 */
static void spec_make(struct coord_node_spec *spec, const struct coord_index *ix,
		      const struct rec_history *h, uint64_t c, uint64_t parent_c,
		      struct rec_key *parent)
{
	memset(spec, 0, sizeof(*spec));
	rec_history_key_at(h, c, &spec->key);
	spec->bucket = *rec_history_bucket(h, c);
	if (parent_c) {
		rec_history_key_at(h, parent_c, parent);
		spec->parent = parent;
	}
	spec->first_page_index = (uint32_t)(parent_c / ix->page_tokens);
	spec->tail_page_count =
		(uint32_t)(c / ix->page_tokens - parent_c / ix->page_tokens);
	spec->bytes = 4096 * (1 + spec->tail_page_count);
	spec->state = COORD_READY;
	spec->row_present = true;
}

/* Inserts the node at c of h under the node at parent_c; asserts success. */
static uint32_t add_node(struct coord_index *ix, const struct rec_history *h,
			 uint64_t c, uint64_t parent_c, enum coord_state state,
			 bool row_present)
{
	struct coord_node_spec spec;
	struct rec_key parent;
	uint32_t id = COORD_NONE;

	spec_make(&spec, ix, h, c, parent_c, &parent);
	spec.state = state;
	spec.row_present = row_present;
	assert_int_equal(coord_index_insert(ix, &spec, &id), 0);
	assert_int_not_equal(id, COORD_NONE);
	return id;
}

static uint32_t add_ready(struct coord_index *ix, const struct rec_history *h,
			  uint64_t c, uint64_t parent_c)
{
	return add_node(ix, h, c, parent_c, COORD_READY, true);
}

/* The node at c of h, which must be present. */
static struct coord_node *node_at(struct coord_index *ix,
				  const struct rec_history *h, uint64_t c)
{
	struct rec_key key;
	uint32_t id;

	rec_history_key_at(h, c, &key);
	id = coord_index_find(ix, &key);
	assert_int_not_equal(id, COORD_NONE);
	return coord_index_node(ix, id);
}

/* Looks up the first length tokens of the sequence from seed. */
static bool lookup_prefix(struct coord_index *ix, uint64_t seed,
			  uint64_t length, uint64_t resident)
{
	struct rec_history h;
	bool hit;

	history_make(&h, seed, length);
	hit = coord_index_lookup(ix, &h, resident, &result);
	rec_history_free(&h);
	return hit;
}

/*
 * Asserts that result is the chain of counts given (ascending), stopping at
 * parent_consumed, with the seed's page arithmetic over resident.
 */
static void assert_chain(const struct coord_index *ix, uint64_t resident,
			 uint64_t parent_consumed, const uint64_t *counts,
			 uint32_t count)
{
	uint64_t pt = ix->page_tokens, pages = 0;

	assert_int_equal(result.chain_count, count);
	for (uint32_t i = 0; i < count; i++) {
		assert_int_equal(ix->nodes[result.chain[i]].key.consumed, counts[i]);
		pages += ix->nodes[result.chain[i]].tail_page_count;
	}
	assert_int_equal(result.consumed, counts[count - 1]);
	assert_int_equal(result.parent_consumed, parent_consumed);
	assert_int_equal(result.skip_pages, resident / pt - parent_consumed / pt);
	assert_int_equal(result.page_count, counts[count - 1] / pt - resident / pt);
	assert_int_equal(pages, counts[count - 1] / pt - parent_consumed / pt);
}

/* A hit over the sequence from seed, and its chain. */
static void expect_hit(struct coord_index *ix, uint64_t seed, uint64_t length,
		       uint64_t resident, uint64_t parent_consumed,
		       const uint64_t *counts, uint32_t count)
{
	assert_true(lookup_prefix(ix, seed, length, resident));
	assert_chain(ix, resident, parent_consumed, counts, count);
}

#define CHAIN(...) (const uint64_t[]){ __VA_ARGS__ }, \
	(uint32_t)(sizeof((const uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t))

enum { SEED_A = 11, SEED_B = 12, SEED_C = 13 };

/* init rejects empty and oversized tables; slots is a power of two >= 2n. */
static void test_index_init_sizes(void **state)
{
	struct coord_index ix;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 0, 64), -EINVAL);
	assert_int_equal(coord_index_init(&ix, 4, 0), -EINVAL);
	assert_int_equal(coord_index_init(&ix, 4, REC_PAGE_TOKENS_MAX + 1), -EINVAL);
	assert_int_equal(coord_index_init(&ix, (1u << 30) + 1, 64), -EINVAL);
	coord_index_destroy(&ix);
	for (uint32_t n = 1; n < 100; n++) {
		assert_int_equal(coord_index_init(&ix, n, 64), 0);
		assert_true(ix.slots >= 2 * n && (ix.slots & (ix.slots - 1)) == 0);
		assert_true(ix.slots < 4 * n || ix.slots == 2);
		assert_int_equal(ix.node_count, 0);
		assert_int_equal(ix.lru.head, COORD_NONE);
		coord_index_destroy(&ix);
	}
	coord_index_destroy(&ix);
}

/* Unaligned endpoints on every page size: the whole chain from the root. */
static void test_index_unaligned_endpoints(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_index ix;
		struct rec_history h;

		assert_int_equal(coord_index_init(&ix, 16, page_sizes[p]), 0);
		history_make(&h, SEED_A, 1100);
		add_ready(&ix, &h, 100, 0);
		add_ready(&ix, &h, 300, 100);
		add_ready(&ix, &h, 517, 300);
		add_ready(&ix, &h, 1000, 517);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517, 1000));
		expect_hit(&ix, SEED_A, 1000, 0, 0, CHAIN(100, 300, 517, 1000));
		expect_hit(&ix, SEED_A, 999, 0, 0, CHAIN(100, 300, 517));
		expect_hit(&ix, SEED_A, 517, 0, 0, CHAIN(100, 300, 517));
		expect_hit(&ix, SEED_A, 516, 0, 0, CHAIN(100, 300));
		expect_hit(&ix, SEED_A, 100, 0, 0, CHAIN(100));
		assert_false(lookup_prefix(&ix, SEED_A, 99, 0));
		assert_int_equal(result.chain_count, 0);
		/* Another sequence matches nothing, though it shares d(0). */
		assert_false(lookup_prefix(&ix, SEED_B, 1100, 0));
		rec_history_free(&h);
		coord_index_destroy(&ix);
	}
}

/* A resident count stops the chain at the parent at or below it. */
static void test_index_feasible_through_resident_ancestor(void **state)
{
	static const uint64_t residents[] = { 350, 400, 512, 516 };

	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_index ix;
		struct rec_history h;
		bool skipped = false;

		assert_int_equal(coord_index_init(&ix, 16, page_sizes[p]), 0);
		history_make(&h, SEED_A, 1100);
		add_ready(&ix, &h, 100, 0);
		add_ready(&ix, &h, 300, 100);
		add_ready(&ix, &h, 517, 300);
		add_ready(&ix, &h, 1000, 517);
		expect_hit(&ix, SEED_A, 1100, 99, 0, CHAIN(100, 300, 517, 1000));
		expect_hit(&ix, SEED_A, 1100, 100, 100, CHAIN(300, 517, 1000));
		expect_hit(&ix, SEED_A, 1100, 200, 100, CHAIN(300, 517, 1000));
		expect_hit(&ix, SEED_A, 1100, 300, 300, CHAIN(517, 1000));
		/* Between nodes: the resident's own leading pages are skipped. */
		for (size_t i = 0; i < SEL_ARRAY_SIZE(residents); i++) {
			expect_hit(&ix, SEED_A, 1100, residents[i], 300, CHAIN(517, 1000));
			skipped |= result.skip_pages > 0;
		}
		assert_true(skipped);
		expect_hit(&ix, SEED_A, 1100, 517, 517, CHAIN(1000));
		expect_hit(&ix, SEED_A, 1100, 999, 517, CHAIN(1000));
		expect_hit(&ix, SEED_A, 700, 400, 300, CHAIN(517));
		/* Nothing past the resident count, or nothing past the history. */
		assert_false(lookup_prefix(&ix, SEED_A, 1100, 1000));
		assert_false(lookup_prefix(&ix, SEED_A, 1000, 1000));
		assert_false(lookup_prefix(&ix, SEED_A, 900, 1000));
		rec_history_free(&h);
		coord_index_destroy(&ix);
	}
}

/*
 * A parent link naming another conversation's record (a forged header or
 * scan cache whose checksums were made to fit) makes the chain infeasible:
 * never B's pages restored as A's, through B's record or over it.
 */
static void test_index_forged_parent_link(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_node_spec spec;
		struct coord_index ix;
		struct rec_history a, b;
		struct rec_key parent;
		uint32_t id;

		assert_int_equal(coord_index_init(&ix, 16, page_sizes[p]), 0);
		history_make(&a, SEED_A, 1100);
		history_make(&b, SEED_B, 1100);
		add_ready(&ix, &a, 300, 0);
		add_ready(&ix, &b, 650, 0);
		spec_make(&spec, &ix, &a, 1000, 650, &parent);
		rec_history_key_at(&b, 650, &parent); /* the lie */
		assert_int_equal(coord_index_insert(&ix, &spec, &id), 0);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(300));
		expect_hit(&ix, SEED_A, 1100, 299, 0, CHAIN(300));
		assert_false(lookup_prefix(&ix, SEED_A, 1100, 300));
		assert_false(lookup_prefix(&ix, SEED_A, 1100, 660));
		/* B's own record is still found for B */
		expect_hit(&ix, SEED_B, 1100, 0, 0, CHAIN(650));
		rec_history_free(&a);
		rec_history_free(&b);
		coord_index_destroy(&ix);
	}
}

/*
 * Links are hashed once, then marked proven: a lookup proves a genuine
 * record's links and never the forged one's, however often it runs, for
 * either conversation or a Present check; a record replaced at the same
 * id starts unproven (a forged replacement of a proven record is still
 * refused), and a publication's link is proven from its insert.
 */
static void test_index_forged_link_never_proven(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_node_spec spec;
		struct coord_index ix;
		struct rec_history a, b;
		struct rec_key parent;
		uint32_t forged, genuine, again;

		assert_int_equal(coord_index_init(&ix, 16, page_sizes[p]), 0);
		history_make(&a, SEED_A, 1100);
		history_make(&b, SEED_B, 1100);
		add_ready(&ix, &a, 300, 0);
		add_ready(&ix, &a, 650, 300);
		add_ready(&ix, &b, 650, 0);
		spec_make(&spec, &ix, &a, 1000, 650, &parent);
		rec_history_key_at(&b, 650, &parent); /* the lie */
		assert_int_equal(coord_index_insert(&ix, &spec, &forged), 0);
		assert_false(node_at(&ix, &a, 650)->parent_proven);
		for (int i = 0; i < 3; i++) {
			expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(300, 650));
			expect_hit(&ix, SEED_B, 1100, 0, 0, CHAIN(650));
			assert_int_equal(coord_index_chain(&ix, &a, forged, &result),
					 COORD_CHAIN_BROKEN);
			assert_true(node_at(&ix, &a, 650)->parent_proven);
			assert_false(ix.nodes[forged].parent_proven);
		}
		/* replaced by the genuine record: unproven until a lookup proves it */
		coord_index_remove(&ix, forged);
		genuine = add_ready(&ix, &a, 1000, 650);
		assert_int_equal(genuine, forged);
		assert_false(ix.nodes[genuine].parent_proven);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(300, 650, 1000));
		assert_true(ix.nodes[genuine].parent_proven);
		/* and by a forged one again: the id's proof did not stay */
		coord_index_remove(&ix, genuine);
		assert_int_equal(coord_index_insert(&ix, &spec, &again), 0);
		assert_int_equal(again, genuine);
		assert_false(ix.nodes[again].parent_proven);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(300, 650));
		assert_false(ix.nodes[again].parent_proven);
		/* a publication's link (key and parent from one history) */
		coord_index_remove(&ix, again);
		spec_make(&spec, &ix, &a, 1000, 650, &parent);
		spec.parent_proven = true;
		assert_int_equal(coord_index_insert(&ix, &spec, &again), 0);
		assert_true(ix.nodes[again].parent_proven);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(300, 650, 1000));
		rec_history_free(&a);
		rec_history_free(&b);
		coord_index_destroy(&ix);
	}
}

/* A page-only node never matches but still supplies its chain pages. */
static void test_index_page_only_node_supplies_pages(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_index ix;
		struct rec_history h;

		assert_int_equal(coord_index_init(&ix, 16, page_sizes[p]), 0);
		history_make(&h, SEED_A, 1100);
		add_ready(&ix, &h, 100, 0);
		add_node(&ix, &h, 300, 100, COORD_READY, false);
		add_node(&ix, &h, 517, 300, COORD_READY, false);
		add_ready(&ix, &h, 1000, 517);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517, 1000));
		expect_hit(&ix, SEED_A, 1100, 200, 100, CHAIN(300, 517, 1000));
		expect_hit(&ix, SEED_A, 999, 0, 0, CHAIN(100));
		expect_hit(&ix, SEED_A, 517, 0, 0, CHAIN(100));
		expect_hit(&ix, SEED_A, 300, 0, 0, CHAIN(100));
		assert_false(lookup_prefix(&ix, SEED_A, 999, 100));
		rec_history_free(&h);
		coord_index_destroy(&ix);
	}
}

/* A WRITING or UNLINKING node on the way makes its descendants infeasible. */
static void test_index_unready_ancestor_infeasible(void **state)
{
	static const enum coord_state states[] = { COORD_WRITING, COORD_UNLINKING };

	(void)state;
	for (size_t s = 0; s < SEL_ARRAY_SIZE(states); s++) {
		for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
			struct coord_index ix;
			struct rec_history h;

			assert_int_equal(coord_index_init(&ix, 16, page_sizes[p]), 0);
			history_make(&h, SEED_A, 1100);
			add_ready(&ix, &h, 100, 0);
			add_node(&ix, &h, 300, 100, states[s], true);
			add_ready(&ix, &h, 517, 300);
			add_node(&ix, &h, 700, 517, states[s], true);
			/* 700 is no candidate, 517 passes 300: only the root is left. */
			expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100));
			assert_false(lookup_prefix(&ix, SEED_A, 1100, 200));
			/* As the stopping parent its state does not matter. */
			expect_hit(&ix, SEED_A, 1100, 300, 300, CHAIN(517));
			expect_hit(&ix, SEED_A, 1100, 450, 300, CHAIN(517));
			node_at(&ix, &h, 300)->state = COORD_READY;
			expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517));
			node_at(&ix, &h, 700)->state = COORD_READY;
			expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517, 700));
			rec_history_free(&h);
			coord_index_destroy(&ix);
		}
	}
}

/* The longest feasible candidate wins, within a block and across blocks. */
static void test_index_first_feasible_wins(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_index ix;
		struct rec_history a, b;

		assert_int_equal(coord_index_init(&ix, 32, page_sizes[p]), 0);
		history_make(&a, SEED_A, 1100);
		/* b shares a's first 515 tokens, so its block 8 has a's bucket. */
		history_fork(&b, SEED_A, 515, SEED_B, 1100);
		assert_true(rec_digest_equal(rec_history_bucket(&a, 520),
					     rec_history_bucket(&b, 520)));
		add_ready(&ix, &a, 100, 0);
		add_ready(&ix, &a, 300, 100);
		add_ready(&ix, &a, 517, 300);
		add_ready(&ix, &a, 520, 517);
		add_ready(&ix, &a, 519, 300);
		add_ready(&ix, &b, 518, 300);
		add_ready(&ix, &b, 525, 300);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517, 520));
		node_at(&ix, &a, 517)->state = COORD_WRITING;
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 519));
		expect_hit(&ix, SEED_A, 518, 0, 0, CHAIN(100, 300));
		node_at(&ix, &a, 519)->state = COORD_UNLINKING;
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300));
		/* b's nodes in the shared bucket are its own. */
		assert_true(coord_index_lookup(&ix, &b, 0, &result));
		assert_chain(&ix, 0, 0, CHAIN(100, 300, 525));
		assert_true(coord_index_lookup(&ix, &b, 519, &result));
		assert_chain(&ix, 519, 300, CHAIN(525));
		rec_history_free(&a);
		rec_history_free(&b);
		coord_index_destroy(&ix);
	}
}

/* Endpoints at a multiple of 64, and in the first block with nothing resident. */
static void test_index_bucket_boundaries(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_index ix;
		struct rec_history a, c;

		assert_int_equal(coord_index_init(&ix, 64, page_sizes[p]), 0);
		history_make(&a, SEED_A, 300);
		add_ready(&ix, &a, 128, 0);
		add_ready(&ix, &a, 192, 128);
		add_ready(&ix, &a, 200, 192);
		assert_true(rec_digest_equal(&node_at(&ix, &a, 128)->bucket, &a.blocks[2]));
		expect_hit(&ix, SEED_A, 128, 0, 0, CHAIN(128));
		expect_hit(&ix, SEED_A, 191, 0, 0, CHAIN(128));
		expect_hit(&ix, SEED_A, 192, 0, 0, CHAIN(128, 192));
		expect_hit(&ix, SEED_A, 300, 0, 0, CHAIN(128, 192, 200));
		expect_hit(&ix, SEED_A, 128, 127, 0, CHAIN(128));
		expect_hit(&ix, SEED_A, 192, 191, 128, CHAIN(192));
		expect_hit(&ix, SEED_A, 199, 128, 128, CHAIN(192));
		assert_false(lookup_prefix(&ix, SEED_A, 191, 128));
		assert_false(lookup_prefix(&ix, SEED_A, 127, 0));
		/* The first block: bucket d(0), shared by every conversation. */
		for (uint64_t s = 0; s < 20; s++) {
			struct rec_history other;

			history_make(&other, 100 + s, 64);
			add_ready(&ix, &other, 1 + s * 3, 0);
			rec_history_free(&other);
		}
		history_make(&c, SEED_C, 64);
		add_ready(&ix, &c, 40, 0);
		add_ready(&ix, &c, 64, 40);
		assert_true(rec_digest_is_zero(&node_at(&ix, &c, 40)->bucket));
		expect_hit(&ix, SEED_C, 40, 0, 0, CHAIN(40));
		expect_hit(&ix, SEED_C, 63, 0, 0, CHAIN(40));
		expect_hit(&ix, SEED_C, 63, 39, 0, CHAIN(40));
		expect_hit(&ix, SEED_C, 64, 0, 0, CHAIN(40, 64));
		expect_hit(&ix, SEED_C, 64, 40, 40, CHAIN(64));
		expect_hit(&ix, SEED_C, 64, 63, 40, CHAIN(64));
		assert_false(lookup_prefix(&ix, SEED_C, 63, 40));
		assert_false(lookup_prefix(&ix, SEED_C, 39, 0));
		assert_false(lookup_prefix(&ix, SEED_C, 0, 0));
		rec_history_free(&a);
		rec_history_free(&c);
		coord_index_destroy(&ix);
	}
}

/* A root record holds its whole chain; a resident count only skips into it. */
static void test_index_root_records(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_index ix;
		struct rec_history h;
		struct coord_node_spec spec;
		struct rec_key zero_parent = { 0 };
		uint32_t id;

		assert_int_equal(coord_index_init(&ix, 16, page_sizes[p]), 0);
		history_make(&h, SEED_A, 1100);
		add_ready(&ix, &h, 300, 0);
		add_ready(&ix, &h, 517, 0);
		add_ready(&ix, &h, 1000, 517);
		assert_int_equal(node_at(&ix, &h, 517)->parent_id, COORD_NONE);
		assert_int_equal(node_at(&ix, &h, 517)->tail_page_count, 517 / page_sizes[p]);
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(517, 1000));
		expect_hit(&ix, SEED_A, 999, 0, 0, CHAIN(517));
		expect_hit(&ix, SEED_A, 999, 200, 0, CHAIN(517));
		expect_hit(&ix, SEED_A, 999, 300, 0, CHAIN(517));
		expect_hit(&ix, SEED_A, 999, 516, 0, CHAIN(517));
		expect_hit(&ix, SEED_A, 516, 0, 0, CHAIN(300));
		/* A parent key of consumed 0 is the root too. */
		spec_make(&spec, &ix, &h, 700, 0, NULL);
		spec.parent = &zero_parent;
		assert_int_equal(coord_index_insert(&ix, &spec, &id), 0);
		assert_int_equal(ix.nodes[id].parent_id, COORD_NONE);
		assert_int_equal(ix.nodes[id].parent.consumed, 0);
		expect_hit(&ix, SEED_A, 999, 600, 0, CHAIN(700));
		rec_history_free(&h);
		coord_index_destroy(&ix);
	}
}

/* insert: -EEXIST, -ENOENT for a missing parent, SEL_EQUEUEFULL when full. */
static void test_index_insert_errors(void **state)
{
	struct coord_index ix;
	struct rec_history h;
	struct coord_node_spec spec;
	struct rec_key parent;
	uint32_t id = 77;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 3, 64), 0);
	history_make(&h, SEED_A, 1100);
	add_ready(&ix, &h, 100, 0);
	spec_make(&spec, &ix, &h, 100, 0, &parent);
	assert_int_equal(coord_index_insert(&ix, &spec, &id), -EEXIST);
	assert_int_equal(id, 77);
	spec_make(&spec, &ix, &h, 517, 300, &parent);
	assert_int_equal(coord_index_insert(&ix, &spec, &id), -ENOENT);
	add_ready(&ix, &h, 300, 100);
	add_ready(&ix, &h, 517, 300);
	assert_int_equal(ix.node_count, 3);
	spec_make(&spec, &ix, &h, 700, 517, &parent);
	assert_int_equal(coord_index_insert(&ix, &spec, &id), SEL_EQUEUEFULL);
	/* A present key is reported as present even when full. */
	spec_make(&spec, &ix, &h, 517, 300, &parent);
	assert_int_equal(coord_index_insert(&ix, &spec, &id), -EEXIST);
	assert_int_equal(id, 77);
	assert_int_equal(ix.node_count, 3);
	assert_int_equal(node_at(&ix, &h, 100)->child_count, 1);
	assert_int_equal(node_at(&ix, &h, 300)->child_count, 1);
	assert_int_equal(node_at(&ix, &h, 517)->child_count, 0);
	expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517));
	rec_history_free(&h);
	coord_index_destroy(&ix);
}

/* remove frees a leaf from every table; its id is the next one handed out. */
static void test_index_remove_reuses_ids(void **state)
{
	struct coord_index ix;
	struct rec_history h, first[5];
	uint32_t ids[5], id, leaf;
	struct rec_key key;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 8, 128), 0);
	history_make(&h, SEED_A, 1100);
	/* Five roots in bucket d(0): one bucket chain, removed from the middle. */
	for (int i = 0; i < 5; i++) {
		history_make(&first[i], 200 + (uint64_t)i, 63);
		ids[i] = add_ready(&ix, &first[i], 10 + (uint64_t)i * 10, 0);
		assert_int_equal(ids[i], (uint32_t)i);
	}
	coord_index_remove(&ix, ids[2]);
	coord_index_remove(&ix, ids[0]);
	coord_index_remove(&ix, ids[4]);
	assert_int_equal(ix.node_count, 2);
	for (int i = 0; i < 5; i++) {
		rec_history_key_at(&first[i], 10 + (uint64_t)i * 10, &key);
		assert_int_equal(coord_index_find(&ix, &key), i % 2 ? ids[i] : COORD_NONE);
		assert_int_equal(coord_index_lookup(&ix, &first[i], 0, &result), i % 2 == 1);
	}
	/* Freed ids come back most recent first. */
	assert_int_equal(add_ready(&ix, &h, 100, 0), ids[4]);
	leaf = add_ready(&ix, &h, 300, 100);
	assert_int_equal(leaf, ids[0]);
	assert_int_equal(node_at(&ix, &h, 100)->child_count, 1);
	expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300));
	coord_index_remove(&ix, leaf);
	assert_int_equal(node_at(&ix, &h, 100)->child_count, 0);
	expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100));
	id = add_ready(&ix, &h, 517, 100);
	assert_int_equal(id, leaf);
	assert_int_equal(ix.nodes[id].key.consumed, 517);
	assert_int_equal(ix.nodes[id].pins, 0);
	expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 517));
	/* Fill every id, empty the index, and fill it again. */
	while (ix.node_count < ix.nodes_max)
		add_ready(&ix, &h, 600 + ix.node_count, 517);
	while (ix.node_count > 0) {
		bool compact;

		coord_index_remove(&ix, coord_index_victim(&ix, NULL, NULL, &compact));
		assert_false(compact);
	}
	assert_int_equal(ix.lru.head, COORD_NONE);
	assert_int_equal(ix.lru.tail, COORD_NONE);
	for (uint32_t i = 0; i < ix.nodes_max; i++)
		add_ready(&ix, &h, 1 + i, i);
	assert_int_equal(ix.node_count, ix.nodes_max);
	for (int i = 0; i < 5; i++)
		rec_history_free(&first[i]);
	rec_history_free(&h);
	coord_index_destroy(&ix);
}

/* Victims are leaves in LRU order; touch moves a node to the recent end. */
static void test_index_lru_order(void **state)
{
	struct coord_index ix;
	struct rec_history h, g;
	uint32_t root, mid, leaf1, leaf2;
	uint64_t tick;
	bool compact = true;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 8, 64), 0);
	history_make(&h, SEED_A, 1100);
	history_fork(&g, SEED_A, 400, SEED_B, 1100);
	root = add_ready(&ix, &h, 100, 0);
	mid = add_ready(&ix, &h, 300, 100);
	leaf1 = add_ready(&ix, &h, 517, 300);
	leaf2 = add_ready(&ix, &g, 600, 300);
	assert_int_equal(ix.lru.head, root);
	assert_int_equal(ix.lru.tail, leaf2);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), leaf1);
	assert_false(compact);
	tick = ix.tick;
	coord_index_touch(&ix, leaf1);
	assert_int_equal(ix.nodes[leaf1].access_tick, tick + 1);
	assert_int_equal(ix.lru.tail, leaf1);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), leaf2);
	coord_index_touch(&ix, leaf2);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), leaf1);
	/* Lookup does not touch. */
	expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517));
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), leaf1);
	coord_index_remove(&ix, leaf1);
	coord_index_remove(&ix, leaf2);
	/* mid is now the only leaf, wherever it stands in the order. */
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), mid);
	coord_index_touch(&ix, mid);
	coord_index_touch(&ix, root);
	assert_int_equal(ix.lru.head, mid);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), mid);
	coord_index_remove(&ix, mid);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), root);
	rec_history_free(&h);
	rec_history_free(&g);
	coord_index_destroy(&ix);
}

/* Walks the LRU list and checks it against the ticks expected, in order. */
static void assert_lru(const struct coord_index *ix, const uint64_t *ticks,
		       uint32_t count)
{
	uint32_t id = ix->lru.head, prev = COORD_NONE;

	for (uint32_t i = 0; i < count; i++) {
		assert_int_not_equal(id, COORD_NONE);
		assert_int_equal(ix->nodes[id].lru.prev, prev);
		assert_int_equal(ix->nodes[id].access_tick, ticks[i]);
		prev = id;
		id = ix->nodes[id].lru.next;
	}
	assert_int_equal(id, COORD_NONE);
	assert_int_equal(ix->lru.tail, prev);
}

/* Explicit access ticks (a rebuild) place nodes by tick; the clock follows. */
static void test_index_access_tick_places_nodes(void **state)
{
	struct coord_index ix;
	struct rec_history h;
	struct coord_node_spec spec;
	struct rec_key parent;
	uint32_t id, child;
	bool compact;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 8, 64), 0);
	history_make(&h, SEED_A, 1100);
	/* A parent truncated after its child wrote carries the newer mtime. */
	spec_make(&spec, &ix, &h, 100, 0, &parent);
	spec.access_tick = 500;
	assert_int_equal(coord_index_insert(&ix, &spec, &id), 0);
	spec_make(&spec, &ix, &h, 300, 100, &parent);
	spec.access_tick = 100;
	assert_int_equal(coord_index_insert(&ix, &spec, &child), 0);
	spec_make(&spec, &ix, &h, 50, 0, &parent);
	spec.access_tick = 300;
	assert_int_equal(coord_index_insert(&ix, &spec, &id), 0);
	spec_make(&spec, &ix, &h, 60, 0, &parent);
	spec.access_tick = 300;
	assert_int_equal(coord_index_insert(&ix, &spec, &id), 0);
	assert_int_equal(ix.tick, 500);
	assert_lru(&ix, CHAIN(100, 300, 300, 500));
	assert_int_equal(ix.lru.head, child);
	assert_int_equal(ix.lru.tail, ix.nodes[child].parent_id);
	assert_int_equal(ix.nodes[ix.nodes[child].lru.next].key.consumed, 50);
	spec_make(&spec, &ix, &h, 400, 300, &parent);
	assert_int_equal(coord_index_insert(&ix, &spec, &id), 0);
	assert_int_equal(ix.nodes[id].access_tick, 501);
	spec_make(&spec, &ix, &h, 10, 0, &parent);
	spec.access_tick = 1;
	assert_int_equal(coord_index_insert(&ix, &spec, &id), 0);
	assert_int_equal(ix.tick, 501);
	assert_int_equal(ix.lru.head, id);
	coord_index_touch(&ix, child);
	assert_lru(&ix, CHAIN(1, 300, 300, 500, 501, 502));
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), id);
	rec_history_free(&h);
	coord_index_destroy(&ix);
}

struct refuse {
	uint64_t consumed[4];
	uint32_t count;
	uint32_t calls;
};

/* An evictable callback that refuses the consumed counts listed in ctx. */
static bool refuse_listed(const struct coord_node *node, void *ctx)
{
	struct refuse *r = ctx;

	r->calls++;
	for (uint32_t i = 0; i < r->count; i++)
		if (node->key.consumed == r->consumed[i])
			return false;
	return true;
}

/* Pinned, non-evictable and unready leaves survive victim selection. */
static void test_index_victim_skips_pinned_and_unevictable(void **state)
{
	struct coord_index ix;
	struct rec_history h[3];
	uint32_t x[3], y[3];
	struct refuse refuse = { .count = 0 };
	bool compact;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 8, 256), 0);
	for (int i = 0; i < 3; i++) {
		history_make(&h[i], 300 + (uint64_t)i, 1100);
		x[i] = add_ready(&ix, &h[i], 100 + (uint64_t)i, 0);
		y[i] = add_ready(&ix, &h[i], 600 + (uint64_t)i, 100 + (uint64_t)i);
	}
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact), y[0]);
	assert_false(compact);
	coord_index_pin(&ix, y[0]);
	coord_index_pin(&ix, y[0]);
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact), y[1]);
	refuse.consumed[refuse.count++] = 601;
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact), y[2]);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), y[1]);
	ix.nodes[y[2]].state = COORD_WRITING;
	/* No leaf left: the LRU single-child ancestor, to compact. */
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact), x[0]);
	assert_true(compact);
	refuse.consumed[refuse.count++] = 100;
	coord_index_pin(&ix, x[1]);
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact), x[2]);
	assert_true(compact);
	ix.nodes[x[2]].state = COORD_UNLINKING;
	refuse.calls = 0;
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact),
			 COORD_NONE);
	assert_false(compact);
	/* Only unpinned READY nodes are offered to the callback. */
	assert_int_equal(refuse.calls, 2);
	refuse.count = 1;
	coord_index_unpin(&ix, y[0]);
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact), x[0]);
	coord_index_unpin(&ix, y[0]);
	assert_int_equal(coord_index_victim(&ix, refuse_listed, &refuse, &compact), y[0]);
	assert_false(compact);
	for (int i = 0; i < 3; i++)
		rec_history_free(&h[i]);
	coord_index_destroy(&ix);
}

/* With every leaf pinned, the LRU single-child node with a row is compacted. */
static void test_index_victim_compaction_candidate(void **state)
{
	struct coord_index ix;
	struct rec_history h, g;
	uint32_t root, mid, leaf, other;
	bool compact;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 8, 128), 0);
	history_make(&h, SEED_A, 1100);
	history_fork(&g, SEED_A, 200, SEED_B, 1100);
	root = add_ready(&ix, &h, 100, 0);
	mid = add_ready(&ix, &h, 300, 100);
	leaf = add_ready(&ix, &h, 517, 300);
	coord_index_pin(&ix, leaf);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), root);
	assert_true(compact);
	coord_index_touch(&ix, root);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), mid);
	assert_true(compact);
	/* Already page-only: nothing more to compact there. */
	ix.nodes[mid].row_present = false;
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), root);
	/* Two children: not a compaction candidate. */
	other = add_ready(&ix, &g, 250, 100);
	coord_index_pin(&ix, other);
	assert_int_equal(ix.nodes[root].child_count, 2);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), COORD_NONE);
	assert_false(compact);
	coord_index_unpin(&ix, other);
	assert_int_equal(coord_index_victim(&ix, NULL, NULL, &compact), other);
	assert_false(compact);
	rec_history_free(&h);
	rec_history_free(&g);
	coord_index_destroy(&ix);
}

/* Compaction drops a node's lookup matches but not the pages it supplies. */
static void test_index_compaction_keeps_chain_pages(void **state)
{
	(void)state;
	for (size_t p = 0; p < SEL_ARRAY_SIZE(page_sizes); p++) {
		struct coord_index ix;
		struct rec_history h;
		uint32_t root, mid, leaf, victim;
		bool compact;

		assert_int_equal(coord_index_init(&ix, 8, page_sizes[p]), 0);
		history_make(&h, SEED_A, 1100);
		root = add_ready(&ix, &h, 100, 0);
		mid = add_ready(&ix, &h, 300, 100);
		leaf = add_ready(&ix, &h, 517, 300);
		coord_index_pin(&ix, leaf);
		coord_index_touch(&ix, root);
		expect_hit(&ix, SEED_A, 516, 0, 0, CHAIN(100, 300));
		victim = coord_index_victim(&ix, NULL, NULL, &compact);
		assert_int_equal(victim, mid);
		assert_true(compact);
		/* What a store does to compact: drop the row, keep the node. */
		ix.nodes[victim].row_present = false;
		expect_hit(&ix, SEED_A, 516, 0, 0, CHAIN(100));
		expect_hit(&ix, SEED_A, 400, 0, 0, CHAIN(100));
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517));
		expect_hit(&ix, SEED_A, 1100, 200, 100, CHAIN(300, 517));
		assert_false(lookup_prefix(&ix, SEED_A, 516, 100));
		victim = coord_index_victim(&ix, NULL, NULL, &compact);
		assert_int_equal(victim, root);
		assert_true(compact);
		ix.nodes[victim].row_present = false;
		assert_false(lookup_prefix(&ix, SEED_A, 516, 0));
		expect_hit(&ix, SEED_A, 1100, 0, 0, CHAIN(100, 300, 517));
		rec_history_free(&h);
		coord_index_destroy(&ix);
	}
}

/* A chain longer than COORD_CHAIN_MAX is infeasible; the next one fits. */
static void test_index_chain_bound(void **state)
{
	const uint64_t n = COORD_CHAIN_MAX + 1;
	struct coord_index ix;
	struct rec_history h;

	(void)state;
	assert_int_equal(coord_index_init(&ix, (uint32_t)n, 64), 0);
	history_make(&h, SEED_A, n + 10);
	for (uint64_t c = 1; c <= n; c++)
		add_ready(&ix, &h, c, c - 1);
	assert_true(coord_index_lookup(&ix, &h, 0, &result));
	assert_int_equal(result.consumed, n - 1);
	assert_int_equal(result.chain_count, COORD_CHAIN_MAX);
	assert_int_equal(result.page_count, (n - 1) / 64);
	assert_true(coord_index_lookup(&ix, &h, 1, &result));
	assert_int_equal(result.consumed, n);
	assert_int_equal(result.chain_count, COORD_CHAIN_MAX);
	assert_int_equal(result.parent_consumed, 1);
	assert_int_equal(ix.nodes[result.chain[0]].key.consumed, 2);
	rec_history_free(&h);
	coord_index_destroy(&ix);
}

/* The programmer errors below, each run by tu_assert_aborts on a struct coord_index. */
static void remove_first(void *ix)
{
	coord_index_remove(ix, 0);
}

static void unpin_first(void *ix)
{
	coord_index_unpin(ix, 0);
}

/* A chain check from a node that is not the history's (it would prove links). */
static void chain_of_another_history(void *ix)
{
	struct rec_history other;

	history_make(&other, SEED_B, 300);
	coord_index_chain(ix, &other, 1, &result);
	rec_history_free(&other);
}

/*
 * Removing a node with children, unpinning below zero and a chain check
 * from a node whose key is not the history's are asserted.
 */
static void test_index_programmer_errors_abort(void **state)
{
	struct coord_index ix;
	struct rec_history h;

	(void)state;
	assert_int_equal(coord_index_init(&ix, 4, 64), 0);
	history_make(&h, SEED_A, 300);
	assert_int_equal(add_ready(&ix, &h, 100, 0), 0);
	add_ready(&ix, &h, 200, 100);
	tu_assert_aborts(remove_first, &ix);
	tu_assert_aborts(unpin_first, &ix);
	coord_index_pin(&ix, 0);
	coord_index_unpin(&ix, 0);
	tu_assert_aborts(unpin_first, &ix);
	tu_assert_aborts(chain_of_another_history, &ix);
	assert_int_equal(coord_index_chain(&ix, &h, 1, &result), COORD_CHAIN_OK);
	rec_history_free(&h);
	coord_index_destroy(&ix);
}

/* The random test: conversations, their nodes, and the brute-force oracle. */

enum {
	RANDOM_CONVERSATIONS = 8,
	RANDOM_TOKENS_MAX = 1600,
	RANDOM_NODES = 192,
	RANDOM_QUERIES = 300,
	RANDOM_ROUNDS = 6,
};

struct conversation {
	uint32_t tokens[RANDOM_TOKENS_MAX];
	uint64_t length;
	struct rec_history h;
};

static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A value in [lo, hi]. */
static uint64_t rng_range(uint64_t *state, uint64_t lo, uint64_t hi)
{
	return lo + rng_next(state) % (hi - lo + 1);
}

/* Conversations, half of them forked from an earlier one at a random point. */
static void random_conversations(struct conversation *convs, uint64_t *rng)
{
	struct rec_identity model;

	tu_identities(&model, NULL);
	for (int i = 0; i < RANDOM_CONVERSATIONS; i++) {
		struct conversation *conv = &convs[i];
		uint64_t split = 0;

		conv->length = rng_range(rng, 1, RANDOM_TOKENS_MAX);
		if (i > 0 && rng_next(rng) % 2) {
			const struct conversation *from = &convs[rng_next(rng) % (uint64_t)i];

			split = rng_range(rng, 0, from->length);
			if (split > conv->length)
				split = conv->length;
			memcpy(conv->tokens, from->tokens, split * sizeof(uint32_t));
		}
		tu_tokens(conv->tokens + split, conv->length - split, rng_next(rng));
		assert_int_equal(rec_history_init(&conv->h, &model, conv->tokens,
						  conv->length), 0);
	}
}

/*
 * A forged link under parent_c: the key at parent_c of another
 * conversation (the same key where the two share that prefix), stored
 * there as a root record if absent. False when that conversation is
 * shorter or there is no room (parent is left as it was).
 */
static bool random_forge(struct coord_index *ix, struct conversation *convs, int i,
			 uint64_t parent_c, uint64_t *rng, struct rec_key *parent)
{
	const struct rec_history *other =
		&convs[(i + 1 + rng_next(rng) % (RANDOM_CONVERSATIONS - 1)) %
		       RANDOM_CONVERSATIONS].h;
	struct coord_node_spec spec;
	struct rec_key none;
	uint32_t id;
	int ret;

	if (other->token_count < parent_c)
		return false;
	spec_make(&spec, ix, other, parent_c, 0, &none);
	ret = coord_index_insert(ix, &spec, &id);
	if (ret != 0 && ret != -EEXIST)
		return false;
	*parent = spec.key;
	return true;
}

/*
 * Nodes along each conversation, each under the previous one present (some
 * published as root records, some under a forged link: another
 * conversation's record at the previous one's count), in random states and
 * row presence.
 */
static void random_nodes(struct coord_index *ix, struct conversation *convs,
			 uint64_t *rng)
{
	for (int i = 0; i < RANDOM_CONVERSATIONS; i++) {
		const struct rec_history *h = &convs[i].h;
		uint64_t parent_c = 0;

		for (uint64_t c = rng_range(rng, 1, 200); c <= convs[i].length;
		     c += rng_range(rng, 1, 120)) {
			struct coord_node_spec spec;
			struct rec_key parent;
			uint64_t roll = rng_next(rng) % 100;
			uint32_t id;
			int ret;

			spec_make(&spec, ix, h, c, roll < 8 ? 0 : parent_c, &parent);
			/* where no other conversation reaches parent_c, the link stays */
			if (roll >= 8 && roll < 16 && parent_c)
				random_forge(ix, convs, i, parent_c, rng, &parent);
			spec.state = roll >= 90 ? COORD_WRITING :
				     roll >= 84 ? COORD_UNLINKING : COORD_READY;
			spec.row_present = rng_next(rng) % 100 >= 15;
			ret = coord_index_insert(ix, &spec, &id);
			if (ret == SEL_EQUEUEFULL)
				return;
			assert_true(ret == 0 || ret == -EEXIST);
			parent_c = c;
		}
	}
}

/* Removes, pins and touches random nodes, leaves only for removal. */
static void random_churn(struct coord_index *ix, uint64_t *rng)
{
	for (int i = 0; i < RANDOM_NODES / 4; i++) {
		uint32_t id = (uint32_t)(rng_next(rng) % ix->nodes_max);
		uint64_t roll = rng_next(rng) % 4;

		if (!ix->nodes[id].in_use)
			continue;
		if (roll == 0 && ix->nodes[id].child_count == 0)
			coord_index_remove(ix, id);
		else if (roll == 1)
			coord_index_pin(ix, id);
		else if (roll == 2 && ix->nodes[id].pins)
			coord_index_unpin(ix, id);
		else
			coord_index_touch(ix, id);
	}
}

/* The node whose key is key, by a scan of every node. */
static uint32_t brute_find(const struct coord_index *ix, const struct rec_key *key)
{
	for (uint32_t id = 0; id < ix->nodes_max; id++)
		if (ix->nodes[id].in_use && rec_key_equal(&ix->nodes[id].key, key))
			return id;
	return COORD_NONE;
}

/* Feasibility by the seed's words, following parent keys rather than ids. */
static bool brute_chain(const struct coord_index *ix, const struct rec_history *h,
			uint32_t candidate, uint64_t resident, uint32_t *chain,
			uint32_t *count, uint64_t *stop)
{
	uint32_t id = candidate;
	struct rec_key key;

	*count = 0;
	for (;;) {
		const struct coord_node *n = &ix->nodes[id];

		if (n->state != COORD_READY || *count == COORD_CHAIN_MAX)
			return false;
		chain[(*count)++] = id;
		if (n->parent.consumed == 0) {
			*stop = 0;
			return true;
		}
		id = brute_find(ix, &n->parent);
		if (id == COORD_NONE)
			return false;
		/* hashed every time: the oracle keeps no proofs */
		rec_history_key_at(h, n->parent.consumed, &key);
		if (!rec_key_equal(&key, &n->parent))
			return false;
		if (ix->nodes[id].key.consumed <= resident) {
			*stop = ix->nodes[id].key.consumed;
			return true;
		}
	}
}

/* Compares one lookup with a search over every node, longest candidate first. */
static void random_check_lookup(struct coord_index *ix,
				const struct rec_history *h, uint64_t resident)
{
	static uint32_t chain[COORD_CHAIN_MAX];
	uint64_t best_c = 0, stop = 0, pt = ix->page_tokens;
	uint32_t best = COORD_NONE, count = 0;
	bool hit = coord_index_lookup(ix, h, resident, &result);

	for (;;) {
		uint64_t next_c = 0;
		uint32_t next = COORD_NONE;

		for (uint32_t id = 0; id < ix->nodes_max; id++) {
			const struct coord_node *n = &ix->nodes[id];
			uint64_t c = n->key.consumed;
			struct rec_key key;

			if (!n->in_use || n->state != COORD_READY || !n->row_present ||
			    c <= resident || c > h->token_count ||
			    (best != COORD_NONE && c >= best_c) || c <= next_c)
				continue;
			rec_history_key_at(h, c, &key);
			if (rec_key_equal(&key, &n->key)) {
				next = id;
				next_c = c;
			}
		}
		if (next == COORD_NONE) {
			assert_false(hit);
			return;
		}
		best = next;
		best_c = next_c;
		if (brute_chain(ix, h, best, resident, chain, &count, &stop))
			break;
	}
	assert_true(hit);
	assert_int_equal(result.consumed, best_c);
	assert_int_equal(result.parent_consumed, stop);
	assert_int_equal(result.chain_count, count);
	for (uint32_t i = 0; i < count; i++)
		assert_int_equal(result.chain[i], chain[count - 1 - i]);
	assert_int_equal(result.skip_pages, resident / pt - stop / pt);
	assert_int_equal(result.page_count, best_c / pt - resident / pt);
}

/* An evictable callback that refuses every fifth id. */
static bool every_fifth_refused(const struct coord_node *node, void *ctx)
{
	const struct coord_index *ix = ctx;

	return (uint32_t)(node - ix->nodes) % 5 != 0;
}

/* The victim by a scan of every node for the smallest eligible tick. */
static uint32_t brute_victim(const struct coord_index *ix, bool *compact)
{
	for (uint32_t pass = 0; pass < 2; pass++) {
		uint32_t best = COORD_NONE;

		for (uint32_t id = 0; id < ix->nodes_max; id++) {
			const struct coord_node *n = &ix->nodes[id];

			if (!n->in_use || n->pins || n->state != COORD_READY ||
			    n->child_count != pass || (pass && !n->row_present) ||
			    !every_fifth_refused(n, (void *)ix))
				continue;
			if (best == COORD_NONE || n->access_tick < ix->nodes[best].access_tick)
				best = id;
		}
		if (best != COORD_NONE) {
			*compact = pass == 1;
			return best;
		}
	}
	*compact = false;
	return COORD_NONE;
}

/* Child counts, the LRU list and the free list agree with the nodes. */
static void random_check_structure(const struct coord_index *ix)
{
	uint32_t lru_count = 0, free_count = 0, used = 0;
	uint64_t tick = 0;

	for (uint32_t id = ix->lru.head; id != COORD_NONE; id = ix->nodes[id].lru.next) {
		assert_true(ix->nodes[id].in_use);
		assert_true(ix->nodes[id].access_tick > tick);
		tick = ix->nodes[id].access_tick;
		lru_count++;
	}
	assert_true(tick <= ix->tick);
	for (uint32_t id = ix->free_head; id != COORD_NONE; id = ix->nodes[id].hash_next) {
		assert_false(ix->nodes[id].in_use);
		free_count++;
	}
	for (uint32_t id = 0; id < ix->nodes_max; id++) {
		uint32_t children = 0;

		if (!ix->nodes[id].in_use)
			continue;
		used++;
		assert_int_equal(coord_index_find(ix, &ix->nodes[id].key), id);
		for (uint32_t other = 0; other < ix->nodes_max; other++)
			children += ix->nodes[other].in_use &&
				    ix->nodes[other].parent_id == id;
		assert_int_equal(ix->nodes[id].child_count, children);
	}
	assert_int_equal(used, ix->node_count);
	assert_int_equal(lru_count, ix->node_count);
	assert_int_equal(free_count, ix->nodes_max - ix->node_count);
}

/* One round: build, churn, then compare lookups and victims with the oracle. */
static void random_round(struct conversation *convs, uint32_t page_tokens,
			 uint64_t *rng)
{
	struct rec_identity model;
	struct coord_index ix;
	uint32_t hits = 0;

	tu_identities(&model, NULL);
	assert_int_equal(coord_index_init(&ix, RANDOM_NODES, page_tokens), 0);
	random_conversations(convs, rng);
	random_nodes(&ix, convs, rng);
	random_churn(&ix, rng);
	random_check_structure(&ix);
	for (int q = 0; q < RANDOM_QUERIES; q++) {
		struct conversation *conv = &convs[rng_next(rng) % RANDOM_CONVERSATIONS];
		uint64_t length = rng_range(rng, 0, conv->length);
		uint64_t resident = rng_range(rng, 0, length);
		uint32_t at = (uint32_t)(rng_next(rng) % ix.nodes_max);
		struct rec_history h;

		/* Often nothing resident, often exactly a node's endpoint. */
		if (rng_next(rng) % 4 == 0)
			resident = 0;
		else if (rng_next(rng) % 3 == 0 && ix.nodes[at].in_use &&
			 ix.nodes[at].key.consumed <= length)
			resident = ix.nodes[at].key.consumed;

		/*
		 * Half way, after lookups proved links: leaves go and new nodes,
		 * some forged, take their ids (a reused id keeps no proof).
		 */
		if (q == RANDOM_QUERIES / 2) {
			random_churn(&ix, rng);
			random_nodes(&ix, convs, rng);
			random_check_structure(&ix);
		}
		assert_int_equal(rec_history_init(&h, &model, conv->tokens, length), 0);
		random_check_lookup(&ix, &h, resident);
		hits += result.chain_count > 0;
		rec_history_free(&h);
	}
	for (int v = 0; v < 20; v++) {
		bool compact, expect_compact;
		uint32_t victim = coord_index_victim(&ix, every_fifth_refused, &ix, &compact);

		assert_int_equal(victim, brute_victim(&ix, &expect_compact));
		assert_int_equal(compact, expect_compact);
		if (victim == COORD_NONE)
			break;
		if (compact)
			ix.nodes[victim].row_present = false;
		else
			coord_index_remove(&ix, victim);
	}
	random_check_structure(&ix);
	printf("round: %u-token pages, %u nodes, %u of %d lookups hit\n", page_tokens,
	       ix.node_count, hits, RANDOM_QUERIES);
	for (int i = 0; i < RANDOM_CONVERSATIONS; i++)
		rec_history_free(&convs[i].h);
	coord_index_destroy(&ix);
}

/* Random conversations: every lookup and victim agrees with brute force. */
static void test_index_random_matches_brute_force(void **state)
{
	struct conversation *convs = calloc(RANDOM_CONVERSATIONS, sizeof(*convs));
	const char *env = getenv("SELENE_TEST_SEED");
	uint64_t seed = env ? strtoull(env, NULL, 0) : sel_realtime_ns();
	uint64_t rng = seed;

	(void)state;
	assert_non_null(convs);
	printf("seed %llu (SELENE_TEST_SEED=%llu repeats it)\n",
	       (unsigned long long)seed, (unsigned long long)seed);
	for (int round = 0; round < RANDOM_ROUNDS; round++)
		random_round(convs, page_sizes[round % SEL_ARRAY_SIZE(page_sizes)], &rng);
	free(convs);
}

/* Element ids of l from head to tail, checking each link back; returns the count. */
static uint32_t idlist_walk(const struct sel_idlist *l, uint32_t *out)
{
	uint32_t n = 0, prev = SEL_IDLIST_NONE;

	for (uint32_t id = l->head; id != SEL_IDLIST_NONE; id = sel_idlist_next(l, id)) {
		assert_int_equal(sel_idlist_prev(l, id), prev);
		out[n++] = prev = id;
	}
	assert_int_equal(l->tail, prev);
	return n;
}

/*
 * The id list the index's LRU and the warm tier's share (common/idlist.h):
 * links inside structs and links alone, insert first, after and last,
 * removal at the head, middle and tail.
 */
static void test_index_idlist_both_layouts(void **state)
{
	struct elem {
		uint64_t payload;
		struct sel_idlink link;
	} elems[4];
	struct sel_idlink links[4];
	struct sel_idlist lists[2];
	uint32_t got[4];

	(void)state;
	sel_idlist_init(&lists[0], &elems[0].link, sizeof(elems[0]));
	sel_idlist_init(&lists[1], links, sizeof(links[0]));
	for (uint32_t k = 0; k < 2; k++) {
		struct sel_idlist *l = &lists[k];

		assert_int_equal(idlist_walk(l, got), 0);
		sel_idlist_push_tail(l, 2);
		sel_idlist_insert_after(l, SEL_IDLIST_NONE, 0); /* first */
		sel_idlist_insert_after(l, 0, 1);
		sel_idlist_push_tail(l, 3);
		assert_int_equal(idlist_walk(l, got), 4);
		for (uint32_t i = 0; i < 4; i++)
			assert_int_equal(got[i], i);
		sel_idlist_remove(l, 1);
		sel_idlist_remove(l, 0);
		sel_idlist_remove(l, 3);
		assert_int_equal(idlist_walk(l, got), 1);
		assert_int_equal(got[0], 2);
		sel_idlist_remove(l, 2);
		assert_int_equal(idlist_walk(l, got), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_index_idlist_both_layouts),
		cmocka_unit_test(test_index_init_sizes),
		cmocka_unit_test(test_index_unaligned_endpoints),
		cmocka_unit_test(test_index_feasible_through_resident_ancestor),
		cmocka_unit_test(test_index_forged_parent_link),
		cmocka_unit_test(test_index_forged_link_never_proven),
		cmocka_unit_test(test_index_page_only_node_supplies_pages),
		cmocka_unit_test(test_index_unready_ancestor_infeasible),
		cmocka_unit_test(test_index_first_feasible_wins),
		cmocka_unit_test(test_index_bucket_boundaries),
		cmocka_unit_test(test_index_root_records),
		cmocka_unit_test(test_index_insert_errors),
		cmocka_unit_test(test_index_remove_reuses_ids),
		cmocka_unit_test(test_index_lru_order),
		cmocka_unit_test(test_index_access_tick_places_nodes),
		cmocka_unit_test(test_index_victim_skips_pinned_and_unevictable),
		cmocka_unit_test(test_index_victim_compaction_candidate),
		cmocka_unit_test(test_index_compaction_keeps_chain_pages),
		cmocka_unit_test(test_index_chain_bound),
		cmocka_unit_test(test_index_programmer_errors_abort),
		cmocka_unit_test(test_index_random_matches_brute_force),
	};

	return cmocka_run_group_tests_name("index", tests, NULL, NULL);
}
