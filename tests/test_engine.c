/*
 * The shard engine on the host backend (shard/engine.h, record/disk.h):
 * store patterns from chosen page ids and a row, poison the planes, fetch
 * into other ids and compare byte-exact; chains longer than a window; suffix
 * fetches; a corrupt page failing the fetch with its reason; a full
 * filesystem failing the store with no temporary file left; injected I/O
 * errors; truncate and unlink jobs; bounded submission. Every test runs on
 * the io_uring path with inline submissions and with kernel workers, and on
 * the pread/pwrite fallback.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "record/disk.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/engine.h"
#include "shard/pool_share.h"
#include "record/format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_dir *dir;
	struct shard_device *dev;
	struct shard_engine *engine;
	struct shard_planes planes;
	uint8_t *plane_memory[8];
	uint8_t *row_memory;
	bool no_uring;
	uint32_t io_workers; /* the engine option: SHARD_IO_WORKERS_NONE or N */
	uint64_t next_job;
	uint64_t unit; /* each page plane's bytes: 5000, or 8192 (setup_grouped) */
};

/* stores_max 0: the engine's default. */
static void open_engine_with(struct fixture *f, uint32_t window_pages, uint32_t jobs_max,
			     uint32_t stores_max)
{
	struct shard_engine_options options = {
		.geometry = &f->g, .dir = f->dir, .device = f->dev,
		.planes = &f->planes, .window_pages = window_pages,
		.jobs_max = jobs_max, .no_uring = f->no_uring, .io_workers = f->io_workers,
		.checksum_threads = 3, /* two helpers, whatever the machine */
		.stores_max = stores_max,
	};
	char err[256];

	if (shard_engine_open(&options, &f->engine, err, sizeof(err)) != 0)
		fail_msg("engine: %s", err);
}

static void open_engine(struct fixture *f, uint32_t window_pages)
{
	open_engine_with(f, window_pages, 8, 0);
}

/*
 * 3 planes of unit bytes (5000, padded to 8 KiB: staging a page record in
 * one piece a slot; or 8192: staging's windows grouped plane-major), a
 * 60000-byte row spanning 3 page-record slots of 24 KiB, 200 device pages.
 */
static int setup_unit(void **state, bool no_uring, uint32_t io_workers, const char *base,
		      uint64_t unit)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct rec_scan scan;

	f->no_uring = no_uring;
	f->io_workers = io_workers;
	f->unit = unit;
	f->base = base ? strdup(base) : tu_make_temp_dir("engine");
	tu_geometry(&f->g, 64, 3, unit, 60000, 1, 2);
	f->g.page_count = 200;
	tu_identities(NULL, &f->ns);
	f->dir = tu_dir_open(f->base, &f->g, true);
	/*
	 * As a store's: scanned, so the directory keeps its catalogue and the
	 * disk's control threads note every commit, truncation and unlink
	 * (R-DIR-10) while the tests run.
	 */
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	assert_int_equal(shard_device_open_host(&f->dev), 0);
	for (uint32_t p = 0; p < 3; p++) {
		f->plane_memory[p] = tu_alloc(unit * 200);
		f->planes.page_base[p] = (uintptr_t)f->plane_memory[p];
	}
	f->row_memory = tu_alloc(60000 * f->g.row_count);
	f->planes.row_base = (uintptr_t)f->row_memory;
	open_engine(f, 4);
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int setup_with(void **state, bool no_uring, uint32_t io_workers, const char *base)
{
	return setup_unit(state, no_uring, io_workers, base, 5000);
}

/* The ring with inline submissions, whatever file system /tmp is. */
static int setup_uring(void **state)
{
	return setup_with(state, false, SHARD_IO_WORKERS_NONE, NULL);
}

/* The ring handing every I/O request to 3 kernel workers. */
static int setup_workers(void **state)
{
	return setup_with(state, false, 3, NULL);
}

/*
 * A record directory on tmpfs with the defaults there (kernel workers).
 * Where /dev/shm is missing, 3 workers on the usual base.
 */
static int setup_memory(void **state)
{
	char *base;
	int ret;

	if (access("/dev/shm", W_OK) != 0)
		return setup_workers(state);
	setenv("TMPDIR", "/dev/shm", 1);
	base = tu_make_temp_dir("engine");
	unsetenv("TMPDIR");
	ret = setup_with(state, false, 0, base);
	free(base);
	return ret;
}

static int setup_fallback(void **state)
{
	return setup_with(state, true, SHARD_IO_WORKERS_NONE, NULL);
}

/* Planes of 8 KiB, the ring with inline submissions: staging grouped plane-major. */
static int setup_grouped(void **state)
{
	return setup_unit(state, false, SHARD_IO_WORKERS_NONE, NULL, 8192);
}

/*
 * The same in a memory-backed directory (kernel workers; the verifying
 * threads read the pages there). Where /dev/shm is missing, 3 workers on
 * the usual base.
 */
static int setup_grouped_memory(void **state)
{
	char *base;
	int ret;

	if (access("/dev/shm", W_OK) != 0)
		return setup_unit(state, false, 3, NULL, 8192);
	setenv("TMPDIR", "/dev/shm", 1);
	base = tu_make_temp_dir("engine");
	unsetenv("TMPDIR");
	ret = setup_unit(state, false, 0, base, 8192);
	free(base);
	return ret;
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

/* The synthetic content of a page: depends on the prefix page and plane. */
static void fill_page(struct fixture *f, uint32_t id, uint64_t prefix_index)
{
	for (uint32_t p = 0; p < 3; p++)
		tu_fill(f->plane_memory[p] + f->unit * id, f->unit, prefix_index * 16 + p);
}

static bool page_matches(struct fixture *f, uint32_t id, uint64_t prefix_index)
{
	uint8_t expect[8192];

	for (uint32_t p = 0; p < 3; p++) {
		tu_fill(expect, f->unit, prefix_index * 16 + p);
		if (memcmp(expect, f->plane_memory[p] + f->unit * id, f->unit) != 0)
			return false;
	}
	return true;
}

static void poison(struct fixture *f)
{
	for (uint32_t p = 0; p < 3; p++)
		memset(f->plane_memory[p], 0xee, f->unit * 200);
	memset(f->row_memory, 0xee, 60000 * f->g.row_count);
}

static void make_key(struct rec_key *key, uint64_t consumed, uint8_t tag)
{
	key->consumed = consumed;
	memset(key->digest.bytes, tag, sizeof(key->digest.bytes));
	key->digest.bytes[0] = (uint8_t)consumed;
}

/* Stores pages [first, key / 64) of a chain from ids base_id + i. */
static int store(struct fixture *f, const struct rec_key *key,
		 const struct rec_key *parent, uint32_t base_id, uint32_t slot,
		 struct shard_completion *c)
{
	uint32_t first = parent ? (uint32_t)(parent->consumed / 64) : 0;
	uint32_t tail = (uint32_t)(key->consumed / 64) - first;
	uint32_t ids[200];
	struct rec_header h;
	struct shard_store_job job = { .header = &h, .page_ids = ids, .state_slot = slot };
	int ret;

	for (uint32_t i = 0; i < tail; i++) {
		ids[i] = base_id + i;
		fill_page(f, ids[i], first + i);
	}
	tu_fill(f->row_memory + 60000ull * slot, 60000, key->consumed);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, key, parent, &key->digest,
					 first, tail, 99), 0);
	ret = shard_engine_store(f->engine, ++f->next_job, &job);
	if (ret)
		return ret;
	shard_engine_wait(f->engine, c);
	assert_int_equal(c->job_id, f->next_job);
	return c->result;
}

/* Fetches chain's pages after skip to ids (one each), its row to slot. */
static int fetch_ids(struct fixture *f, const struct shard_chain_record *chain,
		     uint32_t count, uint32_t skip, const uint32_t *ids, uint32_t slot,
		     struct shard_completion *c)
{
	struct shard_fetch_job job = { .chain = chain, .chain_count = count,
				       .skip_pages = skip, .page_ids = ids,
				       .state_slot = slot };
	int ret = shard_engine_fetch(f->engine, ++f->next_job, &job);

	if (ret)
		return ret;
	shard_engine_wait(f->engine, c);
	return c->result;
}

static int fetch(struct fixture *f, const struct shard_chain_record *chain,
		 uint32_t count, uint32_t skip, uint32_t base_id, uint32_t slot,
		 struct shard_completion *c)
{
	uint32_t ids[200], pages = 0;

	for (uint32_t i = 0; i < count; i++)
		pages += chain[i].tail_page_count;
	for (uint32_t i = 0; i + skip < pages; i++)
		ids[i] = base_id + i;
	return fetch_ids(f, chain, count, skip, ids, slot, c);
}

static bool row_matches(struct fixture *f, uint32_t slot, uint64_t consumed)
{
	uint8_t *expect = malloc(60000);
	bool ok;

	tu_fill(expect, 60000, consumed);
	ok = memcmp(expect, f->row_memory + 60000ull * slot, 60000) == 0;
	free(expect);
	return ok;
}

/* Store from ids 10.., poison, fetch into ids 100.. and another slot. */
static void test_engine_round_trip(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key key;
	struct shard_chain_record chain;
	struct shard_engine_stats stats;

	shard_engine_stats(f->engine, &stats);
	if (f->no_uring)
		assert_string_equal(stats.disk_engine, "pread/pwrite");
	else
		printf("disk engine: %s\n", stats.disk_engine);
	/* The workers asked for are in use where the ring is (none without). */
	if (f->no_uring || f->io_workers == SHARD_IO_WORKERS_NONE)
		assert_int_equal(stats.io_workers, 0);
	else if (f->io_workers)
		assert_int_equal(stats.io_workers, f->io_workers);
	assert_int_equal(stats.checksum_threads, 3);
	make_key(&key, 64 * 11 + 5, 1);
	assert_int_equal(store(f, &key, NULL, 10, 2, &c), 0);
	assert_int_equal(c.bytes, 11ull * 24576 + 61440);
	poison(f);
	chain = (struct shard_chain_record){ .key = key, .first_page_index = 0,
					     .tail_page_count = 11 };
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 5, &c), 0);
	for (uint32_t i = 0; i < 11; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, 5, key.consumed));
	/* nothing else was written */
	assert_int_equal(f->plane_memory[0][f->unit * 99], 0xee);
	assert_int_equal(f->plane_memory[0][f->unit * 111], 0xee);
}

/* A chain of three records, windows of 4 pages, with every skip. */
static void test_engine_chain_and_suffix(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key a, b, d;
	struct shard_chain_record chain[3];
	uint32_t total;

	make_key(&a, 64 * 9, 2);     /* pages 0..8 */
	make_key(&b, 64 * 9 + 30, 3); /* no pages */
	make_key(&d, 64 * 19 + 1, 4); /* pages 9..18 */
	assert_int_equal(store(f, &a, NULL, 0, 0, &c), 0);
	assert_int_equal(store(f, &b, &a, 0, 1, &c), 0);
	assert_int_equal(store(f, &d, &b, 9, 2, &c), 0);
	chain[0] = (struct shard_chain_record){ a, 0, 9 };
	chain[1] = (struct shard_chain_record){ b, 9, 0 };
	chain[2] = (struct shard_chain_record){ d, 9, 10 };
	total = 19;
	for (uint32_t skip = 0; skip <= total; skip += 3) {
		poison(f);
		assert_int_equal(fetch(f, chain, 3, skip, 120, 7, &c), 0);
		for (uint32_t i = 0; i + skip < total; i++)
			if (!page_matches(f, 120 + i, skip + i))
				fail_msg("skip %u: page %u differs", skip, skip + i);
		assert_true(row_matches(f, 7, d.consumed));
		assert_int_equal(f->plane_memory[1][f->unit * (120 + total - skip)], 0xee);
	}
}

/* A corrupt page fails the fetch with a reason naming it. */
static void test_engine_corrupt_page(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key key;
	struct rec_header h;
	struct shard_chain_record chain;
	char *path;

	make_key(&key, 64 * 6, 5);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL, &key.digest,
					 0, 6, 99), 0);
	path = tu_record_path(f->dir, &key);
	tu_flip_bit(path, h.page_offset + h.page_stride * 4 + 100);
	free(path);
	chain = (struct shard_chain_record){ key, 0, 6 };
	assert_int_equal(fetch(f, &chain, 1, 0, 50, 1, &c), SEL_ECHECKSUM);
	if (!strstr(c.why, "page 4 (stored page 4) fails its checksum"))
		fail_msg("why: %s", c.why);
	/* the engine still works afterwards */
	assert_int_equal(fetch(f, &chain, 1, 5, 50, 1, &c), 0);
	assert_true(page_matches(f, 50, 5));

	/* A one-page record's page, verified by the transfer thread alone. */
	make_key(&key, 64, 6);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL, &key.digest,
					 0, 1, 99), 0);
	path = tu_record_path(f->dir, &key);
	tu_flip_bit(path, h.page_offset + 100);
	free(path);
	chain = (struct shard_chain_record){ key, 0, 1 };
	assert_int_equal(fetch(f, &chain, 1, 0, 50, 1, &c), SEL_ECHECKSUM);
	if (!strstr(c.why, "page 0 (stored page 0) fails its checksum"))
		fail_msg("why: %s", c.why);
}

struct truncator {
	char *path;
	uint32_t after_ms;
};

static void *truncate_later(void *arg)
{
	struct truncator *t = arg;
	struct timespec pause = { 0, (long)t->after_ms * 1000000L };

	nanosleep(&pause, NULL);
	assert_int_equal(truncate(t->path, 4096), 0);
	return NULL;
}

/*
 * A record file cut short by another program while a fetch reads it: the
 * read that meets its end fails the fetch with SEL_EBADHEADER and a reason
 * that names the file first, as the length check at its open would, so rank
 * zero drops the record (R-READ-4): cut while its open reads the header
 * and checksums (a sleeping read), and cut while its pages are read (the
 * first page read's completion sleeps; of 15 windows of four pages at
 * most SHARD_STAGES are read ahead, the rest after the cut).
 */
static void test_engine_file_cut_while_read(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key key;
	struct shard_chain_record chain;
	struct truncator t = { .after_ms = 100 };
	char name[REC_FILE_NAME_BYTES];
	pthread_t thread;
	int ret;

	/* cut while the open reads the header and checksums, then while the pages are read */
	static const char *const sleeps[] = { "disk.read=1*sleep(400)",
					      "disk.read=2*off->1*sleep(400)" };

	/*
	 * The disk thread reads (SELENE_FETCH_READS_HERE=0): in a
	 * memory-backed directory the verifying threads read the pages, each
	 * its own, so the rest are read while one read sleeps and the fetch
	 * may end before the cut (rightly: every byte it read was whole).
	 */
	shard_engine_close(f->engine);
	setenv("SELENE_FETCH_READS_HERE", "0", 1);
	open_engine(f, 4);
	unsetenv("SELENE_FETCH_READS_HERE");
	for (int i = 0; i < 2; i++) {
		make_key(&key, 64 * 60, (uint8_t)(9 + i));
		assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
		t.path = tu_record_path(f->dir, &key);
		assert_int_equal(sel_failpoints_configure(sleeps[i]), 0);
		assert_int_equal(pthread_create(&thread, NULL, truncate_later, &t), 0);
		chain = (struct shard_chain_record){ key, 0, 60 };
		ret = fetch(f, &chain, 1, 0, 100, 1, &c);
		pthread_join(thread, NULL);
		sel_failpoints_configure(NULL);
		rec_file_name(name, &key);
		if (ret != SEL_EBADHEADER || strncmp(c.why, name, strlen(name)) != 0 ||
		    !strstr(c.why, "ends"))
			fail_msg("%s: fetch: %s: %s", sleeps[i], sel_strerror(ret), c.why);
		free(t.path);
	}
}

