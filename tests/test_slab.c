/*
 * The slab pool (shard/slab.h): alignment, exhaustion without blocking,
 * reuse, rows over several non-contiguous slots, release, intake
 * reservation, registration with the host device, and the memory available
 * for staging (meminfo and cgroup v1 and v2 files, fake and real).
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/slab.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Slots are 4 KiB-aligned and sized up to a multiple of 4 KiB. */
static void test_slab_alignment(void **state)
{
	struct shard_slab_pool pool;

	(void)state;
	assert_int_equal(shard_slab_init(&pool, 5000, 7), 0);
	assert_int_equal(pool.slot_bytes, 8192);
	for (uint32_t i = 0; i < 7; i++)
		assert_true(sel_is_aligned((uintptr_t)shard_slab_slot(&pool, i), 4096));
	assert_int_equal(shard_slab_slots_for(&pool, 8192 * 2 + 1), 3);
	shard_slab_destroy(&pool);
	assert_int_equal(shard_slab_init(&pool, 0, 7), -EINVAL);
	assert_int_equal(shard_slab_init(&pool, 4096, 0), -EINVAL);
}

/*
 * The grouped layout (shard_slab_layout): slots [0, 8) in groups of 4,
 * plane-major (plane p of slot 4g + j at g * 4 * 24 KiB + 4 * 8 KiB * p
 * + 8 KiB * j), the slots after them (a row's) page records in one piece;
 * runs follow within a group only; a scrub zeroes a slot's planes and
 * nothing else. Planes of 5000 bytes, or of unequal sizes, give G = 1.
 */
static void test_slab_grouped_layout(void **state)
{
	static const uint64_t equal[3] = { 8192, 8192, 8192 };
	static const uint64_t uneven[3] = { 8192, 4096, 8192 };
	static const uint64_t padded[3] = { 5000, 5000, 5000 };
	struct shard_slab_pool pool;
	struct rec_page_spread sp;

	(void)state;
	assert_int_equal(shard_slab_group_slots(equal, 3, 4), 4);
	assert_int_equal(shard_slab_group_slots(uneven, 3, 4), 1);
	assert_int_equal(shard_slab_group_slots(padded, 3, 4), 1);
	assert_int_equal(shard_slab_init(&pool, 3 * 8192, 11), 0);
	shard_slab_layout(&pool, equal, 3, 4, 8);
	for (uint32_t s = 0; s < 8; s++)
		for (uint32_t p = 0; p < 3; p++)
			assert_ptr_equal(shard_slab_plane(&pool, s, p),
					 pool.base + (s / 4) * 4 * 24576 + 4 * 8192 * p +
						 (s % 4) * 8192);
	for (uint32_t s = 8; s < 11; s++) {
		assert_ptr_equal(shard_slab_page(&pool, s), pool.base + s * 24576ull);
		assert_ptr_equal(shard_slab_plane(&pool, s, 2), pool.base + s * 24576ull + 16384);
	}
	shard_slab_spread(&pool, &sp);
	assert_int_equal(sp.segment_count, 3);
	assert_int_equal(sp.segment_bytes, 8192);
	assert_int_equal(sp.pitch_bytes, 4 * 8192);
	assert_true(shard_slab_follows(&pool, 0, 1));
	assert_true(shard_slab_follows(&pool, 6, 7));
	assert_false(shard_slab_follows(&pool, 3, 4)); /* the next group */
	assert_false(shard_slab_follows(&pool, 7, 8)); /* past the groups */
	assert_false(shard_slab_follows(&pool, 8, 9));
	memset(pool.base, 0xab, 11 * 24576ull);
	shard_slab_scrub(&pool, 5);
	shard_slab_scrub(&pool, 9);
	for (uint64_t at = 0; at < 11 * 24576ull; at++) {
		bool in5 = false;

		for (uint32_t p = 0; p < 3; p++)
			in5 = in5 || (pool.base + at >= shard_slab_plane(&pool, 5, p) &&
				      pool.base + at < shard_slab_plane(&pool, 5, p) + 8192);
		if (pool.base[at] != ((in5 || at / 24576 == 9) ? 0 : 0xab))
			fail_msg("byte %" PRIu64 " is %#x", at, pool.base[at]);
	}
	shard_slab_destroy(&pool);

	assert_int_equal(shard_slab_init(&pool, 3 * 8192, 6), 0);
	shard_slab_layout(&pool, padded, 3, 1, 6);
	assert_int_equal(pool.grouped_slots, 0);
	assert_ptr_equal(shard_slab_plane(&pool, 2, 1), pool.base + 2 * 24576 + 8192);
	shard_slab_spread(&pool, &sp);
	assert_false(rec_page_spread_split(&sp));
	assert_false(shard_slab_follows(&pool, 0, 1));
	shard_slab_destroy(&pool);
}

