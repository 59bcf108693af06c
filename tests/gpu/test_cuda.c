/*
 * The shard engine on the cuda backend (make test-gpu): page planes and a
 * row plane in device memory; store patterns from chosen page ids, poison
 * the device planes, fetch into other ids and compare byte-exact, for a
 * chain longer than one window and for a suffix; the same through a warm
 * tier registered with the device, with every file read failing. Skips,
 * saying why, where no GPU or driver is found.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/engine.h"
#include "shard/warm.h"
#include "selene/store.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#define PLANES 4u
#define UNIT 65536u
#define PAGES 400u
#define ROW 300000u
#define ROWS 4u

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_dir *dir;
	struct shard_device *dev;
	struct shard_engine *engine;
	struct shard_planes planes;
	uint8_t *host; /* staging for the test's own uploads and checks */
	bool warm;     /* the engine has a warm tier for both records */
};

static int setup_with(void **state, uint64_t warm_bytes)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct shard_engine_options options = { .geometry = &f->g, .planes = &f->planes,
						.register_pool = true, .warm_bytes = warm_bytes };
	char why[256];
	int ret;

	ret = shard_device_open_cuda(0, &f->dev, why, sizeof(why));
	if (ret) {
		fprintf(stderr, "skip: no GPU: %s\n", why);
		free(f);
		*state = NULL;
		return 0;
	}
	f->base = tu_make_temp_dir("gpu");
	tu_geometry(&f->g, 64, PLANES, UNIT, ROW, 0, 1);
	f->g.page_count = PAGES;
	f->g.row_count = ROWS;
	tu_identities(NULL, &f->ns);
	f->dir = tu_dir_open(f->base, &f->g, true);
	for (uint32_t p = 0; p < PLANES; p++)
		assert_int_equal(shard_device_cuda_alloc(f->dev, (uint64_t)UNIT * PAGES,
							 &f->planes.page_base[p]), 0);
	assert_int_equal(shard_device_cuda_alloc(f->dev, (uint64_t)ROW * ROWS,
						 &f->planes.row_base), 0);
	f->host = tu_alloc((uint64_t)UNIT * PAGES);
	options.dir = f->dir;
	options.device = f->dev;
	if (shard_engine_open(&options, &f->engine, why, sizeof(why)) != 0)
		fail_msg("engine: %s", why);
	f->warm = warm_bytes > 0;
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, 0);
}

/*
 * Warm slots for both records (210 pages and two rows of 2 slots each),
 * rounded up to whole groups of SHARD_WARM_GROUP_SLOTS, as the tier
 * rounds its slots down to them.
 */
static int setup_warm(void **state)
{
	uint64_t slots = (210ull + 4 + SHARD_WARM_GROUP_SLOTS - 1) / SHARD_WARM_GROUP_SLOTS *
			 SHARD_WARM_GROUP_SLOTS;

	return setup_with(state, slots * PLANES * UNIT);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_failpoints_configure(NULL);
	if (!f)
		return 0;
	shard_engine_close(f->engine);
	for (uint32_t p = 0; p < PLANES; p++)
		shard_device_cuda_free(f->dev, f->planes.page_base[p]);
	shard_device_cuda_free(f->dev, f->planes.row_base);
	shard_device_close(f->dev);
	rec_dir_close(f->dir);
	tu_remove_tree(f->base);
	free(f->host);
	free(f);
	return 0;
}

/* Uploads the synthetic content of prefix page index into device page id. */
static void put_page(struct fixture *f, uint32_t id, uint64_t index)
{
	for (uint32_t p = 0; p < PLANES; p++) {
		tu_fill(f->host, UNIT, index * 16 + p);
		assert_int_equal(shard_device_cuda_memcpy(f->dev, SHARD_HOST_TO_DEVICE,
							  f->planes.page_base[p] + (uint64_t)UNIT * id,
							  f->host, UNIT), 0);
	}
}

static bool page_is(struct fixture *f, uint32_t id, uint64_t index)
{
	uint8_t *expect = malloc(UNIT);
	bool ok = true;

	for (uint32_t p = 0; p < PLANES && ok; p++) {
		tu_fill(expect, UNIT, index * 16 + p);
		assert_int_equal(shard_device_cuda_memcpy(f->dev, SHARD_DEVICE_TO_HOST,
							  f->planes.page_base[p] + (uint64_t)UNIT * id,
							  f->host, UNIT), 0);
		ok = memcmp(expect, f->host, UNIT) == 0;
	}
	free(expect);
	return ok;
}