/*
 * With page checksums verified on the checksum pool, a
 * corrupt page in any record of a three-record chain (windows of 4 pages,
 * so the third record's reads wait for the first's verification) fails the
 * fetch naming that page; the chain fetches again once the record is
 * stored again.
 */
static void test_engine_chain_corrupt_page(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key a, b, d;
	struct shard_chain_record chain[3];
	struct rec_header h;
	char *path;

	make_key(&a, 64 * 9, 12);
	make_key(&b, 64 * 9 + 30, 13);
	make_key(&d, 64 * 19 + 1, 14);
	assert_int_equal(store(f, &a, NULL, 0, 0, &c), 0);
	assert_int_equal(store(f, &b, &a, 0, 1, &c), 0);
	assert_int_equal(store(f, &d, &b, 9, 2, &c), 0);
	chain[0] = (struct shard_chain_record){ a, 0, 9 };
	chain[1] = (struct shard_chain_record){ b, 9, 0 };
	chain[2] = (struct shard_chain_record){ d, 9, 10 };

	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &a, NULL, &a.digest, 0, 9, 99), 0);
	path = tu_record_path(f->dir, &a);
	tu_flip_bit(path, h.page_offset + h.page_stride * 6 + 7);
	free(path);
	assert_int_equal(fetch(f, chain, 3, 0, 120, 7, &c), SEL_ECHECKSUM);
	if (!strstr(c.why, "page 6 (stored page 6) fails its checksum"))
		fail_msg("why: %s", c.why);
	assert_int_equal(store(f, &a, NULL, 0, 0, &c), 0);

	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &d, &b, &d.digest, 9, 10, 99), 0);
	path = tu_record_path(f->dir, &d);
	tu_flip_bit(path, h.page_offset + h.page_stride * 8 + 4000);
	free(path);
	assert_int_equal(fetch(f, chain, 3, 2, 120, 7, &c), SEL_ECHECKSUM);
	if (!strstr(c.why, "page 17 (stored page 8) fails its checksum"))
		fail_msg("why: %s", c.why);
	assert_int_equal(store(f, &d, &b, 9, 2, &c), 0);
	poison(f);
	assert_int_equal(fetch(f, chain, 3, 0, 120, 7, &c), 0);
	for (uint32_t i = 0; i < 19; i++)
		assert_true(page_matches(f, 120 + i, i));
	assert_true(row_matches(f, 7, d.consumed));
}

/*
 * Windows whose reads landed while the transfer thread was busy (window
 * 0's copy to the device held 300 ms) are verified together in one pass:
 * twenty one-page windows take at most fourteen passes, every byte
 * arrives, and a corrupt page in such a batch fails the fetch naming it.
 * The disk thread reads them (SELENE_FETCH_READS_HERE=0): in a
 * memory-backed directory the verifying threads would, a group a window.
 */
static void test_engine_fetch_verifies_landed_windows_together(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct shard_engine_stats before, after;
	struct shard_chain_record chain;
	struct rec_header h;
	struct rec_key key;
	char *path;

	shard_engine_close(f->engine);
	setenv("SELENE_FETCH_READS_HERE", "0", 1);
	open_engine(f, 1);
	unsetenv("SELENE_FETCH_READS_HERE");
	make_key(&key, 64 * 20, 40);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	chain = (struct shard_chain_record){ key, 0, 20 };
	shard_engine_stats(f->engine, &before);
	poison(f);
	assert_int_equal(sel_failpoints_configure("device.copy=1*sleep(300)"), 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), 0);
	sel_failpoints_configure(NULL);
	for (uint32_t i = 0; i < 20; i++)
		if (!page_matches(f, 100 + i, i))
			fail_msg("page %u differs", i);
	assert_true(row_matches(f, 3, key.consumed));
	shard_engine_stats(f->engine, &after);
	assert_int_equal(after.fetch_windows - before.fetch_windows, 20);
	if (after.fetch_verify_passes - before.fetch_verify_passes > 14)
		fail_msg("%" PRIu64 " passes for 20 windows",
			 after.fetch_verify_passes - before.fetch_verify_passes);

	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL, &key.digest,
					 0, 20, 99), 0);
	path = tu_record_path(f->dir, &key);
	tu_flip_bit(path, h.page_offset + h.page_stride * 5 + 100);
	free(path);
	assert_int_equal(sel_failpoints_configure("device.copy=1*sleep(300)"), 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), SEL_ECHECKSUM);
	sel_failpoints_configure(NULL);
	if (!strstr(c.why, "page 5 (stored page 5) fails its checksum"))
		fail_msg("why: %s", c.why);
}

/*
 * In a memory-backed directory, with verifying helpers, a fetch's windows
 * are read by the threads that verify them: all five windows of a
 * 20-page record, every byte and the row arrive, and a corrupt page fails
 * the fetch naming it; with SELENE_FETCH_READS_HERE=0 the disk thread
 * reads every window. The fetch's run splits into the time before its
 * first page's verification, its span and the time after its last
 * (fetch_verify_*_ns). Skipped where the directory is not memory-backed.
 */
static void test_engine_fetch_reads_memory_backed_here(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct shard_engine_stats before, after;
	struct shard_chain_record chain;
	struct rec_header h;
	struct rec_key key;
	char *path;

	if (!rec_dir_memory_backed(f->dir)) {
		print_message("skipped: %s is not memory-backed\n", f->base);
		skip();
	}
	shard_engine_close(f->engine);
	open_engine(f, 4);
	make_key(&key, 64 * 20, 41);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	chain = (struct shard_chain_record){ key, 0, 20 };
	shard_engine_stats(f->engine, &before);
	poison(f);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), 0);
	for (uint32_t i = 0; i < 20; i++)
		if (!page_matches(f, 100 + i, i))
			fail_msg("page %u differs", i);
	assert_true(row_matches(f, 3, key.consumed));
	shard_engine_stats(f->engine, &after);
	assert_int_equal(after.fetch_windows - before.fetch_windows, 5);
	assert_int_equal(after.fetch_windows_read_here - before.fetch_windows_read_here, 5);
	/* Its time before, during and after its pages' verification is its run. */
	assert_true(after.fetch_verify_span_ns > before.fetch_verify_span_ns);
	assert_int_equal(after.fetch_verify_lead_ns - before.fetch_verify_lead_ns +
				 after.fetch_verify_span_ns - before.fetch_verify_span_ns +
				 after.fetch_verify_tail_ns - before.fetch_verify_tail_ns,
			 after.fetch_run_ns - before.fetch_run_ns);

	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL, &key.digest,
					 0, 20, 99), 0);
	path = tu_record_path(f->dir, &key);
	tu_flip_bit(path, h.page_offset + h.page_stride * 13 + 4097);
	free(path);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), SEL_ECHECKSUM);
	if (!strstr(c.why, "page 13 (stored page 13) fails its checksum"))
		fail_msg("why: %s", c.why);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);

	shard_engine_close(f->engine);
	setenv("SELENE_FETCH_READS_HERE", "0", 1);
	open_engine(f, 4);
	unsetenv("SELENE_FETCH_READS_HERE");
	shard_engine_stats(f->engine, &before);
	poison(f);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), 0);
	for (uint32_t i = 0; i < 20; i++)
		assert_true(page_matches(f, 100 + i, i));
	shard_engine_stats(f->engine, &after);
	assert_int_equal(after.fetch_windows - before.fetch_windows, 5);
	assert_int_equal(after.fetch_windows_read_here - before.fetch_windows_read_here, 0);
}

/*
 * Staged windows are copied one entry per plane for each run of
 * consecutive window slots going to consecutive page ids where staging is
 * grouped (planes of 8 KiB; before: one entry per page and plane, as still
 * with planes of 5000 bytes, G = 1): a store of 11 pages from consecutive
 * ids in windows of 4, 4 and 3 copies 3 runs x 3 planes; after a restart
 * its fetch to consecutive ids as many, to ids broken within each window
 * 6 runs; the row its 3 pieces each time. Byte-exact each time, a fetch
 * skipping pages too.
 */
static void test_engine_staged_copy_entries_per_run(void **state)
{
	struct fixture *f = *state;
	bool grouped = f->unit == 8192;
	uint32_t ids[11] = { 100, 101, 102, 150, 151, 152, 153, 30, 31, 60, 61 };
	struct shard_chain_record chain;
	struct shard_completion c;
	struct rec_key key;

	/* The device's ops change only while no engine uses it. */
	shard_engine_close(f->engine);
	tu_count_copy_entries(f->dev);
	open_engine(f, 4);
	make_key(&key, 64 * 11 + 5, 7);
	assert_int_equal(store(f, &key, NULL, 10, 2, &c), 0);
	assert_int_equal(tu_entries_to_host, (grouped ? 3 * 3 : 11 * 3) + 3);
	shard_engine_close(f->engine);
	open_engine(f, 4);
	chain = (struct shard_chain_record){ key, 0, 11 };
	poison(f);
	tu_entries_to_device = 0;
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 5, &c), 0);
	for (uint32_t i = 0; i < 11; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, 5, key.consumed));
	assert_int_equal(tu_entries_to_device, (grouped ? 3 * 3 : 11 * 3) + 3);
	poison(f);
	tu_entries_to_device = 0;
	assert_int_equal(fetch_ids(f, &chain, 1, 0, ids, 6, &c), 0);
	for (uint32_t i = 0; i < 11; i++)
		assert_true(page_matches(f, ids[i], i));
	assert_true(row_matches(f, 6, key.consumed));
	assert_int_equal(tu_entries_to_device, (grouped ? 6 * 3 : 11 * 3) + 3);
	poison(f);
	assert_int_equal(fetch(f, &chain, 1, 5, 40, 1, &c), 0);
	for (uint32_t i = 0; i < 6; i++)
		assert_true(page_matches(f, 40 + i, 5 + i));
	assert_true(row_matches(f, 1, key.consumed));
	assert_int_equal(f->plane_memory[2][f->unit * 46], 0xee);
}

/*
 * Reopens the engine with the variable name set to value (NULL: unset) and
 * windows of window_pages (0: the default), its staging described into
 * line, copy entries counted from 0; then stores key (8 pages) from ids
 * 20.. and fetches it to ids 100.., byte-exact.
 */
static void env_round_trip(struct fixture *f, const char *name, const char *value,
			   uint32_t window_pages, const struct rec_key *key, char *line,
			   size_t line_size)
{
	struct shard_chain_record chain = { *key, 0, 8 };
	struct shard_completion c;

	shard_engine_close(f->engine);
	tu_count_copy_entries(f->dev); /* while no engine uses it */
	if (value)
		setenv(name, value, 1);
	open_engine(f, window_pages);
	unsetenv(name);
	shard_engine_describe_staging(f->engine, line, line_size);
	assert_int_equal(store(f, key, NULL, 20, 2, &c), 0);
	poison(f);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), 0);
	for (uint32_t k = 0; k < 8; k++)
		assert_true(page_matches(f, 100 + k, k));
	assert_true(row_matches(f, 3, key->consumed));
}

/*
 * SELENE_STAGING_GROUP_SLOTS caps staging's groups: 1 (or 0) lays every
 * slot out as one page record (a store and a fetch of 8 pages from and to
 * consecutive ids, in windows of 4, are one entry a page and plane), 2
 * (and 3: the largest divisor of the window's pages within it) groups of
 * 2, unset or malformed a window's; the startup line's staging names
 * them. Byte-exact each time.
 */
static void test_engine_staging_group_slots_from_env(void **state)
{
	static const char *const values[] = { "1", "0", "2", "3", "x", NULL };
	static const uint32_t runs[] = { 8, 8, 4, 4, 2, 2 };
	static const char *const groups[] = { "", "", " in groups of 2 by plane",
					      " in groups of 2 by plane", " in groups of 4 by plane",
					      " in groups of 4 by plane" };
	struct fixture *f = *state;
	char line[128], expect[128];
	struct rec_key key;

	make_key(&key, 64 * 8, 8);
	for (uint32_t i = 0; i < SEL_ARRAY_SIZE(values); i++) {
		env_round_trip(f, "SELENE_STAGING_GROUP_SLOTS", values[i], 4, &key, line,
			       sizeof(line));
		snprintf(expect, sizeof(expect), "windows of 4 pages%s", groups[i]);
		if (!strstr(line, expect) || (!groups[i][0] && strstr(line, "groups")))
			fail_msg("SELENE_STAGING_GROUP_SLOTS=%s: %s", values[i] ? values[i] : "(unset)",
				 line);
		if (tu_entries_to_host != runs[i] * 3 + 3 || tu_entries_to_device != runs[i] * 3 + 3)
			fail_msg("SELENE_STAGING_GROUP_SLOTS=%s: %" PRIu64 " and %" PRIu64
				 " entries, not %u", values[i] ? values[i] : "(unset)",
				 tu_entries_to_host, tu_entries_to_device, runs[i] * 3 + 3);
	}
}

/*
 * SELENE_WINDOW_PAGES sets a window's pages where the option does not
 * (before: the window was always the default's): 2 gives a fetch of 8
 * pages to consecutive ids 4 windows, a run each with staging grouped;
 * unset or malformed the default (64 pages of 24 KiB at most). Byte-exact.
 */
static void test_engine_window_pages_from_env(void **state)
{
	static const char *const values[] = { "2", "x", NULL };
	static const char *const lines[] = { "windows of 2 pages in groups of 2 by plane",
					     "windows of 64 pages in groups of 64 by plane",
					     "windows of 64 pages in groups of 64 by plane" };
	static const uint32_t runs[] = { 4, 1, 1 };
	struct fixture *f = *state;
	struct rec_key key;
	char line[128];

	make_key(&key, 64 * 8, 9);
	for (uint32_t i = 0; i < SEL_ARRAY_SIZE(values); i++) {
		env_round_trip(f, "SELENE_WINDOW_PAGES", values[i], 0, &key, line, sizeof(line));
		if (!strstr(line, lines[i]))
			fail_msg("SELENE_WINDOW_PAGES=%s: %s", values[i] ? values[i] : "(unset)", line);
		assert_int_equal(tu_entries_to_device, runs[i] * 3 + 3);
	}
}

