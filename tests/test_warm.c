/*
 * The warm tier (shard/warm.h) in a rank's shard engine on the host
 * backend: a store goes into warm slots and writes its file from them, a
 * fetch of warm records reads no file (proved with disk.open and disk.read
 * failing every call), a full warm tier falls back to staging, a drop, a
 * truncate and an unlink give slots back, a restart starts empty and the
 * files written from warm slots restore from the disk, and a warm tier the
 * host cannot hold is refused with both figures. The store API's side (the
 * coordinator's tiers, LRU, one and several ranks) is in test_api.c and
 * test_fanout.c.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/engine.h"
#include "shard/slab.h"
#include "shard/warm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE_BYTES 5000u
#define ROW_BYTES 60000u
#define SLOT_BYTES 24576u /* 3 planes of 5000 bytes, each padded to 8 KiB */
#define ROW_PIECES 3u     /* a 60000-byte row in 24 KiB slots */

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_dir *dir;
	struct shard_device *dev;
	struct shard_engine *engine;
	struct shard_planes planes;
	uint8_t *plane_memory[3];
	uint8_t *row_memory;
	uint64_t next_job;
};

static int engine_open(struct fixture *f, uint64_t warm_bytes, char *err, size_t err_size)
{
	struct shard_engine_options options = {
		.geometry = &f->g, .dir = f->dir, .device = f->dev,
		.planes = &f->planes, .window_pages = 4, .jobs_max = 8,
		.checksum_threads = 2, .io_workers = SHARD_IO_WORKERS_NONE,
		.warm_bytes = warm_bytes, .register_pool = true,
	};

	return shard_engine_open(&options, &f->engine, err, err_size);
}

static void open_engine(struct fixture *f, uint64_t warm_bytes)
{
	char err[256];

	if (engine_open(f, warm_bytes, err, sizeof(err)) != 0)
		fail_msg("engine: %s", err);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct rec_scan scan;

	f->base = tu_make_temp_dir("warm");
	tu_geometry(&f->g, 64, 3, PAGE_BYTES, ROW_BYTES, 1, 2);
	f->g.page_count = 200;
	tu_identities(NULL, &f->ns);
	f->dir = tu_dir_open(f->base, &f->g, true);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	assert_int_equal(shard_device_open_host(&f->dev), 0);
	for (uint32_t p = 0; p < 3; p++) {
		f->plane_memory[p] = tu_alloc(PAGE_BYTES * 200);
		f->planes.page_base[p] = (uintptr_t)f->plane_memory[p];
	}
	f->row_memory = tu_alloc((size_t)ROW_BYTES * f->g.row_count);
	f->planes.row_base = (uintptr_t)f->row_memory;
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_failpoints_configure(NULL);
	sel_log_set_level(SEL_LOG_INFO);
	shard_engine_close(f->engine);
	shard_device_close(f->dev);
	rec_dir_close(f->dir);
	for (uint32_t p = 0; p < 3; p++)
		free(f->plane_memory[p]);
	free(f->row_memory);
	tu_remove_tree(f->base);
	free(f);
	return 0;
}

static void fill_page(struct fixture *f, uint32_t id, uint64_t prefix_index)
{
	for (uint32_t p = 0; p < 3; p++)
		tu_fill(f->plane_memory[p] + (uint64_t)PAGE_BYTES * id, PAGE_BYTES,
			prefix_index * 16 + p);
}

static bool page_matches(struct fixture *f, uint32_t id, uint64_t prefix_index)
{
	uint8_t expect[PAGE_BYTES];

	for (uint32_t p = 0; p < 3; p++) {
		tu_fill(expect, PAGE_BYTES, prefix_index * 16 + p);
		if (memcmp(expect, f->plane_memory[p] + (uint64_t)PAGE_BYTES * id,
			   PAGE_BYTES) != 0)
			return false;
	}
	return true;
}

