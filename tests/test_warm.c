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
#include "coordinator/metrics.h"
#include "coordinator/warm.h"
#include "record/disk.h"
#include "record/format.h"
#include "record/key.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/engine.h"
#include "shard/slab.h"
#include "shard/warm.h"
#include "selene/store.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * Page planes of 5000 bytes (padded to 8 KiB: warm slots of one page
 * record each, G = 1), or of 8192 (setup_grouped: warm slots in groups,
 * plane-major). The slots are 24 KiB either way.
 */
#define PAGE_BYTES 5000u
#define PAGE_BYTES_GROUPED 8192u
#define ROW_BYTES 60000u
#define SLOT_BYTES 24576u /* 3 planes of 5000 bytes, each padded to 8 KiB */
#define ROW_PIECES 3u     /* a 60000-byte row in 24 KiB slots */
#define PLANES_MAX 16u    /* page planes a fixture may have (setup_planes) */

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_dir *dir;
	struct shard_device *dev;
	struct shard_engine *engine;
	struct shard_planes planes;
	uint8_t *plane_memory[PLANES_MAX];
	uint8_t *row_memory;
	uint64_t next_job;
	uint32_t stores_max; /* 0: the engine's default */
	uint32_t window_pages; /* 0: 4 */
	uint32_t plane_count;  /* 3, or setup_planes' */
	uint64_t plane_bytes[PLANES_MAX]; /* each page plane's: PAGE_BYTES, or see the setups */
	struct shard_device *host; /* the host device while a test's own one is in dev */
};

static int engine_open(struct fixture *f, uint64_t warm_bytes, char *err, size_t err_size)
{
	struct shard_engine_options options = {
		.geometry = &f->g, .dir = f->dir, .device = f->dev,
		.planes = &f->planes, .window_pages = f->window_pages ? f->window_pages : 4,
		.jobs_max = 8,
		.checksum_threads = 2, .io_workers = SHARD_IO_WORKERS_NONE,
		.warm_bytes = warm_bytes, .register_pool = true, .stores_max = f->stores_max,
	};

	return shard_engine_open(&options, &f->engine, err, err_size);
}

static void open_engine(struct fixture *f, uint64_t warm_bytes)
{
	char err[256];

	if (engine_open(f, warm_bytes, err, sizeof(err)) != 0)
		fail_msg("engine: %s", err);
}

/*
 * Opens the engine with a warm tier of 64 slots on dev, a test's own
 * device (the caller's, valid until close_engine_on), in place of the
 * host device.
 */
static void open_engine_on(struct fixture *f, struct shard_device *dev)
{
	f->host = f->dev;
	f->dev = dev;
	open_engine(f, 64ull * SLOT_BYTES);
}

/* Closes the engine open_engine_on opened, and puts the host device back. */
static void close_engine_on(struct fixture *f)
{
	shard_engine_close(f->engine);
	f->engine = NULL;
	f->dev = f->host;
	f->host = NULL;
}

/*
 * The fixture for plane_count page planes of units and page_count pages,
 * its directory in a new temporary directory under tmp_base (NULL: TMPDIR
 * or /tmp).
 */
static int setup_planes(void **state, const uint64_t *units, uint32_t plane_count,
			uint32_t page_count, const char *tmp_base)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct rec_plane planes[PLANES_MAX];
	struct rec_geometry_spec spec = {
		.page_tokens = 64, .page_plane_count = plane_count, .page_planes = planes,
		.row_plane = { .name = "state", .unit_bytes = ROW_BYTES },
		.page_count = page_count, .row_count = 8, .rank = 1, .world_size = 2,
	};
	struct rec_scan scan;
	char *tmp = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
	char err[256];

	SEL_ASSERT(plane_count <= PLANES_MAX);
	f->plane_count = plane_count;
	for (uint32_t p = 0; p < plane_count; p++) {
		f->plane_bytes[p] = units[p];
		planes[p] = (struct rec_plane){ .unit_bytes = units[p] };
		snprintf(planes[p].name, sizeof(planes[p].name), "plane.%03u", p);
	}
	if (rec_geometry_init(&f->g, &spec, err, sizeof(err)) != 0)
		fail_msg("geometry: %s", err);
	if (tmp_base)
		setenv("TMPDIR", tmp_base, 1);
	f->base = tu_make_temp_dir("warm");
	if (tmp_base && tmp)
		setenv("TMPDIR", tmp, 1);
	else if (tmp_base)
		unsetenv("TMPDIR");
	free(tmp);
	tu_identities(NULL, &f->ns);
	f->dir = tu_dir_open(f->base, &f->g, true);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	assert_int_equal(shard_device_open_host(&f->dev), 0);
	for (uint32_t p = 0; p < plane_count; p++) {
		f->plane_memory[p] = tu_alloc(f->plane_bytes[p] * page_count);
		f->planes.page_base[p] = (uintptr_t)f->plane_memory[p];
	}
	f->row_memory = tu_alloc((size_t)ROW_BYTES * f->g.row_count);
	f->planes.row_base = (uintptr_t)f->row_memory;
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

/* setup_planes for three page planes of units and 200 pages. */
static int setup_with(void **state, const uint64_t units[3], const char *tmp_base)
{
	return setup_planes(state, units, 3, 200, tmp_base);
}

static int setup(void **state)
{
	return setup_with(state, (const uint64_t[3]){ PAGE_BYTES, PAGE_BYTES, PAGE_BYTES },
			  NULL);
}

/* Page planes of 4 KiB multiples: warm slots grouped plane-major. */
static int setup_grouped(void **state)
{
	const uint64_t units[3] = { PAGE_BYTES_GROUPED, PAGE_BYTES_GROUPED,
				    PAGE_BYTES_GROUPED };

	return setup_with(state, units, NULL);
}

/* The same in a memory-backed directory: the verifying threads read the pages. */
static int setup_grouped_shm(void **state)
{
	const uint64_t units[3] = { PAGE_BYTES_GROUPED, PAGE_BYTES_GROUPED,
				    PAGE_BYTES_GROUPED };

	return setup_with(state, units, access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL);
}

/* Page planes of unequal strides (8, 4 and 8 KiB): G = 1, slots of 20 KiB. */
static int setup_uneven(void **state)
{
	return setup_with(state, (const uint64_t[3]){ 8192, 4096, 8192 }, NULL);
}

/*
 * Sixteen page planes of 4 KiB (warm slots of 64 KiB, grouped), 480
 * pages, and windows of 33: a window's copy entries (528) are not a
 * power of two times one page's (16).
 */
static int setup_many_planes(void **state)
{
	uint64_t units[PLANES_MAX];
	int ret;

	for (uint32_t p = 0; p < PLANES_MAX; p++)
		units[p] = 4096;
	ret = setup_planes(state, units, PLANES_MAX, 480, NULL);
	((struct fixture *)*state)->window_pages = 33;
	return ret;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_failpoints_configure(NULL);
	sel_log_set_level(SEL_LOG_INFO);
	if (f->host) /* a test failed on its own device: that device is gone */
		close_engine_on(f);
	shard_engine_close(f->engine);
	shard_device_close(f->dev);
	rec_dir_close(f->dir);
	for (uint32_t p = 0; p < f->plane_count; p++)
		free(f->plane_memory[p]);
	free(f->row_memory);
	tu_remove_tree(f->base);
	free(f);
	return 0;
}

static void fill_page(struct fixture *f, uint32_t id, uint64_t prefix_index)
{
	for (uint32_t p = 0; p < f->plane_count; p++)
		tu_fill(f->plane_memory[p] + f->plane_bytes[p] * id, f->plane_bytes[p],
			prefix_index * 16 + p);
}

static bool page_matches(struct fixture *f, uint32_t id, uint64_t prefix_index)
{
	uint8_t expect[PAGE_BYTES_GROUPED];

	for (uint32_t p = 0; p < f->plane_count; p++) {
		tu_fill(expect, f->plane_bytes[p], prefix_index * 16 + p);
		if (memcmp(expect, f->plane_memory[p] + f->plane_bytes[p] * id,
			   f->plane_bytes[p]) != 0)
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
	for (uint32_t p = 0; p < f->plane_count; p++)
		memset(f->plane_memory[p], 0xee, f->plane_bytes[p] * f->g.page_count);
	memset(f->row_memory, 0xee, (size_t)ROW_BYTES * f->g.row_count);
}

static void make_key(struct rec_key *key, uint64_t consumed, uint8_t tag)
{
	key->consumed = consumed;
	memset(key->digest.bytes, tag, sizeof(key->digest.bytes));
	key->digest.bytes[0] = (uint8_t)consumed;
}

/* A store job and the header and page ids it points to (store_prepare). */
struct store_parts {
	struct rec_header header;
	uint32_t ids[200];
	struct shard_store_job job;
};

/*
 * Prepares p as a store of pages [parent's, key's) from ids base_id + i as
 * mode (enum shard_store_warm) says, and writes those pages' bytes and
 * slot's row as page_matches and row_matches expect them; p->job is valid
 * while p is, to submit (again) later.
 */
static void store_prepare(struct fixture *f, struct store_parts *p, const struct rec_key *key,
			  const struct rec_key *parent, uint32_t base_id, uint32_t slot,
			  uint8_t mode)
{
	uint32_t first = parent ? (uint32_t)(parent->consumed / 64) : 0;
	uint32_t tail = (uint32_t)(key->consumed / 64) - first;

	SEL_ASSERT(tail <= 200);
	for (uint32_t i = 0; i < tail; i++) {
		p->ids[i] = base_id + i;
		fill_page(f, p->ids[i], first + i);
	}
	tu_fill(f->row_memory + (uint64_t)ROW_BYTES * slot, ROW_BYTES, key->consumed);
	assert_int_equal(rec_header_init(&p->header, &f->g, &f->ns, key, parent, &key->digest,
					 first, tail, 99), 0);
	p->job = (struct shard_store_job){ .header = &p->header, .page_ids = p->ids,
					   .state_slot = slot, .warm = mode };
}

/*
 * Submits a store of pages [parent's, key's) from ids base_id + i as mode
 * says (store_prepare), without waiting: its job id is f->next_job.
 * Returns the submission's result.
 */
static int store_submit(struct fixture *f, const struct rec_key *key,
			const struct rec_key *parent, uint32_t base_id, uint32_t slot,
			uint8_t mode)
{
	struct store_parts p;

	store_prepare(f, &p, key, parent, base_id, slot, mode);
	return shard_engine_store(f->engine, ++f->next_job, &p.job);
}

/* Stores pages [parent's, key's) from ids base_id + i as mode (enum shard_store_warm) says. */
static int store_as(struct fixture *f, const struct rec_key *key, const struct rec_key *parent,
		    uint32_t base_id, uint32_t slot, uint8_t mode)
{
	struct shard_completion c;
	int ret = store_submit(f, key, parent, base_id, slot, mode);

	if (ret)
		return ret;
	shard_engine_wait(f->engine, &c);
	return c.result;
}

/* Stores pages [parent's, key's) from ids base_id + i, warm (its file too) when asked. */
static int store(struct fixture *f, const struct rec_key *key, const struct rec_key *parent,
		 uint32_t base_id, uint32_t slot, bool warm)
{
	return store_as(f, key, parent, base_id, slot,
			warm ? SHARD_STORE_WARM : SHARD_STORE_COLD);
}

/*
 * Stores a cold chain of three: a (7 pages), b (5 more), c (4 more and a
 * partial one); chain says where each starts and how long it is.
 */
static void store_cold_chain(struct fixture *f, struct rec_key *a, struct rec_key *b,
			     struct rec_key *c, struct shard_chain_record chain[3])
{
	make_key(a, 64 * 7, 1);
	make_key(b, 64 * 12, 2);
	make_key(c, 64 * 16 + 5, 3);
	assert_int_equal(store(f, a, NULL, 10, 1, false), 0);
	assert_int_equal(store(f, b, a, 20, 2, false), 0);
	assert_int_equal(store(f, c, b, 30, 3, false), 0);
	chain[0] = (struct shard_chain_record){ *a, 0, 7 };
	chain[1] = (struct shard_chain_record){ *b, 7, 5 };
	chain[2] = (struct shard_chain_record){ *c, 12, 4 };
}

/* Fetches chain, skipping skip pages, into ids base_id.. and slot; read-through when asked. */
static int fetch_rt(struct fixture *f, const struct shard_chain_record *chain, uint32_t count,
		    uint32_t skip, uint32_t base_id, uint32_t slot, bool read_through)
{
	uint32_t ids[200], pages = 0;
	struct shard_fetch_job job = { .chain = chain, .chain_count = count,
				       .skip_pages = skip, .page_ids = ids, .state_slot = slot,
				       .read_through = read_through };
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

static int fetch(struct fixture *f, const struct shard_chain_record *chain, uint32_t count,
		 uint32_t skip, uint32_t base_id, uint32_t slot)
{
	return fetch_rt(f, chain, count, skip, base_id, slot, false);
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

/* Fetches chain with every file open and read failing; none may be tried. */
static void fetch_reading_no_file(struct fixture *f, const struct shard_chain_record *chain,
				  uint32_t count, uint32_t skip)
{
	fail_file_reads();
	assert_int_equal(fetch(f, chain, count, skip, 100, 4), 0);
	assert_false(files_were_read());
	sel_failpoints_configure(NULL);
}

/* Pages [0, pages) at ids 100.. and the row of consumed in slot are restored. */
static void check_restored(struct fixture *f, uint32_t pages, uint32_t slot, uint64_t consumed)
{
	for (uint32_t i = 0; i < pages; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, slot, consumed));
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
		fetch_reading_no_file(f, chain, 2, skip);
		for (uint32_t i = skip; i < 12; i++)
			assert_true(page_matches(f, 100 + i - skip, i));
		assert_true(row_matches(f, 4, b.consumed));
		assert_int_equal(f->plane_memory[1][f->plane_bytes[1] * 99], 0xee);
		assert_int_equal(f->plane_memory[1][f->plane_bytes[1] * (112 - skip)], 0xee);
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
	check_restored(f, 12, 4, b.consumed);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 0);
	assert_int_equal(ws.slots_used, 0);
	assert_int_equal(ws.drops, 2);
}

/*
 * A warm fetch waits for the device once: its pages (in calls of one page,
 * then twice as many, up to a window) and the last record's row are issued
 * back to back on a device whose copies run only at synchronize, and one
 * synchronize restores them all byte-exact; a failed one fails the fetch.
 * A fetch warm in part issues its warm pages in the same growing calls.
 */
static void test_warm_fetch_one_wait(void **state)
{
	struct fixture *f = *state;
	struct tu_deferred_device d;
	struct rec_key a, b;
	struct shard_chain_record chain[2];
	struct shard_warm_stats ws;
	uint32_t syncs, calls;
	uint64_t hits;

	tu_deferred_device_init(&d);
	open_engine_on(f, &d.base);
	make_key(&a, 64 * 7, 1);
	make_key(&b, 64 * 12 + 3, 2);
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	assert_int_equal(store(f, &b, &a, 17, 2, true), 0);
	chain[0] = (struct shard_chain_record){ a, 0, 7 };
	chain[1] = (struct shard_chain_record){ b, 7, 5 };
	poison(f);
	syncs = d.synchronize_calls;
	calls = d.copy_calls;
	assert_int_equal(fetch(f, chain, 2, 0, 100, 4), 0);
	assert_int_equal(d.synchronize_calls - syncs, 1);
	/* windows of 4 pages (4 + 3, 4 + 1), the first in calls of 1, 2, 1; the row */
	assert_int_equal(d.copy_calls - calls, 7);
	check_restored(f, 12, 4, b.consumed);
	poison(f);
	d.fail_synchronize_at = d.synchronize_calls + 1;
	shard_engine_warm_stats(f->engine, &ws);
	hits = ws.hits;
	assert_int_equal(fetch(f, chain, 2, 0, 100, 4), -EIO);
	assert_int_equal(f->plane_memory[0][f->plane_bytes[0] * 100], 0xee);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.hits, hits); /* a failed restore is no hit */
	assert_int_equal(fetch(f, chain, 2, 0, 100, 4), 0);
	assert_true(row_matches(f, 4, b.consumed));
	/* Warm in part: a's pages go in calls of 1, 2, 1 and 3 pages as well. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &b), 0);
	poison(f);
	calls = d.copy_calls;
	assert_int_equal(fetch(f, chain, 2, 0, 100, 4), 0);
	/* and b's windows (4 + 1 pages) from staging, then its row */
	assert_int_equal(d.copy_calls - calls, 4 + 2 + 1);
	check_restored(f, 12, 4, b.consumed);
	close_engine_on(f);
}

/* Pages [skip, 16) of the three-record chain at ids 100.. and c's row in slot 4. */
static void check_chain(struct fixture *f, uint32_t skip, const struct rec_key *last)
{
	for (uint32_t i = skip; i < 16; i++)
		if (!page_matches(f, 100 + i - skip, i))
			fail_msg("page %u differs", i);
	assert_true(row_matches(f, 4, last->consumed));
}