static void put_row(struct fixture *f, uint32_t slot, uint64_t seed)
{
	tu_fill(f->host, ROW, seed);
	assert_int_equal(shard_device_cuda_memcpy(f->dev, SHARD_HOST_TO_DEVICE,
						  f->planes.row_base + (uint64_t)ROW * slot,
						  f->host, ROW), 0);
}

static bool row_is(struct fixture *f, uint32_t slot, uint64_t seed)
{
	uint8_t *expect = malloc(ROW);
	bool ok;

	tu_fill(expect, ROW, seed);
	assert_int_equal(shard_device_cuda_memcpy(f->dev, SHARD_DEVICE_TO_HOST,
						  f->planes.row_base + (uint64_t)ROW * slot,
						  f->host, ROW), 0);
	ok = memcmp(expect, f->host, ROW) == 0;
	free(expect);
	return ok;
}

static void poison(struct fixture *f)
{
	memset(f->host, 0xee, (uint64_t)UNIT * PAGES);
	for (uint32_t p = 0; p < PLANES; p++)
		assert_int_equal(shard_device_cuda_memcpy(f->dev, SHARD_HOST_TO_DEVICE,
							  f->planes.page_base[p], f->host,
							  (uint64_t)UNIT * PAGES), 0);
	for (uint32_t s = 0; s < ROWS; s++)
		assert_int_equal(shard_device_cuda_memcpy(f->dev, SHARD_HOST_TO_DEVICE,
							  f->planes.row_base + (uint64_t)ROW * s,
							  f->host, ROW), 0);
}

/*
 * Stores a (pages 0..149 from ids 7, 9, 11, ..., scattered; row 111 from
 * slot 1) and its child b (pages 150..209 from ids 310..; row 222 from
 * slot 2), warm where the engine has a warm tier.
 */
static void store_two(struct fixture *f, struct rec_key *a, struct rec_key *b)
{
	uint32_t ids[PAGES];
	struct rec_header h;
	struct shard_completion c;
	struct shard_store_job job = { .header = &h, .page_ids = ids, .warm = f->warm };

	*a = (struct rec_key){ .consumed = 64 * 150 + 3 };
	*b = (struct rec_key){ .consumed = 64 * 210 + 9 };
	memset(a->digest.bytes, 0xa1, 16);
	memset(b->digest.bytes, 0xb2, 16);
	for (uint32_t i = 0; i < 150; i++) {
		ids[i] = 7 + 2 * i;
		put_page(f, ids[i], i);
	}
	put_row(f, 1, 111);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, a, NULL, &a->digest, 0, 150, 5), 0);
	job.state_slot = 1;
	assert_int_equal(shard_engine_store(f->engine, 1, &job), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	for (uint32_t i = 0; i < 60; i++) {
		ids[i] = 310 + i;
		put_page(f, ids[i], 150 + i);
	}
	put_row(f, 2, 222);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, b, a, &b->digest, 150, 60, 5), 0);
	job.state_slot = 2;
	assert_int_equal(shard_engine_store(f->engine, 2, &job), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
}

/*
 * Two records (150 and 60 pages, several windows each) round-trip; with a
 * warm tier, stored warm and fetched with every file read failing.
 */
static void test_gpu_store_poison_fetch(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, b;
	uint32_t ids[PAGES];
	struct shard_completion c;
	struct shard_chain_record chain[2];
	struct shard_fetch_job fetch = { .chain = chain, .chain_count = 2, .page_ids = ids };
	struct shard_warm_stats ws;

	if (!f)
		skip();
	store_two(f, &a, &b);
	chain[0] = (struct shard_chain_record){ a, 0, 150 };
	chain[1] = (struct shard_chain_record){ b, 150, 60 };
	if (f->warm)
		assert_int_equal(sel_failpoints_configure("disk.open=return(EIO);"
							  "disk.read=return(EIO)"), 0);
	for (uint32_t skip = 0; skip <= 200; skip += 100) {
		poison(f);
		for (uint32_t i = 0; i + skip < 210; i++)
			ids[i] = 399 - i; /* other ids, reversed */
		fetch.skip_pages = skip;
		fetch.state_slot = 3;
		assert_int_equal(shard_engine_fetch(f->engine, 3 + skip, &fetch), 0);
		shard_engine_wait(f->engine, &c);
		if (c.result)
			fail_msg("fetch: %s", c.why);
		for (uint32_t i = 0; i + skip < 210; i++)
			if (!page_is(f, 399 - i, skip + i))
				fail_msg("skip %u: page %u differs on the device", skip, skip + i);
		assert_true(row_is(f, 3, 222));
	}
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.hits, f->warm ? 3 : 0);
	assert_int_equal(ws.records, f->warm ? 2 : 0);
	assert_int_equal(ws.store_fallbacks, 0);
	if (f->warm)
		assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_READ), 0);
}

