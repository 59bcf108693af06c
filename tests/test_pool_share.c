/*
 * A rank's share of a pool claim into the device (shard/pool_share.h), on
 * the host device: windows of pages and the row land in the claim's page
 * ids and state slot byte-exact, from a stream or from an arena image;
 * every window the claim does not expect is refused (a page twice, a page
 * within skip, a record outside the chain, a row out of order, sizes that
 * are not whole pages), an arena image of another record or with a broken
 * header is refused, and a claim that ends short fails at finish.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "record/format.h"
#include "selene/selene.h"
#include "shard/device.h"
#include "shard/pool_share.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define UNIT 4096u
#define ROW 6000u
#define PLANES 2u

struct fixture {
	struct rec_geometry g;
	struct rec_identity model, ns;
	struct shard_device *device;
	uint8_t *planes[PLANES];
	uint8_t *rows;
	struct shard_planes bases;
	struct shard_pool_share share;
	struct shard_pool_record chain[2];
	uint8_t page[2 * UNIT];  /* one stored page: both planes, padded */
	uint8_t row[8192];       /* the row segment, padded */
	char why[256];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	tu_geometry(&f->g, 64, PLANES, UNIT, ROW, 0, 1);
	tu_identities(&f->model, &f->ns);
	assert_int_equal(shard_device_open_host(&f->device), 0);
	for (uint32_t p = 0; p < PLANES; p++) {
		f->planes[p] = tu_alloc((size_t)UNIT * f->g.page_count);
		f->bases.page_base[p] = (uintptr_t)f->planes[p];
	}
	f->rows = tu_alloc((size_t)ROW * f->g.row_count);
	f->bases.row_base = (uintptr_t)f->rows;
	assert_int_equal(shard_pool_share_init(&f->share, &f->g, &f->ns, &f->bases, f->device), 0);
	/* a root of 4 pages without its row, then a record of 4 pages with it */
	f->chain[0] = (struct shard_pool_record){ .key = { .consumed = 256 },
						  .first_page_index = 0, .tail_page_count = 4 };
	f->chain[1] = (struct shard_pool_record){ .key = { .consumed = 512 },
						  .first_page_index = 4, .tail_page_count = 4,
						  .row = true };
	f->chain[0].key.digest.bytes[0] = 1;
	f->chain[1].key.digest.bytes[0] = 2;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	shard_pool_share_destroy(&f->share);
	for (uint32_t p = 0; p < PLANES; p++)
		free(f->planes[p]);
	free(f->rows);
	f->device->ops->close(f->device);
	free(f);
	return 0;
}

/* Stored page q of the chain (prefix index), as a record image holds it. */
static void make_page(uint8_t *out, uint32_t q)
{
	memset(out, 0, 2 * UNIT);
	tu_fill(out, UNIT, 1000 + q);
	tu_fill(out + UNIT, UNIT, 2000 + q);
}

static void expect_page(struct fixture *f, uint32_t id, uint32_t q)
{
	uint8_t want[2 * UNIT];

	make_page(want, q);
	assert_memory_equal(f->planes[0] + (size_t)UNIT * id, want, UNIT);
	assert_memory_equal(f->planes[1] + (size_t)UNIT * id, want + UNIT, UNIT);
}

static int window(struct fixture *f, uint32_t i, enum shard_pool_section section,
		  uint32_t first, uint32_t count, const uint8_t *data, size_t bytes)
{
	f->why[0] = '\0';
	return shard_pool_share_window(&f->share, i, section, first, count, data, bytes, f->why,
				       sizeof(f->why));
}

/*
 * A stream of windows, skipping the first 3 pages: pages land in their ids
 * in any window order, the row (split in two windows) in its slot, header
 * and checksum windows move nothing; finish counts what reached the device.
 */