/* An unsatisfiable request fails at once, takes nothing, and is counted. */
static void test_slab_exhaustion_and_reuse(void **state)
{
	struct shard_slab_pool pool;
	uint32_t a_slots[8], b_slots[8];
	struct shard_slab_lease a = { .slots = a_slots, .capacity = 8 };
	struct shard_slab_lease b = { .slots = b_slots, .capacity = 8 };

	(void)state;
	assert_int_equal(shard_slab_init(&pool, 4096, 8), 0);
	assert_int_equal(shard_slab_alloc(&pool, 6, &a), 0);
	assert_int_equal(shard_slab_alloc(&pool, 3, &b), SEL_EQUEUEFULL);
	assert_int_equal(b.count, 0);
	assert_int_equal(pool.exhausted, 1);
	assert_int_equal(shard_slab_alloc(&pool, 2, &b), 0);
	assert_int_equal(shard_slab_free_count(&pool), 0);
	/* every slot handed out once */
	for (uint32_t i = 0; i < 6; i++)
		for (uint32_t j = 0; j < 2; j++)
			assert_int_not_equal(a.slots[i], b.slots[j]);
	shard_slab_release(&pool, &a);
	assert_int_equal(a.count, 0);
	assert_int_equal(shard_slab_free_count(&pool), 6);
	assert_int_equal(shard_slab_alloc(&pool, 6, &a), 0);
	shard_slab_release(&pool, &a);
	shard_slab_release(&pool, &b);
	assert_int_equal(shard_slab_free_count(&pool), 8);
	shard_slab_destroy(&pool);
}

/* A row spans several slots that need not be contiguous; bytes survive. */
static void test_slab_multi_piece_row(void **state)
{
	struct shard_slab_pool pool;
	uint32_t hole_slots[4], row_slots[4];
	struct shard_slab_lease hole = { .slots = hole_slots, .capacity = 4 };
	struct shard_slab_lease row = { .slots = row_slots, .capacity = 4 };
	uint8_t *expect = malloc(3 * 4096), *got = malloc(3 * 4096);

	(void)state;
	assert_int_equal(shard_slab_init(&pool, 4096, 6), 0);
	assert_int_equal(shard_slab_alloc(&pool, 4, &hole), 0);
	/* free slots 1 and 3 so the row's pieces are scattered */
	hole.slots[0] = hole_slots[1];
	hole.slots[1] = hole_slots[3];
	hole.count = 2;
	shard_slab_release(&pool, &hole);
	assert_int_equal(shard_slab_alloc(&pool, shard_slab_slots_for(&pool, 3 * 4096 - 100),
					  &row), 0);
	assert_int_equal(row.count, 3);
	tu_fill(expect, 3 * 4096, 77);
	for (uint32_t k = 0; k < 3; k++)
		memcpy(shard_slab_slot(&pool, row.slots[k]), expect + 4096 * k, 4096);
	for (uint32_t k = 0; k < 3; k++)
		memcpy(got + 4096 * k, shard_slab_slot(&pool, row.slots[k]), 4096);
	assert_memory_equal(got, expect, 3 * 4096);
	assert_false(row.slots[1] == row.slots[0] + 1 && row.slots[2] == row.slots[1] + 1);
	shard_slab_release(&pool, &row);
	free(expect);
	free(got);
	shard_slab_destroy(&pool);
}