/* The same through a warm tier: stored warm, fetched reading no file. */
static void test_gpu_warm_store_poison_fetch(void **state)
{
	test_gpu_store_poison_fetch(state);
}

/*
 * Fetches of warm records submitted back to back (pipelined: each one's
 * copies issued while the one before is in flight, each reported after
 * its own copies) all restore byte-exact into their own ids, reading no
 * file.
 */
static void test_gpu_warm_fetches_pipelined(void **state)
{
	static const uint32_t skips[] = { 0, 100, 200 };
	static const uint32_t bases[] = { 0, 210, 320 }; /* ids 0..329, disjoint */
	struct fixture *f = *state;
	struct rec_key a, b;
	uint32_t ids[PAGES];
	struct shard_completion c;
	struct shard_chain_record chain[2];
	struct shard_fetch_job fetch = { .chain = chain, .chain_count = 2, .page_ids = ids,
					 .state_slot = 3 };
	struct shard_engine_stats st;

	if (!f)
		skip();
	store_two(f, &a, &b);
	chain[0] = (struct shard_chain_record){ a, 0, 150 };
	chain[1] = (struct shard_chain_record){ b, 150, 60 };
	assert_int_equal(sel_failpoints_configure("disk.open=return(EIO);disk.read=return(EIO)"),
			 0);
	poison(f);
	for (uint32_t j = 0; j < 3; j++) {
		for (uint32_t i = 0; i + skips[j] < 210; i++)
			ids[i] = bases[j] + i;
		fetch.skip_pages = skips[j];
		assert_int_equal(shard_engine_fetch(f->engine, 10 + j, &fetch), 0);
	}
	for (uint32_t j = 0; j < 3; j++) {
		shard_engine_wait(f->engine, &c);
		if (c.result)
			fail_msg("fetch %" PRIu64 ": %s", c.job_id, c.why);
	}
	for (uint32_t j = 0; j < 3; j++)
		for (uint32_t i = 0; i + skips[j] < 210; i++)
			if (!page_is(f, bases[j] + i, skips[j] + i))
				fail_msg("fetch %u: page %u differs on the device", j, skips[j] + i);
	assert_true(row_is(f, 3, 222));
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_READ), 0);
	shard_engine_stats(f->engine, &st);
	fprintf(stderr, "%" PRIu64 " of 3 fetches pipelined\n", st.fetch_warm_pipelined);
}

/* Polls the store until one event arrives (10 s at most). */
static struct sel_event wait_event(sel_store *store)
{
	struct sel_event ev = { .kind = SEL_EVENT_FETCH_FAILED, .error = -ETIMEDOUT };

	for (int i = 0; i < 10000; i++) {
		if (sel_poll(store, &ev, 1) == 1)
			break;
		usleep(1000);
	}
	return ev;
}

/*
 * The public store API on the cuda device: a conversation published from
 * device planes, the planes poisoned, the longest prefix looked up and
 * fetched into other ids, byte-exact; then again after a restart.
 */