static bool row_matches(struct fixture *f, uint32_t slot, uint64_t consumed)
{
	uint8_t *expect = malloc(ROW_BYTES);
	bool ok;

	tu_fill(expect, ROW_BYTES, consumed);
	ok = memcmp(expect, f->row_memory + (uint64_t)ROW_BYTES * slot, ROW_BYTES) == 0;
	free(expect);
	return ok;
}

static void poison(struct fixture *f)
{
	for (uint32_t p = 0; p < 3; p++)
		memset(f->plane_memory[p], 0xee, PAGE_BYTES * 200);
	memset(f->row_memory, 0xee, (size_t)ROW_BYTES * f->g.row_count);
}

static void make_key(struct rec_key *key, uint64_t consumed, uint8_t tag)
{
	key->consumed = consumed;
	memset(key->digest.bytes, tag, sizeof(key->digest.bytes));
	key->digest.bytes[0] = (uint8_t)consumed;
}

/* Stores pages [parent's, key's) from ids base_id + i, warm when asked. */
static int store(struct fixture *f, const struct rec_key *key, const struct rec_key *parent,
		 uint32_t base_id, uint32_t slot, bool warm)
{
	uint32_t first = parent ? (uint32_t)(parent->consumed / 64) : 0;
	uint32_t tail = (uint32_t)(key->consumed / 64) - first, ids[200];
	struct rec_header h;
	struct shard_store_job job = { .header = &h, .page_ids = ids, .state_slot = slot,
				       .warm = warm };
	struct shard_completion c;
	int ret;

	for (uint32_t i = 0; i < tail; i++) {
		ids[i] = base_id + i;
		fill_page(f, ids[i], first + i);
	}
	tu_fill(f->row_memory + (uint64_t)ROW_BYTES * slot, ROW_BYTES, key->consumed);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, key, parent, &key->digest,
					 first, tail, 99), 0);
	ret = shard_engine_store(f->engine, ++f->next_job, &job);
	if (ret)
		return ret;
	shard_engine_wait(f->engine, &c);
	return c.result;
}

static int fetch(struct fixture *f, const struct shard_chain_record *chain, uint32_t count,
		 uint32_t skip, uint32_t base_id, uint32_t slot)
{
	uint32_t ids[200], pages = 0;
	struct shard_fetch_job job = { .chain = chain, .chain_count = count,
				       .skip_pages = skip, .page_ids = ids, .state_slot = slot };
	struct shard_completion c;
	int ret;

	for (uint32_t i = 0; i < count; i++)
		pages += chain[i].tail_page_count;
	for (uint32_t i = 0; i + skip < pages; i++)
		ids[i] = base_id + i;
	ret = shard_engine_fetch(f->engine, ++f->next_job, &job);
	if (ret)
		return ret;
	shard_engine_wait(f->engine, &c);
	return c.result;
}

static int key_job(struct fixture *f, enum shard_job_kind kind, const struct rec_key *key)
{
	struct shard_completion c;
	int ret = kind == SHARD_JOB_WARM_DROP ? shard_engine_warm_drop(f->engine, ++f->next_job, key) :
		  kind == SHARD_JOB_TRUNCATE ? shard_engine_truncate(f->engine, ++f->next_job, key) :
					       shard_engine_unlink(f->engine, ++f->next_job, key);

	if (ret)
		return ret;
	shard_engine_wait(f->engine, &c);
	return c.result;
}

/* Every open and read of a record file fails from now on. */
static void fail_file_reads(void)
{
	assert_int_equal(sel_failpoints_configure("disk.open=return(EIO);"
						  "disk.read=return(EIO)"), 0);
}

static bool files_were_read(void)
{
	return sel_failpoint_fired(SEL_FP_DISK_OPEN) || sel_failpoint_fired(SEL_FP_DISK_READ);
}

