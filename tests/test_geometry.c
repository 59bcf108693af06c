/*
 * Geometry (record/geometry.h): validation with messages naming the
 * problem, name order, padded sizes, the layout digest vector, and what the
 * fingerprint does and does not depend on.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "selene/selene.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct spec_holder {
	struct rec_plane planes[4];
	struct rec_geometry_spec spec;
};

/* Three planes out of name order, as gen_key_vectors.py describes them. */
static void base_spec(struct spec_holder *s)
{
	memset(s, 0, sizeof(*s));
	strcpy(s->planes[0].name, "v");
	s->planes[0].unit_bytes = 8192;
	strcpy(s->planes[1].name, "k");
	s->planes[1].unit_bytes = 8192;
	strcpy(s->planes[2].name, "idx");
	s->planes[2].unit_bytes = 520;
	s->spec.page_tokens = 64;
	s->spec.page_plane_count = 3;
	s->spec.page_planes = s->planes;
	strcpy(s->spec.row_plane.name, "state");
	s->spec.row_plane.unit_bytes = 70000;
	s->spec.page_count = 1000;
	s->spec.row_count = 16;
	s->spec.rank = 1;
	s->spec.world_size = 4;
}

static struct rec_geometry *geometry_of(const struct spec_holder *s)
{
	static struct rec_geometry g;
	char err[256];

	assert_int_equal(rec_geometry_init(&g, &s->spec, err, sizeof(err)), 0);
	return &g;
}

static void expect_rejected(const struct spec_holder *s, const char *needle)
{
	struct rec_geometry *g = malloc(sizeof(*g));
	char err[256] = "";

	assert_int_equal(rec_geometry_init(g, &s->spec, err, sizeof(err)),
			 SEL_EGEOMETRY);
	if (!strstr(err, needle))
		fail_msg("message '%s' does not mention '%s'", err, needle);
	free(g);
}

/* Planes come out in name order with padded sizes; digests match vectors. */
static void test_geometry_order_sizes_and_vectors(void **state)
{
	struct spec_holder s;
	struct rec_geometry *g;
	char hex[33];

	(void)state;
	base_spec(&s);
	g = geometry_of(&s);
	assert_string_equal(g->page_planes[0].name, "idx");
	assert_string_equal(g->page_planes[1].name, "k");
	assert_string_equal(g->page_planes[2].name, "v");
	assert_int_equal(g->page_record_bytes, 4096 + 8192 + 8192);
	assert_int_equal(g->row_record_bytes, 73728);
	sel_hex_encode(hex, g->layout_digest.bytes, 16);
	assert_string_equal(hex, "2cffb53137193821226b425d07b9972e");
	sel_hex_encode(hex, g->fingerprint.bytes, 16);
	assert_string_equal(hex, "e2a1df3ed55dae763e4bfb0205c1f480");
}

/* Empty, duplicate and overlong names are refused, each named. */
static void test_geometry_rejects_bad_names(void **state)
{
	struct spec_holder s;

	(void)state;
	base_spec(&s);
	s.planes[1].name[0] = '\0';
	expect_rejected(&s, "empty name");
	base_spec(&s);
	strcpy(s.planes[1].name, "v");
	expect_rejected(&s, "'v' is used twice");
	base_spec(&s);
	strcpy(s.planes[1].name, "state");
	expect_rejected(&s, "'state' is used twice");
	base_spec(&s);
	memset(s.planes[0].name, 'x', sizeof(s.planes[0].name));
	expect_rejected(&s, "longer than 63 bytes");
	base_spec(&s);
	s.spec.row_plane.name[0] = '\0';
	expect_rejected(&s, "row plane has an empty name");
}

/* Zero sizes and counts, and sizes past their maximum, are refused. */
static void test_geometry_rejects_bad_sizes(void **state)
{
	struct spec_holder s;

	(void)state;
	base_spec(&s);
	s.planes[2].unit_bytes = 0;
	expect_rejected(&s, "'idx' has zero unit bytes");
	base_spec(&s);
	s.spec.row_plane.unit_bytes = 0;
	expect_rejected(&s, "'state' has zero unit bytes");
	base_spec(&s);
	s.planes[0].unit_bytes = REC_UNIT_BYTES_MAX + 1;
	expect_rejected(&s, "more than");
	base_spec(&s);
	s.spec.page_tokens = 0;
	expect_rejected(&s, "page tokens is 0");
	base_spec(&s);
	s.spec.page_plane_count = 0;
	expect_rejected(&s, "no page planes");
	base_spec(&s);
	s.spec.page_count = 0;
	expect_rejected(&s, "page count is zero");
	base_spec(&s);
	s.spec.row_count = 0;
	expect_rejected(&s, "row count is zero");
	base_spec(&s);
	s.spec.rank = 4;
	expect_rejected(&s, "rank 4 is outside a world of 4");
	base_spec(&s);
	s.spec.world_size = 0;
	expect_rejected(&s, "world size is 0");
}