/* Intake reservation: ordinary allocations cannot take reserved slots. */
static void test_slab_intake_reservation(void **state)
{
	struct shard_slab_pool pool;
	uint32_t s1[10], s2[10];
	struct shard_slab_lease a = { .slots = s1, .capacity = 10 };
	struct shard_slab_lease intake = { .slots = s2, .capacity = 10 };

	(void)state;
	assert_int_equal(shard_slab_init(&pool, 4096, 10), 0);
	assert_int_equal(shard_slab_reserve_intake(&pool, 4), 0);
	assert_int_equal(shard_slab_reserve_intake(&pool, 7), SEL_EQUEUEFULL);
	assert_int_equal(shard_slab_alloc(&pool, 7, &a), SEL_EQUEUEFULL);
	assert_int_equal(shard_slab_alloc(&pool, 6, &a), 0);
	assert_int_equal(shard_slab_alloc(&pool, 1, &a), SEL_EQUEUEFULL);
	assert_int_equal(shard_slab_alloc_intake(&pool, 4, &intake), 0);
	assert_int_equal(pool.reserved_count, 0);
	shard_slab_release(&pool, &intake);
	shard_slab_release(&pool, &a);
	assert_int_equal(shard_slab_free_count(&pool), 10);
	shard_slab_destroy(&pool);
}

/* Registration is a separate step; the host device accepts it. */
static void test_slab_register_host(void **state)
{
	struct shard_slab_pool pool;
	struct shard_device *dev;

	(void)state;
	assert_int_equal(shard_device_open_host(&dev), 0);
	assert_int_equal(shard_slab_init(&pool, 4096, 4), 0);
	assert_null(pool.registered);
	assert_int_equal(shard_slab_register(&pool, dev), 0);
	assert_ptr_equal(pool.registered, dev);
	shard_slab_unregister(&pool);
	assert_null(pool.registered);
	shard_slab_destroy(&pool);
	shard_device_close(dev);
}

/* Batched copies split at 16 MiB and keep every byte. */
static void test_slab_device_copy_splits(void **state)
{
	struct shard_device *dev;
	uint64_t big = (40ull << 20) + 4096;
	uint8_t *device = malloc(big), *host = malloc(big);
	struct shard_copy copy = { .device_address = (uintptr_t)device, .host = host,
				   .bytes = big };

	(void)state;
	tu_fill(device, big, 5);
	assert_int_equal(shard_device_open_host(&dev), 0);
	assert_int_equal(shard_device_copy(dev, SHARD_DEVICE_TO_HOST, &copy, 1), 0);
	assert_int_equal(dev->batch_calls, 3);
	assert_memory_equal(host, device, big);
	shard_device_close(dev);
	free(device);
	free(host);
}

/* Runs rows of a strided copy the host device's own way, or as plain entries. */
static void strided_round(struct shard_device *dev, uint64_t calls)
{
	enum { ROWS = 5, BYTES = 3000, HOST_PITCH = 8192, DEVICE_PITCH = 4096 };
	uint8_t *host = tu_alloc(HOST_PITCH * ROWS), *device = tu_alloc(DEVICE_PITCH * ROWS);
	struct shard_copy_strided c = { .device_address = (uintptr_t)device,
					.device_pitch = DEVICE_PITCH, .host = host + 100,
					.host_pitch = HOST_PITCH, .bytes = BYTES, .rows = ROWS };
	uint64_t before = dev->batch_calls, bytes = dev->bytes_copied;

	tu_fill(host, HOST_PITCH * ROWS, 3);
	memset(device, 0xee, DEVICE_PITCH * ROWS);
	assert_int_equal(shard_device_copy_strided(dev, SHARD_HOST_TO_DEVICE, &c, 1), 0);
	assert_int_equal(dev->batch_calls - before, calls);
	assert_int_equal(dev->bytes_copied - bytes, (uint64_t)BYTES * ROWS);
	for (uint32_t r = 0; r < ROWS; r++) {
		assert_memory_equal(device + DEVICE_PITCH * r, host + 100 + HOST_PITCH * r, BYTES);
		for (uint32_t b = BYTES; b < DEVICE_PITCH; b++)
			assert_int_equal(device[DEVICE_PITCH * r + b], 0xee);
	}
	free(host);
	free(device);
}