/*
 * A chain of six records of ten one-page windows: each record after the
 * first is opened ahead, while the one before is still read (its open no
 * longer holds the transfer thread at its first window), and every byte
 * and the row arrive. An open sent ahead that fails (a record gone, the
 * last record's row dropped) fails the fetch with the reason naming the
 * file; the engine fetches the chain again once the record is back.
 */
static void test_engine_chain_opens_ahead(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct shard_engine_stats before, after;
	struct shard_chain_record chain[6];
	struct rec_key keys[6];
	char name[REC_FILE_NAME_BYTES], *path;

	shard_engine_close(f->engine);
	open_engine(f, 1);
	for (uint32_t i = 0; i < 6; i++) {
		make_key(&keys[i], 64 * 10 * (i + 1), (uint8_t)(20 + i));
		assert_int_equal(store(f, &keys[i], i ? &keys[i - 1] : NULL, 10 * i, 2, &c), 0);
		chain[i] = (struct shard_chain_record){ keys[i], 10 * i, 10 };
	}
	shard_engine_stats(f->engine, &before);
	poison(f);
	assert_int_equal(fetch(f, chain, 6, 0, 100, 3, &c), 0);
	for (uint32_t i = 0; i < 60; i++)
		if (!page_matches(f, 100 + i, i))
			fail_msg("page %u differs", i);
	assert_true(row_matches(f, 3, keys[5].consumed));
	shard_engine_stats(f->engine, &after);
	assert_int_equal(after.fetch_opens_ahead - before.fetch_opens_ahead, 5);

	/* record 3 gone: its open, sent ahead, fails the fetch naming it */
	path = tu_record_path(f->dir, &keys[3]);
	assert_int_equal(unlink(path), 0);
	free(path);
	assert_int_equal(fetch(f, chain, 6, 0, 100, 3, &c), -ENOENT);
	rec_file_name(name, &keys[3]);
	if (!strstr(c.why, name))
		fail_msg("why: %s", c.why);
	assert_int_equal(store(f, &keys[3], &keys[2], 30, 2, &c), 0);

	/* the last record's row dropped: its open, sent ahead, finds it missing */
	assert_int_equal(shard_engine_truncate(f->engine, ++f->next_job, &keys[5]), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	assert_int_equal(fetch(f, chain, 6, 0, 100, 3, &c), SEL_EMISMATCH);
	if (!strstr(c.why, "expected 50..+10 with row"))
		fail_msg("why: %s", c.why);
	assert_int_equal(store(f, &keys[5], &keys[4], 50, 2, &c), 0);

	poison(f);
	assert_int_equal(fetch(f, chain, 6, 0, 100, 3, &c), 0);
	for (uint32_t i = 0; i < 60; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, 3, keys[5].consumed));
}

/*
 * The open sent ahead for a chain's last record, past a page-less record:
 * its reply may come back while the transfer thread waits for the close
 * of the first record's file, and its failure is the fetch's. Before, that
 * wait dropped every reply's failure, and the missing record was read as
 * if it were open ("no record is open", -EBADF) or a dropped row read
 * (-ENODATA) instead of failing with the reason naming the file. One-page
 * windows, two read ahead, 200 tries (the order of replies varies).
 */
static void test_engine_failed_open_ahead_never_dropped(void **state)
{
	struct fixture *f = *state;
	struct shard_engine_options options = {
		.geometry = &f->g, .dir = f->dir, .device = f->dev, .planes = &f->planes,
		.window_pages = 1, .jobs_max = 8, .no_uring = f->no_uring,
		.io_workers = f->io_workers, .checksum_threads = 3,
		.read_ahead_bytes = 2 * f->g.page_record_bytes,
	};
	struct shard_completion c;
	struct shard_chain_record chain[4];
	struct rec_key keys[4];
	char name[REC_FILE_NAME_BYTES], err[256], *path;

	shard_engine_close(f->engine);
	if (shard_engine_open(&options, &f->engine, err, sizeof(err)) != 0)
		fail_msg("engine: %s", err);
	make_key(&keys[0], 64 * 2, 30);      /* pages 0..1 */
	make_key(&keys[1], 64 * 2 + 10, 31); /* no pages */
	make_key(&keys[2], 64 * 4 + 1, 32);  /* pages 2..3 */
	make_key(&keys[3], 64 * 6 + 1, 33);  /* pages 4..5, the row */
	for (uint32_t i = 0; i < 4; i++) {
		uint32_t first = i ? (uint32_t)(keys[i - 1].consumed / 64) : 0;

		assert_int_equal(store(f, &keys[i], i ? &keys[i - 1] : NULL, first, 2, &c), 0);
		chain[i] = (struct shard_chain_record){ keys[i], first,
							(uint32_t)(keys[i].consumed / 64) - first };
	}
	assert_int_equal(fetch(f, chain, 4, 0, 100, 3, &c), 0);
	for (uint32_t i = 0; i < 6; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, 3, keys[3].consumed));

	path = tu_record_path(f->dir, &keys[3]);
	assert_int_equal(unlink(path), 0);
	free(path);
	rec_file_name(name, &keys[3]);
	for (int i = 0; i < 200; i++) {
		int ret = fetch(f, chain, 4, 0, 100, 3, &c);

		if (ret != -ENOENT || !strstr(c.why, name))
			fail_msg("try %d: %s: %s", i, sel_strerror(ret), c.why);
	}
	assert_int_equal(store(f, &keys[3], &keys[2], 4, 2, &c), 0);
	assert_int_equal(shard_engine_truncate(f->engine, ++f->next_job, &keys[3]), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	for (int i = 0; i < 200; i++) {
		int ret = fetch(f, chain, 4, 0, 100, 3, &c);

		if (ret != SEL_EMISMATCH || !strstr(c.why, name))
			fail_msg("try %d: %s: %s", i, sel_strerror(ret), c.why);
	}
}

/* A fetch whose record is not what the index expects fails before reading. */
static void test_engine_fetch_mismatch(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key key, missing;
	struct shard_chain_record chain;

	make_key(&key, 64 * 3, 6);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	chain = (struct shard_chain_record){ key, 0, 3 };
	assert_int_equal(shard_engine_truncate(f->engine, ++f->next_job, &key), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 50, 1, &c), SEL_EMISMATCH);
	assert_non_null(strstr(c.why, "expected 0..+3 with row"));
	make_key(&missing, 64 * 3, 7);
	chain.key = missing;
	assert_int_equal(fetch(f, &chain, 1, 0, 50, 1, &c), -ENOENT);
	assert_int_equal(shard_engine_unlink(f->engine, ++f->next_job, &key), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
}

/* Injected write and read errors fail the job; nothing is left behind. */
static void test_engine_injected_errors(void **state)
{
	static const char *const configs[] = {
		"disk.write=2*off->return(EIO)", "disk.fallocate=return(ENOSPC)",
		"disk.fdatasync=return(EIO)", "disk.rename=return(EIO)",
		"disk.write=1*short", "record.before_write=1*off->return(EIO)",
		"record.after_write=return(EIO)",
	};
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key key;
	struct shard_chain_record chain;

	make_key(&key, 64 * 13, 8);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(configs); i++) {
		int expect = strstr(configs[i], "short") ? 0 :
			     strstr(configs[i], "ENOSPC") ? -ENOSPC : -EIO;

		assert_int_equal(sel_failpoints_configure(configs[i]), 0);
		assert_int_equal(store(f, &key, NULL, 0, 0, &c), expect);
		sel_failpoints_configure(NULL);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), expect ? 0 : 1);
		if (!expect)
			assert_int_equal(rec_unlink(f->dir, &key), 0);
	}
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	chain = (struct shard_chain_record){ key, 0, 13 };
	assert_int_equal(sel_failpoints_configure("disk.read=3*off->return(EIO)"), 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 60, 0, &c), -EIO);
	sel_failpoints_configure(NULL);
	assert_int_equal(fetch(f, &chain, 1, 0, 60, 0, &c), 0);
	/* storing a key that exists replaces its file whole (R-WRITE-4) */
	assert_int_equal(store(f, &key, NULL, 30, 0, &c), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 1);
	poison(f);
	assert_int_equal(fetch(f, &chain, 1, 0, 60, 0, &c), 0);
	assert_true(page_matches(f, 60, 0));
}

/*
 * Windows are verified on the restore pool as their reads land, in groups
 * queued while the transfer thread waits for a device copy (the first one
 * held 300 ms): every page arrives, every window and page is verified
 * once, a corrupt page in a later group fails the fetch naming it, and a
 * read that fails while groups are queued fails it with the read's error;
 * a clean fetch after either restores every byte (staging scrubbed, no
 * helper left reading it).
 */
static void test_engine_fetch_verifies_groups_in_flight(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct shard_engine_stats before, after;
	struct shard_chain_record chain;
	struct rec_header h;
	struct rec_key key;
	char *path;

	shard_engine_close(f->engine);
	open_engine(f, 1);
	make_key(&key, 64 * 24, 41);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	chain = (struct shard_chain_record){ key, 0, 24 };
	shard_engine_stats(f->engine, &before);
	poison(f);
	assert_int_equal(sel_failpoints_configure("device.copy=1*sleep(300)"), 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), 0);
	sel_failpoints_configure(NULL);
	for (uint32_t i = 0; i < 24; i++)
		if (!page_matches(f, 100 + i, i))
			fail_msg("page %u differs", i);
	assert_true(row_matches(f, 3, key.consumed));
	shard_engine_stats(f->engine, &after);
	assert_int_equal(after.fetch_windows - before.fetch_windows, 24);
	assert_int_equal(after.fetch_bytes_verified - before.fetch_bytes_verified,
			 24 * f->g.page_record_bytes);
	assert_in_range(after.fetch_verify_passes - before.fetch_verify_passes, 1, 24);
	assert_in_range(after.fetch_verify_groups_max, 1, SHARD_STAGES);
	assert_true(after.fetch_hash_ns > before.fetch_hash_ns);

	/* A read failing while earlier windows' groups are queued. */
	assert_int_equal(sel_failpoints_configure("device.copy=1*sleep(300);"
						  "disk.read=6*off->return(EIO)"), 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), -EIO);
	sel_failpoints_configure(NULL);

	/* A corrupt page in a group verified while the first copy is held. */
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL, &key.digest,
					 0, 24, 99), 0);
	path = tu_record_path(f->dir, &key);
	tu_flip_bit(path, h.page_offset + h.page_stride * 13 + 7);
	assert_int_equal(sel_failpoints_configure("device.copy=1*sleep(300)"), 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), SEL_ECHECKSUM);
	sel_failpoints_configure(NULL);
	if (!strstr(c.why, "page 13 (stored page 13) fails its checksum"))
		fail_msg("why: %s", c.why);
	tu_flip_bit(path, h.page_offset + h.page_stride * 13 + 7);
	free(path);
	poison(f);
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3, &c), 0);
	for (uint32_t i = 0; i < 24; i++)
		if (!page_matches(f, 100 + i, i))
			fail_msg("page %u differs after the failures", i);
	assert_true(row_matches(f, 3, key.consumed));
}

/* Bad submissions are refused at once; a full job pool says so. */
static void test_engine_bounded_submission(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c[16];
	struct rec_key key;
	struct rec_header h;
	uint32_t ids[4] = { 1, 2, 3, 500 };
	struct shard_store_job job = { .header = &h, .page_ids = ids, .state_slot = 0 };
	struct shard_chain_record chain[2];
	struct shard_fetch_job fetch_job = { .chain = chain, .chain_count = 2,
					     .page_ids = ids, .state_slot = 0 };
	uint32_t done = 0;
	int ret, accepted = 0;

	make_key(&key, 64 * 4, 9);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL, &key.digest,
					 0, 4, 1), 0);
	assert_int_equal(shard_engine_store(f->engine, 1, &job), -EINVAL);
	ids[3] = 4;
	job.state_slot = 99;
	assert_int_equal(shard_engine_store(f->engine, 1, &job), -EINVAL);
	job.state_slot = 0;
	chain[0] = (struct shard_chain_record){ key, 0, 2 };
	chain[1] = (struct shard_chain_record){ key, 3, 2 };
	assert_int_equal(shard_engine_fetch(f->engine, 1, &fetch_job), SEL_EMISMATCH);
	/* 8 jobs fit; the 9th is refused until completions are polled */
	for (int i = 0; i < 9; i++) {
		ret = shard_engine_truncate(f->engine, 100 + (uint64_t)i, &key);
		if (ret == 0)
			accepted++;
		else
			assert_int_equal(ret, SEL_EQUEUEFULL);
	}
	assert_int_equal(accepted, 8);
	while (done < 8) {
		shard_engine_wait(f->engine, &c[done]);
		assert_int_equal(c[done].result, -ENOENT);
		done++;
	}
	assert_int_equal(shard_engine_poll(f->engine, c, 16), 0);
	assert_int_equal(shard_engine_truncate(f->engine, 200, &key), 0);
	shard_engine_wait(f->engine, c);
}

/* A full filesystem fails the store with ENOSPC and leaves no file. */
static void test_engine_full_filesystem(void **state)
{
	struct fixture *f = *state, *small;
	char *mnt = tu_make_temp_dir("full");
	struct shard_completion c;
	struct rec_key key;
	void *small_state;

	(void)f;
	if (mount("selene-test", mnt, "tmpfs", 0, "size=256k") != 0) {
		fprintf(stderr, "skip: cannot mount a small tmpfs (%s)\n", strerror(errno));
		tu_remove_tree(mnt);
		skip();
	}
	setup_with(&small_state, f->no_uring, f->io_workers, mnt);
	small = small_state;
	make_key(&key, 64 * 30, 10); /* 30 pages of 24 KiB: 720 KiB */
	assert_int_equal(store(small, &key, NULL, 0, 0, &c), -ENOSPC);
	assert_int_equal(tu_count_suffix(rec_dir_path(small->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(small->dir), ".ckpt"), 0);
	make_key(&key, 64 * 3, 11);  /* a small one still fits */
	assert_int_equal(store(small, &key, NULL, 0, 0, &c), 0);
	shard_engine_close(small->engine);
	small->engine = NULL;
	rec_dir_close(small->dir);
	small->dir = NULL;
	umount(mnt);
	teardown(&small_state);
	free(mnt);
}

/*
 * Many small jobs, one page per window, queued back to back: hand-offs
 * between the transfer and disk threads race as often as they can. A lost
 * wake-up shows as a hang, which the alarm turns into a failure.
 */
/* Takes completions, each a success, until the engine has done jobs_done. */
static void drain_until(struct fixture *f, uint64_t jobs_done)
{
	for (;;) {
		struct shard_completion c;
		struct shard_engine_stats st;

		if (shard_engine_poll(f->engine, &c, 1) == 1) {
			assert_int_equal(c.result, 0);
			continue;
		}
		shard_engine_stats(f->engine, &st);
		if (st.jobs_done >= jobs_done)
			break;
		usleep(1000);
	}
}

static void test_engine_many_small_jobs(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key keys[40];
	uint32_t ids[8];
	uint64_t seed = 12345;

	shard_engine_close(f->engine);
	open_engine(f, 1);
	alarm(120);
	printf("seed %llu\n", (unsigned long long)seed);
	for (uint32_t round = 0; round < 5; round++) {
		for (uint32_t i = 0; i < 40; i++) {
			struct rec_header h;
			struct shard_store_job job = { .header = &h, .page_ids = ids,
						       .state_slot = i % 8 };
			uint32_t pages = 1 + (uint32_t)((seed + i * 7) % 6);

			make_key(&keys[i], 64ull * pages + i % 5, (uint8_t)(100 + i));
			keys[i].digest.bytes[1] = (uint8_t)round;
			for (uint32_t p = 0; p < pages; p++) {
				ids[p] = (i * 5 + p) % 200;
				fill_page(f, ids[p], p);
			}
			assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &keys[i], NULL,
							 &keys[i].digest, 0, pages, 1), 0);
			while (shard_engine_store(f->engine, i, &job) == SEL_EQUEUEFULL) {
				shard_engine_wait(f->engine, &c);
				assert_int_equal(c.result, 0);
			}
		}
		/* restores run before queued stores: each key is on disk first */
		drain_until(f, round * 120ull + 40);
		for (uint32_t i = 0; i < 40; i++) {
			struct shard_chain_record chain = { keys[i], 0,
							    (uint32_t)(keys[i].consumed / 64) };
			struct shard_fetch_job job = { .chain = &chain, .chain_count = 1,
						       .page_ids = ids, .state_slot = 0 };

			for (uint32_t p = 0; p < chain.tail_page_count; p++)
				ids[p] = 150 + p;
			while (shard_engine_fetch(f->engine, 1000 + i, &job) == SEL_EQUEUEFULL) {
				shard_engine_wait(f->engine, &c);
				assert_int_equal(c.result, 0);
			}
			while (shard_engine_unlink(f->engine, 2000 + i, &keys[i]) == SEL_EQUEUEFULL) {
				shard_engine_wait(f->engine, &c);
				assert_int_equal(c.result, 0);
			}
		}
		drain_until(f, (round + 1) * 120ull);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	}
	alarm(0);
}