/* More planes than a header's table can describe are refused. */
static void test_geometry_rejects_too_many_planes(void **state)
{
	struct rec_plane *planes = calloc(REC_PAGE_PLANES_MAX + 1, sizeof(*planes));
	struct spec_holder s;
	struct rec_geometry *g = malloc(sizeof(*g));
	char err[256];

	(void)state;
	base_spec(&s);
	for (uint32_t i = 0; i <= REC_PAGE_PLANES_MAX; i++) {
		snprintf(planes[i].name, sizeof(planes[i].name), "p%u", i);
		planes[i].unit_bytes = 4096;
	}
	s.spec.page_planes = planes;
	s.spec.page_plane_count = REC_PAGE_PLANES_MAX + 1;
	expect_rejected(&s, "a record header describes at most 479");
	s.spec.page_plane_count = REC_PAGE_PLANES_MAX;
	assert_int_equal(rec_geometry_init(g, &s.spec, err, sizeof(err)), 0);
	free(g);
	free(planes);
}

/* Options that leave the layout alone leave the fingerprint alone. */
static void test_geometry_fingerprint_stable(void **state)
{
	struct spec_holder s;
	struct rec_digest reference;
	struct rec_plane swapped;

	(void)state;
	base_spec(&s);
	reference = geometry_of(&s)->fingerprint;
	s.spec.page_count = 5;   /* GPU capacity is not layout */
	s.spec.row_count = 2;
	swapped = s.planes[0];   /* neither is the order planes are listed in */
	s.planes[0] = s.planes[2];
	s.planes[2] = swapped;
	assert_true(rec_digest_equal(&geometry_of(&s)->fingerprint, &reference));
}

/* Any plane size or name, page tokens, rank or world changes it. */
static void test_geometry_fingerprint_changes(void **state)
{
	struct spec_holder s;
	struct rec_digest reference, layout;

	(void)state;
	base_spec(&s);
	reference = geometry_of(&s)->fingerprint;
	layout = geometry_of(&s)->layout_digest;
#define EXPECT_CHANGE(mutation)                                              \
	do {                                                                 \
		base_spec(&s);                                               \
		mutation;                                                    \
		assert_false(rec_digest_equal(&geometry_of(&s)->fingerprint, \
					      &reference));                  \
	} while (0)
	EXPECT_CHANGE(s.planes[0].unit_bytes = 8200);
	EXPECT_CHANGE(s.planes[2].unit_bytes = 521);
	EXPECT_CHANGE(strcpy(s.planes[0].name, "w"));
	EXPECT_CHANGE(s.spec.row_plane.unit_bytes = 70001);
	EXPECT_CHANGE(strcpy(s.spec.row_plane.name, "row"));
	EXPECT_CHANGE(s.spec.page_tokens = 128);
	EXPECT_CHANGE(s.spec.page_plane_count = 2);
	EXPECT_CHANGE(s.spec.rank = 2);
	EXPECT_CHANGE(s.spec.world_size = 8);
#undef EXPECT_CHANGE
	/* Rank and world change the fingerprint but not the layout digest. */
	base_spec(&s);
	s.spec.rank = 3;
	assert_true(rec_digest_equal(&geometry_of(&s)->layout_digest, &layout));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_geometry_order_sizes_and_vectors),
		cmocka_unit_test(test_geometry_rejects_bad_names),
		cmocka_unit_test(test_geometry_rejects_bad_sizes),
		cmocka_unit_test(test_geometry_rejects_too_many_planes),
		cmocka_unit_test(test_geometry_fingerprint_stable),
		cmocka_unit_test(test_geometry_fingerprint_changes),
	};

	return cmocka_run_group_tests_name("geometry", tests, NULL, NULL);
}