/*
 * A strided copy is one call to a device that copies strided (the host
 * device), and its rows as one batch of plain entries to a device that
 * does not; the bytes land the same, nothing between rows is touched.
 */
static void test_slab_device_copy_strided(void **state)
{
	/* static: a failed assertion still leaves the device's ops valid */
	static struct shard_device_ops plain;
	struct shard_device *dev;

	(void)state;
	assert_int_equal(shard_device_open_host(&dev), 0);
	strided_round(dev, 1);
	plain = *dev->ops;
	plain.copy_strided = NULL;
	dev->ops = &plain;
	strided_round(dev, 1);
	shard_device_close(dev);
}

/* The largest piece a device was given, and how many. */
static uint64_t strided_piece_max;
static uint32_t strided_pieces;
static const struct shard_device_ops *strided_inner;

static int recording_strided(struct shard_device *dev, enum shard_copy_direction dir,
			     const struct shard_copy_strided *copies, uint32_t count)
{
	for (uint32_t i = 0; i < count; i++) {
		uint64_t bytes = copies[i].bytes * copies[i].rows;

		strided_piece_max = bytes > strided_piece_max ? bytes : strided_piece_max;
		strided_pieces++;
	}
	return strided_inner->copy_strided(dev, dir, copies, count);
}

/*
 * A strided copy past SHARD_COPY_BATCH_BYTES_MAX reaches the device in
 * pieces of whole rows within it, as plain copies are cut: 17 rows of 1
 * MiB are 16 and 1, the bytes exact.
 */
static void test_slab_device_copy_strided_pieces(void **state)
{
	static struct shard_device_ops ops;
	const uint64_t row = 1u << 20, pitch = row + 4096;
	uint8_t *host = tu_alloc(pitch * 17), *device = tu_alloc(row * 17);
	struct shard_copy_strided c = { .device_address = (uintptr_t)device, .device_pitch = row,
					.host = host, .host_pitch = pitch, .bytes = row,
					.rows = 17 };
	struct shard_device *dev;

	(void)state;
	tu_fill(host, pitch * 17, 9);
	assert_int_equal(shard_device_open_host(&dev), 0);
	strided_inner = dev->ops;
	ops = *dev->ops;
	ops.copy_strided = recording_strided;
	dev->ops = &ops;
	strided_piece_max = 0;
	strided_pieces = 0;
	assert_int_equal(shard_device_copy_strided(dev, SHARD_HOST_TO_DEVICE, &c, 1), 0);
	assert_int_equal(strided_pieces, 2);
	assert_int_equal(strided_piece_max, SHARD_COPY_BATCH_BYTES_MAX);
	assert_int_equal(dev->bytes_copied, 17 * row);
	for (uint32_t r = 0; r < 17; r++)
		assert_memory_equal(device + row * r, host + pitch * r, row);
	shard_device_close(dev);
	free(host);
	free(device);
}

static uint32_t counted_synchronizes;

static int counted_synchronize(struct shard_device *dev)
{
	(void)dev;
	counted_synchronizes++;
	return -EIO;
}

/*
 * Marks: on the deferred device a mark's wait runs the copies issued
 * before it and leaves later ones queued; the host device's copies are
 * done when issued (its marks wait for nothing); a device without marks
 * waits for a mark by synchronizing, and its failure is the wait's.
 */
