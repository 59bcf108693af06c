/*
 * Record format (record/format.h, FORMAT.md R-REC-*): header round trip,
 * structural validation, expectations, lengths, names and alignment.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/xxh.h"
#include "selene/selene.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct fixture {
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_header h;
	uint8_t buf[REC_HEADER_BYTES];
	char why[256];
};

/* A child record: parent at 130 tokens, key at 300, 64-token pages. */
static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct rec_key key = { .consumed = 300 }, parent = { .consumed = 130 };
	struct rec_digest bucket;

	tu_geometry(&f->g, 64, 3, 5000, 70000, 1, 4);
	tu_identities(NULL, &f->ns);
	memset(key.digest.bytes, 0xab, 16);
	memset(parent.digest.bytes, 0xcd, 16);
	memset(bucket.bytes, 0xef, 16);
	assert_int_equal(rec_header_init(&f->h, &f->g, &f->ns, &key, &parent,
					 &bucket, 2, 2, 12345), 0);
	f->h.row_checksum = 0x1122334455667788ull;
	rec_header_encode(&f->h, f->buf);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return 0;
}

/* Recomputes the header checksum after a deliberate edit (R-REC-5). */
static void resign(uint8_t *buf)
{
	memset(buf + REC_OFF_HEADER_CHECKSUM, 0, 8);
	sel_put_le64(buf + REC_OFF_HEADER_CHECKSUM, XXH3_64bits(buf, REC_HEADER_BYTES));
}

static void expect_bad(struct fixture *f, const uint8_t *buf, const char *rule)
{
	struct rec_header h;

	f->why[0] = '\0';
	assert_int_equal(rec_header_decode(buf, &h, f->why, sizeof(f->why)),
			 SEL_EBADHEADER);
	if (!strstr(f->why, rule))
		fail_msg("reason '%s' does not cite %s", f->why, rule);
}

/* R-REC-4: encode then decode gives back every field. */
static void test_format_header_round_trip(void **state)
{
	struct fixture *f = *state;
	struct rec_header h;

	assert_int_equal(rec_header_decode(f->buf, &h, f->why, sizeof(f->why)), 0);
	assert_memory_equal(f->buf, "FLARECKP", 8);
	assert_int_equal(h.version, 2);
	assert_true(rec_key_equal(&h.key, &f->h.key));
	assert_true(rec_key_equal(&h.parent, &f->h.parent));
	assert_true(rec_digest_equal(&h.bucket, &f->h.bucket));
	assert_true(rec_digest_equal(&h.fingerprint, &f->g.fingerprint));
	assert_memory_equal(h.namespace_id.bytes, f->ns.bytes, 32);
	assert_int_equal(h.page_tokens, 64);
	assert_int_equal(h.first_page_index, 2);
	assert_int_equal(h.tail_page_count, 2);
	assert_int_equal(h.rank_count, 1);
	assert_int_equal(h.first_rank, 1);
	assert_int_equal(h.world_size, 4);
	assert_int_equal(h.plane_count, 3);
	assert_int_equal(h.page_stride, 3 * 8192);
	assert_int_equal(h.checksum_offset, 4096);
	assert_int_equal(h.page_offset, 8192);
	assert_int_equal(h.row_offset, 8192 + 2 * 3 * 8192);
	assert_int_equal(h.row_length, 73728);
	assert_int_equal(h.row_checksum, 0x1122334455667788ull);
	assert_int_equal(h.created_ns, 12345);
	for (int i = 0; i < 3; i++)
		assert_int_equal(h.table[i], 5000);
	assert_int_equal(h.table[3], 70000);
	/* Offsets of docs/DESIGN.md section 4, byte-exact. */
	assert_int_equal(sel_get_le64(f->buf + 64), 300);
	assert_int_equal(sel_get_le64(f->buf + 88), 130);
	assert_int_equal(sel_get_le32(f->buf + 136), 2);
	assert_int_equal(sel_get_le64(f->buf + 256 + 24), 70000);
}