static void test_gpu_store_api(void **state)
{
	struct fixture *f = *state;
	struct sel_plane planes[PLANES];
	char names[PLANES][16], err[256], *dir;
	struct sel_store_config config;
	uint32_t tokens[64 * 100], ids[PAGES];
	sel_store *store;
	sel_history *h;
	struct sel_hit hit;
	struct sel_event ev;
	bool joined;

	if (!f)
		skip();
	dir = tu_make_temp_dir("gpu-api");
	for (uint32_t p = 0; p < PLANES; p++) {
		snprintf(names[p], sizeof(names[p]), "plane.%03u", p);
		planes[p] = (struct sel_plane){ names[p], UNIT, f->planes.page_base[p] };
	}
	config = (struct sel_store_config){
		.dir = dir, .page_tokens = 64, .page_plane_count = PLANES, .page_planes = planes,
		.row_plane = { "state", ROW, f->planes.row_base }, .page_count = PAGES,
		.row_count = ROWS, .device = "cuda", .disk_limit_bytes = 1ull << 30,
		.durable = true, .records_max = 1000,
	};
	tu_tokens(tokens, 64 * 100, 31);
	for (int round = 0; round < 2; round++) {
		if (sel_store_open(&config, &store, err, sizeof(err)) != 0)
			fail_msg("open: %s", err);
		assert_int_equal(sel_history_create(store, tokens, 64 * 100, &h), 0);
		if (round == 0) {
			uint64_t points[2] = { 64 * 40 + 7, 64 * 90 + 1 };

			for (uint32_t i = 0; i < 90; i++) {
				ids[i] = i;
				put_page(f, i, i);
			}
			for (int k = 0; k < 2; k++) {
				struct sel_publication pub = { .checkpoint = (uint64_t)k, .history = h,
							       .consumed = points[k],
							       .parent_consumed = k ? points[0] : 0,
							       .page_ids = ids, .state_slot = (uint32_t)k };
				enum sel_outcome outcome;

				put_row(f, (uint32_t)k, points[k]);
				assert_int_equal(sel_store_publish(store, &pub, &outcome), 0);
				assert_int_equal(outcome, SEL_QUEUED);
				ev = wait_event(store);
				if (ev.kind != SEL_EVENT_STORED)
					fail_msg("store: %s", ev.why);
			}
		}
		poison(f);
		assert_true(sel_lookup(store, h, 0, &hit));
		assert_int_equal(hit.consumed, 64 * 90 + 1);
		assert_int_equal(hit.page_count, 90);
		for (uint32_t i = 0; i < 90; i++)
			ids[i] = 399 - i;
		assert_int_equal(sel_fetch(store, &hit, ids, 3, 7, &joined), 0);
		ev = wait_event(store);
		if (ev.kind != SEL_EVENT_FETCHED)
			fail_msg("fetch (round %d): %s", round, ev.why);
		for (uint32_t i = 0; i < 90; i++)
			if (!page_is(f, 399 - i, i))
				fail_msg("round %d: page %u differs on the device", round, i);
		assert_true(row_is(f, 3, 64 * 90 + 1));
		sel_history_destroy(h);
		assert_int_equal(sel_store_close(store, 10000), 0);
	}
	tu_remove_tree(dir);
}

/*
 * Strided copies on the cuda backend (one cuMemcpy2DAsync each): 8 page
 * records a stride apart in host memory go to consecutive page ids of
 * plane 1 and come back into another stride, byte-exact, nothing between
 * the rows touched.
 */
static void test_gpu_copy_strided_round_trip(void **state)
{
	struct fixture *f = *state;
	uint64_t pitch = 3ull * UNIT, calls;
	uint8_t *src, *back;

	if (!f)
		skip();
	src = tu_alloc(pitch * 8);
	back = tu_alloc(pitch * 8);
	tu_fill(src, pitch * 8, 77);
	memset(back, 0xee, pitch * 8);
	calls = f->dev->batch_calls;
	assert_int_equal(shard_device_copy_strided(f->dev, SHARD_HOST_TO_DEVICE,
		&(struct shard_copy_strided){ .device_address = f->planes.page_base[1] +
					      (uint64_t)UNIT * 100, .device_pitch = UNIT,
					      .host = src + UNIT, .host_pitch = pitch,
					      .bytes = UNIT, .rows = 8 }, 1), 0);
	assert_int_equal(f->dev->batch_calls, calls + 1);
	assert_int_equal(shard_device_copy_strided(f->dev, SHARD_DEVICE_TO_HOST,
		&(struct shard_copy_strided){ .device_address = f->planes.page_base[1] +
					      (uint64_t)UNIT * 100, .device_pitch = UNIT,
					      .host = back, .host_pitch = pitch,
					      .bytes = UNIT, .rows = 8 }, 1), 0);
	assert_int_equal(shard_device_synchronize(f->dev), 0);
	for (uint32_t r = 0; r < 8; r++) {
		assert_memory_equal(back + pitch * r, src + pitch * r + UNIT, UNIT);
		for (uint64_t b = UNIT; b < pitch; b++)
			if (back[pitch * r + b] != 0xee)
				fail_msg("row %u: byte %" PRIu64 " past the row was written", r, b);
	}
	free(src);
	free(back);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_gpu_store_poison_fetch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_warm_fetches_pipelined, setup_warm,
						teardown),
		cmocka_unit_test_setup_teardown(test_gpu_warm_store_poison_fetch, setup_warm,
						teardown),
		cmocka_unit_test_setup_teardown(test_gpu_store_api, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gpu_copy_strided_round_trip, setup, teardown),
	};

	return cmocka_run_group_tests_name("gpu", tests, NULL, NULL);
}