static void test_slab_device_marks(void **state)
{
	struct tu_deferred_device d;
	struct shard_device *host, plain;
	struct shard_device_ops plain_ops;
	uint8_t device[3][64], copied[3][64];
	struct shard_copy copies[3];

	(void)state;
	tu_deferred_device_init(&d);
	for (int i = 0; i < 3; i++) {
		tu_fill(device[i], sizeof(device[i]), 40 + (uint64_t)i);
		memset(copied[i], 0, sizeof(copied[i]));
		copies[i] = (struct shard_copy){ .device_address = (uintptr_t)device[i],
						 .host = copied[i], .bytes = 64 };
	}
	assert_int_equal(shard_device_copy(&d.base, SHARD_DEVICE_TO_HOST, &copies[0], 1), 0);
	assert_int_equal(shard_device_mark(&d.base, 0), 0);
	assert_int_equal(shard_device_copy(&d.base, SHARD_DEVICE_TO_HOST, &copies[1], 2), 0);
	assert_int_equal(shard_device_mark(&d.base, 1), 0);
	assert_int_equal(shard_device_wait_mark(&d.base, 0), 0);
	assert_memory_equal(copied[0], device[0], 64);
	assert_int_equal(copied[1][0], 0);
	assert_int_equal(d.queued_count, 2);
	assert_int_equal(d.queued_batches, 1);
	d.fail_synchronize_at = d.synchronize_calls + 1;
	assert_int_equal(shard_device_wait_mark(&d.base, 1), -EIO);
	assert_int_equal(copied[1][0], 0); /* a failed wait ran none of its copies */
	assert_int_equal(d.queued_count, 0);
	assert_int_equal(shard_device_wait_mark(&d.base, 0), 0); /* long done */

	assert_int_equal(shard_device_open_host(&host), 0);
	assert_true(host->ops->copies_synchronous);
	assert_int_equal(shard_device_copy(host, SHARD_DEVICE_TO_HOST, &copies[2], 1), 0);
	assert_int_equal(shard_device_mark(host, SHARD_DEVICE_MARKS - 1), 0);
	assert_memory_equal(copied[2], device[2], 64);
	assert_int_equal(shard_device_wait_mark(host, SHARD_DEVICE_MARKS - 1), 0);

	plain_ops = *host->ops;
	plain_ops.mark = NULL;
	plain_ops.wait_mark = NULL;
	plain_ops.synchronize = counted_synchronize;
	plain = (struct shard_device){ .ops = &plain_ops };
	assert_int_equal(shard_device_mark(&plain, 0), 0);
	assert_int_equal(shard_device_wait_mark(&plain, 0), -EIO);
	assert_int_equal(counted_synchronizes, 1);
	shard_device_close(host);
}