/* A chain of two warm records restores byte-exact, suffix too, reading no file. */
static void test_warm_fetch_reads_no_file(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, b;
	struct shard_chain_record chain[2];
	struct shard_warm_stats ws;

	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 7, 1);
	make_key(&b, 64 * 12 + 3, 2);
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	assert_int_equal(store(f, &b, &a, 17, 2, true), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 2);
	assert_int_equal(ws.slots_used, 7 + 5 + 2 * ROW_PIECES);
	assert_int_equal(ws.slots_total, 64);
	assert_int_equal(ws.bytes, (7 + 5 + 2ull * ROW_PIECES) * SLOT_BYTES);
	chain[0] = (struct shard_chain_record){ a, 0, 7 };
	chain[1] = (struct shard_chain_record){ b, 7, 5 };
	for (uint32_t skip = 0; skip <= 12; skip += 3) {
		poison(f);
		fail_file_reads();
		assert_int_equal(fetch(f, chain, 2, skip, 100, 4), 0);
		assert_false(files_were_read());
		sel_failpoints_configure(NULL);
		for (uint32_t i = skip; i < 12; i++)
			assert_true(page_matches(f, 100 + i - skip, i));
		assert_true(row_matches(f, 4, b.consumed));
		assert_int_equal(f->plane_memory[1][(uint64_t)PAGE_BYTES * 99], 0xee);
		assert_int_equal(f->plane_memory[1][(uint64_t)PAGE_BYTES * (112 - skip)], 0xee);
	}
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.hits, 5);
	/* Without the failpoints the disk copy, written from warm slots, verifies. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &b), 0);
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
	poison(f);
	fail_file_reads();
	assert_int_not_equal(fetch(f, chain, 2, 0, 100, 4), 0);
	assert_true(files_were_read());
	sel_failpoints_configure(NULL);
	assert_int_equal(fetch(f, chain, 2, 0, 100, 4), 0);
	for (uint32_t i = 0; i < 12; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, 4, b.consumed));
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 0);
	assert_int_equal(ws.slots_used, 0);
	assert_int_equal(ws.drops, 2);
}

/* A record that does not fit the free slots is stored through staging, and restores from disk. */
static void test_warm_full_falls_back(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, b;
	struct shard_chain_record chain;
	struct shard_warm_stats ws;

	open_engine(f, (10ull + 2 * ROW_PIECES) * SLOT_BYTES);
	make_key(&a, 64 * 6, 1);
	make_key(&b, 64 * 6, 2);
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	assert_int_equal(store(f, &b, NULL, 30, 2, true), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 1);
	assert_int_equal(ws.store_fallbacks, 1);
	assert_int_equal(ws.slots_used, 6 + ROW_PIECES);
	poison(f);
	fail_file_reads();
	chain = (struct shard_chain_record){ a, 0, 6 };
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3), 0);
	assert_false(files_were_read());
	chain = (struct shard_chain_record){ b, 0, 6 };
	assert_int_not_equal(fetch(f, &chain, 1, 0, 120, 4), 0);
	sel_failpoints_configure(NULL);
	assert_int_equal(fetch(f, &chain, 1, 0, 120, 4), 0);
	for (uint32_t i = 0; i < 6; i++) {
		assert_true(page_matches(f, 100 + i, i));
		assert_true(page_matches(f, 120 + i, i));
	}
	assert_true(row_matches(f, 3, a.consumed));
	assert_true(row_matches(f, 4, b.consumed));
	/* A store not asked to be warm never is. */
	make_key(&b, 64 * 2, 3);
	assert_int_equal(store(f, &b, NULL, 40, 2, false), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 1);
}