/* R-REC-1, R-REC-3, R-REC-5: magic, version, checksum and flags. */
static void test_format_rejects_envelope(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[REC_HEADER_BYTES];

	memcpy(buf, f->buf, sizeof(buf));
	buf[0] = 'G';
	expect_bad(f, buf, "R-REC-1");
	memcpy(buf, f->buf, sizeof(buf));
	sel_put_le32(buf + REC_OFF_VERSION, 1);
	resign(buf);
	expect_bad(f, buf, "R-REC-3");
	memcpy(buf, f->buf, sizeof(buf));
	sel_put_le32(buf + REC_OFF_VERSION, 3);
	resign(buf);
	expect_bad(f, buf, "R-REC-3");
	memcpy(buf, f->buf, sizeof(buf));
	sel_put_le32(buf + REC_OFF_FLAGS, REC_FLAG_REPLICATED_PAGES);
	resign(buf);
	expect_bad(f, buf, "R-REC-3");
	/* Any bit of the header, flipped, fails the header checksum. */
	for (size_t byte = 8; byte < REC_HEADER_BYTES; byte += 37) {
		memcpy(buf, f->buf, sizeof(buf));
		buf[byte] ^= 0x01;
		expect_bad(f, buf, byte >= REC_OFF_VERSION && byte < REC_OFF_VERSION + 4 ?
					   "R-REC-3" : "R-REC-5");
	}
}

/* R-REC-4, R-REC-6, R-REC-7: structure is checked even when signed. */
static void test_format_rejects_structure(void **state)
{
	struct fixture *f = *state;
	uint8_t buf[REC_HEADER_BYTES];

#define SIGNED_EDIT(edit, rule)                     \
	do {                                        \
		memcpy(buf, f->buf, sizeof(buf));   \
		edit;                               \
		resign(buf);                        \
		expect_bad(f, buf, rule);           \
	} while (0)
	SIGNED_EDIT(buf[REC_OFF_RESERVED_156] = 1, "R-REC-4");
	SIGNED_EDIT(buf[REC_OFF_RESERVED_224 + 31] = 1, "R-REC-4");
	SIGNED_EDIT(buf[REC_HEADER_BYTES - 1] = 1, "R-REC-4");
	SIGNED_EDIT(buf[256 + 32] = 1, "R-REC-4");
	SIGNED_EDIT(sel_put_le32(buf + REC_OFF_PAGE_TOKENS, 0), "R-REC-4");
	SIGNED_EDIT(sel_put_le32(buf + REC_OFF_RANK_COUNT, 0), "R-REC-4");
	SIGNED_EDIT(sel_put_le32(buf + REC_OFF_FIRST_RANK, 4), "R-REC-4");
	SIGNED_EDIT(sel_put_le32(buf + REC_OFF_PLANE_COUNT, 480), "R-REC-4");
	SIGNED_EDIT(sel_put_le64(buf + 256, 0), "R-REC-4");
	SIGNED_EDIT(sel_put_le64(buf + 256 + 24, REC_ROW_BYTES_MAX + 1), "R-REC-4");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_KEY_CONSUMED, 0), "R-REC-6");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_KEY_CONSUMED, 400), "R-REC-6");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_PARENT_CONSUMED, 300), "R-REC-6");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_PARENT_CONSUMED, 0), "R-REC-6");
	SIGNED_EDIT(sel_put_le32(buf + REC_OFF_FIRST_PAGE, 1), "R-REC-6");
	SIGNED_EDIT(sel_put_le32(buf + REC_OFF_TAIL_PAGES, 3), "R-REC-6");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_PAGE_STRIDE, 3 * 5000), "R-REC-7");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_CHECKSUM_OFFSET, 4097), "R-REC-7");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_PAGE_OFFSET, 4096), "R-REC-7");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_ROW_OFFSET, 4096 * 20), "R-REC-7");
	SIGNED_EDIT(sel_put_le64(buf + REC_OFF_ROW_LENGTH, 70000), "R-REC-7");
	SIGNED_EDIT(sel_put_le64(buf + 256, REC_UNIT_BYTES_MAX + 1), "R-REC-4");
#undef SIGNED_EDIT
}