/* Writes text to dir/name, making the directories on the way. */
static void write_file(const char *dir, const char *name, const char *text)
{
	char path[1024];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	for (char *slash = strchr(path + strlen(dir) + 1, '/'); slash;
	     slash = strchr(slash + 1, '/')) {
		*slash = '\0';
		mkdir(path, 0755);
		*slash = '/';
	}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* shard_slab_memory_available_at over the fake files under base. */
static int available_at(const char *base, uint64_t *bytes)
{
	char meminfo[512], self[512], root[512];

	snprintf(meminfo, sizeof(meminfo), "%s/meminfo", base);
	snprintf(self, sizeof(self), "%s/self-cgroup", base);
	snprintf(root, sizeof(root), "%s/cg", base);
	return shard_slab_memory_available_at(meminfo, self, root, bytes);
}

#define MIB (1ull << 20)

/*
 * MemAvailable alone; then bounded by a v2 cgroup's room (its limit less
 * what it uses beyond inactive file cache), and by a tighter ancestor's;
 * a limit of "max" bounds nothing; nothing readable is -ENOENT.
 */
static void test_slab_memory_available_cgroup_v2(void **state)
{
	char *base = tu_make_temp_dir("meminfo");
	uint64_t bytes = 0;

	(void)state;
	assert_int_equal(available_at(base, &bytes), -ENOENT);
	write_file(base, "meminfo", "MemTotal:       16000000 kB\n"
				    "MemFree:         1000000 kB\n"
				    "MemAvailable:    8192000 kB\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 8192000ull * 1024);
	write_file(base, "self-cgroup", "0::/a/b\n");
	write_file(base, "cg/a/b/memory.max", "max\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 8192000ull * 1024);
	write_file(base, "cg/a/b/memory.max", "4294967296\n");
	write_file(base, "cg/a/b/memory.current", "3221225472\n");
	write_file(base, "cg/a/b/memory.stat", "anon 1\nfile 2\ninactive_file 536870912\n"
					       "active_file 268435456\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 1792 * MIB); /* 4 GiB - (3 GiB - 512 MiB - 256 MiB) */
	write_file(base, "cg/a/memory.max", "2147483648\n");
	write_file(base, "cg/a/memory.current", "2000000000\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 2147483648ull - 2000000000ull);
	/* over its limit: no room at all (known, not unknown) */
	write_file(base, "cg/a/memory.current", "3000000000\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 0);
	/* a cgroup limit without meminfo still says */
	write_file(base, "cg/a/memory.max", "max\n");
	write_file(base, "meminfo", "MemTotal:       16000000 kB\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 1792 * MIB);
	tu_remove_tree(base);
}

/*
 * A v1 memory controller (its line among others, its controllers listed
 * with a comma), its total_ file cache figures preferred; v1's page-rounded LONG_MAX
 * is no limit; a hybrid host's v2 line without a memory.max bounds nothing.
 */
static void test_slab_memory_available_cgroup_v1(void **state)
{
	char *base = tu_make_temp_dir("meminfo");
	uint64_t bytes = 0;

	(void)state;
	write_file(base, "meminfo", "MemAvailable:    8192000 kB\n");
	write_file(base, "self-cgroup", "9:name=systemd:/\n4:cpu,memory:/job/7\n0::/\n");
	write_file(base, "cg/memory/job/7/memory.limit_in_bytes", "9223372036854771712\n");
	write_file(base, "cg/memory/memory.limit_in_bytes", "9223372036854771712\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 8192000ull * 1024);
	write_file(base, "cg/memory/job/7/memory.limit_in_bytes", "2147483648\n");
	write_file(base, "cg/memory/job/7/memory.usage_in_bytes", "1073741824\n");
	write_file(base, "cg/memory/job/7/memory.stat", "inactive_file 1\n"
							"total_inactive_file 268435456\n"
							"active_file 1\n"
							"total_active_file 134217728\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 1408 * MIB); /* 2 GiB - (1 GiB - 256 MiB - 128 MiB) */
	/* a cgroup namespace: the host's path is not under the mount */
	write_file(base, "self-cgroup", "4:memory:/elsewhere/9\n");
	write_file(base, "cg/memory/memory.limit_in_bytes", "1073741824\n");
	assert_int_equal(available_at(base, &bytes), 0);
	assert_int_equal(bytes, 1024 * MIB);
	tu_remove_tree(base);
}

/* The machine's own figure, when it has one: above zero, at most its memory. */
static void test_slab_memory_available_here(void **state)
{
	uint64_t bytes = 0, total = (uint64_t)sysconf(_SC_PHYS_PAGES) *
				    (uint64_t)sysconf(_SC_PAGESIZE);
	int ret = shard_slab_memory_available(&bytes);

	(void)state;
	if (ret == -ENOENT)
		skip();
	assert_int_equal(ret, 0);
	assert_true(bytes <= total); /* 0 is possible: a cgroup at its limit */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slab_alignment),
		cmocka_unit_test(test_slab_grouped_layout),
		cmocka_unit_test(test_slab_exhaustion_and_reuse),
		cmocka_unit_test(test_slab_multi_piece_row),
		cmocka_unit_test(test_slab_intake_reservation),
		cmocka_unit_test(test_slab_register_host),
		cmocka_unit_test(test_slab_device_copy_splits),
		cmocka_unit_test(test_slab_device_copy_strided),
		cmocka_unit_test(test_slab_device_copy_strided_pieces),
		cmocka_unit_test(test_slab_device_marks),
		cmocka_unit_test(test_slab_memory_available_cgroup_v2),
		cmocka_unit_test(test_slab_memory_available_cgroup_v1),
		cmocka_unit_test(test_slab_memory_available_here),
	};

	return cmocka_run_group_tests_name("slab", tests, NULL, NULL);
}