/* A truncate drops a warm row, an unlink the record, a second store the older copy. */
static void test_warm_truncate_unlink_restore(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, b;
	struct shard_chain_record chain[2];
	struct shard_warm_stats ws;

	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 4, 1);
	make_key(&b, 64 * 8, 2);
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	assert_int_equal(store(f, &b, &a, 14, 2, true), 0);
	assert_int_equal(key_job(f, SHARD_JOB_TRUNCATE, &a), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 2);
	assert_int_equal(ws.slots_used, 8 + ROW_PIECES);
	/* a's pages stay warm: the chain to b still reads no file. */
	chain[0] = (struct shard_chain_record){ a, 0, 4 };
	chain[1] = (struct shard_chain_record){ b, 4, 4 };
	poison(f);
	fail_file_reads();
	assert_int_equal(fetch(f, chain, 2, 0, 100, 4), 0);
	assert_false(files_were_read());
	/* a alone has no row any more: not warm, so its file is read (and fails). */
	assert_int_not_equal(fetch(f, chain, 1, 0, 100, 4), 0);
	sel_failpoints_configure(NULL);
	for (uint32_t i = 0; i < 8; i++)
		assert_true(page_matches(f, 100 + i, i));
	/* The same key stored again: one warm copy, the new one. */
	assert_int_equal(store(f, &b, &a, 50, 2, true), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 2);
	assert_int_equal(ws.slots_used, 8 + ROW_PIECES);
	assert_int_equal(key_job(f, SHARD_JOB_UNLINK, &b), 0);
	assert_int_equal(key_job(f, SHARD_JOB_UNLINK, &a), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 0);
	assert_int_equal(ws.slots_used, 0);
	/* A drop of what is not warm does nothing, and succeeds. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
}

/* After a restart the warm tier is empty and the records restore from the disk. */
static void test_warm_restart_empty(void **state)
{
	struct fixture *f = *state;
	struct rec_key a;
	struct shard_chain_record chain;
	struct shard_warm_stats ws;

	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 9 + 1, 1);
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	shard_engine_close(f->engine);
	open_engine(f, 64ull * SLOT_BYTES);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 0);
	assert_int_equal(ws.slots_used, 0);
	assert_int_equal(ws.slots_total, 64);
	poison(f);
	chain = (struct shard_chain_record){ a, 0, 9 };
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 2), 0);
	for (uint32_t i = 0; i < 9; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, 2, a.consumed));
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.hits, 0);
}

/* A warm tier the host cannot hold, or one too small for a record, is refused. */
static void test_warm_bad_sizes(void **state)
{
	struct fixture *f = *state;
	uint64_t available;
	char err[512];

	assert_int_equal(engine_open(f, ROW_PIECES * SLOT_BYTES, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "warm tier"));
	if (shard_slab_memory_available(&available) != 0) {
		skip(); /* no memory figure to check against */
		return;
	}
	assert_int_equal(engine_open(f, available, err, sizeof(err)), -ENOMEM);
	assert_non_null(strstr(err, "the warm tier ("));
	assert_non_null(strstr(err, "MiB of memory available"));
	open_engine(f, 0);
}

/* The slot pool alone: reserve, commit, find, drop, and no block when full. */
static void test_warm_pool(void **state)
{
	struct shard_warm w;
	struct rec_key a, b;
	uint32_t e1, e2, slots[8];

	(void)state;
	assert_int_equal(shard_warm_init(&w, 4096, 10, 8, 2), 0);
	make_key(&a, 64, 1);
	make_key(&b, 128, 2);
	e1 = shard_warm_reserve(&w, &a, 0, 5);
	assert_int_not_equal(e1, SHARD_WARM_NONE);
	assert_int_equal(shard_warm_find(&w, &a), SHARD_WARM_NONE); /* not yet */
	assert_int_equal(shard_warm_reserve(&w, &b, 0, 2), SHARD_WARM_NONE); /* 7 + 4 > 10 */
	e2 = shard_warm_reserve(&w, &b, 0, 1);
	assert_int_not_equal(e2, SHARD_WARM_NONE);
	shard_warm_commit(&w, e1);
	shard_warm_abort(&w, e2);
	assert_int_equal(shard_warm_find(&w, &a), e1);
	shard_warm_page_slots(&w, e1, 1, 3, slots);
	for (uint32_t i = 0; i < 3; i++)
		assert_true(slots[i] < 10);
	assert_int_not_equal(slots[0], slots[1]);
	assert_true(shard_warm_drop(&w, &a, false));
	assert_false(shard_warm_drop(&w, &a, false));
	assert_int_equal(w.stats.slots_used, 0);
	assert_int_equal(w.stats.store_fallbacks, 1);
	shard_warm_destroy(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warm_pool),
		cmocka_unit_test_setup_teardown(test_warm_fetch_reads_no_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_full_falls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_truncate_unlink_restore, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_restart_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_bad_sizes, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