/* R-REC-12, R-REC-2: identity, fingerprint, geometry and name. */
static void test_format_rejects_expectations(void **state)
{
	struct fixture *f = *state;
	struct rec_identity other_ns;
	struct rec_geometry *other = malloc(sizeof(*other));
	struct rec_key other_key = f->h.key;
	struct rec_expect expect = { 0 };

	tu_geometry(other, 64, 3, 5000, 70000, 1, 4);
	expect.namespace_id = &f->ns;
	expect.fingerprint = &f->g.fingerprint;
	expect.geometry = &f->g;
	expect.key = &f->h.key;
	assert_int_equal(rec_header_check_expected(&f->h, &expect, f->why,
						   sizeof(f->why)), 0);
	memcpy(&other_ns, &f->ns, sizeof(other_ns));
	other_ns.bytes[31] ^= 1;
	expect.namespace_id = &other_ns;
	assert_int_equal(rec_header_check_expected(&f->h, &expect, f->why,
						   sizeof(f->why)), SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "namespace"));
	expect.namespace_id = &f->ns;
	tu_geometry(other, 64, 3, 5000, 70000, 2, 4);
	expect.fingerprint = &other->fingerprint;
	assert_int_equal(rec_header_check_expected(&f->h, &expect, f->why,
						   sizeof(f->why)), SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "fingerprint"));
	expect.fingerprint = &f->g.fingerprint;
	tu_geometry(other, 64, 3, 5000, 70001, 1, 4);
	expect.geometry = other;
	assert_int_equal(rec_header_check_expected(&f->h, &expect, f->why,
						   sizeof(f->why)), SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "row"));
	expect.geometry = &f->g;
	other_key.digest.bytes[0] ^= 1;
	expect.key = &other_key;
	assert_int_equal(rec_header_check_expected(&f->h, &expect, f->why,
						   sizeof(f->why)), SEL_EMISMATCH);
	assert_non_null(strstr(f->why, "R-REC-2"));
	free(other);
}

/* R-REC-10: only the two exact lengths are valid; every other is refused. */
static void test_format_every_length(void **state)
{
	struct fixture *f = *state;
	uint64_t full = f->h.row_offset + f->h.row_length;
	bool row;

	for (uint64_t len = 0; len <= full + 4096; len++) {
		int ret = rec_header_check_length(&f->h, len, &row, f->why,
						  sizeof(f->why));

		if (len == full || len == f->h.row_offset) {
			assert_int_equal(ret, 0);
			assert_true(row == (len == full));
		} else {
			assert_int_equal(ret, SEL_EBADHEADER);
		}
	}
}

/* R-REC-2: names round-trip, and near misses are not record names. */
static void test_format_names(void **state)
{
	struct fixture *f = *state;
	char name[REC_FILE_NAME_BYTES], tmp_name[80], dir_name[REC_DIR_NAME_BYTES];
	struct rec_digest fingerprint;
	struct rec_key key;
	uint8_t prefix[8];
	bool tmp;

	rec_file_name(name, &f->h.key);
	assert_string_equal(name, "000000000000012c-abababababababababababababababab.ckpt");
	assert_true(rec_file_name_parse(name, &key, &tmp));
	assert_false(tmp);
	assert_true(rec_key_equal(&key, &f->h.key));
	snprintf(tmp_name, sizeof(tmp_name), "%s.tmp", name);
	assert_true(rec_file_name_parse(tmp_name, &key, &tmp));
	assert_true(tmp);
	assert_false(rec_file_name_parse("000000000000012c-ab.ckpt", &key, &tmp));
	name[3] = 'G';
	assert_false(rec_file_name_parse(name, &key, &tmp));
	name[3] = 'A'; /* uppercase is not this format's spelling */
	assert_false(rec_file_name_parse(name, &key, &tmp));
	snprintf(tmp_name, sizeof(tmp_name), "%.50s.ckpx", "000000000000012c-abababababababababababababababab");
	assert_false(rec_file_name_parse(tmp_name, &key, &tmp));
	rec_dir_name(dir_name, &f->ns, &f->g.fingerprint);
	assert_int_equal(strlen(dir_name), 49);
	assert_true(rec_dir_name_parse(dir_name, prefix, &fingerprint));
	assert_memory_equal(prefix, f->ns.bytes, 8);
	assert_true(rec_digest_equal(&fingerprint, &f->g.fingerprint));
	assert_false(rec_dir_name_parse("not-a-record-dir", prefix, &fingerprint));
}