/* A noop completes with 0, moves nothing, touches no file, and counts. */
static void *wait_one(void *arg)
{
	struct shard_completion c;

	shard_engine_wait(arg, &c);
	return NULL;
}

/*
 * Two threads in shard_engine_wait, each for a job of its own, each get a
 * completion: one is taken under the lock it was waited for under (before,
 * the other could take it in between, and the wait's assertion aborted).
 */
static void test_engine_two_waiters(void **state)
{
	struct fixture *f = *state;

	for (uint64_t round = 0; round < 20000; round++) {
		pthread_t a, b;

		assert_int_equal(shard_engine_noop(f->engine, 2 * round), 0);
		assert_int_equal(shard_engine_noop(f->engine, 2 * round + 1), 0);
		assert_int_equal(pthread_create(&a, NULL, wait_one, f->engine), 0);
		assert_int_equal(pthread_create(&b, NULL, wait_one, f->engine), 0);
		pthread_join(a, NULL);
		pthread_join(b, NULL);
	}
}

/* What a retired closing saw: the thread it ran on and whether its gate was open. */
struct retire_note {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	bool open;      /* the gate: the closing waits for it */
	uint32_t ran;
	pthread_t thread;
};

static void retire_close(void *ctx)
{
	struct retire_note *n = ctx;

	pthread_mutex_lock(&n->lock);
	while (!n->open)
		pthread_cond_wait(&n->changed, &n->lock);
	n->thread = pthread_self();
	n->ran++;
	pthread_cond_broadcast(&n->changed);
	pthread_mutex_unlock(&n->lock);
}

/*
 * A closing handed to shard_engine_retire runs on the transfer thread, not
 * the caller's (which returns while it waits), and the engine's close runs
 * those the thread never reached.
 */
static void test_engine_retire_runs_on_the_transfer_thread(void **state)
{
	struct fixture *f = *state;
	struct retire_note n = { .lock = PTHREAD_MUTEX_INITIALIZER,
				 .changed = PTHREAD_COND_INITIALIZER };
	struct retire_note later[SHARD_RETIRES_MAX - 1];
	uint32_t i;

	assert_int_equal(shard_engine_retire(f->engine, retire_close, &n), 0);
	/* returned with its closing still held at the gate */
	pthread_mutex_lock(&n.lock);
	assert_int_equal(n.ran, 0);
	pthread_mutex_unlock(&n.lock);
	for (i = 0; i < SHARD_RETIRES_MAX - 1; i++) {
		later[i] = (struct retire_note){ .lock = PTHREAD_MUTEX_INITIALIZER,
						 .changed = PTHREAD_COND_INITIALIZER,
						 .open = true };
		assert_int_equal(shard_engine_retire(f->engine, retire_close, &later[i]), 0);
	}
	/* the first waits at its gate, running or not yet taken: none is lost */
	assert_int_equal(shard_engine_retiring(f->engine), SHARD_RETIRES_MAX);
	pthread_mutex_lock(&n.lock);
	n.open = true;
	pthread_cond_broadcast(&n.changed);
	while (n.ran == 0)
		pthread_cond_wait(&n.changed, &n.lock);
	pthread_mutex_unlock(&n.lock);
	assert_false(pthread_equal(n.thread, pthread_self()));
	shard_engine_close(f->engine);
	f->engine = NULL;
	assert_int_equal(n.ran, 1);
	for (i = 0; i < SHARD_RETIRES_MAX - 1; i++)
		assert_int_equal(later[i].ran, 1);
	open_engine(f, 4);
}

static void test_engine_noop(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c[3];
	struct shard_engine_stats before, after;

	shard_engine_stats(f->engine, &before);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(shard_engine_noop(f->engine, 500 + i), 0);
	for (int i = 0; i < 3; i++) {
		shard_engine_wait(f->engine, &c[i]);
		assert_int_equal(c[i].job_id, 500 + (uint64_t)i); /* in order */
		assert_int_equal(c[i].kind, SHARD_JOB_NOOP);
		assert_int_equal(c[i].result, 0);
		assert_int_equal(c[i].bytes, 0);
	}
	shard_engine_stats(f->engine, &after);
	assert_int_equal(after.jobs_done, before.jobs_done + 3);
	assert_int_equal(after.bytes_stored + after.bytes_fetched,
			 before.bytes_stored + before.bytes_fetched);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
}

struct hook_seen {
	pthread_mutex_t lock;
	uint64_t count, last_id;
	bool other_thread;
	pthread_t caller;
};

static void hook_record(void *ctx, const struct shard_completion *c)
{
	struct hook_seen *h = ctx;

	pthread_mutex_lock(&h->lock);
	h->count++;
	h->last_id = c->job_id;
	h->other_thread = !pthread_equal(pthread_self(), h->caller);
	pthread_mutex_unlock(&h->lock);
}

/*
 * With a completion hook, completions reach it on the transfer thread and
 * never the ring, so more than jobs_max jobs in all pass without a poll;
 * once it is removed, completions go to the ring again.
 */
static void test_engine_completion_hook(void **state)
{
	struct fixture *f = *state;
	struct hook_seen h = { .lock = PTHREAD_MUTEX_INITIALIZER, .caller = pthread_self() };
	struct shard_completion c;
	uint64_t seen = 0;

	shard_engine_set_completion_hook(f->engine, hook_record, &h);
	for (uint64_t i = 0; i < 40; i++) {
		int ret, tries = 0;

		/* 8 jobs at most in the engine at once; a hook frees their places */
		while ((ret = shard_engine_noop(f->engine, 1000 + i)) == SEL_EQUEUEFULL &&
		       ++tries < 50000)
			usleep(100);
		assert_int_equal(ret, 0);
	}
	for (int i = 0; i < 5000 && seen < 40; i++) {
		pthread_mutex_lock(&h.lock);
		seen = h.count;
		pthread_mutex_unlock(&h.lock);
		usleep(1000);
	}
	assert_int_equal(seen, 40);
	assert_int_equal(h.last_id, 1039);
	assert_true(h.other_thread);
	assert_int_equal(shard_engine_poll(f->engine, &c, 1), 0);
	shard_engine_set_completion_hook(f->engine, NULL, NULL);
	assert_int_equal(shard_engine_noop(f->engine, 2000), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 2000);
	assert_int_equal(h.count, 40);
}

/*
 * The ring's own failures: io_uring_submit failing (once, then on every
 * write, then on every read) fails the request that carried the I/O, the
 * process goes on, and the next store and fetch are byte-exact;
 * io_uring_wait_cqe failing a few times delays completions and fails
 * nothing. Skips where the disk thread has no ring.
 */
static void test_engine_ring_errors(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct shard_engine_stats stats;
	struct rec_key key;
	struct shard_chain_record chain;

	shard_engine_stats(f->engine, &stats);
	if (strcmp(stats.disk_engine, "io_uring") != 0)
		skip();
	make_key(&key, 64 * 9, 12);
	chain = (struct shard_chain_record){ key, 0, 9 };
	assert_int_equal(sel_failpoints_configure("disk.submit=1*return(EAGAIN)"), 0);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), -EAGAIN);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_SUBMIT), 1);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	assert_int_equal(sel_failpoints_configure("disk.wait=5*return(EIO)"), 0);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	assert_true(sel_failpoint_fired(SEL_FP_DISK_WAIT) > 0);
	assert_int_equal(sel_failpoints_configure("disk.submit=return(ENOMEM)"), 0);
	assert_int_equal(fetch(f, &chain, 1, 0, 60, 0, &c), -ENOMEM);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), -ENOMEM);
	sel_failpoints_configure(NULL);
	poison(f);
	assert_int_equal(fetch(f, &chain, 1, 0, 60, 0, &c), 0);
	for (uint32_t i = 0; i < 9; i++)
		assert_true(page_matches(f, 60 + i, i));
	assert_int_equal(store(f, &key, NULL, 30, 1, &c), 0);
}

/*
 * The deferred test device (testutil.h) and what the completion hook saw:
 * how many copy calls were still queued when the job was reported.
 */
struct deferred_device {
	struct tu_deferred_device dev;
	uint32_t batches_at_completion;
	int result_at_completion;
	uint32_t completions;
	uint32_t failures;      /* jobs completed with an error */
	char last_why[200];     /* the last failure's reason */
};

/* Runs on the transfer thread, right after the job's last step. */
static void deferred_hook(void *ctx, const struct shard_completion *c)
{
	struct deferred_device *d = ctx;

	d->batches_at_completion = d->dev.queued_batches;
	d->result_at_completion = c->result;
	if (c->result) {
		d->failures++;
		snprintf(d->last_why, sizeof(d->last_why), "%s", c->why);
	}
	__atomic_add_fetch(&d->completions, 1, __ATOMIC_RELEASE);
}

static int deferred_run(struct deferred_device *d, int submitted)
{
	uint32_t before = __atomic_load_n(&d->completions, __ATOMIC_ACQUIRE);

	assert_int_equal(submitted, 0);
	alarm(60);
	while (__atomic_load_n(&d->completions, __ATOMIC_ACQUIRE) == before)
		usleep(1000);
	alarm(0);
	return d->result_at_completion;
}

/*
 * An engine on a deferred device: plane_count planes of 4 KiB units over
 * page_count device pages (each plane filled from seed + its index), a
 * 4 KiB row (filled from 7), a record directory of its own.
 */
struct deferred_rig {
	struct deferred_device d;
	struct rec_geometry g;
	struct shard_planes planes;
	uint8_t *memory[64];
	uint8_t *row;
	uint32_t plane_count;
	char *base;
	struct rec_dir *dir;
	struct shard_engine *engine;
};

static void rig_init(struct deferred_rig *r, const char *name, uint32_t plane_count,
		     uint32_t page_count, uint64_t seed)
{
	memset(r, 0, sizeof(*r));
	tu_deferred_device_init(&r->d.dev);
	r->plane_count = plane_count;
	r->base = tu_make_temp_dir(name);
	tu_geometry(&r->g, 64, plane_count, 4096, 4096, 0, 1);
	r->g.page_count = page_count;
	for (uint32_t p = 0; p < plane_count; p++) {
		r->memory[p] = tu_alloc(4096ull * page_count);
		tu_fill(r->memory[p], 4096ull * page_count, seed + p);
		r->planes.page_base[p] = (uintptr_t)r->memory[p];
	}
	r->row = tu_alloc(4096ull * r->g.row_count);
	tu_fill(r->row, 4096, 7);
	r->planes.row_base = (uintptr_t)r->row;
	r->dir = tu_dir_open(r->base, &r->g, true);
}

/*
 * Opens the rig's engine (read_ahead_bytes 0: the default; stores_max 0:
 * the engine's), its hook set.
 */
static void rig_open_with(struct fixture *f, struct deferred_rig *r, uint32_t window_pages,
			  uint64_t read_ahead_bytes, uint32_t stores_max)
{
	struct shard_engine_options options = {
		.geometry = &r->g, .dir = r->dir, .device = &r->d.dev.base, .planes = &r->planes,
		.window_pages = window_pages, .jobs_max = 8, .no_uring = f->no_uring,
		.io_workers = f->io_workers, .read_ahead_bytes = read_ahead_bytes,
		.stores_max = stores_max,
	};
	char err[256];

	if (shard_engine_open(&options, &r->engine, err, sizeof(err)) != 0)
		fail_msg("engine: %s", err);
	shard_engine_set_completion_hook(r->engine, deferred_hook, &r->d);
}

static void rig_open(struct fixture *f, struct deferred_rig *r, uint32_t window_pages,
		     uint64_t read_ahead_bytes)
{
	rig_open_with(f, r, window_pages, read_ahead_bytes, 0);
}

static void rig_close(struct deferred_rig *r)
{
	shard_engine_set_completion_hook(r->engine, NULL, NULL);
	shard_engine_close(r->engine);
	r->engine = NULL;
}

static void rig_free(struct deferred_rig *r)
{
	rec_dir_close(r->dir);
	for (uint32_t p = 0; p < r->plane_count; p++)
		free(r->memory[p]);
	free(r->row);
	tu_remove_tree(r->base);
}

/*
 * A window of 9 pages x 64 planes (576 copies) goes to the
 * device in two batches; device.copy fails the second. The job's failure is
 * reported only after the first batch has completed (the device was
 * synchronized), for a store and for a fetch, and the engine works after.
 */
