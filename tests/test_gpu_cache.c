/*
 * The reference worker's GPU prefix cache (launch/worker/gpu_cache.h): the deepest
 * matching checkpoint wins, chains share pages by reference, eviction is
 * least recently used and never takes a pinned checkpoint, and a full
 * device says whether waiting can help.
 */
#include "tests/testutil.h"

#include "launch/worker/gpu_cache.h"

#include <errno.h>
#include <string.h>

/* A prompt whose hash at n is n for n <= match, and something else beyond. */
struct fake_prompt {
	uint64_t match;
};

static uint64_t fake_hash(const void *prompt, uint64_t consumed)
{
	const struct fake_prompt *p = prompt;

	return consumed <= p->match ? consumed : consumed + 1000000;
}

static struct launch_gpu_checkpoint *put(struct launch_gpu_cache *c, uint64_t consumed,
					 uint32_t *ids)
{
	uint32_t slot, pages = (uint32_t)(consumed / c->page_tokens);
	struct launch_gpu_checkpoint *k;

	assert_int_equal(launch_gpu_cache_alloc_row(c, &slot), 0);
	k = launch_gpu_cache_insert(c, consumed, consumed, ids, slot);
	assert_non_null(k);
	assert_int_equal(k->page_count, pages);
	return k;
}

/* The deepest checkpoint whose prefix matches, and not one past the prompt. */
static void test_gpu_cache_lookup_deepest_match(void **state)
{
	struct launch_gpu_cache c;
	struct fake_prompt prompt = { .match = 300 };
	uint32_t ids[8];

	(void)state;
	assert_int_equal(launch_gpu_cache_init(&c, 64, 16, 4), 0);
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 6, ids), 0);
	put(&c, 128, ids);
	put(&c, 256, ids);
	put(&c, 384, ids); /* beyond the matching prefix */
	launch_gpu_cache_release(&c, ids, 6);
	assert_int_equal(launch_gpu_cache_lookup(&c, 1000, fake_hash, &prompt)->consumed, 256);
	assert_int_equal(launch_gpu_cache_lookup(&c, 200, fake_hash, &prompt)->consumed, 128);
	assert_null(launch_gpu_cache_lookup(&c, 100, fake_hash, &prompt));
	launch_gpu_cache_destroy(&c);
}

/* Shared pages stay until the last holder lets go; LRU picks the victim. */
static void test_gpu_cache_lru_and_shared_pages(void **state)
{
	struct launch_gpu_cache c;
	struct fake_prompt prompt = { .match = 1000 };
	uint32_t ids[8], more[8];
	struct launch_gpu_checkpoint *a, *b;

	(void)state;
	assert_int_equal(launch_gpu_cache_init(&c, 64, 8, 4), 0);
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 4, ids), 0);
	a = put(&c, 128, ids);      /* pages 0..1 */
	b = put(&c, 256, ids);      /* pages 0..3, sharing 0..1 */
	launch_gpu_cache_release(&c, ids, 4);
	assert_int_equal(c.free_page_count, 4);
	/* a was used last: b is the victim, and only b's own pages come back */
	prompt.match = 200;
	assert_ptr_equal(launch_gpu_cache_lookup(&c, 1000, fake_hash, &prompt), a);
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 6, more), 0);
	assert_false(b->live);
	assert_true(a->live);
	assert_int_equal(c.evictions, 1);
	for (uint32_t i = 0; i < 6; i++)
		assert_true(more[i] != ids[0] && more[i] != ids[1]);
	launch_gpu_cache_destroy(&c);
}

/* Pinned checkpoints are never evicted: -EAGAIN, then room once unpinned;
 * a request larger than the device is -ENOSPC. */
static void test_gpu_cache_pins_and_full(void **state)
{
	struct launch_gpu_cache c;
	uint32_t ids[8], slot;
	struct launch_gpu_checkpoint *k;

	(void)state;
	assert_int_equal(launch_gpu_cache_init(&c, 64, 4, 1), 0);
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 9, ids), -ENOSPC);
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 4, ids), 0);
	k = put(&c, 256, ids);
	k->pins = 1;
	k->store_id = 7;
	launch_gpu_cache_release(&c, ids, 4);
	assert_ptr_equal(launch_gpu_cache_find_store(&c, 7), k);
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 1, ids), -EAGAIN);
	assert_int_equal(launch_gpu_cache_alloc_row(&c, &slot), -EAGAIN);
	k->pins = 0;
	assert_int_equal(launch_gpu_cache_alloc_row(&c, &slot), 0);
	assert_int_equal(launch_gpu_cache_checkpoint_count(&c), 0);
	assert_int_equal(c.free_page_count, 4);
	launch_gpu_cache_free_row(&c, slot);
	/* nothing cached, nothing free: no waiting can help */
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 4, ids), 0);
	assert_int_equal(launch_gpu_cache_alloc_pages(&c, 1, ids + 4), -ENOSPC);
	launch_gpu_cache_destroy(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpu_cache_lookup_deepest_match),
		cmocka_unit_test(test_gpu_cache_lru_and_shared_pages),
		cmocka_unit_test(test_gpu_cache_pins_and_full),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