/*
 * A read-through copies each window from the warm slots it was read into
 * without waiting for that copy: on a device whose copies run only at a
 * synchronize, a chain of five windows read through is waited for once
 * for its pages (and once for its row), and restores byte-exact.
 */
static void test_warm_read_through_waits_once(void **state)
{
	struct fixture *f = *state;
	struct tu_deferred_device d;
	struct rec_key a, b, c;
	struct shard_chain_record chain[3];
	struct shard_warm_stats ws;
	uint32_t syncs;

	tu_deferred_device_init(&d);
	open_engine_on(f, &d.base);
	store_cold_chain(f, &a, &b, &c, chain);
	poison(f);
	syncs = d.synchronize_calls;
	assert_int_equal(fetch_rt(f, chain, 3, 0, 100, 4, true), 0);
	/* windows of 4 pages: 4 + 3, 4 + 1, 4; then the row's copy */
	assert_int_equal(d.synchronize_calls - syncs, 2);
	check_chain(f, 0, &c);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 3);
	close_engine_on(f);
}

/*
 * Read-through on the engine: a cold chain read with read_through lands in
 * warm slots (pages of every record, the last one's row) and restores
 * again with every file read failing; a chain warm in part restores its
 * warm records from slots and the rest from files, byte-exact at every
 * skip; a record the fetch does not read whole (pages skipped) stays cold.
 */
static void test_warm_read_through_engine(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, b, c;
	struct shard_chain_record chain[3];
	struct shard_warm_stats ws;

	open_engine(f, 64ull * SLOT_BYTES);
	store_cold_chain(f, &a, &b, &c, chain);
	poison(f);
	assert_int_equal(fetch_rt(f, chain, 3, 0, 100, 4, true), 0);
	check_chain(f, 0, &c);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 3);
	assert_int_equal(ws.records, 3);
	assert_int_equal(ws.slots_used, 16 + ROW_PIECES);
	assert_int_equal(ws.read_through_bytes, (16ull + ROW_PIECES) * SLOT_BYTES);
	/* Served from the slots now: no file is opened or read. */
	poison(f);
	fetch_reading_no_file(f, chain, 3, 0);
	check_chain(f, 0, &c);
	/* b leaves the tier: a and c from slots, b from its file, at every skip. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &b), 0);
	for (uint32_t skip = 0; skip <= 15; skip += 3) {
		poison(f);
		assert_int_equal(fetch(f, chain, 3, skip, 100, 4), 0);
		check_chain(f, skip, &c);
	}
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.partial_hits, 6);
	assert_int_equal(ws.records, 2);
	/* Skipping into b: b is not read whole, so it stays cold. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &c), 0);
	poison(f);
	assert_int_equal(fetch_rt(f, chain, 3, 9, 100, 4, true), 0);
	check_chain(f, 9, &c);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 4); /* c only */
	assert_int_equal(ws.records, 2);
	/* Read whole, b goes in too; then the whole chain is warm. */
	poison(f);
	assert_int_equal(fetch_rt(f, chain, 3, 0, 100, 4, true), 0);
	check_chain(f, 0, &c);
	poison(f);
	fetch_reading_no_file(f, chain, 3, 0);
	check_chain(f, 0, &c);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 5);
	assert_int_equal(ws.records, 3);
	assert_int_equal(ws.slots_used, 16 + ROW_PIECES);
}

/*
 * A read-through that fails (a page's checksum, a read's EIO) fails the
 * fetch as without a warm tier and gives its slots back zeroed; the same
 * records read through once the file is good again; a chain larger than
 * the free slots streams through staging and stays cold.
 */
static void test_warm_read_through_fails(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, b;
	struct shard_chain_record chain[2];
	struct shard_warm_stats ws;
	struct rec_header h;
	char *path;

	open_engine(f, (12ull + ROW_PIECES) * SLOT_BYTES);
	make_key(&a, 64 * 7, 1);
	make_key(&b, 64 * 12, 2);
	assert_int_equal(store(f, &a, NULL, 10, 1, false), 0);
	assert_int_equal(store(f, &b, &a, 20, 2, false), 0);
	chain[0] = (struct shard_chain_record){ a, 0, 7 };
	chain[1] = (struct shard_chain_record){ b, 7, 5 };
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &b, &a, &b.digest, 7, 5, 99), 0);
	path = tu_record_path(f->dir, &b);
	tu_flip_bit(path, h.page_offset + h.page_stride * 3 + 100);
	assert_int_equal(fetch_rt(f, chain, 2, 0, 100, 4, true), SEL_ECHECKSUM);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_failures, 2);
	assert_int_equal(ws.read_throughs, 0);
	assert_int_equal(ws.records, 0);
	assert_int_equal(ws.slots_used, 0);
	tu_flip_bit(path, h.page_offset + h.page_stride * 3 + 100);
	free(path);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_not_equal(fetch_rt(f, chain, 2, 0, 100, 4, true), 0);
	sel_failpoints_configure(NULL);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_failures, 4);
	assert_int_equal(ws.slots_used, 0);
	poison(f);
	assert_int_equal(fetch_rt(f, chain, 2, 0, 100, 4, true), 0);
	check_restored(f, 12, 4, b.consumed);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 2);
	assert_int_equal(ws.slots_used, 12 + ROW_PIECES);
	/* A third record finds no slots free: it streams, cold, and restores. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &b), 0);
	make_key(&b, 64 * 13, 4);
	assert_int_equal(store(f, &b, &a, 40, 2, false), 0);
	chain[1] = (struct shard_chain_record){ b, 7, 6 };
	poison(f);
	assert_int_equal(fetch_rt(f, chain, 2, 0, 100, 4, true), 0);
	check_restored(f, 13, 4, b.consumed);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 2);
	assert_int_equal(ws.read_fallbacks, 1);
	assert_int_equal(ws.records, 1);
}

/*
 * A chain warm in part whose device copy fails (the first, of a warm
 * record's slots, or a later one, of a window read from a file) fails the
 * fetch with the reason, counts no partial hit, gives the read-through's
 * slots back and keeps the warm record; the same fetch then restores.
 */
static void test_warm_partial_fetch_copy_fails(void **state)
{
	static const char *const faults[] = { "device.copy=1*return(EIO)",
					      "device.copy=1*off->1*return(EIO)" };
	struct fixture *f = *state;
	struct rec_key a, b;
	struct shard_chain_record chain[2];
	struct shard_warm_stats ws;

	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 7, 1);
	make_key(&b, 64 * 12, 2);
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	assert_int_equal(store(f, &b, &a, 20, 2, false), 0);
	chain[0] = (struct shard_chain_record){ a, 0, 7 };
	chain[1] = (struct shard_chain_record){ b, 7, 5 };
	for (uint32_t i = 0; i < 2; i++) {
		poison(f);
		assert_int_equal(sel_failpoints_configure(faults[i]), 0);
		assert_int_equal(fetch_rt(f, chain, 2, 0, 100, 4, true), -EIO);
		sel_failpoints_configure(NULL);
		shard_engine_warm_stats(f->engine, &ws);
		assert_int_equal(ws.partial_hits, 0);
		assert_int_equal(ws.read_failures, i + 1);
		assert_int_equal(ws.read_throughs, 0);
		assert_int_equal(ws.records, 1);
		assert_int_equal(ws.slots_used, 7 + ROW_PIECES);
	}
	poison(f);
	assert_int_equal(fetch_rt(f, chain, 2, 0, 100, 4, true), 0);
	check_restored(f, 12, 4, b.consumed);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.partial_hits, 1);
	assert_int_equal(ws.read_throughs, 1);
	assert_int_equal(ws.records, 2);
	poison(f);
	fetch_reading_no_file(f, chain, 2, 0);
	check_restored(f, 12, 4, b.consumed);
}

/*
 * A warm store (its file too, or warm only) whose device copy fails (its
 * pages', or its row's) fails with EIO, holds no slot, leaves no
 * file and is not found; the same store then succeeds, warm, and restores
 * reading no file.
 */
static void test_warm_store_copy_fails(void **state)
{
	static const char *const faults[] = { "device.copy=1*return(EIO)",
					      "device.copy=1*off->1*return(EIO)" };
	static const uint8_t modes[] = { SHARD_STORE_WARM, SHARD_STORE_WARM_ONLY };
	struct fixture *f = *state;
	struct shard_chain_record chain;
	struct shard_warm_stats ws;
	struct rec_key a;

	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 3, 1);
	chain = (struct shard_chain_record){ a, 0, 3 };
	for (uint32_t m = 0; m < 2; m++) {
		for (uint32_t i = 0; i < 2; i++) {
			assert_int_equal(sel_failpoints_configure(faults[i]), 0);
			assert_int_equal(store_as(f, &a, NULL, 10, 1, modes[m]), -EIO);
			sel_failpoints_configure(NULL);
			shard_engine_warm_stats(f->engine, &ws);
			assert_int_equal(ws.records, 0);
			assert_int_equal(ws.slots_used, 0);
			assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
			assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
			assert_int_not_equal(fetch(f, &chain, 1, 0, 100, 4), 0);
		}
		assert_int_equal(store_as(f, &a, NULL, 10, 1, modes[m]), 0);
		shard_engine_warm_stats(f->engine, &ws);
		assert_int_equal(ws.records, 1);
		assert_int_equal(ws.slots_used, 3 + ROW_PIECES);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"),
				 modes[m] == SHARD_STORE_WARM);
		poison(f);
		fetch_reading_no_file(f, &chain, 1, 0);
		check_restored(f, 3, 4, a.consumed);
		assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
		if (modes[m] == SHARD_STORE_WARM)
			assert_int_equal(key_job(f, SHARD_JOB_UNLINK, &a), 0);
	}
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.stores, 2);
	assert_int_equal(ws.slots_used, 0);
}

/*
 * A warm store's row is copied behind its last window's pages and settled
 * with them: on a device whose copies run only when awaited, one wait per
 * window and none for the row alone, and the row in its slots and its
 * file is the device's; a failed wait for the last window and the row
 * fails the store, which then holds no slot and leaves no file.
 */
static void test_warm_store_row_with_last_window(void **state)
{
	static const uint8_t modes[] = { SHARD_STORE_WARM, SHARD_STORE_WARM_ONLY };
	struct fixture *f = *state;
	struct tu_deferred_device d;
	struct shard_chain_record chain;
	struct shard_warm_stats ws;
	struct rec_key a;
	uint32_t syncs;

	tu_deferred_device_init(&d);
	open_engine_on(f, &d.base);
	make_key(&a, 64 * 7, 1);
	chain = (struct shard_chain_record){ a, 0, 7 };
	for (uint32_t m = 0; m < 2; m++) {
		syncs = d.synchronize_calls;
		assert_int_equal(store_as(f, &a, NULL, 10, 1, modes[m]), 0);
		/* windows of 4 and 3 pages, the row behind the second */
		assert_int_equal(d.synchronize_calls - syncs, 2);
		poison(f);
		fetch_reading_no_file(f, &chain, 1, 0);
		check_restored(f, 7, 4, a.consumed);
		assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
		if (modes[m] == SHARD_STORE_WARM) {
			poison(f);
			assert_int_equal(fetch(f, &chain, 1, 0, 100, 4), 0); /* from its file */
			check_restored(f, 7, 4, a.consumed);
			assert_int_equal(key_job(f, SHARD_JOB_UNLINK, &a), 0);
		}
	}
	d.fail_synchronize_at = d.synchronize_calls + 2;
	assert_int_equal(store_as(f, &a, NULL, 10, 1, SHARD_STORE_WARM), -EIO);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.slots_used, 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	assert_int_equal(store_as(f, &a, NULL, 10, 1, SHARD_STORE_WARM), 0);
	poison(f);
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 7, 4, a.consumed);
	close_engine_on(f);
}

/*
 * The stores' window copies are counted apart (store_copies, issue, wait,
 * and those a checksum pass overlapped): a warm-only store of 5 windows,
 * which hashes nothing, copies 5 windows none of them overlapped; a
 * store that writes its file alone hashes each window while the next one
 * copies, so some of its copies are overlapped, never its first; issue
 * and wait are parts of the copy time.
 */
static void test_warm_store_copies_counted(void **state)
{
	static const uint8_t modes[] = { SHARD_STORE_WARM_ONLY, SHARD_STORE_WARM };
	struct fixture *f = *state;
	struct tu_deferred_device d;
	struct shard_engine_stats before, after;
	struct rec_key a;

	tu_deferred_device_init(&d);
	open_engine_on(f, &d.base);
	make_key(&a, 64 * 20, 1); /* windows of 4 pages: 5 */
	for (uint32_t m = 0; m < 2; m++) {
		uint64_t copies, overlapped;

		shard_engine_stats(f->engine, &before);
		assert_int_equal(store_as(f, &a, NULL, 10, 1, modes[m]), 0);
		shard_engine_stats(f->engine, &after);
		copies = after.store_copies - before.store_copies;
		overlapped = after.store_copies_overlapped - before.store_copies_overlapped;
		assert_int_equal(copies, 5);
		if (modes[m] == SHARD_STORE_WARM_ONLY)
			assert_int_equal(overlapped, 0);
		else
			assert_true(overlapped >= 1 && overlapped < copies);
		assert_true(after.store_copy_wait_ns > before.store_copy_wait_ns);
		assert_true(after.store_copy_issue_ns + after.store_copy_wait_ns -
				    before.store_copy_issue_ns - before.store_copy_wait_ns <=
			    after.store_copy_ns - before.store_copy_ns);
		assert_true(after.store_copy_gap_ns >= before.store_copy_gap_ns);
		assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
		if (modes[m] == SHARD_STORE_WARM)
			assert_int_equal(key_job(f, SHARD_JOB_UNLINK, &a), 0);
	}
	close_engine_on(f);
}

/*
 * A deferred device (testutil.h) that logs its calls in order ('c' a copy
 * call, 'w' a wait for a mark, 's' a synchronize) and fails the wait that
 * covers the first copy to device address bad (0: none), running none of
 * the copies that wait covers, as a failed stream's.
 */
struct order_device {
	struct tu_deferred_device d; /* first: the ops take it for the device */
	const struct shard_device_ops *inner;
	struct shard_device_ops ops;
	char log[512];
	uint32_t count;
	uintptr_t bad;
	uint64_t bad_at; /* the bad copy's place in the queue's order, or UINT64_MAX */
};

static void order_note(struct order_device *o, char what)
{
	if (o->count + 1 < sizeof(o->log))
		o->log[o->count++] = what;
}

static int order_copy(struct shard_device *dev, enum shard_copy_direction dir,
		      const struct shard_copy *copies, uint32_t count)
{
	struct order_device *o = (struct order_device *)dev;

	for (uint32_t i = 0; i < count && o->bad_at == UINT64_MAX; i++)
		if (o->bad && copies[i].device_address == o->bad)
			o->bad_at = o->d.consumed + o->d.queued_count + i;
	order_note(o, 'c');
	return o->inner->copy(dev, dir, copies, count);
}

/* Arms the deferred device's failure when the wait up to target covers the bad copy. */
static void order_arm(struct order_device *o, uint64_t target)
{
	if (o->bad_at >= o->d.consumed && o->bad_at < target) {
		o->d.fail_synchronize_at = o->d.synchronize_calls + 1;
		o->bad_at = UINT64_MAX - 1; /* failed once */
	}
}

static int order_synchronize(struct shard_device *dev)
{
	struct order_device *o = (struct order_device *)dev;

	order_note(o, 's');
	order_arm(o, o->d.consumed + o->d.queued_count);
	return o->inner->synchronize(dev);
}

static int order_wait_mark(struct shard_device *dev, uint32_t mark)
{
	struct order_device *o = (struct order_device *)dev;

	order_note(o, 'w');
	order_arm(o, o->d.marks[mark]);
	return o->inner->wait_mark(dev, mark);
}

static void order_device_init(struct order_device *o, uintptr_t bad)
{
	memset(o, 0, sizeof(*o));
	tu_deferred_device_init(&o->d);
	o->inner = o->d.base.ops;
	o->ops = *o->inner;
	o->ops.copy = order_copy;
	o->ops.synchronize = order_synchronize;
	o->ops.wait_mark = order_wait_mark;
	o->d.base.ops = &o->ops;
	o->bad = bad;
	o->bad_at = UINT64_MAX;
}

/*
 * A warm store's window copies are pipelined (docs/DESIGN.md section 6):
 * a warm-only store of 3 windows on a device whose copies run only when
 * awaited issues its second window's copies before it waits for the
 * first's, waits for each window by its own mark, the stats count the
 * windows waited for with the next one issued, and it restores
 * byte-exact from its slots.
 */