static void test_engine_copy_failure_drains_first(void **state)
{
	struct fixture *f = *state;
	struct deferred_rig r;
	struct rec_key key;
	struct rec_header h;
	uint32_t ids[9] = { 0, 1, 2, 3, 4, 5, 6, 7, 8 }, dest[9];
	struct shard_store_job store_job = { .header = &h, .page_ids = ids };
	struct shard_chain_record chain;
	struct shard_fetch_job fetch_job = { .chain = &chain, .chain_count = 1,
					     .page_ids = dest, .state_slot = 1 };

	rig_init(&r, "drain", 64, 20, 0);
	rig_open(f, &r, 9, 0);
	make_key(&key, 64 * 9, 40);
	assert_int_equal(rec_header_init(&h, &r.g, &f->ns, &key, NULL, &key.digest, 0, 9, 1),
			 0);

	assert_int_equal(sel_failpoints_configure("device.copy=1*off->1*return(EIO)"), 0);
	assert_int_equal(deferred_run(&r.d, shard_engine_store(r.engine, 1, &store_job)),
			 -EIO);
	assert_int_equal(r.d.batches_at_completion, 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".tmp"), 0);
	sel_failpoints_configure(NULL);
	assert_int_equal(deferred_run(&r.d, shard_engine_store(r.engine, 2, &store_job)), 0);

	chain = (struct shard_chain_record){ key, 0, 9 };
	for (uint32_t i = 0; i < 9; i++)
		dest[i] = 10 + i;
	assert_int_equal(sel_failpoints_configure("device.copy=1*off->1*return(EIO)"), 0);
	assert_int_equal(deferred_run(&r.d, shard_engine_fetch(r.engine, 3, &fetch_job)),
			 -EIO);
	assert_int_equal(r.d.batches_at_completion, 0);
	sel_failpoints_configure(NULL);
	assert_int_equal(deferred_run(&r.d, shard_engine_fetch(r.engine, 4, &fetch_job)), 0);
	for (uint32_t p = 0; p < 64; p++)
		assert_memory_equal(r.memory[p] + 4096 * 10, r.memory[p], 4096 * 9);

	rig_close(&r);
	rig_free(&r);
}

/*
 * A fetch starts a window's copy to the device and
 * verifies the next window before waiting for it. On a device whose copies
 * run only at synchronize, a fetch of 20 windows through 8 stages restores
 * every byte: no stage is read into again while its copy is still queued,
 * and every copy has run when the job completes, also when a later window
 * fails its checksum.
 */
static void test_engine_fetch_copies_overlap(void **state)
{
	struct fixture *f = *state;
	struct deferred_rig r;
	struct rec_key key;
	struct rec_header h;
	uint32_t ids[40], dest[40];
	uint8_t ee[4096];
	struct shard_store_job store_job = { .header = &h, .page_ids = ids };
	struct shard_chain_record chain;
	struct shard_fetch_job fetch_job = { .chain = &chain, .chain_count = 1,
					     .page_ids = dest, .state_slot = 1 };

	rig_init(&r, "overlap", 8, 80, 100);
	for (uint32_t i = 0; i < 40; i++) {
		ids[i] = i;
		dest[i] = 79 - i; /* scattered the other way */
	}
	/*
	 * Reading 8 windows ahead (every stage: a stage is read into again as
	 * soon as its copy is done) and 2 ahead (the pending copy's stage is
	 * not reused before the failure).
	 */
	for (uint32_t round = 0; round < 2; round++) {
		rig_open(f, &r, 2, round == 0 ? 0 : 1);
		make_key(&key, 64 * 40, (uint8_t)(41 + round));
		assert_int_equal(rec_header_init(&h, &r.g, &f->ns, &key, NULL, &key.digest, 0,
						 40, 1), 0);
		assert_int_equal(deferred_run(&r.d, shard_engine_store(r.engine, 1, &store_job)),
				 0);
		for (uint32_t p = 0; p < 8; p++)
			memset(r.memory[p] + 4096 * 40, 0xee, 4096 * 40);
		memset(r.row + 4096, 0xee, 4096);
		chain = (struct shard_chain_record){ key, 0, 40 };
		assert_int_equal(deferred_run(&r.d, shard_engine_fetch(r.engine, 2, &fetch_job)),
				 0);
		assert_int_equal(r.d.batches_at_completion, 0);
		for (uint32_t p = 0; p < 8; p++)
			for (uint32_t i = 0; i < 40; i++)
				assert_memory_equal(r.memory[p] + 4096 * dest[i],
						    r.memory[p] + 4096 * i, 4096);
		assert_memory_equal(r.row + 4096, r.row, 4096);

		/*
		 * A corrupt page in window 3 fails the fetch while the copy of a
		 * window before it may still be queued: the failure is reported
		 * only after every copy started ran. A window verified in the
		 * same pass as window 3 is not copied at all, so each window
		 * before it arrived whole or not at all, and none after it.
		 */
		{
			char *path = tu_record_path(r.dir, &key);

			tu_flip_bit(path, h.page_offset + h.page_stride * 6 + 100);
			free(path);
		}
		for (uint32_t p = 0; p < 8; p++)
			memset(r.memory[p] + 4096 * 40, 0xee, 4096 * 40);
		assert_int_equal(deferred_run(&r.d, shard_engine_fetch(r.engine, 3, &fetch_job)),
				 SEL_ECHECKSUM);
		assert_int_equal(r.d.batches_at_completion, 0);
		memset(ee, 0xee, sizeof(ee));
		for (uint32_t i = 0; i < 40; i++) {
			bool copied = i < 6 && memcmp(r.memory[0] + 4096 * dest[i],
						      r.memory[0] + 4096 * i, 4096) == 0;

			if (i % 2 == 1 && i < 6 &&
			    copied != (memcmp(r.memory[0] + 4096 * dest[i - 1],
					      r.memory[0] + 4096 * (i - 1), 4096) == 0))
				fail_msg("window %u arrived in part", i / 2);
			for (uint32_t p = 0; p < 8; p++) {
				if (copied)
					assert_memory_equal(r.memory[p] + 4096 * dest[i],
							    r.memory[p] + 4096 * i, 4096);
				else
					assert_memory_equal(r.memory[p] + 4096 * dest[i], ee,
							    4096);
			}
		}
		rig_close(&r);
	}
	rig_free(&r);
}

/* Waits until the rig's hook has seen count more completions than before. */
static void rig_wait_completions(struct deferred_rig *r, uint32_t before, uint32_t count)
{
	alarm(60);
	while (__atomic_load_n(&r->d.completions, __ATOMIC_ACQUIRE) < before + count)
		usleep(1000);
	alarm(0);
}

/* Stores of 20 pages on a rig: key k (tag + k) from device pages 20k.. as job k. */
struct rig_stores {
	struct rec_key keys[5];
	struct rec_header headers[5];
	uint32_t page_ids[5][20];
	struct shard_store_job jobs[5];
};

static void rig_stores_init(struct fixture *f, struct deferred_rig *r, struct rig_stores *s,
			    uint32_t count, uint8_t tag)
{
	SEL_ASSERT(count <= SEL_ARRAY_SIZE(s->jobs));
	for (uint32_t k = 0; k < count; k++) {
		make_key(&s->keys[k], 64 * 20, (uint8_t)(tag + k));
		assert_int_equal(rec_header_init(&s->headers[k], &r->g, &f->ns, &s->keys[k], NULL,
						 &s->keys[k].digest, 0, 20, 1), 0);
		for (uint32_t i = 0; i < 20; i++)
			s->page_ids[k][i] = 20 * k + i;
		s->jobs[k] = (struct shard_store_job){ .header = &s->headers[k],
						       .page_ids = s->page_ids[k] };
	}
}

/* Device pages 100..119 hold pages first..first + 19, every plane. */
static void rig_assert_restored(const struct deferred_rig *r, uint32_t first)
{
	for (uint32_t i = 0; i < 20; i++)
		for (uint32_t p = 0; p < r->plane_count; p++)
			assert_memory_equal(r->memory[p] + 4096 * (100 + i),
					    r->memory[p] + 4096 * (first + i), 4096);
}

/*
 * Fetches key's 20 pages alone (as job_id) into device pages 100.., made
 * 0xee first, every checksum verified, and checks them against first...
 */
static void rig_restore_right(struct deferred_rig *r, const struct rec_key *key,
			      uint32_t first, uint64_t job_id)
{
	uint32_t dest[20];
	struct shard_chain_record chain = { *key, 0, 20 };
	struct shard_fetch_job job = { .chain = &chain, .chain_count = 1, .page_ids = dest,
				       .state_slot = 1 };

	for (uint32_t i = 0; i < 20; i++)
		dest[i] = 100 + i;
	for (uint32_t p = 0; p < r->plane_count; p++)
		memset(r->memory[p] + 4096 * 100, 0xee, 4096 * 20);
	assert_int_equal(deferred_run(&r->d, shard_engine_fetch(r->engine, job_id, &job)), 0);
	rig_assert_restored(r, first);
}

/*
 * Stores at once on a device whose copies run only at synchronize: four
 * stores of 10 windows each, the first one's create held 500 ms (a window
 * copied and summed meanwhile waits for it), and a fetch submitted among
 * them, all complete right: every window was summed after its copy ran,
 * and every byte restores. The engine's split of the stores' time
 * accounts for the held create as waiting for the disk, and the fetches'
 * split a held open and a held read apart, and a fetch's end into its
 * last copy, its row and closing its files.
 */
static void test_engine_stores_on_deferred_device(void **state)
{
	struct fixture *f = *state;
	struct deferred_rig r;
	struct rig_stores s;
	uint32_t dest[20], before;
	struct shard_chain_record chain;
	struct shard_fetch_job fetch_job = { .chain = &chain, .chain_count = 1,
					     .page_ids = dest, .state_slot = 1 };
	struct shard_engine_stats stats;

	rig_init(&r, "stores-deferred", 8, 120, 300);
	rig_open_with(f, &r, 2, 0, 4);
	rig_stores_init(f, &r, &s, 5, 70);
	for (uint32_t i = 0; i < 20; i++)
		dest[i] = 100 + i;
	/* The fifth record, to restore while the others are stored. */
	assert_int_equal(deferred_run(&r.d, shard_engine_store(r.engine, 5, &s.jobs[4])), 0);

	assert_int_equal(sel_failpoints_configure("record.before_create=1*sleep(500)"), 0);
	before = __atomic_load_n(&r.d.completions, __ATOMIC_ACQUIRE);
	for (uint32_t k = 0; k < 4; k++)
		assert_int_equal(shard_engine_store(r.engine, 1 + k, &s.jobs[k]), 0);
	chain = (struct shard_chain_record){ s.keys[4], 0, 20 };
	assert_int_equal(shard_engine_fetch(r.engine, 6, &fetch_job), 0);
	rig_wait_completions(&r, before, 5);
	sel_failpoints_configure(NULL);
	assert_int_equal(r.d.batches_at_completion, 0);
	shard_engine_stats(r.engine, &stats);
	assert_int_equal(stats.jobs_failed, 0);
	assert_int_equal(stats.stores_at_once, 4);
	rig_assert_restored(&r, 80);

	/* Each record restores byte for byte, every checksum verified. */
	for (uint32_t k = 0; k < 4; k++)
		rig_restore_right(&r, &s.keys[k], 20 * k, 10 + k);
	shard_engine_stats(r.engine, &stats);
	assert_true(stats.store_copy_ns > 0 && stats.store_sum_ns > 0);
	/* The create held 500 ms: the stores waited for the disk meanwhile. */
	assert_true(stats.store_wait_ns >= 250000000ull);
	assert_true(stats.store_run_ns >=
		    stats.store_copy_ns + stats.store_sum_ns + stats.store_wait_ns);
	/*
	 * The fetches' split: an open whose header read is held 300 ms counts
	 * as opening, a page read held as long as waiting for reads.
	 */
	assert_true(stats.fetch_verify_ns > 0 && stats.fetch_copy_ns > 0 &&
		    stats.fetch_end_ns > 0 && stats.fetch_open_ns < 150000000ull &&
		    stats.fetch_wait_ns < 150000000ull);
	assert_int_equal(sel_failpoints_configure("disk.read=1*sleep(300)"), 0);
	rig_restore_right(&r, &s.keys[0], 0, 20);
	assert_int_equal(sel_failpoints_configure("disk.read=2*off->1*sleep(300)"), 0);
	rig_restore_right(&r, &s.keys[1], 20, 21);
	sel_failpoints_configure(NULL);
	shard_engine_stats(r.engine, &stats);
	assert_true(stats.fetch_open_ns >= 250000000ull);
	assert_true(stats.fetch_wait_ns >= 250000000ull);
	assert_true(stats.fetch_run_ns >= stats.fetch_open_ns + stats.fetch_wait_ns +
					  stats.fetch_verify_ns + stats.fetch_copy_ns +
					  stats.fetch_end_ns);
	/* A fetch's end splits into its last copy, its row and its closes. */
	assert_true(stats.fetch_end_row_ns > 0 && stats.fetch_end_close_ns > 0);
	assert_true(stats.fetch_end_ns >= stats.fetch_end_copy_ns + stats.fetch_end_row_ns +
						   stats.fetch_end_close_ns);
	assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".tmp"), 0);
	rig_close(&r);
	rig_free(&r);
}

/*
 * The stores' copy pipeline: a window's checksum pass runs while the next
 * window copies, only after its own copy was synchronized. Four stores of
 * ten windows each on the deferred device, whose fifth synchronization
 * fails (its copies never ran): the window it held fails its store alone,
 * with the device's reason and no file left; the other three commit, and
 * each restores byte for byte.
 */
static void test_engine_store_pipeline_sync_failure(void **state)
{
	struct fixture *f = *state;
	struct deferred_rig r;
	struct rig_stores s;
	uint32_t before, restored = 0;

	rig_init(&r, "pipeline-sync", 8, 120, 500);
	rig_open_with(f, &r, 2, 0, 4);
	rig_stores_init(f, &r, &s, 4, 90);
	r.d.dev.fail_synchronize_at = 5;
	before = __atomic_load_n(&r.d.completions, __ATOMIC_ACQUIRE);
	for (uint32_t k = 0; k < 4; k++)
		assert_int_equal(shard_engine_store(r.engine, 1 + k, &s.jobs[k]), 0);
	rig_wait_completions(&r, before, 4);
	assert_true(r.d.dev.synchronize_calls >= 5);
	assert_int_equal(r.d.failures, 1);
	assert_non_null(strstr(r.d.last_why, "device copy device to host failed"));
	assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".ckpt"), 3);

	for (uint32_t k = 0; k < 4; k++) {
		char *path = tu_record_path(r.dir, &s.keys[k]);
		bool exists = access(path, F_OK) == 0;

		free(path);
		if (!exists)
			continue;
		rig_restore_right(&r, &s.keys[k], 20 * k, 10 + k);
		restored++;
	}
	assert_int_equal(restored, 3);
	rig_close(&r);
	rig_free(&r);
}

/*
 * A store whose own copy fails when it is waited for does no more device
 * or disk work: one store of 2 windows whose second window's copy fails
 * as its row is due, and one of 3 windows whose second window's copy
 * fails once its third was issued behind it (the pipeline), each on a
 * deferred device with windows of 2 pages. Neither issues another copy (a
 * row or a window), each fails with the device's reason and leaves no
 * file, and each stores after.
 */