static void test_pool_share_stream_byte_exact(void **state)
{
	struct fixture *f = *state;
	uint32_t ids[5] = { 40, 7, 33, 12, 50 };
	uint8_t pages[2][2 * UNIT * 2];
	uint64_t bytes = 0;

	tu_fill(f->row, sizeof(f->row), 99);
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 3, ids, 5, 6, f->why,
						sizeof(f->why)), 0);
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_HEADER, 0, 4096, f->row, 4096), 0);
	make_page(pages[0], 3);
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_PAGES, 3, 1, pages[0], 2 * UNIT), 0);
	/* record 1's pages 2 and 3 before its 0 and 1 */
	make_page(pages[1], 6);
	make_page(pages[1] + 2 * UNIT, 7);
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_PAGES, 2, 2, pages[1], 4 * UNIT), 0);
	make_page(pages[1], 4);
	make_page(pages[1] + 2 * UNIT, 5);
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_PAGES, 0, 2, pages[1], 4 * UNIT), 0);
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_ROW, 0, 5000, f->row, 5000), 0);
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_ROW, 5000, 3192, f->row + 5000, 3192), 0);
	assert_int_equal(shard_pool_share_finish(&f->share, &bytes, f->why, sizeof(f->why)), 0);
	for (uint32_t d = 0; d < 5; d++)
		expect_page(f, ids[d], 3 + d);
	assert_memory_equal(f->rows + (size_t)ROW * 6, f->row, ROW);
	assert_int_equal(bytes, 5ull * 2 * UNIT + ROW);
}

/* Windows the claim does not expect are refused, naming what is wrong. */
static void test_pool_share_refuses_unexpected_windows(void **state)
{
	struct fixture *f = *state;
	uint32_t ids[5] = { 0, 1, 2, 3, 4 };
	uint8_t page[2 * UNIT * 2];

	make_page(page, 3);
	make_page(page + 2 * UNIT, 4);
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 3, ids, 5, 0, f->why,
						sizeof(f->why)), 0);
	assert_int_equal(window(f, 2, SHARD_POOL_SECTION_PAGES, 0, 1, page, 2 * UNIT),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "claim record 2 of 2"));
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_PAGES, 2, 1, page, 2 * UNIT),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "within the 3 pages skipped"));
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_PAGES, 3, 2, page, 4 * UNIT),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "past its 4"));
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_PAGES, 3, 1, page, 2 * UNIT - 1),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "not 8192"));
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_PAGES, 3, 1, page, 2 * UNIT), 0);
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_PAGES, 3, 1, page, 2 * UNIT),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "arrived twice"));
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_ROW, 0, 100, f->row, 100),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "the row is the last record's"));
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_ROW, 100, 100, f->row, 100),
			 SEL_EMISMATCH);
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_ROW, 0, 100, f->row, 99),
			 SEL_EMISMATCH);
}

/*
 * A claim that stops early (a connection lost, a deadline) fails at
 * finish: missing pages, or a row not whole.
 */
static void test_pool_share_short_claim_fails(void **state)
{
	struct fixture *f = *state;
	uint32_t ids[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	uint8_t page[2 * UNIT];
	uint64_t bytes;

	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 0, ids, 8, 0, f->why,
						sizeof(f->why)), 0);
	make_page(page, 0);
	assert_int_equal(window(f, 0, SHARD_POOL_SECTION_PAGES, 0, 1, page, sizeof(page)), 0);
	assert_int_equal(shard_pool_share_finish(&f->share, &bytes, f->why, sizeof(f->why)),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "1 of 8 pages"));
	/* every page, and part of the row */
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 4, ids, 4, 0, f->why,
						sizeof(f->why)), 0);
	for (uint32_t j = 0; j < 4; j++) {
		make_page(page, 4 + j);
		assert_int_equal(window(f, 1, SHARD_POOL_SECTION_PAGES, j, 1, page, sizeof(page)),
				 0);
	}
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_ROW, 0, 4096, f->row, 4096), 0);
	assert_int_equal(shard_pool_share_finish(&f->share, &bytes, f->why, sizeof(f->why)),
			 SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "4096 of 6000 row bytes"));
}

/* begin refuses a chain that cannot be restored into this rank. */
static void test_pool_share_begin_checks(void **state)
{
	struct fixture *f = *state;
	uint32_t ids[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	struct shard_pool_record broken[2];

	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 0, ids, 7, 0, f->why,
						sizeof(f->why)), -EINVAL);
	assert_non_null(strstr(f->why, "names 7 page ids"));
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 0, ids, 8,
						f->g.row_count, f->why, sizeof(f->why)), -EINVAL);
	ids[3] = f->g.page_count;
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 0, ids, 8, 0, f->why,
						sizeof(f->why)), -EINVAL);
	assert_non_null(strstr(f->why, "past this rank's"));
	ids[3] = 3;
	memcpy(broken, f->chain, sizeof(broken));
	broken[1].first_page_index = 5;
	assert_int_equal(shard_pool_share_begin(&f->share, broken, 2, 0, ids, 8, 0, f->why,
						sizeof(f->why)), -EINVAL);
	assert_non_null(strstr(f->why, "does not follow"));
	broken[1] = f->chain[1];
	broken[1].row = false;
	assert_int_equal(shard_pool_share_begin(&f->share, broken, 2, 0, ids, 8, 0, f->why,
						sizeof(f->why)), -EINVAL);
	assert_non_null(strstr(f->why, "no row"));
}