static void test_warm_store_windows_pipelined(void **state)
{
	struct fixture *f = *state;
	struct order_device o;
	struct shard_engine_stats before, after;
	struct shard_chain_record chain;
	struct rec_key a;
	uint32_t from;

	order_device_init(&o, 0);
	open_engine_on(f, &o.d.base);
	make_key(&a, 64 * 12, 1); /* windows of 4 pages: 3 */
	shard_engine_stats(f->engine, &before);
	from = o.count;
	assert_int_equal(store_as(f, &a, NULL, 10, 1, SHARD_STORE_WARM_ONLY), 0);
	shard_engine_stats(f->engine, &after);
	o.log[o.count] = '\0';
	/* c c w: the second window issued before the first's wait; then its row with the third. */
	assert_string_equal(o.log + from, "ccwccww");
	assert_int_equal(after.store_copies - before.store_copies, 3);
	assert_int_equal(after.store_copies_pipelined - before.store_copies_pipelined, 2);
	assert_int_equal(after.store_copies_alone - before.store_copies_alone, 1);
	poison(f);
	chain = (struct shard_chain_record){ a, 0, 12 };
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 12, 4, a.consumed);
	close_engine_on(f);
}

/*
 * A failed copy in a warm store's second window fails that store alone:
 * two warm-only stores of 3 windows at once, their windows pipelined
 * behind one another, the copy to page id 14 (a's second window's first
 * page) failing when its window is waited for. a fails with the device's
 * reason and holds no warm slot after; b commits and restores
 * byte-exact; a stores again after and restores byte-exact too.
 */
static void test_warm_store_window_failure_is_its_own(void **state)
{
	struct fixture *f = *state;
	struct order_device o;
	struct rec_key keys[2];
	struct store_parts parts[2];
	struct shard_chain_record chain;
	struct shard_warm_stats ws;
	struct shard_completion c;
	int result[2] = { 1, 1 };
	uint32_t b_slots;

	order_device_init(&o, (uintptr_t)(f->plane_memory[0] + f->plane_bytes[0] * 14));
	f->stores_max = 2;
	open_engine_on(f, &o.d.base);
	for (uint32_t k = 0; k < 2; k++) {
		make_key(&keys[k], 64 * 12, (uint8_t)(1 + k));
		store_prepare(f, &parts[k], &keys[k], NULL, 10 + 20 * k, 1 + k,
			      SHARD_STORE_WARM_ONLY);
	}
	/* Both queued before either starts: the transfer thread held at a's first copy. */
	__atomic_store_n(&o.d.gate_at, o.d.copy_calls + 1, __ATOMIC_RELEASE);
	assert_int_equal(shard_engine_store(f->engine, ++f->next_job, &parts[0].job), 0);
	tu_deferred_gate_wait(&o.d);
	assert_int_equal(shard_engine_store(f->engine, ++f->next_job, &parts[1].job), 0);
	__atomic_store_n(&o.d.gate_at, 0, __ATOMIC_RELEASE);
	for (uint32_t i = 0; i < 2; i++) {
		shard_engine_wait(f->engine, &c);
		result[c.job_id - f->next_job + 1] = c.result;
		if (c.result)
			assert_non_null(strstr(c.why, "device copy device to host failed"));
	}
	assert_int_equal(o.bad_at, UINT64_MAX - 1); /* the bad copy's wait failed */
	assert_int_equal(result[0], -EIO);
	assert_int_equal(result[1], 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 1);
	b_slots = ws.slots_used;
	poison(f);
	chain = (struct shard_chain_record){ keys[1], 0, 12 };
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 12, 4, keys[1].consumed);
	/* its pages and row were poisoned with the rest */
	store_prepare(f, &parts[0], &keys[0], NULL, 10, 1, SHARD_STORE_WARM_ONLY);
	assert_int_equal(shard_engine_store(f->engine, ++f->next_job, &parts[0].job), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
	poison(f);
	chain = (struct shard_chain_record){ keys[0], 0, 12 };
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 12, 4, keys[0].consumed);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.slots_used, 2 * b_slots); /* a failed held none */
	close_engine_on(f);
}

/* Polls (until deadline_ns, monotonic) until d has had count copy calls: whether it has. */
static bool copy_calls_reach(struct tu_deferred_device *d, uint32_t count, uint64_t deadline_ns)
{
	while (__atomic_load_n(&d->copy_calls, __ATOMIC_RELAXED) < count) {
		if (sel_monotonic_ns() > deadline_ns)
			return false;
		usleep(1000);
	}
	return true;
}

/*
 * A warm store's windows take no staging: with its file's writes held on
 * the disk (the first one sleeps 5 s) and every stage of its share full,
 * a cold store begun beside it still copies its first window at once; both
 * then complete and restore byte-exact.
 */
static void test_warm_store_leaves_staging(void **state)
{
	struct fixture *f = *state;
	struct tu_deferred_device d;
	struct rec_key a, b, none;
	struct store_parts pa, pb;
	struct shard_chain_record chain;
	struct shard_completion c;
	bool alone, beside;
	uint64_t start;

	tu_deferred_device_init(&d);
	f->stores_max = 2;
	open_engine_on(f, &d.base);
	make_key(&a, 64 * 40, 1);
	make_key(&b, 64 * 8, 2);
	make_key(&none, 64, 3);
	store_prepare(f, &pa, &a, NULL, 10, 1, SHARD_STORE_WARM);
	store_prepare(f, &pb, &b, NULL, 60, 2, SHARD_STORE_COLD);
	assert_int_equal(sel_failpoints_configure("disk.write=1*sleep(5000)"), 0);
	start = sel_monotonic_ns();
	assert_int_equal(shard_engine_store(f->engine, ++f->next_job, &pa.job), 0);
	/* Alone, it takes its share: every one of the 8 stages. */
	alone = copy_calls_reach(&d, 8, start + 4000000000ull);
	assert_int_equal(shard_engine_store(f->engine, ++f->next_job, &pb.job), 0);
	/* A job on the restore queue wakes the transfer thread's wait for the disk. */
	assert_int_equal(shard_engine_warm_drop(f->engine, ++f->next_job, &none), 0);
	beside = copy_calls_reach(&d, 9, start + 4000000000ull);
	/* Every job done before any check: the device is this function's. */
	for (uint32_t i = 0; i < 3; i++) {
		shard_engine_wait(f->engine, &c);
		assert_int_equal(c.result, 0);
	}
	sel_failpoints_configure(NULL);
	assert_true(alone);
	assert_true(beside);
	poison(f);
	chain = (struct shard_chain_record){ a, 0, 40 };
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 40, 4, a.consumed);
	poison(f);
	chain = (struct shard_chain_record){ b, 0, 8 };
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 4), 0);
	check_restored(f, 8, 4, b.consumed);
	close_engine_on(f);
}

/*
 * A warm store that writes its file completes only once the file is
 * committed, its first write held on the disk meanwhile: until then it is
 * a job in flight (jobs_in_flight), at its completion the file is whole
 * and nothing is in flight; a job completed and not yet polled is not in
 * flight either.
 */
static void test_warm_store_done_with_its_file(void **state)
{
	struct fixture *f = *state;
	struct shard_engine_stats st;
	struct shard_completion c;
	struct rec_key a;
	struct store_parts p;
	char name[REC_FILE_NAME_BYTES], path[1200];
	struct stat sb;
	uint32_t in_flight = 1;

	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 7, 1);
	store_prepare(f, &p, &a, NULL, 10, 1, SHARD_STORE_WARM);
	rec_file_name(name, &a);
	snprintf(path, sizeof(path), "%s/%s", rec_dir_path(f->dir), name);
	assert_int_equal(sel_failpoints_configure("disk.write=1*sleep(300)"), 0);
	assert_int_equal(shard_engine_store(f->engine, ++f->next_job, &p.job), 0);
	shard_engine_stats(f->engine, &st);
	assert_int_equal(st.jobs_in_flight, 1);
	shard_engine_wait(f->engine, &c);
	sel_failpoints_configure(NULL);
	assert_int_equal(c.result, 0);
	shard_engine_stats(f->engine, &st);
	assert_int_equal(st.jobs_in_flight, 0);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal((uint64_t)sb.st_size, rec_geometry_file_bytes(&f->g, 7, true));
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(shard_engine_noop(f->engine, ++f->next_job), 0);
	for (int i = 0; i < 5000 && in_flight; i++) {
		shard_engine_stats(f->engine, &st);
		in_flight = st.jobs_in_flight;
		if (in_flight)
			usleep(1000);
	}
	assert_int_equal(in_flight, 0);
	assert_int_equal(shard_engine_poll(f->engine, &c, 1), 1);
	assert_int_equal(c.result, 0);
}

/* Job ids of the pipelined fetches' tests (pipe_submit and friends). */
#define PIPE_JOB0 1000u
#define PIPE_JOBS 8u

/*
 * What the completion hook saw of each job, in completion order: its id,
 * result and reason, the copies still queued on the deferred device then,
 * and whether a fetch's own pages and row were in place then.
 */
struct pipe_log {
	struct fixture *f;
	struct tu_deferred_device *d;
	uint32_t count;
	uint64_t job_id[PIPE_JOBS];
	int result[PIPE_JOBS];
	char why[PIPE_JOBS][200];
	uint32_t queued[PIPE_JOBS];
	bool restored[PIPE_JOBS];
	/* by job id less PIPE_JOB0: what a fetch restores where */
	struct pipe_want {
		bool fetch;
		uint32_t base_id, first, pages, slot;
		uint64_t consumed;
	} want[PIPE_JOBS];
};

/* Runs on the transfer thread, as the job is reported. */
static void pipe_hook(void *ctx, const struct shard_completion *c)
{
	struct pipe_log *log = ctx;
	const struct pipe_want *w = &log->want[c->job_id - PIPE_JOB0];
	uint32_t n = log->count;
	bool ok = true;

	SEL_ASSERT(n < PIPE_JOBS && c->job_id - PIPE_JOB0 < PIPE_JOBS);
	for (uint32_t i = 0; w->fetch && i < w->pages; i++)
		ok = ok && page_matches(log->f, w->base_id + i, w->first + i);
	if (w->fetch)
		ok = ok && row_matches(log->f, w->slot, w->consumed);
	log->job_id[n] = c->job_id;
	log->result[n] = c->result;
	snprintf(log->why[n], sizeof(log->why[n]), "%s", c->why);
	log->queued[n] = log->d->queued_count;
	log->restored[n] = ok;
	__atomic_store_n(&log->count, n + 1, __ATOMIC_RELEASE);
}

/*
 * Submits fetch job id of chain[0, count), its pages from skip on, into
 * ids base_id.. and slot, without waiting; notes what it restores.
 */
static void pipe_fetch(struct pipe_log *log, uint64_t id, const struct shard_chain_record *chain,
		       uint32_t count, uint32_t skip, uint32_t base_id, uint32_t slot)
{
	uint32_t ids[200], pages = 0;
	struct shard_fetch_job job = { .chain = chain, .chain_count = count, .skip_pages = skip,
				       .page_ids = ids, .state_slot = slot };

	for (uint32_t i = 0; i < count; i++)
		pages += chain[i].tail_page_count;
	for (uint32_t i = 0; i + skip < pages; i++)
		ids[i] = base_id + i;
	log->want[id - PIPE_JOB0] = (struct pipe_want){
		.fetch = true, .base_id = base_id, .first = skip, .pages = pages - skip,
		.slot = slot, .consumed = chain[count - 1].key.consumed,
	};
	assert_int_equal(shard_engine_fetch(log->f->engine, id, &job), 0);
}

/* Waits (60 s at most) until count jobs were reported. */
static void pipe_wait(struct pipe_log *log, uint32_t count)
{
	alarm(60);
	while (__atomic_load_n(&log->count, __ATOMIC_ACQUIRE) < count)
		usleep(1000);
	alarm(0);
}

/*
 * A chain a (pages 0-6), b (7-11), c (12-15), warm, on a deferred device,
 * the hook logging; the transfer thread then held at the next copy call
 * (the first fetch's), so the jobs submitted next queue behind it.
 */
static void pipe_setup(struct fixture *f, struct tu_deferred_device *d, struct pipe_log *log,
		       struct shard_chain_record *chain)
{
	struct rec_key a, b, c;

	tu_deferred_device_init(d);
	open_engine_on(f, &d->base);
	make_key(&a, 64 * 7, 1);
	make_key(&b, 64 * 12, 2);
	make_key(&c, 64 * 16, 3);
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	assert_int_equal(store(f, &b, &a, 20, 2, true), 0);
	assert_int_equal(store(f, &c, &b, 30, 3, true), 0);
	chain[0] = (struct shard_chain_record){ a, 0, 7 };
	chain[1] = (struct shard_chain_record){ b, 7, 5 };
	chain[2] = (struct shard_chain_record){ c, 12, 4 };
	poison(f);
	memset(log, 0, sizeof(*log));
	log->f = f;
	log->d = d;
	shard_engine_set_completion_hook(f->engine, pipe_hook, log);
	__atomic_store_n(&d->gate_at, d->copy_calls + 1, __ATOMIC_RELEASE);
}

static void pipe_teardown(struct fixture *f)
{
	shard_engine_set_completion_hook(f->engine, NULL, NULL);
	close_engine_on(f);
}

/*
 * Fetches of warm records queued back to back are pipelined: the next
 * one's copies are issued before the one before is reported, and each is
 * reported only once its own copies ran (waited for by its own mark). A
 * warm drop at the queue's head drains the pipeline before it runs (the
 * fetch before it reported with no copy queued), a fetch it left warm in
 * part restores from the file, and an unlink queued behind them all runs
 * last, with nothing queued on the device.
 */
static void test_warm_fetches_pipelined(void **state)
{
	struct fixture *f = *state;
	struct tu_deferred_device d;
	struct shard_chain_record chain[3];
	struct shard_warm_stats ws;
	struct shard_engine_stats st;
	struct pipe_log log;
	uint32_t waits;

	pipe_setup(f, &d, &log, chain);
	waits = d.mark_waits;
	pipe_fetch(&log, PIPE_JOB0, chain, 1, 0, 100, 4);
	tu_deferred_gate_wait(&d);
	pipe_fetch(&log, PIPE_JOB0 + 1, chain, 2, 7, 120, 5);
	pipe_fetch(&log, PIPE_JOB0 + 2, chain, 3, 12, 140, 6);
	assert_int_equal(shard_engine_warm_drop(f->engine, PIPE_JOB0 + 3, &chain[2].key), 0);
	pipe_fetch(&log, PIPE_JOB0 + 4, chain, 3, 12, 160, 7);
	assert_int_equal(shard_engine_unlink(f->engine, PIPE_JOB0 + 5, &chain[1].key), 0);
	__atomic_store_n(&d.gate_at, 0, __ATOMIC_RELEASE);
	pipe_wait(&log, 6);
	for (uint32_t i = 0; i < 6; i++) {
		if (log.result[i] != 0)
			fail_msg("job %u failed: %s", i, log.why[i]);
		assert_int_equal(log.job_id[i], PIPE_JOB0 + i);
		if (log.want[i].fetch && !log.restored[i])
			fail_msg("fetch %u reported before its copies ran", i);
	}
	/* The second and third fetches' copies were queued as the one before was reported. */
	assert_true(log.queued[0] > 0);
	assert_true(log.queued[1] > 0);
	/* The drop stopped the pipeline; the fetch after it read c's file. */
	assert_int_equal(log.queued[2], 0);
	assert_int_equal(log.queued[3], 0);
	assert_int_equal(log.queued[4], 0);
	assert_int_equal(log.queued[5], 0);
	assert_int_equal(d.mark_waits - waits, 3);
	shard_engine_stats(f->engine, &st);
	assert_int_equal(st.fetch_warm_pipelined, 2);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.hits, 3);
	assert_int_equal(ws.partial_hits, 1);
	assert_int_equal(ws.records, 1); /* a: b unlinked, c dropped */
	pipe_teardown(f);
}

/*
 * A pipelined fetch whose copies fail (its mark's wait, or the issue of
 * its second copy call) fails alone, with the reason, only once every copy
 * it issued is done; the fetch before it and the one after restore.
 */