static void test_engine_store_pipeline_stops_at_own_failure(void **state)
{
	struct fixture *f = *state;
	uint32_t pages[2] = { 4, 6 };

	for (uint32_t k = 0; k < 2; k++) {
		struct deferred_rig r;
		struct rec_key key;
		struct rec_header h;
		uint32_t ids[6] = { 0, 1, 2, 3, 4, 5 }, calls;
		struct shard_store_job job = { .header = &h, .page_ids = ids };

		rig_init(&r, "pipeline-own", 8, 20, 700 + k);
		rig_open_with(f, &r, 2, 0, 1);
		make_key(&key, 64ull * pages[k], (uint8_t)(120 + k));
		assert_int_equal(rec_header_init(&h, &r.g, &f->ns, &key, NULL, &key.digest,
						 0, pages[k], 1), 0);
		/* Window 1 is synchronized first (its create pending), then window 2. */
		r.d.dev.fail_synchronize_at = r.d.dev.synchronize_calls + 2;
		calls = r.d.dev.copy_calls;
		assert_int_equal(deferred_run(&r.d, shard_engine_store(r.engine, 1, &job)), -EIO);
		assert_int_equal(r.d.dev.copy_calls - calls, pages[k] / 2);
		assert_non_null(strstr(r.d.last_why, "device copy device to host failed"));
		assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".tmp"), 0);
		assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".ckpt"), 0);
		calls = r.d.dev.copy_calls;
		assert_int_equal(deferred_run(&r.d, shard_engine_store(r.engine, 2, &job)), 0);
		assert_int_equal(r.d.dev.copy_calls - calls, pages[k] / 2 + 1);
		assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".ckpt"), 1);
		rig_close(&r);
		rig_free(&r);
	}
}

/*
 * A fetch that a store yields to while the store's next window copies
 * finds the device to itself: the store's copy is synchronized first, and
 * its failure is the store's. One store of ten windows; its third window's
 * copy call waits at a gate until a fetch is queued, and the
 * synchronization of that copy fails: the store fails with the device's
 * reason and leaves no file, and the fetch restores every byte.
 */
static void test_engine_store_pipeline_settles_before_fetch(void **state)
{
	struct fixture *f = *state;
	struct deferred_rig r;
	struct rig_stores s;
	uint32_t dest[20], before;
	struct shard_chain_record chain;
	struct shard_fetch_job fetch_job = { .chain = &chain, .chain_count = 1,
					     .page_ids = dest, .state_slot = 1 };
	char *path;

	rig_init(&r, "pipeline-fetch", 8, 120, 600);
	rig_open_with(f, &r, 2, 0, 1);
	rig_stores_init(f, &r, &s, 2, 110);
	for (uint32_t i = 0; i < 20; i++)
		dest[i] = 100 + i;
	assert_int_equal(deferred_run(&r.d, shard_engine_store(r.engine, 1, &s.jobs[0])), 0);

	/*
	 * The second store: window 1 is copied and synchronized (its create
	 * pending), window 2 is copied, and the copy call of window 3 waits;
	 * the synchronization after it, window 3's, fails.
	 */
	r.d.dev.fail_synchronize_at = r.d.dev.synchronize_calls + 3;
	__atomic_store_n(&r.d.dev.gate_at, r.d.dev.copy_calls + 3, __ATOMIC_RELEASE);
	before = __atomic_load_n(&r.d.completions, __ATOMIC_ACQUIRE);
	assert_int_equal(shard_engine_store(r.engine, 2, &s.jobs[1]), 0);
	tu_deferred_gate_wait(&r.d.dev);
	chain = (struct shard_chain_record){ s.keys[0], 0, 20 };
	assert_int_equal(shard_engine_fetch(r.engine, 3, &fetch_job), 0);
	__atomic_store_n(&r.d.dev.gate_at, 0, __ATOMIC_RELEASE);
	rig_wait_completions(&r, before, 2);
	assert_int_equal(r.d.failures, 1);
	assert_non_null(strstr(r.d.last_why, "device copy device to host failed"));
	rig_assert_restored(&r, 0);
	path = tu_record_path(r.dir, &s.keys[1]);
	assert_int_equal(access(path, F_OK), -1);
	free(path);
	assert_int_equal(tu_count_suffix(rec_dir_path(r.dir), ".tmp"), 0);
	rig_close(&r);
	rig_free(&r);
}

/*
 * A host device whose copy call number gate_at blocks until the test opens
 * the gate: a job held at a known point of its run, without timing.
 */
struct gated_device {
	struct shard_device base;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	uint64_t calls;
	uint64_t gate_at; /* 0: never blocks */
	bool blocked;
};

static int gated_copy(struct shard_device *dev, enum shard_copy_direction dir,
		      const struct shard_copy *copies, uint32_t count)
{
	struct gated_device *g = (struct gated_device *)dev;

	pthread_mutex_lock(&g->lock);
	if (++g->calls == g->gate_at) {
		g->blocked = true;
		pthread_cond_broadcast(&g->changed);
		while (g->gate_at)
			pthread_cond_wait(&g->changed, &g->lock);
		g->blocked = false;
	}
	pthread_mutex_unlock(&g->lock);
	shard_copy_in_memory(dir, copies, count);
	return 0;
}

static int gated_synchronize(struct shard_device *dev)
{
	(void)dev;
	return 0;
}

static const struct shard_device_ops gated_ops = {
	.name = "gated",
	.bind = tu_device_bind,
	.register_host = tu_device_register,
	.unregister_host = tu_device_unregister,
	.copy = gated_copy,
	.synchronize = gated_synchronize,
	.close = tu_device_close,
	.mark = tu_device_mark_none,
	.wait_mark = tu_device_mark_none,
	.copies_synchronous = true,
};

/* Blocks the copy call after the next `after` calls; waits until it blocks. */
static void gate_close_after(struct gated_device *g, uint64_t after)
{
	pthread_mutex_lock(&g->lock);
	g->gate_at = g->calls + after;
	pthread_mutex_unlock(&g->lock);
}

static void gate_wait_blocked(struct gated_device *g)
{
	pthread_mutex_lock(&g->lock);
	while (!g->blocked)
		pthread_cond_wait(&g->changed, &g->lock);
	pthread_mutex_unlock(&g->lock);
}

static void gate_open(struct gated_device *g)
{
	pthread_mutex_lock(&g->lock);
	g->gate_at = 0;
	pthread_cond_broadcast(&g->changed);
	pthread_mutex_unlock(&g->lock);
}

/* Swaps the fixture's engine for one on a gated device, windows of 4 pages. */
static struct shard_device *use_gated(struct fixture *f, struct gated_device *g)
{
	struct shard_device *host = f->dev;

	*g = (struct gated_device){ .base.ops = &gated_ops,
				    .lock = PTHREAD_MUTEX_INITIALIZER,
				    .changed = PTHREAD_COND_INITIALIZER };
	shard_engine_close(f->engine);
	f->dev = &g->base;
	open_engine(f, 4);
	return host;
}

static void drop_gated(struct fixture *f, struct shard_device *host)
{
	shard_engine_close(f->engine);
	f->dev = host;
	open_engine(f, 4);
}

/* Submits a store of pages [0, key / 64) from ids base_id.. and slot. */
static void submit_store(struct fixture *f, const struct rec_key *key, uint32_t base_id,
			 uint32_t slot, uint64_t job_id)
{
	uint32_t tail = (uint32_t)(key->consumed / 64), ids[200];
	struct rec_header h;
	struct shard_store_job job = { .header = &h, .page_ids = ids, .state_slot = slot };

	for (uint32_t i = 0; i < tail; i++) {
		ids[i] = base_id + i;
		fill_page(f, ids[i], i);
	}
	tu_fill(f->row_memory + 60000ull * slot, 60000, key->consumed);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, key, NULL, &key->digest,
					 0, tail, 99), 0);
	assert_int_equal(shard_engine_store(f->engine, job_id, &job), 0);
}

static void submit_fetch(struct fixture *f, const struct shard_chain_record *chain,
			 uint32_t base_id, uint32_t slot, uint64_t job_id)
{
	uint32_t ids[200];
	struct shard_fetch_job job = { .chain = chain, .chain_count = 1, .page_ids = ids,
				       .state_slot = slot };

	for (uint32_t i = 0; i < chain->tail_page_count; i++)
		ids[i] = base_id + i;
	assert_int_equal(shard_engine_fetch(f->engine, job_id, &job), 0);
}

/* Fetches key whole into ids 150.. and slot 7; true when every byte is right. */
static bool stored_right(struct fixture *f, const struct rec_key *key)
{
	struct shard_chain_record chain = { *key, 0, (uint32_t)(key->consumed / 64) };
	struct shard_completion c;

	poison(f);
	if (fetch(f, &chain, 1, 0, 150, 7, &c) != 0)
		return false;
	for (uint32_t i = 0; i < chain.tail_page_count; i++)
		if (!page_matches(f, 150 + i, i))
			return false;
	return row_matches(f, 7, key->consumed);
}

/*
 * A store whose row fails to copy from the device (the second batch: its
 * two pages are the first) fails with the reason, leaves no file, and the
 * same store succeeds after.
 */
static void test_engine_row_copy_failure(void **state)
{
	struct fixture *f = *state;
	struct shard_completion c;
	struct rec_key key;

	make_key(&key, 64 * 2, 9);
	assert_int_equal(sel_failpoints_configure("device.copy=1*off->1*return(EIO)"), 0);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), -EIO);
	sel_failpoints_configure(NULL);
	assert_non_null(strstr(c.why, "device copy of the row failed"));
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	assert_int_equal(store(f, &key, NULL, 0, 0, &c), 0);
	assert_true(stored_right(f, &key));
}

/*
 * Waits for count completions; marks each job id's bit in *seen (ids
 * base..), each in turn when in_order.
 */
static void wait_jobs(struct fixture *f, uint32_t count, uint64_t base, uint32_t *seen,
		      int expect_result, bool in_order)
{
	struct shard_completion c;

	for (uint32_t i = 0; i < count; i++) {
		shard_engine_wait(f->engine, &c);
		assert_in_range(c.job_id, base, base + 31);
		if (in_order)
			assert_int_equal(c.job_id, base + i);
		assert_false(*seen & (1u << (c.job_id - base)));
		*seen |= 1u << (c.job_id - base);
		if (expect_result == 0)
			assert_int_equal(c.result, 0);
	}
}

/*
 * Submits count stores (job ids 10.., state slots 0..) behind a gate
 * closed on the first one's first window copy: key i of pages + i pages
 * (and i tokens more), digest tag + i, device pages from 20 * i.
 */
static void stores_behind_gate(struct fixture *f, struct gated_device *g, struct rec_key *keys,
			       uint32_t count, uint32_t pages, uint8_t tag)
{
	gate_close_after(g, 1);
	for (uint32_t i = 0; i < count; i++) {
		make_key(&keys[i], 64ull * (pages + i) + i, (uint8_t)(tag + i));
		submit_store(f, &keys[i], 20 * i, i, 10 + i);
		if (i == 0)
			gate_wait_blocked(g);
	}
}

/*
 * A store is held in its first window while four more are
 * queued behind it; a fetch submitted last completes first (the running
 * stores yield to it between windows), then every store completes with
 * the right bytes: in order with one store at a time, in any order where
 * several run at once.
 */
static void test_engine_restore_before_queued_stores(void **state)
{
	struct fixture *f = *state;
	struct gated_device g;
	struct shard_device *host = use_gated(f, &g);
	struct shard_chain_record chain;
	struct shard_completion c;
	struct shard_engine_stats stats;
	struct rec_key restore, keys[5];
	uint32_t seen = 0;

	make_key(&restore, 64 * 6, 50);
	assert_int_equal(store(f, &restore, NULL, 0, 5, &c), 0);
	chain = (struct shard_chain_record){ restore, 0, 6 };
	stores_behind_gate(f, &g, keys, 5, 9, 51);
	submit_fetch(f, &chain, 100, 6, 99);
	gate_open(&g);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 99);
	assert_int_equal(c.result, 0);
	for (uint32_t i = 0; i < 6; i++)
		assert_true(page_matches(f, 100 + i, i));
	shard_engine_stats(f->engine, &stats);
	wait_jobs(f, 5, 10, &seen, 0, stats.stores_max == 1);
	assert_int_equal(seen, 0x1fu);
	shard_engine_stats(f->engine, &stats);
	assert_int_equal(stats.store_yields, 1);
	for (uint32_t i = 0; i < 5; i++)
		assert_true(stored_right(f, &keys[i]));
	drop_gated(f, host);
}

/*
 * Several stores in progress at once (shard/engine.h, stores_max): the
 * engine reopened with SHARD_STORES_MAX stores at once (and 16 background
 * stages), as many stores queued behind the first's first window, an
 * unlink of the third's key, then one more store. All of them run at once;
 * the unlink completes after every store queued before it (so the third's
 * record is gone) and before the last store; every other record has the
 * right bytes and no temporary file is left.
 */
static void test_engine_stores_at_once(void **state)
{
	struct fixture *f = *state;
	struct gated_device g;
	struct shard_device *host = use_gated(f, &g);
	struct shard_completion c;
	struct shard_engine_stats stats;
	struct rec_key keys[SHARD_STORES_MAX + 1];
	const uint32_t n = SHARD_STORES_MAX, last = SHARD_STORES_MAX;
	uint32_t seen = 0;

	/* n stores, an unlink and one more store in the queue at once. */
	shard_engine_close(f->engine);
	open_engine_with(f, 4, n + 2, n);
	stores_behind_gate(f, &g, keys, n, 5, 60);
	assert_int_equal(shard_engine_unlink(f->engine, 30, &keys[2]), 0);
	/* The third's row slot: its record is unlinked, whatever its row. */
	make_key(&keys[last], 64ull * 12 + 6, 66);
	submit_store(f, &keys[last], 20 * n, 2, 31);
	gate_open(&g);
	wait_jobs(f, n, 10, &seen, 0, false);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 30);
	assert_int_equal(c.result, 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 31);
	assert_int_equal(c.result, 0);
	shard_engine_stats(f->engine, &stats);
	assert_int_equal(stats.stores_max, n);
	assert_int_equal(stats.stores_at_once, n);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	for (uint32_t i = 0; i <= last; i++)
		if (i != 2)
			assert_true(stored_right(f, &keys[i]));
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), n);
	drop_gated(f, host);
}

/*
 * Two stores of one key never overlap (it is one file): queued back to back
 * beside a third, all complete and the records are right.
 */
static void test_engine_same_key_stores_in_turn(void **state)
{
	struct fixture *f = *state;
	struct gated_device g;
	struct shard_device *host = use_gated(f, &g);
	struct rec_key x, y;
	uint32_t seen = 0;

	make_key(&x, 64 * 8, 70);
	make_key(&y, 64 * 9, 71);
	gate_close_after(&g, 1);
	submit_store(f, &x, 0, 0, 10);
	gate_wait_blocked(&g);
	submit_store(f, &x, 0, 0, 11);
	submit_store(f, &y, 40, 1, 12);
	gate_open(&g);
	wait_jobs(f, 3, 10, &seen, 0, false);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_true(stored_right(f, &x));
	assert_true(stored_right(f, &y));
	drop_gated(f, host);
}

/*
 * A failure in one of several stores in progress is that store's alone:
 * the first create after the first store's fails (ENOSPC; with several
 * control threads, whichever store's create runs next); that store is
 * reported with its reason and leaves no file, and the three beside it
 * complete right.
 */