/* A record image as the arena holds it: header, checksums, pages, row. */
static uint8_t *make_image(struct fixture *f, uint32_t i, bool row, uint64_t *bytes)
{
	const struct shard_pool_record *r = &f->chain[i];
	struct rec_header h;
	struct rec_layout layout;
	struct rec_digest bucket = { { 0 } };
	uint8_t *image;

	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &r->key,
					 i ? &f->chain[i - 1].key : NULL, &bucket,
					 r->first_page_index, r->tail_page_count, 1), 0);
	assert_int_equal(rec_layout_from_header(&h, &layout), 0);
	*bytes = row ? layout.file_length : layout.row_offset;
	image = tu_alloc(layout.file_length);
	rec_header_encode(&h, image);
	for (uint32_t j = 0; j < r->tail_page_count; j++)
		make_page(image + layout.page_offset + j * layout.page_stride,
			  r->first_page_index + j);
	if (row)
		memcpy(image + layout.row_offset, f->row, ROW);
	return image;
}

/*
 * Begins the claim of both records to ids (pages 2 .. 7 and the row to
 * row 3), places image[0] (no row) and image[1] (with it) in order, and
 * returns the finish's result, *copied the bytes it says it copied.
 */
static int place_both(struct fixture *f, const uint32_t *ids, uint8_t *const *image,
		      const uint64_t *bytes, uint64_t *copied)
{
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 2, ids, 6, 3, f->why,
						sizeof(f->why)), 0);
	for (uint32_t i = 0; i < 2; i++)
		assert_int_equal(shard_pool_share_place(&f->share, i, image[i], bytes[i], f->why,
							sizeof(f->why)), 0);
	return shard_pool_share_finish(&f->share, copied, f->why, sizeof(f->why));
}

/* What a claim of both records placed at ids holds, byte for byte, and copied bytes. */
static void expect_placed(struct fixture *f, const uint32_t *ids, uint64_t copied)
{
	for (uint32_t d = 0; d < 6; d++)
		expect_page(f, ids[d], 2 + d);
	assert_memory_equal(f->rows + (size_t)ROW * 3, f->row, ROW);
	assert_int_equal(copied, 6ull * 2 * UNIT + ROW);
}

/*
 * Same host: each record's image in the arena is copied whole from its
 * place (pages within resident passed over, the row from the last), after
 * its header is checked: another record, or a broken header, is refused.
 */
static void test_pool_share_place_byte_exact(void **state)
{
	struct fixture *f = *state;
	uint32_t ids[6] = { 9, 8, 7, 6, 5, 4 };
	uint64_t bytes[2], copied;
	uint8_t *image[2];

	tu_fill(f->row, sizeof(f->row), 7);
	image[0] = make_image(f, 0, false, &bytes[0]);
	image[1] = make_image(f, 1, true, &bytes[1]);
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 2, ids, 6, 3, f->why,
						sizeof(f->why)), 0);
	assert_int_equal(shard_pool_share_place(&f->share, 1, image[0], bytes[0], f->why,
						sizeof(f->why)), SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "another record"));
	assert_int_equal(shard_pool_share_place(&f->share, 0, image[0], bytes[0], f->why,
						sizeof(f->why)), 0);
	assert_int_equal(shard_pool_share_place(&f->share, 1, image[1], bytes[1], f->why,
						sizeof(f->why)), 0);
	assert_int_equal(shard_pool_share_finish(&f->share, &copied, f->why, sizeof(f->why)), 0);
	expect_placed(f, ids, copied);
	/* a flipped header byte, and a length that is neither with nor without the row */
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 2, ids, 6, 3, f->why,
						sizeof(f->why)), 0);
	image[1][100] ^= 1;
	assert_int_equal(shard_pool_share_place(&f->share, 1, image[1], bytes[1], f->why,
						sizeof(f->why)), SEL_EBADHEADER);
	image[1][100] ^= 1;
	assert_int_equal(shard_pool_share_place(&f->share, 1, image[1], bytes[1] - 1, f->why,
						sizeof(f->why)), SEL_EBADHEADER);
	assert_int_equal(shard_pool_share_place(&f->share, 1, image[1], 100, f->why,
						sizeof(f->why)), SEL_EMISMATCH);
	free(image[0]);
	free(image[1]);
}