/* R-REC-7, R-REC-8: every segment and plane is 4 KiB-aligned. */
static void test_format_alignment_every_geometry(void **state)
{
	static const struct {
		uint32_t page_tokens, planes;
		uint64_t unit, row;
		uint64_t consumed, parent;
	} cases[] = {
		{ 64, 1, 4096, 4096, 640, 0 },
		{ 64, 36, 65536, 300000, 64 * 70 + 5, 64 * 6 },
		{ 128, 4, 520, 1000, 128 * 3, 0 },
		{ 256, 6, 5000, 9000, 256 * 9, 256 * 4 + 17 },
		{ 64, 2, 12288, 4097, 64 * 3 + 10, 64 * 3 + 1 }, /* no tail pages */
		{ 128, 479, 16, 16, 128 * 2, 0 },               /* the most planes */
	};
	struct fixture *f = *state;
	struct rec_geometry *g = malloc(sizeof(*g));

	for (size_t i = 0; i < SEL_ARRAY_SIZE(cases); i++) {
		struct rec_key key = { .consumed = cases[i].consumed };
		struct rec_key parent = { .consumed = cases[i].parent };
		uint32_t first = (uint32_t)(cases[i].parent / cases[i].page_tokens);
		uint32_t tail = (uint32_t)(cases[i].consumed / cases[i].page_tokens) - first;
		struct rec_header h, back;
		uint64_t plane_offset = 0;

		memset(parent.digest.bytes, 1, 16);
		tu_geometry(g, cases[i].page_tokens, cases[i].planes, cases[i].unit,
			    cases[i].row, 0, 1);
		assert_int_equal(rec_header_init(&h, g, &f->ns, &key,
						 cases[i].parent ? &parent : NULL,
						 &key.digest, first, tail, 1), 0);
		assert_true(sel_is_aligned(h.checksum_offset, 4096));
		assert_true(sel_is_aligned(h.page_offset, 4096));
		assert_true(sel_is_aligned(h.page_stride, 4096));
		assert_true(sel_is_aligned(h.row_offset, 4096));
		assert_true(sel_is_aligned(h.row_length, 4096));
		assert_true(h.page_offset - h.checksum_offset >= 8ull * tail);
		for (uint32_t p = 0; p < g->page_plane_count; p++) {
			assert_true(sel_is_aligned(h.page_offset + plane_offset, 4096));
			assert_true(g->page_planes[p].unit_bytes <=
				    sel_align_up(g->page_planes[p].unit_bytes, 4096));
			plane_offset += sel_align_up(g->page_planes[p].unit_bytes, 4096);
		}
		assert_int_equal(plane_offset, h.page_stride);
		assert_int_equal(h.row_offset, h.page_offset + h.page_stride * tail);
		/* what the policy charges for one rank's file is its length */
		assert_int_equal(rec_geometry_file_bytes(g, tail, false), h.row_offset);
		assert_int_equal(rec_geometry_file_bytes(g, tail, true), h.row_offset + h.row_length);
		rec_header_encode(&h, f->buf);
		assert_int_equal(rec_header_decode(f->buf, &back, f->why,
						   sizeof(f->why)), 0);
	}
	free(g);
}

/* rec_header_init refuses pages that do not span parent to key (R-REC-6). */
static void test_format_init_checks_pages(void **state)
{
	struct fixture *f = *state;
	struct rec_key key = { .consumed = 300 }, parent = { .consumed = 130 };
	struct rec_header h;

	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, &parent,
					 &key.digest, 2, 3, 1), SEL_EBADHEADER);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL,
					 &key.digest, 0, 4, 1), 0);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, NULL,
					 &key.digest, 2, 2, 1), SEL_EBADHEADER);
	parent.consumed = 300;
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &key, &parent,
					 &key.digest, 4, 0, 1), SEL_EBADHEADER);
}