static void test_engine_failure_among_stores(void **state)
{
	struct fixture *f = *state;
	struct gated_device g;
	struct shard_device *host = use_gated(f, &g);
	struct shard_completion c;
	struct rec_key keys[4];
	uint32_t seen = 0, failed = 0;

	assert_int_equal(sel_failpoints_configure("record.before_create=1*off->1*return(ENOSPC)"),
			 0);
	gate_close_after(&g, 1);
	for (uint32_t i = 0; i < 4; i++) {
		make_key(&keys[i], 64ull * (6 + i), (uint8_t)(80 + i));
		submit_store(f, &keys[i], 20 * i, i, 10 + i);
		if (i == 0) {
			gate_wait_blocked(&g);
			/* the first store's create has passed the point */
			while (sel_failpoint_evaluations(SEL_FP_RECORD_BEFORE_CREATE) < 1)
				usleep(1000);
		}
	}
	gate_open(&g);
	for (uint32_t i = 0; i < 4; i++) {
		shard_engine_wait(f->engine, &c);
		assert_false(seen & (1u << (c.job_id - 10)));
		seen |= 1u << (c.job_id - 10);
		if (c.result) {
			assert_int_equal(c.result, -ENOSPC);
			assert_true(strlen(c.why) > 0);
			assert_int_not_equal(c.job_id, 10);
			assert_int_equal(failed, 0);
			failed = (uint32_t)c.job_id;
		}
	}
	sel_failpoints_configure(NULL);
	assert_int_not_equal(failed, 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 3);
	for (uint32_t i = 0; i < 4; i++)
		if (10 + i != failed)
			assert_true(stored_right(f, &keys[i]));
	drop_gated(f, host);
}

/*
 * A restore does not wait for a store's commit. The
 * commit's syncs and rename run on the disk's control thread, and the
 * store's wait for it runs every fetch submitted meanwhile. The commit is
 * held 3 s at record.before_rename; a fetch submitted while it is held
 * completes first and right, and the store completes after it.
 */
static void test_engine_restore_during_slow_commit(void **state)
{
	struct fixture *f = *state;
	struct shard_chain_record chain;
	struct shard_completion c;
	struct rec_key restore, slow;
	uint64_t fired;

	make_key(&restore, 64 * 6, 60);
	assert_int_equal(store(f, &restore, NULL, 0, 5, &c), 0);
	chain = (struct shard_chain_record){ restore, 0, 6 };
	assert_int_equal(sel_failpoints_configure("record.before_rename=1*sleep(3000)"), 0);
	fired = sel_failpoint_fired(SEL_FP_RECORD_BEFORE_RENAME);
	make_key(&slow, 64 * 7 + 1, 61);
	submit_store(f, &slow, 20, 1, 10);
	alarm(60);
	while (sel_failpoint_fired(SEL_FP_RECORD_BEFORE_RENAME) == fired)
		usleep(1000);
	alarm(0);
	submit_fetch(f, &chain, 100, 6, 99);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 99);
	assert_int_equal(c.result, 0);
	for (uint32_t i = 0; i < 6; i++)
		assert_true(page_matches(f, 100 + i, i));
	/* The commit is still held: its file is not renamed yet. */
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 1);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 10);
	assert_int_equal(c.result, 0);
	sel_failpoints_configure(NULL);
	assert_true(stored_right(f, &slow));
}

/*
 * A store that yields to a fetch and then fails (its
 * writes fail after the yield) fails as before: the fetch completes first
 * and right, the store reports the error once its writes have drained, no
 * temporary file is left, and the key stores again afterwards.
 */
static void test_engine_yielded_store_failure(void **state)
{
	struct fixture *f = *state;
	struct gated_device g;
	struct shard_device *host = use_gated(f, &g);
	struct shard_chain_record chain;
	struct shard_completion c;
	struct rec_key restore, key;

	make_key(&restore, 64 * 5, 60);
	assert_int_equal(store(f, &restore, NULL, 0, 5, &c), 0);
	chain = (struct shard_chain_record){ restore, 0, 5 };
	make_key(&key, 64 * 20 + 3, 61);
	gate_close_after(&g, 2); /* the store's second window */
	submit_store(f, &key, 20, 1, 10);
	gate_wait_blocked(&g);
	submit_fetch(f, &chain, 100, 6, 11);
	assert_int_equal(sel_failpoints_configure("record.after_write=return(EIO)"), 0);
	gate_open(&g);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 11);
	assert_int_equal(c.result, 0);
	for (uint32_t i = 0; i < 5; i++)
		assert_true(page_matches(f, 100 + i, i));
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.job_id, 10);
	assert_int_equal(c.result, -EIO);
	assert_non_null(strstr(c.why, "record.after_write"));
	sel_failpoints_configure(NULL);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 1);
	submit_store(f, &key, 20, 1, 12);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	assert_true(stored_right(f, &key));
	drop_gated(f, host);
}

/*
 * The disk thread's kernel workers when nothing says
 * otherwise: SELENE_IO_THREADS when valid (a malformed or too large value
 * keeps the default); none on a directory with O_DIRECT on a device; 1 to
 * 8 on tmpfs.
 */
/*
 * Options past their limits are refused at open with their reason, and the
 * open leaves nothing behind (the sanitizer build checks for leaks).
 */
static void test_engine_open_refuses_bad_options(void **state)
{
	struct fixture *f = *state;
	static const struct {
		uint32_t io_workers, stores_max, window_pages, jobs_max;
		const char *reason;
	} cases[] = {
		{ REC_DISK_IO_WORKERS_MAX + 1, 0, 4, 8, "kernel I/O workers past the maximum" },
		{ 0, SHARD_STORES_MAX + 1, 4, 8, "stores at once past the maximum" },
		{ 0, 0, SHARD_WINDOW_PAGES_MAX + 1, 8, "past the maximum" },
		{ 0, 0, 4, SHARD_JOBS_MAX + 1, "past the maximum" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct shard_engine_options options = {
			.geometry = &f->g, .dir = f->dir, .device = f->dev, .planes = &f->planes,
			.window_pages = cases[i].window_pages, .jobs_max = cases[i].jobs_max,
			.io_workers = cases[i].io_workers, .stores_max = cases[i].stores_max,
		};
		struct shard_engine *engine = (struct shard_engine *)1;
		char err[256] = "";

		assert_int_equal(shard_engine_open(&options, &engine, err, sizeof(err)), -EINVAL);
		assert_null(engine);
		assert_non_null(strstr(err, cases[i].reason));
	}
}

/*
 * Stores at once by default: SHARD_STORES_MAX with kernel workers, one
 * without; SELENE_STORES_AT_ONCE overrides, and 0 or a malformed value
 * leaves the default. An engine reports what it runs.
 */
static void test_engine_default_stores_max(void **state)
{
	struct fixture *f = *state;
	struct shard_engine_stats stats;
	const char *env = getenv("SELENE_STORES_AT_ONCE");
	char *was = env ? strdup(env) : NULL; /* what the fixture's engine saw */

	unsetenv("SELENE_STORES_AT_ONCE");
	assert_int_equal(shard_default_stores_max(0), 1);
	assert_int_equal(shard_default_stores_max(3), SHARD_STORES_MAX);
	setenv("SELENE_STORES_AT_ONCE", "2", 1);
	assert_int_equal(shard_default_stores_max(0), 2);
	assert_int_equal(shard_default_stores_max(3), 2);
	setenv("SELENE_STORES_AT_ONCE", "0", 1);
	assert_int_equal(shard_default_stores_max(3), SHARD_STORES_MAX);
	{
		char past[16];

		snprintf(past, sizeof(past), "%u", SHARD_STORES_MAX + 1);
		setenv("SELENE_STORES_AT_ONCE", past, 1);
		assert_int_equal(shard_default_stores_max(0), 1);
	}
	setenv("SELENE_STORES_AT_ONCE", "two", 1);
	assert_int_equal(shard_default_stores_max(3), SHARD_STORES_MAX);
	if (was)
		setenv("SELENE_STORES_AT_ONCE", was, 1);
	else
		unsetenv("SELENE_STORES_AT_ONCE");
	free(was);
	shard_engine_stats(f->engine, &stats);
	assert_int_equal(stats.stores_max, shard_default_stores_max(stats.io_workers));
}

static void test_engine_default_io_workers(void **state)
{
	struct fixture *f = *state;
	uint32_t fallback;

	unsetenv("SELENE_IO_THREADS");
	fallback = rec_disk_default_io_workers(f->dir);
	if (rec_dir_direct(f->dir) && !rec_dir_memory_backed(f->dir))
		assert_int_equal(fallback, 0);
	else
		assert_true(fallback >= 1 && fallback <= 8);
	/* the rule by the directory's two facts, as a raw baseline asks it */
	assert_int_equal(rec_disk_default_io_workers_for(false, true), 0);
	assert_int_equal(rec_disk_default_io_workers_for(rec_dir_memory_backed(f->dir),
							 rec_dir_direct(f->dir)), fallback);
	assert_true(rec_disk_default_io_workers_for(true, true) >= 1);
	assert_true(rec_disk_default_io_workers_for(false, false) >= 1);
	setenv("SELENE_IO_THREADS", "5", 1);
	assert_int_equal(rec_disk_default_io_workers(f->dir), 5);
	assert_int_equal(rec_disk_default_io_workers_for(false, true), 5);
	setenv("SELENE_IO_THREADS", "0", 1);
	assert_int_equal(rec_disk_default_io_workers(f->dir), 0);
	setenv("SELENE_IO_THREADS", "5x", 1);
	assert_int_equal(rec_disk_default_io_workers(f->dir), fallback);
	setenv("SELENE_IO_THREADS", "65", 1);
	assert_int_equal(rec_disk_default_io_workers(f->dir), fallback);
	unsetenv("SELENE_IO_THREADS");
	if (access("/dev/shm", W_OK) == 0) {
		struct rec_dir *shm;
		char *base;
		uint32_t n;

		setenv("TMPDIR", "/dev/shm", 1);
		base = tu_make_temp_dir("workers");
		unsetenv("TMPDIR");
		shm = tu_dir_open(base, &f->g, true);
		n = rec_disk_default_io_workers(shm);
		assert_true(n >= 1 && n <= 8);
		rec_dir_close(shm);
		tu_remove_tree(base);
	}
}

/*
 * A pool in memory, as a rank's connection would see it: a put keeps the
 * share image read from the record file; a claim streams each record's
 * image back as windows (header, checksums, pages three at a time from
 * skip, the row in two), as the client hands them over, and may stop after
 * fail_after windows as a manager killed mid-claim.
 */
struct fake_pool {
	uint8_t *images[4];
	uint64_t lengths[4];
	uint64_t put_ids[4];
	uint32_t count;
	int fail_after;        /* windows before the claim fails; < 0: never */
	bool stop_early;       /* end the stream after the first record, "complete" */
};

static int fake_put_share(void *ctx, uint64_t put_id, int fd, uint64_t length, char *why,
			  size_t why_size)
{
	struct fake_pool *fp = ctx;

	(void)why;
	(void)why_size;
	SEL_ASSERT(fp->count < 4);
	fp->images[fp->count] = malloc(length);
	assert_int_equal(pread(fd, fp->images[fp->count], length, 0), (ssize_t)length);
	fp->lengths[fp->count] = length;
	fp->put_ids[fp->count++] = put_id;
	return 0;
}

static int fake_claim_share(void *ctx, uint64_t claim_id, const struct shard_pool_record *chain,
			    uint32_t chain_count, uint32_t skip_pages,
			    struct shard_pool_share *share, char *why, size_t why_size)
{
	struct fake_pool *fp = ctx;
	uint64_t start = chain[0].first_page_index + skip_pages;
	int windows = 0, ret = 0;

	(void)claim_id;
	for (uint32_t i = 0; !ret && i < chain_count; i++) {
		const uint8_t *image = NULL;
		struct rec_header h;

		for (uint32_t k = 0; k < fp->count; k++)
			if (rec_header_decode(fp->images[k], &h, NULL, 0) == 0 &&
			    rec_key_equal(&h.key, &chain[i].key))
				image = fp->images[k];
		assert_non_null(image);
		assert_int_equal(rec_header_decode(image, &h, NULL, 0), 0);
#define WINDOW(section, first, count, data, bytes)                                          \
	do {                                                                                 \
		if (fp->fail_after >= 0 && windows++ >= fp->fail_after)                      \
			return sel_fail(-ECONNRESET, why, why_size, "the manager went away"); \
		ret = shard_pool_share_window(share, i, section, first, count, data, bytes, why,  \
					      why_size);                                     \
	} while (0)
		WINDOW(SHARD_POOL_SECTION_HEADER, 0, 4096, image, 4096);
		/* the pages from skip on, three to a window */
		for (uint32_t j = 0; !ret && j < h.tail_page_count;) {
			uint32_t n = h.tail_page_count - j < 3 ? h.tail_page_count - j : 3;

			if (chain[i].first_page_index + j < start) {
				j++;
				continue;
			}
			WINDOW(SHARD_POOL_SECTION_PAGES, j, n, image + h.page_offset +
			       h.page_stride * j, h.page_stride * n);
			j += n;
		}
		if (!ret && i + 1 == chain_count) {
			WINDOW(SHARD_POOL_SECTION_ROW, 0, 4096, image + h.row_offset, 4096);
			if (!ret)
				WINDOW(SHARD_POOL_SECTION_ROW, 4096, (uint32_t)(h.row_length - 4096),
				       image + h.row_offset + 4096, h.row_length - 4096);
		}
#undef WINDOW
		if (fp->stop_early)
			break;
	}
	return ret;
}

static void fake_pool_free(struct fake_pool *fp)
{
	for (uint32_t i = 0; i < fp->count; i++)
		free(fp->images[i]);
}

static void pool_on(struct fixture *f, struct fake_pool *fp)
{
	struct shard_pool_conn conn = { .ctx = fp, .put_share = fake_put_share,
					.claim_share = fake_claim_share };

	assert_int_equal(shard_engine_set_pool(f->engine, &conn, &f->ns), 0);
}

static int pool_claim(struct fixture *f, const struct shard_pool_record *chain, uint32_t count,
		      uint32_t skip, uint32_t base_id, uint32_t slot, struct shard_completion *c)
{
	uint32_t ids[200], pages = 0;
	int ret;

	for (uint32_t i = 0; i < count; i++)
		pages += chain[i].tail_page_count;
	for (uint32_t i = 0; i + skip < pages; i++)
		ids[i] = base_id + i;
	ret = shard_engine_pool_claim(f->engine, ++f->next_job, &(struct shard_pool_claim_job){
		.claim_id = 7, .chain = chain, .chain_count = count, .skip_pages = skip,
		.page_ids = ids, .state_slot = slot });
	if (ret)
		return ret;
	shard_engine_wait(f->engine, c);
	return c->result;
}

/* A host device that records what it registered and where its device-to-host copies land. */
struct recording_device {
	struct shard_device base;
	struct {
		const uint8_t *ptr;
		uint64_t bytes;
	} registered[8];
	uint32_t registered_count;
	uint64_t to_host_entries, to_host_registered; /* entries, and those inside a registration */
};

static int recording_register(struct shard_device *dev, void *ptr, uint64_t bytes)
{
	struct recording_device *r = (struct recording_device *)dev;

	SEL_ASSERT(r->registered_count < 8);
	r->registered[r->registered_count].ptr = ptr;
	r->registered[r->registered_count++].bytes = bytes;
	return 0;
}

static void recording_unregister(struct shard_device *dev, void *ptr)
{
	struct recording_device *r = (struct recording_device *)dev;

	for (uint32_t i = 0; i < r->registered_count; i++)
		if (r->registered[i].ptr == ptr)
			r->registered[i] = r->registered[--r->registered_count];
}

static int recording_copy(struct shard_device *dev, enum shard_copy_direction dir,
			  const struct shard_copy *copies, uint32_t count)
{
	struct recording_device *r = (struct recording_device *)dev;

	for (uint32_t k = 0; dir == SHARD_DEVICE_TO_HOST && k < count; k++) {
		const uint8_t *h = copies[k].host;

		r->to_host_entries++;
		for (uint32_t i = 0; i < r->registered_count; i++)
			if (h >= r->registered[i].ptr &&
			    h + copies[k].bytes <= r->registered[i].ptr + r->registered[i].bytes) {
				r->to_host_registered++;
				break;
			}
	}
	shard_copy_in_memory(dir, copies, count);
	return 0;
}

static const struct shard_device_ops recording_ops = {
	.name = "recording",
	.bind = tu_device_bind,
	.register_host = recording_register,
	.unregister_host = recording_unregister,
	.copy = recording_copy,
	.synchronize = gated_synchronize,
	.close = tu_device_close,
	.mark = tu_device_mark_none,
	.wait_mark = tu_device_mark_none,
	.copies_synchronous = true,
};

/*
 * R-POOL-78: a GPU checkpoint's export copies its pages and row from the
 * device only into the registered staging (pinned speed on a GPU), never
 * into pageable memory, and the share is the record image byte-exact:
 * ten pages (three windows of four, the last partial) from reversed page
 * ids, the row, and checksums that hold.
 */
static void test_engine_pool_export_copies_into_registered_staging(void **state)
{
	struct fixture *f = *state;
	static struct recording_device rd; /* outlives a failed test's engine until teardown */
	struct shard_device *host = f->dev;
	struct fake_pool fp = { .fail_after = -1 };
	struct shard_engine_options options = {
		.geometry = &f->g, .dir = f->dir, .device = &rd.base, .planes = &f->planes,
		.window_pages = 4, .jobs_max = 16, .no_uring = f->no_uring,
		.io_workers = f->io_workers, .checksum_threads = 3, .register_pool = true };
	uint32_t ids[10], slot = 5;
	struct shard_completion c;
	struct rec_layout layout;
	struct rec_header h, got;
	struct rec_key key;
	char err[256];
	uint64_t seed;

	rd = (struct recording_device){ .base.ops = &recording_ops };
	shard_engine_close(f->engine);
	if (shard_engine_open(&options, &f->engine, err, sizeof(err)) != 0)
		fail_msg("engine: %s", err);
	assert_true(rd.registered_count >= 1);
	make_key(&key, 640, 3);
	for (uint32_t i = 0; i < 10; i++) {
		ids[i] = 150 - i;
		fill_page(f, ids[i], 300 + i);
	}
	tu_fill(f->row_memory + 60000ull * slot, 60000, 4242);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL, &key.digest, 0, 10, 99),
			 0);
	pool_on(f, &fp);
	assert_int_equal(shard_engine_pool_export(f->engine, ++f->next_job,
						  &(struct shard_pool_export_job){
							  .header = &h, .page_ids = ids,
							  .state_slot = slot, .put_id = 77 }),
			 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	assert_int_equal(c.kind, SHARD_JOB_POOL_EXPORT);
	/* every plane of every page, and the row's pieces: all into registered memory */
	assert_true(rd.to_host_entries >= 10 * 3 + 1);
	assert_int_equal(rd.to_host_registered, rd.to_host_entries);
	assert_int_equal(fp.count, 1);
	assert_int_equal(fp.put_ids[0], 77);
	assert_int_equal(rec_header_decode(fp.images[0], &got, NULL, 0), 0);
	assert_int_equal(rec_layout_from_header(&got, &layout), 0);
	assert_int_equal(fp.lengths[0], layout.file_length);
	seed = rec_checksum_seed(&got.key);
	for (uint32_t i = 0; i < 10; i++) {
		const uint8_t *page = fp.images[0] + layout.page_offset + layout.page_stride * i;

		for (uint32_t p = 0; p < 3; p++)
			assert_memory_equal(page + 8192u * p, f->plane_memory[p] + f->unit * ids[i],
					    f->unit);
		assert_true(sel_get_le64(fp.images[0] + layout.checksum_offset + 8ull * i) ==
			    rec_page_checksum(page, layout.page_stride, seed, i));
	}
	assert_memory_equal(fp.images[0] + layout.row_offset, f->row_memory + 60000ull * slot,
			    60000);
	assert_true(got.row_checksum ==
		    rec_row_checksum(fp.images[0] + layout.row_offset, layout.row_length, seed));
	fake_pool_free(&fp);
	shard_engine_close(f->engine);
	f->engine = NULL;
	f->dev = host;
	open_engine(f, 4);
}