/* A device whose synchronize fails, as a CUDA stream's error surfaces. */
static int failing_synchronize(struct shard_device *dev)
{
	(void)dev;
	return -EIO;
}

/*
 * Same host: the arena copies are waited for once, at the claim's finish;
 * a failure there fails the claim with the device's error, not success.
 */
static void test_pool_share_place_sync_failure(void **state)
{
	struct fixture *f = *state;
	/* static: a failed assertion's teardown still closes through it */
	static struct shard_device_ops ops;
	uint32_t ids[6] = { 9, 8, 7, 6, 5, 4 };
	uint64_t bytes[2], copied;
	uint8_t *image[2];

	image[0] = make_image(f, 0, false, &bytes[0]);
	image[1] = make_image(f, 1, true, &bytes[1]);
	ops = *f->device->ops;
	ops.synchronize = failing_synchronize;
	f->device->ops = &ops;
	assert_int_equal(place_both(f, ids, image, bytes, &copied), -EIO);
	assert_non_null(strstr(f->why, "the device copies of the claim failed"));
	free(image[0]);
	free(image[1]);
}

/* Entries a device was given to copy, plain and strided, and their rows. */
static uint32_t recorded_entries, recorded_rows;
static const struct shard_device_ops *recorded_inner;

static int recording_copy(struct shard_device *dev, enum shard_copy_direction dir,
			  const struct shard_copy *copies, uint32_t count)
{
	recorded_entries += count;
	recorded_rows += count;
	return recorded_inner->copy(dev, dir, copies, count);
}

static int recording_copy_strided(struct shard_device *dev, enum shard_copy_direction dir,
				  const struct shard_copy_strided *copies, uint32_t count)
{
	recorded_entries += count;
	for (uint32_t i = 0; i < count; i++)
		recorded_rows += copies[i].rows;
	return recorded_inner->copy_strided(dev, dir, copies, count);
}

/*
 * Each plane of a run of stored pages of one record going to consecutive
 * page ids is one device entry, from an arena image and from a window; a
 * break in the ids or a new record starts a new run; bytes stay exact.
 */
static void test_pool_share_runs_copy_one_entry_per_plane(void **state)
{
	struct fixture *f = *state;
	/* static: a failed assertion's teardown still closes through it */
	static struct shard_device_ops ops;
	uint32_t ids[6] = { 10, 11, 12, 13, 20, 21 };
	uint8_t pages[4 * 2 * UNIT];
	uint64_t bytes[2], copied;
	uint8_t *image[2];

	tu_fill(f->row, sizeof(f->row), 5);
	image[0] = make_image(f, 0, false, &bytes[0]);
	image[1] = make_image(f, 1, true, &bytes[1]);
	recorded_inner = f->device->ops;
	ops = *f->device->ops;
	ops.copy = recording_copy;
	ops.copy_strided = recording_copy_strided;
	f->device->ops = &ops;
	recorded_entries = recorded_rows = 0;
	assert_int_equal(place_both(f, ids, image, bytes, &copied), 0);
	expect_placed(f, ids, copied);
	/* runs: pages 2-3 (ids 10-11), 4-5 (a new record, ids 12-13), 6-7 (ids 20-21); the row */
	assert_int_equal(recorded_entries, 3 * PLANES + 1);
	assert_int_equal(recorded_rows, 6 * PLANES + 1);
	/* a window of 4 pages to 4 consecutive ids: one entry per plane */
	recorded_entries = recorded_rows = 0;
	for (uint32_t d = 0; d < 6; d++)
		ids[d] = 30 + d;
	assert_int_equal(shard_pool_share_begin(&f->share, f->chain, 2, 2, ids, 6, 3, f->why,
						sizeof(f->why)), 0);
	for (uint32_t j = 0; j < 4; j++)
		make_page(pages + j * 2 * UNIT, 4 + j);
	assert_int_equal(window(f, 1, SHARD_POOL_SECTION_PAGES, 0, 4, pages, sizeof(pages)), 0);
	assert_int_equal(recorded_entries, PLANES);
	assert_int_equal(recorded_rows, 4 * PLANES);
	for (uint32_t d = 2; d < 6; d++)
		expect_page(f, ids[d], 2 + d);
	shard_pool_share_finish(&f->share, &copied, NULL, 0);
	free(image[0]);
	free(image[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pool_share_stream_byte_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_share_refuses_unexpected_windows, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pool_share_short_claim_fails, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_share_begin_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_share_place_byte_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_share_place_sync_failure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pool_share_runs_copy_one_entry_per_plane, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("pool_share", tests, NULL, NULL);
}