/* The checksums through the vector dispatcher equal libxxhash's plain XXH3 (R-REC-11). */
static void test_format_checksums_equal_plain_xxh3(void **state)
{
	const size_t bytes = (4u << 20) + 4096 + 77;
	uint8_t *buf = malloc(bytes);
	XXH3_state_t *st = XXH3_createState();
	const uint64_t seed = 0x9e3779b97f4a7c15ull;

	(void)state;
	assert_non_null(buf);
	assert_non_null(st);
	for (size_t i = 0; i < bytes; i++)
		buf[i] = (uint8_t)(i * 131 + (i >> 9));
	print_message("xxh3 dispatcher %s\n", sel_xxh3_dispatched() ? "present" : "absent");
	/* every small length, odd offsets, and the large lengths a window has */
	for (size_t len = 0; len < bytes; len = len < 2048 ? len + 1 : len * 3 + 4095) {
		for (size_t at = 0; at < 3 && at + len <= bytes; at++) {
			const uint8_t *p = buf + at;

			assert_true(sel_xxh3(p, len) == XXH3_64bits(p, len));
			assert_true(sel_xxh3_seeded(p, len, seed) == XXH3_64bits_withSeed(p, len, seed));
			assert_true(rec_page_checksum(p, len, seed, 7) ==
				    XXH3_64bits_withSeed(p, len, seed ^ 7));
			assert_true(rec_row_checksum(p, len, seed) ==
				    XXH3_64bits_withSeed(p, len, seed));
			/* streamed in uneven pieces */
			XXH3_64bits_reset(st);
			for (size_t done = 0, piece = 1; done < len; piece = piece * 2 + 5) {
				size_t n = len - done < piece ? len - done : piece;

				sel_xxh3_update(st, p + done, n);
				done += n;
			}
			assert_true(XXH3_64bits_digest(st) == XXH3_64bits(p, len));
		}
	}
	XXH3_freeState(st);
	free(buf);
}

/*
 * A page record's checksum streamed over its segments (rec_page_spread: a
 * warm slot's planes) equals the checksum of the same bytes in one piece,
 * for every segment count and spacing; a spread that does not hold the
 * page whole, or whose segments are not 4 KiB multiples, is not valid.
 */
static void test_format_page_checksum_spread(void **state)
{
	const uint64_t seed = 0x243f6a8885a308d3ull;
	uint8_t *page = malloc(6 * 8192), *spread_page = malloc(64 * 6 * 8192);

	(void)state;
	assert_non_null(page);
	assert_non_null(spread_page);
	for (uint32_t segments = 1; segments <= 6; segments++) {
		for (uint32_t group = 1; group <= 64; group *= 4) {
			struct rec_page_spread sp = { .segment_count = segments,
						      .segment_bytes = 8192,
						      .pitch_bytes = 8192ull * group };
			uint64_t stride = 8192ull * segments;

			for (uint64_t i = 0; i < stride; i++)
				page[i] = (uint8_t)(i * 37 + segments + group);
			memset(spread_page, 0x5a, 64 * 6 * 8192);
			for (uint32_t k = 0; k < segments; k++)
				memcpy(spread_page + sp.pitch_bytes * k, page + 8192ull * k, 8192);
			assert_true(rec_page_spread_valid(&sp, stride));
			assert_true(rec_page_checksum_spread(spread_page, &sp, stride, seed, 9) ==
				    rec_page_checksum(page, stride, seed, 9));
			assert_true(rec_page_checksum_spread(page, NULL, stride, seed, 9) ==
				    rec_page_checksum(page, stride, seed, 9));
			/* a byte outside the segments does not count; one inside does */
			if (group > 1) {
				spread_page[8192] ^= 1;
				assert_true(rec_page_checksum_spread(spread_page, &sp, stride,
								     seed, 9) ==
					    rec_page_checksum(page, stride, seed, 9));
			}
			spread_page[sp.pitch_bytes * (segments - 1) + 8191] ^= 1;
			assert_false(rec_page_checksum_spread(spread_page, &sp, stride, seed, 9) ==
				     rec_page_checksum(page, stride, seed, 9));
			/* one segment is a page in one piece, whatever its stride */
			assert_true(rec_page_spread_valid(&sp, stride + 8192) == (segments == 1));
		}
	}
	assert_false(rec_page_spread_valid(&(struct rec_page_spread){ 3, 5000, 8192 }, 15000));
	assert_false(rec_page_spread_valid(&(struct rec_page_spread){ 2, 8192, 4096 }, 16384));
	assert_true(rec_page_spread_valid(&(struct rec_page_spread){ 0 }, 12345));
	free(page);
	free(spread_page);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_format_header_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_rejects_envelope, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_rejects_structure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_rejects_expectations, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_every_length, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_alignment_every_geometry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_format_init_checks_pages, setup, teardown),
		cmocka_unit_test(test_format_checksums_equal_plain_xxh3),
		cmocka_unit_test(test_format_page_checksum_spread),
	};

	return cmocka_run_group_tests_name("format", tests, NULL, NULL);
}