/*
 * A pool put sends this rank's record file as its share, byte for byte;
 * a claim of the chain from the pool, skipping a page, restores every
 * page and the row byte-exact into other page ids and another slot.
 */
static void test_engine_pool_put_and_claim(void **state)
{
	struct fixture *f = *state;
	struct fake_pool fp = { .fail_after = -1 };
	struct shard_completion c;
	struct rec_key root, child;
	struct shard_pool_record chain[2];
	uint64_t bytes[2] = { rec_geometry_file_bytes(&f->g, 4, true),
			      rec_geometry_file_bytes(&f->g, 4, true) };

	make_key(&root, 256, 1);
	make_key(&child, 512, 1);
	assert_int_equal(store(f, &root, NULL, 10, 0, &c), 0);
	assert_int_equal(store(f, &child, &root, 20, 1, &c), 0);
	pool_on(f, &fp);
	assert_int_equal(shard_engine_pool_put(f->engine, ++f->next_job, &root, 41, bytes[0]), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	assert_int_equal(c.kind, SHARD_JOB_POOL_PUT);
	assert_int_equal(c.bytes, bytes[0]);
	assert_int_equal(shard_engine_pool_put(f->engine, ++f->next_job, &child, 42, bytes[1]), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	assert_int_equal(fp.count, 2);
	assert_int_equal(fp.put_ids[1], 42);
	assert_int_equal(fp.lengths[1], bytes[1]);
	poison(f);
	chain[0] = (struct shard_pool_record){ root, 0, 4, true };
	chain[1] = (struct shard_pool_record){ child, 4, 4, true };
	assert_int_equal(pool_claim(f, chain, 2, 1, 100, 2, &c), 0);
	assert_int_equal(c.kind, SHARD_JOB_POOL_CLAIM);
	for (uint32_t i = 0; i < 7; i++)
		assert_true(page_matches(f, 100 + i, 1 + i));
	assert_true(row_matches(f, 2, 512));
	assert_int_equal(c.bytes, 7ull * 3 * f->unit + 60000);
	fake_pool_free(&fp);
}

/*
 * A put whose share length is not the file's, or of a key this rank does
 * not hold, fails and sends nothing; without a pool connection every pool
 * job fails with -ENOTSUP, saying so.
 */
static void test_engine_pool_put_refusals(void **state)
{
	struct fixture *f = *state;
	struct fake_pool fp = { .fail_after = -1 };
	struct shard_completion c;
	struct shard_pool_record chain;
	struct rec_key root, missing;

	make_key(&root, 256, 2);
	make_key(&missing, 320, 2);
	assert_int_equal(store(f, &root, NULL, 10, 0, &c), 0);
	assert_int_equal(shard_engine_pool_put(f->engine, ++f->next_job, &root, 1, 4096), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, -ENOTSUP);
	assert_non_null(strstr(c.why, "has no pool connection"));
	chain = (struct shard_pool_record){ root, 0, 4, true };
	assert_int_equal(pool_claim(f, &chain, 1, 0, 100, 2, &c), -ENOTSUP);
	pool_on(f, &fp);
	assert_int_equal(shard_engine_pool_put(f->engine, ++f->next_job, &root, 1, 4096), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, SEL_EMISMATCH);
	assert_non_null(strstr(c.why, "the put's share 4096"));
	assert_int_equal(shard_engine_pool_put(f->engine, ++f->next_job, &missing, 1, 4096), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, -ENOENT);
	assert_int_equal(fp.count, 0);
}

/*
 * A claim that fails midway (the manager killed) fails the job with the
 * connection's reason; one whose stream ends short fails at the end: no
 * claim reports success with a page or the row missing.
 */
static void test_engine_pool_claim_fails_whole(void **state)
{
	struct fixture *f = *state;
	struct fake_pool fp = { .fail_after = -1 };
	struct shard_completion c;
	struct rec_key root, child;
	struct shard_pool_record chain[2];
	uint64_t bytes = rec_geometry_file_bytes(&f->g, 4, true);

	make_key(&root, 256, 3);
	make_key(&child, 512, 3);
	assert_int_equal(store(f, &root, NULL, 10, 0, &c), 0);
	assert_int_equal(store(f, &child, &root, 20, 1, &c), 0);
	pool_on(f, &fp);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(shard_engine_pool_put(f->engine, ++f->next_job, k ? &child : &root,
						       (uint64_t)k, bytes), 0);
		shard_engine_wait(f->engine, &c);
		assert_int_equal(c.result, 0);
	}
	chain[0] = (struct shard_pool_record){ root, 0, 4, true };
	chain[1] = (struct shard_pool_record){ child, 4, 4, true };
	for (int after = 0; after < 6; after++) {
		fp.fail_after = after;
		assert_int_equal(pool_claim(f, chain, 2, 0, 100, 2, &c), -ECONNRESET);
		assert_non_null(strstr(c.why, "the manager went away"));
	}
	fp.fail_after = -1;
	fp.stop_early = true;
	assert_int_equal(pool_claim(f, chain, 2, 0, 100, 2, &c), SEL_EMISMATCH);
	assert_non_null(strstr(c.why, "4 of 8 pages"));
	fp.stop_early = false;
	assert_int_equal(pool_claim(f, chain, 2, 0, 100, 2, &c), 0);
	for (uint32_t i = 0; i < 8; i++)
		assert_true(page_matches(f, 100 + i, i));
	fake_pool_free(&fp);
}

int main(void)
{
#define BOTH(test)                                                      \
	cmocka_unit_test_setup_teardown(test, setup_uring, teardown),   \
	cmocka_unit_test_setup_teardown(test, setup_workers, teardown), \
	cmocka_unit_test_setup_teardown(test, setup_memory, teardown),  \
	cmocka_unit_test_setup_teardown(test, setup_fallback, teardown)
/* Staging grouped plane-major (planes of 8 KiB): on a disk, and memory-backed. */
#define GROUPED(test)                                                            \
	{ #test " (grouped)", test, setup_grouped, teardown, NULL },             \
	{ #test " (grouped, memory-backed)", test, setup_grouped_memory, teardown, NULL }
	const struct CMUnitTest tests[] = {
		BOTH(test_engine_round_trip),
		BOTH(test_engine_chain_and_suffix),
		BOTH(test_engine_corrupt_page),
		BOTH(test_engine_file_cut_while_read),
		BOTH(test_engine_chain_corrupt_page),
		BOTH(test_engine_chain_opens_ahead),
		BOTH(test_engine_fetch_verifies_landed_windows_together),
		BOTH(test_engine_fetch_verifies_groups_in_flight),
		BOTH(test_engine_failed_open_ahead_never_dropped),
		BOTH(test_engine_fetch_mismatch),
		BOTH(test_engine_injected_errors),
		BOTH(test_engine_row_copy_failure),
		BOTH(test_engine_bounded_submission),
		BOTH(test_engine_full_filesystem),
		BOTH(test_engine_many_small_jobs),
		BOTH(test_engine_noop),
		BOTH(test_engine_retire_runs_on_the_transfer_thread),
		BOTH(test_engine_pool_put_and_claim),
		BOTH(test_engine_pool_export_copies_into_registered_staging),
		BOTH(test_engine_pool_put_refusals),
		BOTH(test_engine_pool_claim_fails_whole),
		cmocka_unit_test_setup_teardown(test_engine_two_waiters, setup_uring, teardown),
		BOTH(test_engine_completion_hook),
		cmocka_unit_test_setup_teardown(test_engine_ring_errors, setup_uring, teardown),
		cmocka_unit_test_setup_teardown(test_engine_ring_errors, setup_workers, teardown),
		cmocka_unit_test_setup_teardown(test_engine_ring_errors, setup_memory, teardown),
		BOTH(test_engine_copy_failure_drains_first),
		BOTH(test_engine_fetch_reads_memory_backed_here),
		BOTH(test_engine_staged_copy_entries_per_run),
		GROUPED(test_engine_staged_copy_entries_per_run),
		GROUPED(test_engine_round_trip),
		GROUPED(test_engine_chain_and_suffix),
		GROUPED(test_engine_corrupt_page),
		GROUPED(test_engine_chain_corrupt_page),
		GROUPED(test_engine_fetch_reads_memory_backed_here),
		GROUPED(test_engine_stores_at_once),
		GROUPED(test_engine_pool_put_and_claim),
		GROUPED(test_engine_pool_export_copies_into_registered_staging),
		cmocka_unit_test_setup_teardown(test_engine_staging_group_slots_from_env,
						setup_grouped, teardown),
		cmocka_unit_test_setup_teardown(test_engine_window_pages_from_env, setup_grouped,
						teardown),
		BOTH(test_engine_restore_before_queued_stores),
		BOTH(test_engine_yielded_store_failure),
		BOTH(test_engine_restore_during_slow_commit),
		BOTH(test_engine_stores_at_once),
		BOTH(test_engine_same_key_stores_in_turn),
		BOTH(test_engine_failure_among_stores),
		BOTH(test_engine_fetch_copies_overlap),
		BOTH(test_engine_stores_on_deferred_device),
		BOTH(test_engine_store_pipeline_sync_failure),
		BOTH(test_engine_store_pipeline_settles_before_fetch),
		BOTH(test_engine_store_pipeline_stops_at_own_failure),
		cmocka_unit_test_setup_teardown(test_engine_default_io_workers, setup_uring, teardown),
		BOTH(test_engine_default_stores_max),
		cmocka_unit_test_setup_teardown(test_engine_open_refuses_bad_options, setup_uring,
						teardown),
	};
#undef BOTH
#undef GROUPED

	return cmocka_run_group_tests_name("engine", tests, NULL, NULL);
}