static void test_warm_pipeline_failure_is_its_own(void **state)
{
	struct fixture *f = *state;
	struct tu_deferred_device d;
	struct shard_chain_record chain[3];
	struct shard_warm_stats ws;
	struct pipe_log log;

	for (int issue = 0; issue < 2; issue++) {
		pipe_setup(f, &d, &log, chain);
		if (issue) {
			/* the first fetch: a's 7 pages in calls of 1, 2, 1, 3 and the row */
			assert_int_equal(sel_failpoints_configure("device.copy=6*off->1*return(EIO)"),
					 0);
		} else {
			d.fail_synchronize_at = d.synchronize_calls + 2;
		}
		pipe_fetch(&log, PIPE_JOB0, chain, 1, 0, 100, 4);
		tu_deferred_gate_wait(&d);
		pipe_fetch(&log, PIPE_JOB0 + 1, chain, 2, 7, 120, 5);
		pipe_fetch(&log, PIPE_JOB0 + 2, chain, 3, 12, 140, 6);
		__atomic_store_n(&d.gate_at, 0, __ATOMIC_RELEASE);
		pipe_wait(&log, 3);
		sel_failpoints_configure(NULL);
		for (uint32_t i = 0; i < 3; i++)
			assert_int_equal(log.job_id[i], PIPE_JOB0 + i);
		assert_int_equal(log.result[0], 0);
		assert_true(log.restored[0]);
		assert_true(log.queued[0] > 0);
		assert_int_equal(log.result[1], -EIO);
		assert_false(log.restored[1]);
		assert_non_null(strstr(log.why[1], "device copy host to device failed"));
		/* After a failed issue nothing more was taken: its copies drained alone. */
		if (issue)
			assert_int_equal(log.queued[1], 0);
		else
			assert_true(log.queued[1] > 0);
		assert_int_equal(log.result[2], 0);
		assert_true(log.restored[2]);
		assert_int_equal(log.queued[2], 0);
		shard_engine_warm_stats(f->engine, &ws);
		assert_int_equal(ws.hits, 2); /* a failed restore is no hit */
		assert_int_equal(ws.records, 3);
		pipe_teardown(f);
	}
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

/*
 * A warm-only store rank zero counted room for, on a rank whose slots a
 * read-through holds (a record rank zero lists warm that this rank had
 * not kept, read through again here): records this rank read through
 * make the room, and the chain they held still restores byte-exact from
 * its files.
 */
static void test_warm_only_store_drops_reads(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, b, c, d;
	struct shard_chain_record chain[3];
	struct shard_warm_stats ws;

	open_engine(f, (16ull + ROW_PIECES) * SLOT_BYTES);
	store_cold_chain(f, &a, &b, &c, chain);
	assert_int_equal(fetch_rt(f, chain, 3, 0, 100, 4, true), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.slots_used, ws.slots_total);
	make_key(&d, 64 * 20, 4);
	assert_int_equal(store_as(f, &d, &c, 50, 5, SHARD_STORE_WARM_ONLY), 0);
	shard_engine_warm_stats(f->engine, &ws);
	assert_true(ws.reads_dropped >= 1);
	assert_int_equal(ws.records, 3 - ws.reads_dropped + 1);
	assert_true(ws.slots_used <= ws.slots_total);
	for (uint32_t skip = 0; skip <= 15; skip += 5) {
		poison(f);
		assert_int_equal(fetch(f, chain, 3, skip, 100, 4), 0);
		check_chain(f, skip, &c);
	}
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

/*
 * A warm drop that arrives while a write from warm of its key is in
 * flight fails with -EBUSY and frees nothing: a store admitted beside the
 * write (same size, other bytes) takes other slots, and the file written
 * holds the record's own bytes, which restore from it. Freed, the slots
 * would be the new store's, and the file its bytes under valid checksums.
 */
static void test_warm_drop_refused_while_writing(void **state)
{
	struct fixture *f = *state;
	struct rec_key a, p, b;
	struct shard_chain_record chain;
	struct shard_completion c;
	struct shard_warm_stats ws;
	int write_result = 1, drop_result = 1, store_result = 1;
	uint64_t write_id, drop_id, store_id;

	f->stores_max = 2; /* the new store runs beside the write */
	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 7, 1);
	make_key(&p, 64 * 7, 2);
	make_key(&b, 64 * 14, 3); /* p's child: 7 pages as a, bytes of pages 7..13 */
	assert_int_equal(store_as(f, &a, NULL, 10, 1, SHARD_STORE_WARM_ONLY), 0);
	/* The write's create stalls on the disk; the drop and the store come meanwhile. */
	assert_int_equal(sel_failpoints_configure("record.before_create=1*sleep(1000)"), 0);
	assert_int_equal(store_submit(f, &a, NULL, 10, 1, SHARD_STORE_WARM_WRITE), 0);
	write_id = f->next_job;
	for (int i = 0; i < 10000 && !sel_failpoint_evaluations(SEL_FP_RECORD_BEFORE_CREATE); i++)
		usleep(1000);
	assert_true(sel_failpoint_evaluations(SEL_FP_RECORD_BEFORE_CREATE) > 0);
	assert_int_equal(store_submit(f, &b, &p, 30, 2, SHARD_STORE_WARM), 0);
	store_id = f->next_job;
	assert_int_equal(shard_engine_warm_drop(f->engine, ++f->next_job, &a), 0);
	drop_id = f->next_job;
	for (int i = 0; i < 3; i++) {
		shard_engine_wait(f->engine, &c);
		if (c.job_id == write_id)
			write_result = c.result;
		else if (c.job_id == drop_id)
			drop_result = c.result;
		else if (c.job_id == store_id)
			store_result = c.result;
		if (c.job_id == drop_id && c.result)
			assert_non_null(strstr(c.why, "write from warm is in flight"));
	}
	sel_failpoints_configure(NULL);
	assert_int_equal(write_result, 0);
	assert_int_equal(store_result, 0);
	/* a's file, read with its warm copy gone, holds a's bytes. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
	poison(f);
	chain = (struct shard_chain_record){ a, 0, 7 };
	assert_int_equal(fetch(f, &chain, 1, 0, 100, 3), 0);
	for (uint32_t i = 0; i < 7; i++)
		assert_true(page_matches(f, 100 + i, i));
	assert_true(row_matches(f, 3, a.consumed));
	chain = (struct shard_chain_record){ b, 7, 7 };
	assert_int_equal(fetch(f, &chain, 1, 0, 120, 4), 0);
	for (uint32_t i = 0; i < 7; i++)
		assert_true(page_matches(f, 120 + i, 7 + i));
	assert_true(row_matches(f, 4, b.consumed));
	assert_int_equal(drop_result, -EBUSY);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.records, 1); /* b */
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
	check_restored(f, 9, 2, a.consumed);
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

/*
 * Rank zero's dirty states through coordinator/warm.h: a dirty child makes
 * its parent no victim; while its write runs it is no dirty victim, a
 * failed write makes it one again, and clean it frees its parent and
 * forgets a row drop it wanted.
 */
static void test_warm_policy_write_states(void **state)
{
	struct coord_index ix;
	struct coord_warm w;
	struct rec_key pk, ck;
	uint32_t parent, child;

	(void)state;
	make_key(&pk, 64, 1);
	make_key(&ck, 128, 2);
	assert_int_equal(coord_index_init(&ix, 8, 64), 0);
	assert_int_equal(coord_index_insert(&ix, &(struct coord_node_spec){
		.key = pk, .tail_page_count = 1, .state = COORD_READY, .row_present = true },
		&parent), 0);
	assert_int_equal(coord_index_insert(&ix, &(struct coord_node_spec){
		.key = ck, .parent = &pk, .first_page_index = 1, .tail_page_count = 1,
		.state = COORD_READY, .row_present = true }, &child), 0);
	assert_int_equal(coord_warm_init(&w, 8, 8, 1, 4096), 0);
	coord_warm_charge(&w, parent, 2);
	coord_warm_ready(&w, parent);
	coord_warm_charge(&w, child, 2);
	coord_warm_ready(&w, child);
	coord_warm_set_dirty(&w, &ix, child, 7);
	coord_warm_want_row_drop(&w, child, 5); /* a grandchild's id */
	assert_int_equal(coord_warm_dirty_below(&w, parent), 1);
	assert_int_equal(coord_warm_victim(&w, &ix, w.list.head), COORD_NONE);
	assert_int_equal(coord_warm_dirty_victim(&w, &ix, w.list.head), child);
	coord_warm_set_writing(&w, child);
	assert_int_equal(coord_warm_dirty_state(&w, child), COORD_WARM_WRITING);
	assert_int_equal(coord_warm_dirty_victim(&w, &ix, w.list.head), COORD_NONE);
	assert_int_equal(w.dirty_records, 1);
	coord_warm_write_failed(&w, child);
	assert_int_equal(coord_warm_dirty_state(&w, child), COORD_WARM_DIRTY);
	assert_int_equal(coord_warm_dirty_victim(&w, &ix, w.list.head), child);
	assert_int_equal(coord_warm_row_drop_child(&w, child), 5);
	coord_warm_set_writing(&w, child);
	coord_warm_set_clean(&w, &ix, child);
	assert_int_equal(coord_warm_row_drop_child(&w, child), COORD_NONE);
	assert_int_equal(w.dirty_records, 0);
	assert_int_equal(w.dirty_slots, 0);
	assert_int_equal(coord_warm_dirty_below(&w, parent), 0);
	assert_int_equal(coord_warm_victim(&w, &ix, w.list.head), parent);
	coord_warm_destroy(&w);
	assert_int_equal(coord_warm_dirty_below(&w, parent), 0); /* off: no tier */
	coord_index_destroy(&ix);
}

/* A warm tier of slot_count slots of one plane of slot_bytes, rows of row_slots. */
static int warm_init_slots(struct shard_warm *w, uint64_t slot_bytes, uint32_t slot_count,
			   uint32_t pages_max, uint32_t row_slots, uint32_t group_slots_max)
{
	return shard_warm_init(w, &(struct shard_warm_shape){
					  .plane_bytes = &slot_bytes, .plane_count = 1,
					  .row_bytes = slot_bytes * row_slots,
					  .slot_count = slot_count, .pages_max = pages_max,
					  .group_slots_max = group_slots_max });
}

/* The slot pool alone: reserve, commit, find, drop, and no block when full. */
static void test_warm_pool(void **state)
{
	struct shard_warm w;
	struct rec_key a, b;
	uint32_t e1, e2, slots[8];

	(void)state;
	assert_int_equal(warm_init_slots(&w, 4096, 10, 8, 2, 1), 0);
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


/*
 * The store API with a warm tier, on one rank and on three (forked peers
 * over loopback, their planes in shared memory so rank zero checks every
 * rank's bytes). Page planes of 4 KiB make 8 KiB slots; a row of 8 KiB
 * takes one.
 */
#define API_UNIT 4096u
#define API_ROW 8192u
#define API_PAGES 64u
#define API_ROWS 4u
#define API_TOKENS 1024u
#define API_SLOT 8192u
#define API_WORLD 3u
#define API_HISTORIES 4u

struct rank_memory {
	uint8_t planes[2][API_PAGES * API_UNIT];
	uint8_t rows[API_ROWS * API_ROW];
	char why[256];
};

struct api_fixture {
	char *base;
	uint32_t world;
	struct rank_memory *mem; /* shared with the children */
	pid_t children[API_WORLD];
	int listen_fd;
	struct sel_cluster cluster;
	uint64_t warm_bytes;
	uint64_t peer_warm_bytes; /* what rank 1 is configured with */
	bool peer_reads;          /* peers read files (else every read fails) */
	uint8_t warm_policy, peer_warm_policy;
	uint64_t max_age_ms;
	bool keep_dirty;          /* api_publish_at does not wait for ON_DISK */
	uint32_t on_disk;         /* SEL_EVENT_ON_DISK events seen */
	uint64_t on_disk_id;      /* the last one's checkpoint */
	sel_store *store;
	sel_history *h[API_HISTORIES];
};

static void api_config(struct api_fixture *f, uint32_t rank, struct sel_store_config *c,
		       struct sel_plane planes[2], char *dir, size_t dir_size)
{
	struct rec_identity model;

	tu_identities(&model, NULL);
	snprintf(dir, dir_size, "%s/rank%u", f->base, rank);
	for (int p = 0; p < 2; p++)
		planes[p] = (struct sel_plane){ p ? "v" : "k", API_UNIT,
						(uintptr_t)f->mem[rank].planes[p] };
	*c = (struct sel_store_config){
		.dir = dir, .page_tokens = 64, .page_plane_count = 2, .page_planes = planes,
		.row_plane = { "state", API_ROW, (uintptr_t)f->mem[rank].rows },
		.page_count = API_PAGES, .row_count = API_ROWS, .device = "host",
		.disk_limit_bytes = 1ull << 30, .records_max = 1000,
		.cluster = f->world > 1 ? &f->cluster : NULL,
		.warm_bytes = rank == 1 ? f->peer_warm_bytes : f->warm_bytes,
		.warm_policy = rank == 1 ? f->peer_warm_policy : f->warm_policy,
		.max_age_ms = f->max_age_ms,
	};
	memcpy(c->model_identity, model.bytes, 32);
}

/*
 * A peer: file reads fail from the start (unless peer_reads), so it
 * restores only from warm slots.
 */
static void api_child(struct api_fixture *f, uint32_t rank)
{
	struct sel_store_config c;
	struct sel_plane planes[2];
	char dir[512];
	sel_peer *peer;
	int ret;

	close(f->listen_fd);
	f->cluster.rank = rank;
	f->cluster.listen_fd = -1;
	api_config(f, rank, &c, planes, dir, sizeof(dir));
	if (!f->peer_reads && sel_failpoints_configure("disk.read=return(EIO)") != 0)
		_exit(6);
	if (sel_peer_start(&c, &peer, f->mem[rank].why, sizeof(f->mem[rank].why)) != 0)
		_exit(2);
	ret = sel_peer_wait(peer);
	if (sel_peer_stop(peer) != 0)
		_exit(4);
	_exit(ret ? 3 : 0);
}

static void api_start(struct api_fixture *f, uint32_t world)
{
	uint16_t port;

	f->world = world;
	if (world == 1)
		return;
	f->listen_fd = tu_listen_loopback(API_WORLD, &port);
	f->cluster = (struct sel_cluster){
		.rank = 0, .world_size = world, .coordinator_host = "127.0.0.1",
		.coordinator_port = port, .listen_fd = f->listen_fd,
		.join_timeout_ms = 10000, .silence_timeout_ms = 5000, .job_timeout_ms = 10000,
	};
	memset(f->cluster.secret, 0x5a, sizeof(f->cluster.secret));
	for (uint32_t r = 1; r < world; r++) {
		pid_t pid = fork();

		assert_true(pid >= 0);
		if (pid == 0)
			api_child(f, r);
		f->children[r] = pid;
	}
}

static int api_open(struct api_fixture *f, char *err, size_t err_size)
{
	struct sel_store_config c;
	struct sel_plane planes[2];
	char dir[512];
	int ret;

	api_config(f, 0, &c, planes, dir, sizeof(dir));
	ret = sel_store_open(&c, &f->store, err, err_size);
	if (f->listen_fd >= 0) {
		close(f->listen_fd);
		f->listen_fd = -1;
	}
	for (uint32_t k = 0; !ret && k < API_HISTORIES; k++) {
		uint32_t tokens[API_TOKENS];

		tu_tokens(tokens, API_TOKENS, 100 + k);
		assert_int_equal(sel_history_create(f->store, tokens, API_TOKENS, &f->h[k]), 0);
	}
	return ret;
}

static int api_reap(struct api_fixture *f, uint32_t r)
{
	return tu_reap(&f->children[r]);
}

static int api_setup(void **state)
{
	struct api_fixture *f = calloc(1, sizeof(*f));

	f->base = tu_make_temp_dir("warm-api");
	f->mem = mmap(NULL, API_WORLD * sizeof(struct rank_memory), PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(f->mem != MAP_FAILED);
	f->listen_fd = -1;
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

/* Closes the store with a drain of drain_ms (its histories first): the close's result. */
static int api_close_within(struct api_fixture *f, uint64_t drain_ms)
{
	int ret = 0;

	for (uint32_t k = 0; k < API_HISTORIES; k++) {
		sel_history_destroy(f->h[k]);
		f->h[k] = NULL;
	}
	if (f->store)
		ret = sel_store_close(f->store, drain_ms);
	f->store = NULL;
	return ret;
}

static void api_close(struct api_fixture *f)
{
	api_close_within(f, 5000);
}

/* One rank opened with a write-behind warm tier of two 4-page records, kept dirty. */
static void api_open_write_behind(struct api_fixture *f)
{
	char err[512];

	f->warm_bytes = 12ull * API_SLOT;
	f->warm_policy = SEL_WARM_WRITE_BEHIND;
	f->keep_dirty = true;
	api_start(f, 1);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
}

static int api_teardown(void **state)
{
	struct api_fixture *f = *state;

	sel_failpoints_configure(NULL);
	api_close(f);
	for (uint32_t r = 1; r < API_WORLD; r++) {
		if (f->children[r] > 0) {
			kill(f->children[r], SIGKILL);
			api_reap(f, r);
		}
	}
	munmap(f->mem, API_WORLD * sizeof(struct rank_memory));
	tu_remove_tree(f->base);
	sel_log_set_level(SEL_LOG_INFO);
	free(f);
	return 0;
}

/* Page i of history k on rank r, plane p: a function of all four. */
static uint64_t api_seed(uint32_t k, uint32_t r, uint32_t i, int p)
{
	return ((uint64_t)k << 40) + ((uint64_t)r << 20) + i * 8 + (uint64_t)p;
}

/* The next event but ON_DISK (those are counted in f->on_disk). */
static struct sel_event api_event(struct api_fixture *f)
{
	struct sel_event ev = { .kind = SEL_EVENT_STORE_FAILED, .error = -ETIMEDOUT };

	for (uint32_t i = 0; i < 10000; i++) {
		if (sel_poll(f->store, &ev, 1) == 1) {
			if (ev.kind != SEL_EVENT_ON_DISK)
				return ev;
			f->on_disk++;
			f->on_disk_id = ev.id;
			continue;
		}
		usleep(1000);
	}
	ev = (struct sel_event){ .kind = SEL_EVENT_STORE_FAILED, .error = -ETIMEDOUT };
	return ev;
}

/* Polls until count ON_DISK events were seen (up to 10 s): whether they were. */
static bool api_wait_on_disk(struct api_fixture *f, uint32_t count)
{
	struct sel_event ev;

	for (uint32_t i = 0; i < 10000 && f->on_disk < count; i++) {
		if (sel_poll(f->store, &ev, 1) == 1) {
			assert_int_equal(ev.kind, SEL_EVENT_ON_DISK);
			f->on_disk++;
			f->on_disk_id = ev.id;
			continue;
		}
		usleep(1000);
	}
	return f->on_disk >= count;
}

/*
 * Publishes history k's first consumed tokens (a child of parent_consumed,
 * 0: a root) from ids 0.. and row slot 0; returns its event.
 */
static struct sel_event api_publish_at(struct api_fixture *f, uint32_t k, uint64_t consumed,
				       uint64_t parent_consumed)
{
	uint32_t ids[API_PAGES], pages = (uint32_t)(consumed / 64);
	struct sel_publication pub = { .checkpoint = 100 + k, .history = f->h[k],
				       .consumed = consumed, .parent_consumed = parent_consumed,
				       .page_ids = ids, .state_slot = 0 };
	enum sel_outcome outcome;
	uint32_t on_disk = f->on_disk;
	struct sel_event ev;

	for (uint32_t r = 0; r < f->world; r++) {
		for (uint32_t i = 0; i < pages; i++)
			for (int p = 0; p < 2; p++)
				tu_fill(f->mem[r].planes[p] + (uint64_t)i * API_UNIT, API_UNIT,
					api_seed(k, r, i, p));
		tu_fill(f->mem[r].rows, API_ROW, api_seed(k, r, 999, 0));
	}
	for (uint32_t i = 0; i < pages; i++)
		ids[i] = i;
	assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
	assert_int_equal(outcome, SEL_QUEUED);
	ev = api_event(f);
	/* Written through: on disk soon after, as the tests before policies expect. */
	if (ev.kind == SEL_EVENT_STORED && f->warm_bytes && !f->keep_dirty)
		assert_true(api_wait_on_disk(f, on_disk + 1));
	return ev;
}

static void api_publish(struct api_fixture *f, uint32_t k, uint64_t consumed)
{
	struct sel_event ev = api_publish_at(f, k, consumed, 0);

	if (ev.kind != SEL_EVENT_STORED)
		fail_msg("store of history %u: %d %s", k, ev.kind, ev.why);
}

/*
 * Looks history k up, fetches it into ids 32.. and row slot 2 on every
 * rank; on success checks every rank's bytes. Returns the event's error.
 */
static int api_fetch(struct api_fixture *f, uint32_t k)
{
	struct sel_hit hit;
	uint32_t ids[API_PAGES];
	struct sel_event ev;
	bool joined;

	for (uint32_t r = 0; r < f->world; r++) {
		memset(f->mem[r].planes, 0xee, sizeof(f->mem[r].planes));
		memset(f->mem[r].rows, 0xee, sizeof(f->mem[r].rows));
	}
	assert_true(sel_lookup(f->store, f->h[k], 0, &hit));
	for (uint32_t i = 0; i < hit.page_count; i++)
		ids[i] = 32 + i;
	assert_int_equal(sel_fetch(f->store, &hit, ids, 2, 7, &joined), 0);
	ev = api_event(f);
	if (ev.kind != SEL_EVENT_FETCHED)
		return ev.error ? ev.error : -EIO;
	for (uint32_t r = 0; r < f->world; r++) {
		uint8_t expect[API_ROW];

		for (uint32_t i = 0; i < hit.page_count; i++)
			for (int p = 0; p < 2; p++) {
				tu_fill(expect, API_UNIT, api_seed(k, r, i, p));
				if (memcmp(expect, f->mem[r].planes[p] + (32ull + i) * API_UNIT,
					   API_UNIT) != 0)
					fail_msg("rank %u page %u plane %d differs", r, i, p);
			}
		tu_fill(expect, API_ROW, api_seed(k, r, 999, 0));
		assert_memory_equal(f->mem[r].rows + 2 * API_ROW, expect, API_ROW);
	}
	return 0;
}

static void api_stats(struct api_fixture *f, struct sel_stats *st)
{
	struct sel_event ev;

	sel_poll(f->store, &ev, 0); /* the counters are brought up to date by a poll */
	assert_int_equal(sel_store_stats(f->store, st), 0);
}

/*
 * One rank: a warm record restores with every file read failing, counted
 * as a warm hit; the metrics show the tier; a restart starts it empty and
 * restores from the disk, reading the record into warm slots: the next
 * restore opens and reads no file.
 */
static void test_warm_api_one_rank(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	char err[512], *metrics;

	f->warm_bytes = 64ull * API_SLOT;
	api_start(f, 1);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	api_publish(f, 0, 640);
	api_stats(f, &st);
	assert_int_equal(st.warm_records, 1);
	assert_int_equal(st.warm_slots_used, 11);
	assert_int_equal(st.warm_slots_total, 64);
	assert_int_equal(st.warm_bytes, 11ull * API_SLOT);
	assert_int_equal(sel_failpoints_configure("disk.open=return(EIO);"
						  "disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_READ), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_OPEN), 0);
	sel_failpoints_configure(NULL);
	api_stats(f, &st);
	assert_int_equal(st.warm_hits, 1);
	metrics = malloc(SEL_METRICS_BYTES(1));
	assert_true(sel_store_metrics(f->store, metrics, SEL_METRICS_BYTES(1)) > 0);
	assert_non_null(strstr(metrics, "selene_warm_hits_total 1\n"));
	assert_non_null(strstr(metrics, "selene_warm_slots 64\n"));
	assert_non_null(strstr(metrics, "selene_warm_records 1\n"));
	assert_non_null(strstr(metrics, "selene_warm_store_fallbacks_total 0\n"));
	free(metrics);
	/* A restart: the warm tier is empty, the record restores from its file. */
	api_close(f);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	api_stats(f, &st);
	assert_int_equal(st.warm_records, 0);
	assert_int_equal(st.warm_slots_used, 0);
	assert_int_equal(api_fetch(f, 0), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_hits, 0);
	assert_int_equal(st.warm_read_throughs, 1);
	assert_int_equal(st.warm_read_through_bytes, 11ull * API_SLOT);
	assert_int_equal(st.warm_records, 1);
	assert_int_equal(st.warm_slots_used, 11);
	assert_int_equal(sel_failpoints_configure("disk.open=return(EIO);"
						  "disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_READ), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_OPEN), 0);
	sel_failpoints_configure(NULL);
	api_stats(f, &st);
	assert_int_equal(st.warm_hits, 1);
}

/*
 * LRU: a third record evicts the least recently used of two (a fetch is a
 * use), which then restores from its file; a record larger than the whole
 * tier is stored cold. With file reads failing, what is warm restores and
 * what is not fails.
 */
static void test_warm_api_lru(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	char err[512];

	f->warm_bytes = 12ull * API_SLOT; /* two records of 4 pages and a row */
	api_start(f, 1);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	api_publish(f, 0, 256);
	api_publish(f, 1, 256);
	assert_int_equal(api_fetch(f, 0), 0); /* 0 is now more recent than 1 */
	api_publish(f, 2, 256);
	api_stats(f, &st);
	assert_int_equal(st.warm_records, 2);
	assert_int_equal(st.warm_evictions, 1);
	assert_int_equal(st.warm_slots_used, 10);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	assert_int_equal(api_fetch(f, 2), 0);
	/*
	 * Evicted: its file is read, and fails. Its read-through made room
	 * first: 0, the least recently used, went; the failure gave 1's slots
	 * back.
	 */
	assert_int_not_equal(api_fetch(f, 1), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_evictions, 2);
	assert_int_equal(st.warm_read_failures, 1);
	assert_int_equal(st.warm_records, 1);
	assert_int_equal(st.warm_slots_used, 5);
	sel_failpoints_configure(NULL);
	assert_int_equal(api_fetch(f, 1), 0); /* read through: warm again */
	api_stats(f, &st);
	assert_int_equal(st.warm_read_throughs, 1);
	assert_int_equal(st.warm_read_through_bytes, 5ull * API_SLOT);
	/* 12 pages and a row: more than the tier, stored cold, nothing evicted. */
	api_publish(f, 3, 768);
	api_stats(f, &st);
	assert_int_equal(st.warm_records, 2);
	assert_int_equal(st.warm_evictions, 2);
	/* Too large for the tier to read through: it streams and stays cold. */
	assert_int_equal(api_fetch(f, 3), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_records, 2);
	assert_int_equal(st.warm_read_throughs, 1);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 1), 0);
	assert_int_equal(api_fetch(f, 2), 0);
	assert_int_not_equal(api_fetch(f, 3), 0);
}

/*
 * A chain keeps its warm pages when a parent's row is dropped; a rewrite
 * that puts the row back stores it cold, and the chain reads that file
 * (into warm slots: a read-through that fails gives them back, one that
 * succeeds keeps them); a warm store whose file write fails stays
 * restorable from its slots, dirty, until a later write lands.
 */
static void test_warm_api_rewrite_and_failed_write(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	struct sel_event ev;
	uint32_t on_disk;
	char err[512];

	f->warm_bytes = 18ull * API_SLOT;
	api_start(f, 1);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	assert_int_equal(api_publish_at(f, 0, 320, 0).kind, SEL_EVENT_STORED);
	assert_int_equal(api_publish_at(f, 0, 640, 320).kind, SEL_EVENT_STORED);
	assert_int_equal(api_publish_at(f, 0, 960, 640).kind, SEL_EVENT_STORED);
	api_stats(f, &st);
	/* 640's row went when 960 committed: 6 + 5 + 6 slots. */
	assert_int_equal(st.truncations, 1);
	assert_int_equal(st.warm_records, 3);
	assert_int_equal(st.warm_slots_used, 17);
	assert_int_equal(st.warm_bytes, 17ull * API_SLOT);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	sel_failpoints_configure(NULL);
	/* 640 again: its row is put back by a rewrite, cold. */
	ev = api_publish_at(f, 0, 640, 320);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	api_stats(f, &st);
	assert_int_equal(st.warm_records, 2);
	assert_int_equal(st.warm_slots_used, 12);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_not_equal(api_fetch(f, 0), 0);
	sel_failpoints_configure(NULL);
	api_stats(f, &st);
	assert_int_equal(st.warm_read_failures, 1);
	assert_int_equal(st.warm_slots_used, 12);
	/* 640's pages are read into warm slots (not its row: not the chain's last). */
	assert_int_equal(api_fetch(f, 0), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_partial_hits, 1);
	assert_int_equal(st.warm_read_throughs, 1);
	assert_int_equal(st.warm_records, 3);
	assert_int_equal(st.warm_slots_used, 17);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	sel_failpoints_configure(NULL);
	/*
	 * A warm store whose file cannot be written: STORED, restorable from
	 * its slots, dirty, no ON_DISK, the failures counted; once the disk
	 * takes writes again (after the backoff) its file is written: ON_DISK.
	 */
	on_disk = f->on_disk;
	f->keep_dirty = true;
	assert_int_equal(sel_failpoints_configure("disk.write=return(EIO)"), 0);
	ev = api_publish_at(f, 1, 320, 0);
	assert_int_equal(ev.kind, SEL_EVENT_STORED);
	for (uint32_t i = 0; i < 5000 && st.warm_write_failures == 0; i++) {
		usleep(1000);
		api_stats(f, &st);
	}
	assert_true(st.warm_write_failures >= 1);
	assert_int_equal(st.warm_dirty_records, 1);
	assert_int_equal(st.warm_dirty_bytes, 6ull * API_SLOT);
	/* It made room by dropping 960, the chain's least recently used. */
	assert_int_equal(st.warm_records, 3);
	assert_int_equal(st.warm_slots_used, 17);
	assert_int_equal(sel_failpoints_configure("disk.write=return(EIO);"
						  "disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 1), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_READ), 0);
	assert_int_equal(f->on_disk, on_disk);
	sel_failpoints_configure(NULL);
	assert_true(api_wait_on_disk(f, on_disk + 1));
	assert_int_equal(f->on_disk_id, 101);
	api_stats(f, &st);
	assert_int_equal(st.warm_dirty_records, 0);
	assert_int_equal(st.warm_dirty_bytes, 0);
	assert_true(st.warm_writes >= 4);
	assert_int_equal(st.warm_records, 3);
	assert_int_equal(st.warm_slots_used, 17);
	assert_int_equal(st.warm_evictions, 1);
	/* On disk: a restart restores it from its file. */
	api_close(f);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	assert_int_equal(api_fetch(f, 1), 0);
}

/* Three ranks: every rank restores from its warm slots, and every rank drops the same record. */
static void test_warm_api_three_ranks(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	char err[512];

	f->warm_bytes = f->peer_warm_bytes = 12ull * API_SLOT;
	api_start(f, API_WORLD);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	api_publish(f, 0, 256);
	api_publish(f, 1, 256);
	/* Peers fail every file read; rank zero too now. */
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	assert_int_equal(api_fetch(f, 1), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	sel_failpoints_configure(NULL);
	api_publish(f, 2, 256); /* evicts 1 on every rank */
	api_stats(f, &st);
	assert_int_equal(st.warm_hits, 3);
	assert_int_equal(st.warm_evictions, 1);
	/*
	 * Rank zero reads files again, the peers still cannot: 1 fails (the
	 * peers dropped it too). Its read-through made room by dropping 0, the
	 * least recently used, on every rank; rank zero read 1 through, and
	 * the failure on the peers dropped it there again: 2 restores from
	 * every rank's slots, 0 fails as 1 did.
	 */
	assert_int_not_equal(api_fetch(f, 1), 0);
	assert_int_equal(api_fetch(f, 2), 0);
	assert_int_not_equal(api_fetch(f, 0), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_read_failures, 2);
	assert_int_equal(st.warm_read_throughs, 0);
	assert_int_equal(st.warm_records, 1);
	assert_int_equal(st.warm_slots_used, 5);
	/*
	 * Rank zero's engine holds only 2 too: a record of 7 slots is stored
	 * warm there (had it kept 1's or 0's 5 slots, it would be staged).
	 */
	api_publish(f, 3, 384);
	api_stats(f, &st);
	assert_int_equal(st.warm_slots_used, 12);
	{
		char *metrics = malloc(SEL_METRICS_BYTES(API_WORLD));

		assert_true(sel_store_metrics(f->store, metrics, SEL_METRICS_BYTES(API_WORLD)) > 0);
		assert_non_null(strstr(metrics, "selene_warm_store_fallbacks_total 0\n"));
		assert_non_null(strstr(metrics, "selene_warm_read_failures_total 2\n"));
		free(metrics);
	}
	assert_int_equal(api_fetch(f, 3), 0);
	assert_int_equal(api_fetch(f, 2), 0);
	api_close(f);
	for (uint32_t r = 1; r < API_WORLD; r++)
		assert_int_equal(api_reap(f, r), 0);
}

/* Rank r's record directory: the one directory in its configured one. */
static void api_record_dir(struct api_fixture *f, uint32_t r, char *out, size_t size)
{
	char top[512];
	struct dirent *d;
	DIR *dp;

	snprintf(top, sizeof(top), "%s/rank%u", f->base, r);
	dp = opendir(top);
	assert_non_null(dp);
	out[0] = '\0';
	while ((d = readdir(dp)))
		if (d->d_type == DT_DIR && d->d_name[0] != '.')
			assert_true(snprintf(out, size, "%s/%s", top, d->d_name) < (int)size);
	closedir(dp);
	assert_true(out[0] != '\0');
}

/* Renames every rank's record files away (hide) or back. */
static void api_hide_files(struct api_fixture *f, bool hide)
{
	for (uint32_t r = 0; r < f->world; r++) {
		char dir[512], from[1024], to[1024 + 8];
		struct dirent *d;
		DIR *dp;
		uint32_t moved = 0;

		api_record_dir(f, r, dir, sizeof(dir));
		dp = opendir(dir);
		assert_non_null(dp);
		while ((d = readdir(dp))) {
			size_t n = strlen(d->d_name);

			if (hide && n > 5 && strcmp(d->d_name + n - 5, ".ckpt") == 0) {
				snprintf(from, sizeof(from), "%s/%s", dir, d->d_name);
				snprintf(to, sizeof(to), "%s/%s.away", dir, d->d_name);
			} else if (!hide && n > 10 && strcmp(d->d_name + n - 10, ".ckpt.away") == 0) {
				snprintf(from, sizeof(from), "%s/%s", dir, d->d_name);
				snprintf(to, sizeof(to), "%s/%.*s", dir, (int)(n - 5), d->d_name);
			} else {
				continue;
			}
			assert_int_equal(rename(from, to), 0);
			moved++;
		}
		closedir(dp);
		assert_true(moved > 0);
	}
}

/* Flips a page byte of history k's record of consumed tokens in rank r's file. */
static void api_corrupt(struct api_fixture *f, uint32_t r, uint32_t k, uint64_t consumed)
{
	/* sel_history's first member is its rec_history (coordinator/api.c). */
	const struct rec_history *h = (const struct rec_history *)f->h[k];
	char name[REC_FILE_NAME_BYTES], dir[512], path[1024];
	uint8_t header[REC_HEADER_BYTES];
	struct rec_key key;
	FILE *fp;

	rec_history_key_at(h, consumed, &key);
	rec_file_name(name, &key);
	api_record_dir(f, r, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "rb");
	assert_non_null(fp);
	assert_int_equal(fread(header, 1, sizeof(header), fp), sizeof(header));
	fclose(fp);
	tu_flip_bit(path, sel_get_le64(header + 176) + 100); /* the page segment (R-REC-8) */
}

/*
 * Three ranks that read their files: a disk-only record is read through
 * on every rank and then restores with no rank holding a record file; a
 * read-through that fails a page checksum on one rank drops the record as
 * a failed restore does and frees its slots on every rank (a record that
 * takes exactly the free slots is then warm everywhere).
 */
static void test_warm_api_read_through_three_ranks(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	char err[512];

	f->warm_bytes = f->peer_warm_bytes = 12ull * API_SLOT;
	f->peer_reads = true;
	api_start(f, API_WORLD);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	api_publish(f, 0, 256);
	api_publish(f, 1, 256);
	api_publish(f, 2, 256); /* evicts 0 */
	assert_int_equal(api_fetch(f, 0), 0); /* read through; 1 makes room */
	api_stats(f, &st);
	assert_int_equal(st.warm_read_throughs, 1);
	assert_int_equal(st.warm_evictions, 2);
	assert_int_equal(st.warm_records, 2);
	assert_int_equal(st.warm_slots_used, 10);
	api_hide_files(f, true);
	assert_int_equal(api_fetch(f, 0), 0);
	assert_int_equal(api_fetch(f, 2), 0);
	api_hide_files(f, false);
	api_stats(f, &st);
	assert_int_equal(st.warm_hits, 2);
	/* 1's page fails its checksum on rank 1 alone. */
	api_corrupt(f, 1, 1, 256);
	assert_int_not_equal(api_fetch(f, 1), 0);
	api_stats(f, &st);
	assert_int_equal(st.records_dropped_checksum, 1);
	assert_int_equal(st.warm_read_failures, 1);
	assert_int_equal(st.warm_read_throughs, 1);
	/* Its read-through made room first: 0 went, the least recently used. */
	assert_int_equal(st.warm_evictions, 3);
	assert_int_equal(st.warm_records, 1);
	assert_int_equal(st.warm_slots_used, 5);
	/* The 7 free slots, on every rank, or its restore would read a file. */
	api_publish(f, 3, 384);
	api_stats(f, &st);
	assert_int_equal(st.warm_slots_used, 12);
	assert_int_equal(st.warm_evictions, 3);
	api_hide_files(f, true);
	assert_int_equal(api_fetch(f, 3), 0);
	assert_int_equal(api_fetch(f, 2), 0);
	api_hide_files(f, false);
	api_close(f);
	for (uint32_t r = 1; r < API_WORLD; r++)
		assert_int_equal(api_reap(f, r), 0);
}

/* A peer whose warm tier differs is refused at the join, the reason on both sides. */
static uint32_t ckpt_files_seen;

static int count_ckpt(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	size_t n = strlen(path);

	(void)st;
	(void)ftw;
	if (type == FTW_F && n > 5 && strcmp(path + n - 5, ".ckpt") == 0)
		ckpt_files_seen++;
	return 0;
}

/* Record files (committed, *.ckpt) in rank r's directory. */
static uint32_t api_files(struct api_fixture *f, uint32_t r)
{
	char dir[512];

	snprintf(dir, sizeof(dir), "%s/rank%u", f->base, r);
	ckpt_files_seen = 0;
	assert_int_equal(nftw(dir, count_ckpt, 16, FTW_PHYS), 0);
	return ckpt_files_seen;
}

/* Publishes history k's first consumed tokens as a root; returns the outcome only. */
static enum sel_outcome api_offer(struct api_fixture *f, uint32_t k, uint64_t consumed)
{
	uint32_t ids[API_PAGES];
	struct sel_publication pub = { .checkpoint = 100 + k, .history = f->h[k],
				       .consumed = consumed, .page_ids = ids, .state_slot = 0 };
	enum sel_outcome outcome;

	for (uint32_t i = 0; i < API_PAGES; i++)
		ids[i] = i;
	assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
	return outcome;
}

/*
 * Write-behind: a warm store is restorable (STORED, fetched with every
 * file read failing) with no file written; nothing is written until a
 * store needs dirty records' slots, which answers Retry and spills the
 * least recently used; close's drain writes the rest, and a restart
 * restores all three from their files.
 */
static void test_warm_api_write_behind(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	char err[512];

	api_open_write_behind(f);
	api_publish(f, 0, 256);
	assert_int_equal(sel_failpoints_configure("disk.open=return(EIO);"
						  "disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_READ), 0);
	sel_failpoints_configure(NULL);
	api_publish(f, 1, 256);
	usleep(50000); /* no write goes out meanwhile */
	api_stats(f, &st);
	assert_int_equal(st.warm_dirty_records, 2);
	assert_int_equal(st.warm_dirty_bytes, 10ull * API_SLOT);
	assert_int_equal(st.warm_writes, 0);
	assert_int_equal(f->on_disk, 0);
	assert_int_equal(api_files(f, 0), 0);
	/* 2 needs 5 slots, 2 are free: 0, the least recently used, is spilled. */
	assert_int_equal(api_offer(f, 2, 256), SEL_RETRY);
	assert_true(api_wait_on_disk(f, 1));
	assert_int_equal(f->on_disk_id, 100);
	api_stats(f, &st);
	assert_int_equal(st.warm_spills, 1);
	assert_int_equal(st.warm_retry_dirty, 1);
	assert_int_equal(st.warm_writes, 1);
	assert_int_equal(st.warm_dirty_records, 1);
	assert_int_equal(api_files(f, 0), 1);
	api_publish(f, 2, 256); /* 0, on disk now, leaves warm */
	api_stats(f, &st);
	assert_int_equal(st.warm_evictions, 1);
	assert_int_equal(st.warm_dirty_records, 2);
	/* The drain at close writes 1 and 2; a restart restores all three. */
	api_close(f);
	assert_int_equal(api_files(f, 0), 3);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	for (uint32_t k = 0; k < 3; k++)
		assert_int_equal(api_fetch(f, k), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_hits, 0);
}

/*
 * Write-behind keeps a chain's files in order: a store whose file is
 * written at once (cold, larger than the tier) under a dirty chain answers
 * Retry and starts the write of the chain's first dirty record, one at a
 * time from the root (a child's file never lands before its parent's);
 * the row of a record whose only child committed while it was dirty goes
 * once its file is written. The chain then restores byte-exact.
 */
static void test_warm_api_write_behind_chain_order(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	uint32_t retries = 0, ids[API_PAGES];
	struct sel_publication pub = { .checkpoint = 100, .consumed = 1024,
				       .parent_consumed = 384, .page_ids = ids };
	enum sel_outcome outcome = SEL_RETRY;

	api_open_write_behind(f);
	assert_int_equal(api_publish_at(f, 0, 128, 0).kind, SEL_EVENT_STORED);
	assert_int_equal(api_publish_at(f, 0, 256, 128).kind, SEL_EVENT_STORED);
	assert_int_equal(api_publish_at(f, 0, 384, 256).kind, SEL_EVENT_STORED);
	api_stats(f, &st);
	assert_int_equal(st.warm_dirty_records, 3);
	assert_int_equal(st.truncations, 0);
	pub.history = f->h[0];
	for (uint32_t i = 0; i < API_PAGES; i++)
		ids[i] = i;
	/* 1024's pages (6 .. 15) as api_publish_at fills a history's. */
	for (uint32_t i = 6; i < 16; i++)
		for (int p = 0; p < 2; p++)
			tu_fill(f->mem[0].planes[p] + (uint64_t)i * API_UNIT, API_UNIT,
				api_seed(0, 0, i, p));
	for (uint32_t i = 0; i < 10 && outcome == SEL_RETRY; i++) {
		assert_int_equal(sel_store_publish(f->store, &pub, &outcome), 0);
		if (outcome != SEL_RETRY)
			break;
		retries++;
		assert_true(api_wait_on_disk(f, retries));
		assert_int_equal(api_files(f, 0), retries);
	}
	assert_int_equal(outcome, SEL_QUEUED);
	assert_int_equal(retries, 3);
	assert_int_equal(api_event(f).kind, SEL_EVENT_STORED);
	api_stats(f, &st);
	assert_int_equal(st.warm_dirty_records, 0);
	/* 256's row went once its file was written, 384's when 1024 committed. */
	assert_int_equal(st.truncations, 2);
	assert_int_equal(api_files(f, 0), 4);
	assert_int_equal(api_fetch(f, 0), 0);
}

/*
 * A full disk while a record is dirty: it stays STORED and restorable
 * from its slots, its write failed and counted; new publications answer
 * Retry for the disk's backoff instead of waiting; the record already on
 * disk stays; once the disk has room the dirty record's write lands and a
 * restart restores both.
 */
static void test_warm_api_disk_full_while_dirty(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st = { 0 };
	char err[512];

	f->warm_bytes = 12ull * API_SLOT;
	api_start(f, 1);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	api_publish(f, 0, 256); /* on disk */
	f->keep_dirty = true;
	assert_int_equal(sel_failpoints_configure("disk.write=return(ENOSPC)"), 0);
	assert_int_equal(api_publish_at(f, 1, 256, 0).kind, SEL_EVENT_STORED);
	for (uint32_t i = 0; i < 5000 && st.warm_write_failures == 0; i++) {
		usleep(1000);
		api_stats(f, &st);
	}
	assert_true(st.warm_write_failures >= 1);
	assert_int_equal(st.warm_dirty_records, 1);
	assert_int_equal(api_offer(f, 2, 256), SEL_RETRY);
	assert_int_equal(sel_failpoints_configure("disk.write=return(ENOSPC);"
						  "disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 1), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	sel_failpoints_configure(NULL);
	assert_true(api_wait_on_disk(f, 2));
	assert_int_equal(f->on_disk_id, 101);
	api_close(f);
	assert_int_equal(api_files(f, 0), 2);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	assert_int_equal(api_fetch(f, 0), 0);
	assert_int_equal(api_fetch(f, 1), 0);
}

/*
 * A drain deadline too short to write anything: the dirty records are
 * lost (said in the log), and the restart neither finds them nor restores
 * wrong bytes.
 */
static void test_warm_api_drain_deadline(void **state)
{
	struct api_fixture *f = *state;
	struct sel_hit hit;
	char err[512];

	api_open_write_behind(f);
	api_publish(f, 0, 256);
	api_publish(f, 1, 256);
	assert_int_equal(api_close_within(f, 0), 0);
	assert_int_equal(api_files(f, 0), 0);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	assert_false(sel_lookup(f->store, f->h[0], 0, &hit));
	assert_false(sel_lookup(f->store, f->h[1], 0, &hit));
}

/*
 * A child stored warm only under a parent that is only on disk (cold after
 * a restart): while the child is dirty, with no file, its chain restores
 * byte-exact, the parent read from its file and the child copied from its
 * slots (a partial warm hit); close's drain writes the child, and after a
 * restart the chain restores from the two files.
 */
static void test_warm_api_dirty_child_of_cold_parent(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	char err[512];

	api_open_write_behind(f);
	assert_int_equal(api_publish_at(f, 0, 256, 0).kind, SEL_EVENT_STORED);
	api_close(f);
	assert_int_equal(api_files(f, 0), 1);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	assert_int_equal(api_publish_at(f, 0, 512, 256).kind, SEL_EVENT_STORED);
	api_stats(f, &st);
	assert_int_equal(st.warm_dirty_records, 1);
	assert_int_equal(st.warm_records, 1);
	assert_int_equal(api_files(f, 0), 1);
	assert_int_equal(api_fetch(f, 0), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_partial_hits, 1);
	assert_int_equal(st.warm_dirty_records, 1);
	assert_int_equal(api_files(f, 0), 1);
	api_close(f);
	assert_int_equal(api_files(f, 0), 2);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	assert_int_equal(api_fetch(f, 0), 0);
	api_stats(f, &st);
	assert_int_equal(st.warm_hits, 0);
	assert_int_equal(st.warm_partial_hits, 0);
}

/*
 * A write from warm that fails during close's drain is tried again once
 * its backoff is over, while the deadline lasts: the record reaches the
 * disk, and a restart restores it.
 */
static void test_warm_api_drain_retries_failed_write(void **state)
{
	struct api_fixture *f = *state;
	char err[512];

	api_open_write_behind(f);
	api_publish(f, 0, 256);
	assert_int_equal(api_files(f, 0), 0);
	assert_int_equal(sel_failpoints_configure("disk.write=1*return(EIO)"), 0);
	api_close(f);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_WRITE), 1);
	sel_failpoints_configure(NULL);
	assert_int_equal(api_files(f, 0), 1);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("reopen: %s", err);
	assert_int_equal(api_fetch(f, 0), 0);
}

/*
 * A disk that keeps failing ends close's drain after SEL_CLOSE_WRITE_RETRIES
 * tries, long before a 60 s deadline; the record is lost, not retried
 * until the deadline (a run's close once took its whole minute).
 */
static void test_warm_api_drain_gives_up_on_failing_disk(void **state)
{
	struct api_fixture *f = *state;
	uint64_t t;

	api_open_write_behind(f);
	api_publish(f, 0, 256);
	assert_int_equal(sel_failpoints_configure("disk.write=return(EIO)"), 0);
	t = sel_monotonic_ns();
	api_close_within(f, 60000);
	t = sel_monotonic_ns() - t;
	/* each try fails every window it writes: at least one write a try */
	assert_true(sel_failpoint_fired(SEL_FP_DISK_WRITE) >= 1 + SEL_CLOSE_WRITE_RETRIES);
	sel_failpoints_configure(NULL);
	assert_true(t < 30ull * 1000000000ull);
	assert_int_equal(api_files(f, 0), 0);
}

/*
 * Three ranks, write-behind: a record is restorable from every rank's
 * slots before any rank has its file, and close's drain writes it on
 * every rank.
 */
static void test_warm_api_three_ranks_write_behind(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st;
	char err[512];

	f->warm_bytes = f->peer_warm_bytes = 12ull * API_SLOT;
	f->warm_policy = f->peer_warm_policy = SEL_WARM_WRITE_BEHIND;
	f->keep_dirty = true;
	api_start(f, API_WORLD);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	api_publish(f, 0, 256);
	api_stats(f, &st);
	assert_int_equal(st.warm_dirty_records, 1);
	for (uint32_t r = 0; r < API_WORLD; r++)
		assert_int_equal(api_files(f, r), 0);
	/* Peers fail every file read; rank zero too now. */
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(api_fetch(f, 0), 0);
	sel_failpoints_configure(NULL);
	api_close(f);
	for (uint32_t r = 1; r < API_WORLD; r++)
		assert_int_equal(api_reap(f, r), 0);
	for (uint32_t r = 0; r < API_WORLD; r++)
		assert_int_equal(api_files(f, r), 1);
}

static void test_warm_api_mismatch_refused(void **state)
{
	struct api_fixture *f = *state;
	char err[512];

	f->warm_bytes = 12ull * API_SLOT;
	f->peer_warm_bytes = 16ull * API_SLOT;
	api_start(f, API_WORLD);
	assert_int_not_equal(api_open(f, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "warm tier"));
	assert_non_null(strstr(err, "every rank's is the same"));
	for (uint32_t r = 1; r < API_WORLD; r++)
		assert_int_not_equal(api_reap(f, r), 0);
	assert_non_null(strstr(f->mem[1].why, "warm tier"));
}

/*
 * Max-age: a record not used for max_age_ms leaves both tiers, its warm
 * slots and its file, on every rank; a lookup misses it then.
 */
static void test_warm_api_max_age(void **state)
{
	struct api_fixture *f = *state;
	struct sel_stats st = { 0 };
	struct sel_hit hit;
	char err[512];

	f->warm_bytes = f->peer_warm_bytes = 12ull * API_SLOT;
	f->max_age_ms = 200;
	api_start(f, API_WORLD);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open: %s", err);
	api_publish(f, 0, 256);
	for (uint32_t i = 0; i < 5000 && (st.expired == 0 || st.jobs_in_flight > 0); i++) {
		usleep(1000);
		api_stats(f, &st);
	}
	assert_int_equal(st.expired, 1);
	assert_int_equal(st.warm_expired, 1);
	assert_int_equal(st.evictions, 0);
	assert_int_equal(st.warm_records, 0);
	assert_int_equal(st.warm_slots_used, 0);
	assert_int_equal(st.records, 0);
	assert_false(sel_lookup(f->store, f->h[0], 0, &hit));
	api_close(f);
	for (uint32_t r = 1; r < API_WORLD; r++) {
		assert_int_equal(api_reap(f, r), 0);
		assert_int_equal(api_files(f, r), 0);
	}
	assert_int_equal(api_files(f, 0), 0);
}

/* A rank whose warm policy differs from rank zero's is refused at the join. */
static void test_warm_api_policy_mismatch_refused(void **state)
{
	struct api_fixture *f = *state;
	char err[512];

	f->warm_bytes = f->peer_warm_bytes = 12ull * API_SLOT;
	f->warm_policy = SEL_WARM_WRITE_BEHIND;
	f->peer_warm_policy = SEL_WARM_WRITE_THROUGH;
	api_start(f, API_WORLD);
	assert_int_not_equal(api_open(f, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "warm policy"));
	assert_non_null(strstr(err, "rank 1"));
	for (uint32_t r = 1; r < API_WORLD; r++)
		assert_int_not_equal(api_reap(f, r), 0);
	assert_non_null(strstr(f->mem[1].why, "warm policy"));
}

/*
 * The driver refusing the warm tier's registration, on rank zero or on a
 * peer: the open fails and says so, and what the refused open took is
 * given back (a second open of the same directory, the driver willing,
 * stores and restores; the ASan build finds any leak).
 */
static void test_warm_api_register_refused(void **state)
{
	struct api_fixture *f = *state;
	char err[512];

	f->warm_bytes = f->peer_warm_bytes = 12ull * API_SLOT;
	api_start(f, 1);
	assert_int_equal(sel_failpoints_configure("warm.register=return(ENOMEM)"), 0);
	assert_int_not_equal(api_open(f, err, sizeof(err)), 0);
	assert_null(f->store);
	assert_non_null(strstr(err, "cannot register the warm tier's"));
	assert_true(sel_failpoint_fired(SEL_FP_WARM_REGISTER) >= 1);
	sel_failpoints_configure(NULL);
	if (api_open(f, err, sizeof(err)) != 0)
		fail_msg("open with the driver willing: %s", err);
	api_publish(f, 0, 256);
	assert_int_equal(api_fetch(f, 0), 0);
	api_close(f);

	/* a peer's driver refuses: the peer fails its start, the join says so */
	f->peer_reads = true; /* (the children keep the point armed) */
	assert_int_equal(sel_failpoints_configure("warm.register=return(ENOMEM)"), 0);
	api_start(f, API_WORLD);
	sel_failpoints_configure(NULL);
	assert_int_not_equal(api_open(f, err, sizeof(err)), 0);
	assert_null(f->store);
	for (uint32_t r = 1; r < API_WORLD; r++)
		assert_int_not_equal(api_reap(f, r), 0);
	assert_non_null(strstr(f->mem[1].why, "cannot register the warm tier's"));
	assert_non_null(strstr(err, "failed at startup: cannot register the warm tier's"));
}

/* A warm tier without a disk store, or past the host's memory, is refused at open. */
static void test_warm_api_bad_config(void **state)
{
	struct api_fixture *f = *state;
	struct sel_store_config c;
	struct sel_plane planes[2];
	uint64_t available;
	char dir[512], err[512];

	api_start(f, 1);
	f->warm_bytes = 64ull * API_SLOT;
	api_config(f, 0, &c, planes, dir, sizeof(dir));
	c.disk_limit_bytes = 0;
	assert_int_equal(sel_store_open(&c, &f->store, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "warm_bytes"));
	api_config(f, 0, &c, planes, dir, sizeof(dir));
	c.warm_policy = 2;
	assert_int_equal(sel_store_open(&c, &f->store, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "warm_policy is 2"));
	if (shard_slab_memory_available(&available) != 0) {
		skip(); /* no memory figure to check against */
		return;
	}
	api_config(f, 0, &c, planes, dir, sizeof(dir));
	c.warm_bytes = available;
	assert_int_equal(sel_store_open(&c, &f->store, err, sizeof(err)), -ENOMEM);
	assert_non_null(strstr(err, "the warm tier ("));
	assert_non_null(strstr(err, "MiB of memory available"));
}

/*
 * With the warm families, one rank's exposition still fits in
 * SEL_METRICS_BYTES(1) whatever the counters hold: every counter and
 * gauge at its widest (UINT64_MAX, 20 digits).
 */
static void test_warm_metrics_fit(void **state)
{
	static char buf[SEL_METRICS_BYTES(1)];
	struct sel_stats st;
	struct coord_metrics_staging staging;
	int n;

	(void)state;
	memset(&st, 0xff, sizeof(st));
	st.store_latency.sum_seconds = st.fetch_latency.sum_seconds = 1e300;
	memset(&staging, 0xff, sizeof(staging));
	n = coord_metrics_write(buf, sizeof(buf), &st, &staging, NULL, 1);
	assert_true(n > 0);
	assert_non_null(strstr(buf, "selene_warm_hits_total 18446744073709551615\n"));
	assert_non_null(strstr(buf, "selene_warm_store_fallbacks_total 18446744073709551615\n"));
	printf("worst-case exposition of one rank: %d of %u bytes\n", n, SEL_METRICS_BYTES(1));
}

/*
 * A read-through's entry: pages only, or pages and a row; committed it is
 * found and counted; aborted, its slots are zero again and free.
 */
static void test_warm_pool_read_through(void **state)
{
	struct shard_warm w;
	struct shard_warm_stats ws;
	struct rec_key a, b;
	uint32_t e;

	(void)state;
	assert_int_equal(warm_init_slots(&w, 4096, 10, 8, 2, 1), 0);
	make_key(&a, 64 * 4, 1);
	make_key(&b, 64 * 9, 2);
	e = shard_warm_reserve_read(&w, &a, 0, 4, false);
	assert_int_not_equal(e, SHARD_WARM_NONE);
	assert_int_equal(shard_warm_at(&w, e)->row_first, SHARD_WARM_NONE);
	shard_warm_commit_read(&w, e);
	assert_int_equal(shard_warm_find(&w, &a), e);
	/* 5 pages and a row of 2: 7 slots, 6 free. */
	assert_int_equal(shard_warm_reserve_read(&w, &b, 4, 5, true), SHARD_WARM_NONE);
	e = shard_warm_reserve_read(&w, &b, 4, 4, true);
	assert_int_not_equal(e, SHARD_WARM_NONE);
	for (uint32_t s = 0; s < 10; s++)
		memset(shard_slab_page(&w.pool, s), 0xab, 4096);
	shard_warm_abort_read(&w, e);
	assert_int_equal(shard_warm_find(&w, &b), SHARD_WARM_NONE);
	shard_warm_get_stats(&w, &ws);
	assert_int_equal(ws.read_throughs, 1);
	assert_int_equal(ws.read_through_bytes, 4 * 4096);
	assert_int_equal(ws.read_failures, 1);
	assert_int_equal(ws.read_fallbacks, 1);
	assert_int_equal(ws.slots_used, 4);
	assert_int_equal(ws.records, 1);
	/* The 6 freed slots are the free ones: zero again. */
	e = shard_warm_reserve_read(&w, &b, 4, 4, true);
	assert_int_not_equal(e, SHARD_WARM_NONE);
	{
		uint32_t slots[6];
		uint8_t zero[4096] = { 0 };

		shard_warm_page_slots(&w, e, 0, 4, slots);
		shard_warm_row_slots(&w, e, slots + 4);
		for (uint32_t i = 0; i < 6; i++)
			assert_memory_equal(shard_slab_page(&w.pool, slots[i]), zero, 4096);
	}
	shard_warm_destroy(&w);
}

/* A device that counts registrations and can refuse the n-th. */
struct counting_device {
	struct shard_device base;
	uint32_t registered, unregistered, refuse_at;
	uint8_t *ptrs[16];
	uint64_t bytes[16];
};

static int counting_bind(struct shard_device *dev)
{
	(void)dev;
	return 0;
}

static int counting_register(struct shard_device *dev, void *ptr, uint64_t bytes)
{
	struct counting_device *d = (struct counting_device *)dev;

	if (d->registered + 1 == d->refuse_at)
		return -ENOMEM;
	SEL_ASSERT(d->registered < 16);
	d->ptrs[d->registered] = ptr;
	d->bytes[d->registered++] = bytes;
	return 0;
}

static void counting_unregister(struct shard_device *dev, void *ptr)
{
	struct counting_device *d = (struct counting_device *)dev;
	bool known = false;

	for (uint32_t i = 0; i < d->registered; i++)
		known |= d->ptrs[i] == ptr;
	SEL_ASSERT(known);
	d->unregistered++;
}

static int counting_copy(struct shard_device *dev, enum shard_copy_direction dir,
			 const struct shard_copy *copies, uint32_t count)
{
	(void)dev;
	shard_copy_in_memory(dir, copies, count);
	return 0;
}

static int counting_synchronize(struct shard_device *dev)
{
	(void)dev;
	return 0;
}

static void counting_close(struct shard_device *dev)
{
	(void)dev;
}

static const struct shard_device_ops counting_ops = {
	.name = "counting", .bind = counting_bind, .register_host = counting_register,
	.unregister_host = counting_unregister, .copy = counting_copy,
	.synchronize = counting_synchronize, .close = counting_close,
	.mark = tu_device_mark_none, .wait_mark = tu_device_mark_none,
	.copies_synchronous = true,
};

/*
 * Registration in chunks of whole slots, back to back over the mapping,
 * each unregistered at destroy; a refused chunk unregisters the ones
 * before it and fails.
 */
static void test_warm_register_in_chunks(void **state)
{
	struct counting_device d = { .base = { .ops = &counting_ops } };
	struct shard_warm w;
	struct shard_warm_stats ws;

	(void)state;
	assert_int_equal(warm_init_slots(&w, 3 * 4096, 10, 8, 2, 1), 0);
	w.register_chunk_bytes = 32768; /* two 12 KiB slots a call: 5 calls */
	assert_int_equal(shard_warm_register(&w, &d.base), 0);
	assert_int_equal(d.registered, 5);
	for (uint32_t i = 0; i < 5; i++) {
		assert_ptr_equal(d.ptrs[i], w.pool.base + 24576ull * i);
		assert_int_equal(d.bytes[i], 24576);
	}
	shard_warm_get_stats(&w, &ws);
	assert_int_equal(ws.register_chunks, 5);
	shard_warm_destroy(&w);
	assert_int_equal(d.unregistered, 5);

	d = (struct counting_device){ .base = { .ops = &counting_ops }, .refuse_at = 3 };
	assert_int_equal(warm_init_slots(&w, 3 * 4096, 9, 8, 2, 1), 0);
	w.register_chunk_bytes = 32768; /* the last chunk is one slot */
	assert_int_equal(shard_warm_register(&w, &d.base), -ENOMEM);
	assert_int_equal(d.registered, 2);
	assert_int_equal(d.unregistered, 2);
	assert_null(w.registered);
	d.refuse_at = 0;
	assert_int_equal(shard_warm_register(&w, &d.base), 0);
	assert_int_equal(d.registered, 7);
	assert_int_equal(d.bytes[6], 12288);
	shard_warm_destroy(&w);
	assert_int_equal(d.unregistered, 7);
}

/* A tier of 3 planes of 8 KiB (or units) and a 60000-byte row, slot_count slots. */
static int warm_init_planes(struct shard_warm *w, const uint64_t units[3], uint32_t slot_count,
			    uint32_t group_slots_max)
{
	return shard_warm_init(w, &(struct shard_warm_shape){
					  .plane_bytes = units, .plane_count = 3,
					  .row_bytes = ROW_BYTES, .slot_count = slot_count,
					  .pages_max = 16, .group_slots_max = group_slots_max });
}

/*
 * The grouped layout: with equal planes of 4 KiB multiples, slots go in
 * groups of 64 (slot_count rounded down to whole groups; fewer slots than
 * 64 are one group), plane p of slot g*64 + j at g*64*slot_bytes +
 * 64*off[p] + j*stride, the spread says so, runs end at a group's end, a
 * row's pieces are its slots' planes in order, and registration chunks
 * are whole groups. Unequal strides, planes with padding, or a group of
 * at most 1 lay each slot out as one page record.
 */
static void test_warm_layout_groups(void **state)
{
	static const uint64_t equal[3] = { 8192, 8192, 8192 };
	struct counting_device d = { .base = { .ops = &counting_ops } };
	const uint64_t slot = 3 * 8192, group = 64 * slot;
	struct rec_page_spread sp;
	struct shard_warm w;
	void *pieces[REC_DISK_BUFFERS_MAX];
	uint32_t row_slots[3] = { 70, 71, 140 };
	uint64_t piece_bytes;

	(void)state;
	assert_int_equal(warm_init_planes(&w, equal, 200, SHARD_WARM_GROUP_SLOTS), 0);
	assert_int_equal(w.pool.group_slots, 64);
	assert_int_equal(w.pool.slot_count, 192);
	assert_int_equal(w.stats.slots_total, 192);
	assert_int_equal(w.pool.slot_bytes, slot);
	assert_int_equal(w.row_piece_count, 3);
	for (uint32_t s = 0; s < 192; s += 7)
		for (uint32_t p = 0; p < 3; p++)
			assert_ptr_equal(shard_slab_plane(&w.pool, s, p),
					 w.pool.base + (s / 64) * group + 64ull * 8192 * p +
						 (s % 64) * 8192ull);
	assert_ptr_equal(shard_slab_page(&w.pool, 65), w.pool.base + group + 8192);
	shard_slab_spread(&w.pool, &sp);
	assert_int_equal(sp.segment_count, 3);
	assert_int_equal(sp.segment_bytes, 8192);
	assert_int_equal(sp.pitch_bytes, 64 * 8192);
	assert_true(shard_slab_follows(&w.pool, 5, 6));
	assert_true(shard_slab_follows(&w.pool, 62, 63));
	assert_false(shard_slab_follows(&w.pool, 63, 64)); /* the next group */
	assert_false(shard_slab_follows(&w.pool, 5, 7));
	assert_false(shard_slab_follows(&w.pool, 6, 5));
	/* A 60000-byte row: 8 pieces of 8 KiB, each slot's planes in order. */
	assert_int_equal(shard_warm_row_buffers(&w, row_slots, pieces, &piece_bytes), 8);
	assert_int_equal(piece_bytes, 8192);
	for (uint32_t k = 0; k < 8; k++)
		assert_ptr_equal(pieces[k], shard_slab_plane(&w.pool, row_slots[k / 3], k % 3));
	memset(shard_slab_plane(&w.pool, 9, 1), 0xab, 8192);
	shard_slab_scrub(&w.pool, 9);
	assert_int_equal(*shard_slab_plane(&w.pool, 9, 1), 0);
	/* Chunks of two whole groups where a chunk holds two and a half. */
	w.register_chunk_bytes = 2 * group + group / 2;
	assert_int_equal(shard_warm_register(&w, &d.base), 0);
	assert_int_equal(d.registered, 2);
	assert_ptr_equal(d.ptrs[0], w.pool.base);
	assert_int_equal(d.bytes[0], 2 * group);
	assert_ptr_equal(d.ptrs[1], w.pool.base + 2 * group);
	assert_int_equal(d.bytes[1], group);
	shard_warm_destroy(&w);

	/* Fewer slots than a group: one group of them all. */
	assert_int_equal(warm_init_planes(&w, equal, 10, SHARD_WARM_GROUP_SLOTS), 0);
	assert_int_equal(w.pool.group_slots, 10);
	assert_int_equal(w.pool.slot_count, 10);
	assert_ptr_equal(shard_slab_plane(&w.pool, 3, 2), w.pool.base + 10 * 2 * 8192 + 3 * 8192);
	shard_warm_destroy(&w);

	/* G = 1: unequal strides, padded planes, or asked for. */
	{
		static const uint64_t uneven[3] = { 8192, 4096, 8192 };
		static const uint64_t padded[3] = { 5000, 5000, 5000 };
		const uint64_t *shapes[3] = { uneven, padded, equal };

		for (uint32_t i = 0; i < 3; i++) {
			uint64_t bytes = 0, offset = 0;

			assert_int_equal(warm_init_planes(&w, shapes[i], 130, i == 2 ? 1 :
							  SHARD_WARM_GROUP_SLOTS), 0);
			for (uint32_t p = 0; p < 3; p++)
				bytes += sel_align_up(shapes[i][p], 4096);
			assert_int_equal(w.pool.group_slots, 1);
			assert_int_equal(w.pool.slot_count, 130);
			assert_int_equal(w.pool.slot_bytes, bytes);
			for (uint32_t p = 0; p < 3; p++) {
				assert_ptr_equal(shard_slab_plane(&w.pool, 77, p),
						 w.pool.base + 77 * bytes + offset);
				offset += sel_align_up(shapes[i][p], 4096);
			}
			shard_slab_spread(&w.pool, &sp);
			assert_false(rec_page_spread_split(&sp));
			assert_false(shard_slab_follows(&w.pool, 5, 6));
			assert_int_equal(shard_warm_row_buffers(&w, row_slots, pieces,
								&piece_bytes),
					 (ROW_BYTES + bytes - 1) / bytes);
			assert_int_equal(piece_bytes, bytes);
			assert_ptr_equal(pieces[1], shard_slab_page(&w.pool, 71));
			shard_warm_destroy(&w);
		}
	}
}

/*
 * Slots are handed out lowest first, and a dropped record's slots go back
 * so that the next record of its size takes the same slots in the same
 * order (before, the free stack gave them back last first), its pages
 * still consecutive; an aborted reservation's too.
 */
static void test_warm_slots_in_order(void **state)
{
	static const uint64_t equal[3] = { 8192, 8192, 8192 };
	struct shard_warm w;
	struct rec_key a, b, c;
	uint32_t e, slots[8], row[3];

	(void)state;
	assert_int_equal(warm_init_planes(&w, equal, 64, SHARD_WARM_GROUP_SLOTS), 0);
	make_key(&a, 64 * 8, 1);
	make_key(&b, 64 * 5, 2);
	make_key(&c, 64 * 8 + 1, 3);
	e = shard_warm_reserve(&w, &a, 0, 8);
	shard_warm_commit(&w, e);
	shard_warm_page_slots(&w, e, 0, 8, slots);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(slots[i], i);
	shard_warm_row_slots(&w, e, row);
	for (uint32_t k = 0; k < 3; k++)
		assert_int_equal(row[k], 8 + k);
	e = shard_warm_reserve(&w, &b, 0, 5);
	shard_warm_commit(&w, e);
	shard_warm_page_slots(&w, e, 0, 5, slots);
	assert_int_equal(slots[0], 11);
	assert_int_equal(slots[4], 15);
	for (uint32_t round = 0; round < 3; round++) {
		assert_true(shard_warm_drop(&w, round % 2 ? &c : &a, false));
		e = shard_warm_reserve(&w, round % 2 ? &a : &c, 0, 8);
		shard_warm_page_slots(&w, e, 0, 8, slots);
		for (uint32_t i = 0; i < 8; i++)
			assert_int_equal(slots[i], i);
		shard_warm_row_slots(&w, e, row);
		for (uint32_t k = 0; k < 3; k++)
			assert_int_equal(row[k], 8 + k);
		if (round == 1) {
			shard_warm_abort(&w, e);
			e = shard_warm_reserve(&w, &a, 0, 8);
			shard_warm_page_slots(&w, e, 0, 8, slots);
			for (uint32_t i = 0; i < 8; i++)
				assert_int_equal(slots[i], i);
		}
		shard_warm_commit(&w, e);
	}
	shard_warm_destroy(&w);
}

/* Fetches chain's pages to ids (one each) and its row to slot. */
static int fetch_to(struct fixture *f, const struct shard_chain_record *chain, uint32_t count,
		    const uint32_t *ids, uint32_t slot)
{
	struct shard_fetch_job job = { .chain = chain, .chain_count = count,
				       .page_ids = ids, .state_slot = slot };
	struct shard_completion c;
	int ret = shard_engine_fetch(f->engine, ++f->next_job, &job);

	if (ret)
		return ret;
	shard_engine_wait(f->engine, &c);
	return c.result;
}

/*
 * Warm copies are one entry per plane for each run of consecutive warm
 * slots going to consecutive page ids, with warm slots grouped (before:
 * one per plane and page, as still with G = 1): a warm store of 7 pages
 * in windows of 4 and 3 copies 2 runs x 3 planes (a run ends with its
 * window there), its warm fetch 1 run (a fetch's runs go on past its
 * windows), one to ids with a gap 2 runs, and a read-through of it after
 * a drop (the same slots again, in order) uploads 2 (one a window), and
 * a run ends at its group's end; the row is its pieces (grouped: its
 * slots' 8 KiB planes). Byte-exact each time.
 */
static void test_warm_copy_entries_per_run(void **state)
{
	struct fixture *f = *state;
	bool grouped = f->plane_bytes[0] == PAGE_BYTES_GROUPED;
	uint32_t row = grouped ? (ROW_BYTES + 8191) / 8192 : ROW_PIECES;
	uint32_t ids[7] = { 100, 101, 102, 150, 151, 152, 153 };
	struct shard_chain_record chain;
	struct shard_warm_stats ws;
	struct rec_key a, x;

	tu_count_copy_entries(f->dev);
	open_engine(f, 128ull * SLOT_BYTES); /* two groups */
	make_key(&a, 64 * 7, 1);
	chain = (struct shard_chain_record){ a, 0, 7 };
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	assert_int_equal(tu_entries_to_host, (grouped ? 2 * 3 : 7 * 3) + row);
	poison(f);
	tu_entries_to_device = 0;
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 7, 4, a.consumed);
	assert_int_equal(tu_entries_to_device, (grouped ? 1 * 3 : 7 * 3) + row);
	poison(f);
	tu_entries_to_device = 0;
	assert_int_equal(fetch_to(f, &chain, 1, ids, 4), 0);
	for (uint32_t i = 0; i < 7; i++)
		assert_true(page_matches(f, ids[i], i));
	assert_true(row_matches(f, 4, a.consumed));
	assert_int_equal(tu_entries_to_device, (grouped ? 2 * 3 : 7 * 3) + row);
	/* Read through from its file into the slots it had, in order. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
	poison(f);
	tu_entries_to_device = 0;
	assert_int_equal(fetch_rt(f, &chain, 1, 0, 100, 4, true), 0);
	check_restored(f, 7, 4, a.consumed);
	assert_int_equal(tu_entries_to_device, (grouped ? 2 * 3 : 7 * 3) + row);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 1);
	poison(f);
	tu_entries_to_device = 0;
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 7, 4, a.consumed);
	assert_int_equal(tu_entries_to_device, (grouped ? 1 * 3 : 7 * 3) + row);
	/* A run ends at its group's end: a's pages in slots 63 | 64..69. */
	assert_int_equal(key_job(f, SHARD_JOB_WARM_DROP, &a), 0);
	make_key(&x, 64 * 60, 9);
	assert_int_equal(store(f, &x, NULL, 20, 2, true), 0); /* slots 0..62 */
	assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
	poison(f);
	tu_entries_to_device = 0;
	fetch_reading_no_file(f, &chain, 1, 0);
	check_restored(f, 7, 4, a.consumed);
	assert_int_equal(tu_entries_to_device, (grouped ? 2 * 3 : 7 * 3) + row);
}

/*
 * A warm fetch's entries held back while a run is open stay within the
 * lane's copy list: its calls grow to a window's entries and no further.
 * Windows of 33 pages of 16 planes, a record of 160 pages in its slots
 * in order, fetched to ids that break a run at every page but five: with
 * calls doubled past a window's (1024 entries), 1456 were held at once in
 * a list of 1312 (ASan: heap-buffer-overflow). Byte-exact.
 */
static void test_warm_fetch_held_entries_fit(void **state)
{
	struct fixture *f = *state;
	uint32_t ids[160];
	struct shard_chain_record chain;
	struct rec_key a;

	open_engine(f, 192ull * 16 * 4096); /* three groups of 64 slots */
	make_key(&a, 64 * 160, 1);
	assert_int_equal(store(f, &a, NULL, 0, 1, true), 0);
	for (uint32_t i = 0; i < 160; i++)
		ids[i] = i >= 28 && i <= 32 ? ids[i - 1] + 1 : 3 * i;
	chain = (struct shard_chain_record){ a, 0, 160 };
	poison(f);
	assert_int_equal(fetch_to(f, &chain, 1, ids, 4), 0);
	for (uint32_t i = 0; i < 160; i++)
		assert_true(page_matches(f, ids[i], i));
	assert_true(row_matches(f, 4, a.consumed));
}

/*
 * SELENE_WARM_GROUP_SLOTS caps G: 1 (or 0) lays the tier out as page
 * records in one piece (named so at startup, a warm fetch one entry a
 * page and plane), 8 groups of 8, unset 64; a malformed value is the
 * default.
 */
static void test_warm_group_slots_from_env(void **state)
{
	static const char *const values[] = { "1", "0", "8", "x", NULL };
	static const char *const lines[] = { "24 KiB, registered", "24 KiB, registered",
					     "in groups of 8 by plane", "in groups of 64 by plane",
					     "in groups of 64 by plane" };
	struct fixture *f = *state;
	struct shard_chain_record chain;
	struct rec_key a;
	char line[256];

	make_key(&a, 64 * 7, 1);
	chain = (struct shard_chain_record){ a, 0, 7 };
	tu_count_copy_entries(f->dev);
	for (uint32_t i = 0; i < 5; i++) {
		if (values[i])
			setenv("SELENE_WARM_GROUP_SLOTS", values[i], 1);
		else
			unsetenv("SELENE_WARM_GROUP_SLOTS");
		open_engine(f, 64ull * SLOT_BYTES);
		unsetenv("SELENE_WARM_GROUP_SLOTS");
		shard_engine_describe_warm(f->engine, line, sizeof(line));
		if (!strstr(line, lines[i]))
			fail_msg("SELENE_WARM_GROUP_SLOTS=%s: %s", values[i] ? values[i] : "(unset)",
				 line);
		assert_int_equal(store(f, &a, NULL, 10, 1, true), 0);
		poison(f);
		tu_entries_to_device = 0;
		fetch_reading_no_file(f, &chain, 1, 0);
		check_restored(f, 7, 4, a.consumed);
		assert_int_equal(tu_entries_to_device, (i < 2 ? 7 * 3 + ROW_PIECES : 3 + 8));
		assert_int_equal(key_job(f, SHARD_JOB_UNLINK, &a), 0);
		shard_engine_close(f->engine);
		f->engine = NULL;
	}
}

/* Stores key's record warm only, then its file from its warm slots (no device copy). */
static void store_then_write_from_warm(struct fixture *f, const struct rec_key *key,
				       const struct rec_key *parent, uint32_t base_id,
				       uint32_t slot)
{
	uint32_t first = parent ? (uint32_t)(parent->consumed / 64) : 0;
	uint32_t tail = (uint32_t)(key->consumed / 64) - first, ids[200];
	struct rec_header h;
	struct shard_store_job job = { .header = &h, .page_ids = ids, .state_slot = slot,
				       .warm = SHARD_STORE_WARM_WRITE };
	struct shard_completion c;

	assert_int_equal(store_as(f, key, parent, base_id, slot, SHARD_STORE_WARM_ONLY), 0);
	/* The device's bytes are wrong now: the file must come from the slots. */
	poison(f);
	for (uint32_t i = 0; i < tail; i++)
		ids[i] = base_id + i;
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, key, parent, &key->digest,
					 first, tail, 99), 0);
	assert_int_equal(shard_engine_store(f->engine, ++f->next_job, &job), 0);
	shard_engine_wait(f->engine, &c);
	assert_int_equal(c.result, 0);
}

/*
 * Byte-exact through every tier, for each layout (G = 1 with padded or
 * unequal planes, grouped, grouped in a memory-backed directory whose
 * verifying threads read the pages themselves): a chain of two records
 * stored warm only, written from its warm slots, restored warm; after a
 * restart (warm empty) from the disk, then read through into warm slots,
 * then restored warm again, reading no file.
 */
static void test_warm_round_trip_every_layout(void **state)
{
	struct fixture *f = *state;
	struct shard_engine_stats st;
	struct shard_warm_stats ws;
	struct shard_chain_record chain[2];
	struct rec_key a, b;

	open_engine(f, 64ull * SLOT_BYTES);
	make_key(&a, 64 * 7, 1);
	make_key(&b, 64 * 12 + 3, 2);
	store_then_write_from_warm(f, &a, NULL, 10, 1);
	store_then_write_from_warm(f, &b, &a, 17, 2);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 2);
	chain[0] = (struct shard_chain_record){ a, 0, 7 };
	chain[1] = (struct shard_chain_record){ b, 7, 5 };
	poison(f);
	fetch_reading_no_file(f, chain, 2, 0);
	check_restored(f, 12, 4, b.consumed);
	shard_engine_close(f->engine);
	open_engine(f, 64ull * SLOT_BYTES);
	poison(f);
	assert_int_equal(fetch(f, chain, 2, 0, 100, 4), 0);
	check_restored(f, 12, 4, b.consumed);
	poison(f);
	assert_int_equal(fetch_rt(f, chain, 2, 0, 100, 4, true), 0);
	check_restored(f, 12, 4, b.consumed);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.read_throughs, 2);
	assert_int_equal(ws.hits, 0);
	shard_engine_stats(f->engine, &st);
	if (rec_dir_memory_backed(f->dir))
		assert_true(st.fetch_windows_read_here > 0);
	poison(f);
	fetch_reading_no_file(f, chain, 2, 0);
	check_restored(f, 12, 4, b.consumed);
	shard_engine_warm_stats(f->engine, &ws);
	assert_int_equal(ws.hits, 1);
}

/*
 * An engine test again with warm slots grouped plane-major (setup_grouped).
 * Not test_warm_fetch_one_wait and test_warm_pipeline_failure_is_its_own:
 * they count copy calls of one page's entries each, and a grouped run is
 * one entry a plane (test_warm_copy_entries_per_run).
 */
#define GROUPED(test) { #test " (grouped)", test, setup_grouped, teardown, NULL }

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_warm_pool),
		cmocka_unit_test(test_warm_policy_write_states),
		cmocka_unit_test(test_warm_pool_read_through),
		cmocka_unit_test(test_warm_metrics_fit),
		cmocka_unit_test(test_warm_register_in_chunks),
		cmocka_unit_test(test_warm_layout_groups),
		cmocka_unit_test(test_warm_slots_in_order),
		cmocka_unit_test_setup_teardown(test_warm_copy_entries_per_run, setup, teardown),
		GROUPED(test_warm_copy_entries_per_run),
		GROUPED(test_warm_group_slots_from_env),
		cmocka_unit_test_setup_teardown(test_warm_fetch_held_entries_fit,
						setup_many_planes, teardown),
		cmocka_unit_test_setup_teardown(test_warm_round_trip_every_layout, setup,
						teardown),
		{ "test_warm_round_trip_every_layout (uneven)", test_warm_round_trip_every_layout,
		  setup_uneven, teardown, NULL },
		GROUPED(test_warm_round_trip_every_layout),
		{ "test_warm_round_trip_every_layout (grouped, memory-backed)",
		  test_warm_round_trip_every_layout, setup_grouped_shm, teardown, NULL },
		{ "test_warm_read_through_fails (grouped, memory-backed)",
		  test_warm_read_through_fails, setup_grouped_shm, teardown, NULL },
		cmocka_unit_test_setup_teardown(test_warm_fetch_reads_no_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_fetch_one_wait, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_fetches_pipelined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_pipeline_failure_is_its_own, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_warm_full_falls_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_only_store_drops_reads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_read_through_engine, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_read_through_waits_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_read_through_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_store_copy_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_store_row_with_last_window, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_warm_store_copies_counted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_store_windows_pipelined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_store_window_failure_is_its_own, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_warm_store_leaves_staging, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_store_done_with_its_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_partial_fetch_copy_fails, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_warm_truncate_unlink_restore, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_drop_refused_while_writing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_warm_restart_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_warm_bad_sizes, setup, teardown),
		GROUPED(test_warm_fetch_reads_no_file),
		GROUPED(test_warm_fetches_pipelined),
		GROUPED(test_warm_full_falls_back),
		GROUPED(test_warm_read_through_engine),
		GROUPED(test_warm_read_through_waits_once),
		GROUPED(test_warm_read_through_fails),
		GROUPED(test_warm_store_copy_fails),
		GROUPED(test_warm_store_row_with_last_window),
		GROUPED(test_warm_store_leaves_staging),
		GROUPED(test_warm_store_done_with_its_file),
		GROUPED(test_warm_partial_fetch_copy_fails),
		GROUPED(test_warm_truncate_unlink_restore),
		GROUPED(test_warm_restart_empty),
		GROUPED(test_warm_bad_sizes),
		cmocka_unit_test_setup_teardown(test_warm_api_write_behind, api_setup, api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_write_behind_chain_order, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_disk_full_while_dirty, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_drain_deadline, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_drain_retries_failed_write, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_drain_gives_up_on_failing_disk,
						api_setup, api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_dirty_child_of_cold_parent, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_three_ranks_write_behind, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_policy_mismatch_refused, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_max_age, api_setup, api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_one_rank, api_setup, api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_lru, api_setup, api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_rewrite_and_failed_write, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_three_ranks, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_read_through_three_ranks, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_register_refused, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_mismatch_refused, api_setup,
						api_teardown),
		cmocka_unit_test_setup_teardown(test_warm_api_bad_config, api_setup, api_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
