/* Geometry validation and digests: see geometry.h, FORMAT.md R-KEY-3/4. */
#include "record/geometry.h"

#include "common/base.h"
#include "selene/selene.h"

#include <blake2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char shard_domain[] = "selene-shard-v1";

static int compare_planes(const void *a, const void *b)
{
	return strcmp(((const struct rec_plane *)a)->name,
		      ((const struct rec_plane *)b)->name);
}

/* Checks one plane's name and size; what names it in messages. */
static int check_plane(const struct rec_plane *plane, const char *what,
		       uint64_t unit_bytes_max, char *err, size_t err_size)
{
	size_t len = strnlen(plane->name, sizeof(plane->name));

	if (len == 0)
		return sel_fail(SEL_EGEOMETRY, err, err_size, "%s has an empty name", what);
	if (len > REC_PLANE_NAME_BYTES_MAX)
		return sel_fail(SEL_EGEOMETRY, err, err_size,
				     "%s name is longer than %u bytes", what,
				     REC_PLANE_NAME_BYTES_MAX);
	if (plane->unit_bytes == 0)
		return sel_fail(SEL_EGEOMETRY, err, err_size, "%s '%s' has zero unit bytes",
				     what, plane->name);
	if (plane->unit_bytes > unit_bytes_max)
		return sel_fail(SEL_EGEOMETRY, err, err_size,
				     "%s '%s' has %llu unit bytes, more than %llu",
				     what, plane->name,
				     (unsigned long long)plane->unit_bytes,
				     (unsigned long long)unit_bytes_max);
	return 0;
}

static int check_counts(const struct rec_geometry_spec *spec, char *err,
			size_t err_size)
{
	if (spec->page_tokens == 0 || spec->page_tokens > REC_PAGE_TOKENS_MAX)
		return sel_fail(SEL_EGEOMETRY, err, err_size,
				     "page tokens is %u; it must be 1 to %u",
				     spec->page_tokens, REC_PAGE_TOKENS_MAX);
	if (spec->page_plane_count == 0)
		return sel_fail(SEL_EGEOMETRY, err, err_size, "there are no page planes");
	if (spec->page_plane_count > REC_PAGE_PLANES_MAX)
		return sel_fail(SEL_EGEOMETRY, err, err_size,
				     "%u page planes; a record header describes at most %u",
				     spec->page_plane_count, REC_PAGE_PLANES_MAX);
	if (spec->page_count == 0)
		return sel_fail(SEL_EGEOMETRY, err, err_size, "page count is zero");
	if (spec->row_count == 0)
		return sel_fail(SEL_EGEOMETRY, err, err_size, "row count is zero");
	if (spec->world_size == 0 || spec->world_size > REC_WORLD_SIZE_MAX)
		return sel_fail(SEL_EGEOMETRY, err, err_size,
				     "world size is %u; it must be 1 to %u",
				     spec->world_size, REC_WORLD_SIZE_MAX);
	if (spec->rank >= spec->world_size)
		return sel_fail(SEL_EGEOMETRY, err, err_size,
				     "rank %u is outside a world of %u",
				     spec->rank, spec->world_size);
	return 0;
}

static void hash_plane(blake2b_state *state, const struct rec_plane *plane)
{
	uint8_t le[8];
	uint32_t len = (uint32_t)strlen(plane->name);

	sel_put_le32(le, len);
	blake2b_update(state, le, 4);
	blake2b_update(state, (const uint8_t *)plane->name, len);
	sel_put_le64(le, plane->unit_bytes);
	blake2b_update(state, le, 8);
}

static void layout_digest(struct rec_geometry *g)
{
	blake2b_state state;
	uint8_t le[4];

	blake2b_init(&state, REC_DIGEST_BYTES);
	sel_put_le32(le, g->page_tokens);
	blake2b_update(&state, le, 4);
	sel_put_le32(le, g->page_plane_count);
	blake2b_update(&state, le, 4);
	for (uint32_t i = 0; i < g->page_plane_count; i++)
		hash_plane(&state, &g->page_planes[i]);
	hash_plane(&state, &g->row_plane);
	blake2b_final(&state, g->layout_digest.bytes, REC_DIGEST_BYTES);
}

void rec_shard_fingerprint(struct rec_digest *out,
			   const struct rec_digest *layout, uint32_t rank,
			   uint32_t world_size)
{
	blake2b_state state;
	uint8_t le[4];

	blake2b_init(&state, REC_DIGEST_BYTES);
	blake2b_update(&state, (const uint8_t *)shard_domain, strlen(shard_domain));
	blake2b_update(&state, layout->bytes, REC_DIGEST_BYTES);
	sel_put_le32(le, rank);
	blake2b_update(&state, le, 4);
	sel_put_le32(le, world_size);
	blake2b_update(&state, le, 4);
	blake2b_final(&state, out->bytes, REC_DIGEST_BYTES);
}

int rec_geometry_init(struct rec_geometry *g,
		      const struct rec_geometry_spec *spec, char *err,
		      size_t err_size)
{
	char what[32];
	int ret = check_counts(spec, err, err_size);

	if (ret)
		return ret;
	memset(g, 0, sizeof(*g));
	for (uint32_t i = 0; i < spec->page_plane_count; i++) {
		snprintf(what, sizeof(what), "page plane %u", i);
		ret = check_plane(&spec->page_planes[i], what,
				  REC_UNIT_BYTES_MAX, err, err_size);
		if (ret)
			return ret;
		g->page_planes[i] = spec->page_planes[i];
	}
	ret = check_plane(&spec->row_plane, "row plane", REC_ROW_BYTES_MAX, err,
			  err_size);
	if (ret)
		return ret;
	qsort(g->page_planes, spec->page_plane_count, sizeof(g->page_planes[0]),
	      compare_planes);
	for (uint32_t i = 0; i < spec->page_plane_count; i++) {
		const char *name = g->page_planes[i].name;

		if ((i > 0 && strcmp(name, g->page_planes[i - 1].name) == 0) ||
		    strcmp(name, spec->row_plane.name) == 0)
			return sel_fail(SEL_EGEOMETRY, err, err_size,
					     "plane name '%s' is used twice", name);
		g->page_record_bytes +=
			sel_align_up(g->page_planes[i].unit_bytes, SEL_BLOCK_BYTES);
	}
	g->page_tokens = spec->page_tokens;
	g->page_plane_count = spec->page_plane_count;
	g->page_count = spec->page_count;
	g->row_count = spec->row_count;
	g->rank = spec->rank;
	g->world_size = spec->world_size;
	g->row_plane = spec->row_plane;
	g->row_record_bytes = sel_align_up(spec->row_plane.unit_bytes,
					   SEL_BLOCK_BYTES);
	layout_digest(g);
	rec_shard_fingerprint(&g->fingerprint, &g->layout_digest, g->rank,
			      g->world_size);
	return 0;
}

uint64_t rec_geometry_file_bytes(const struct rec_geometry *g, uint32_t tail_pages, bool row)
{
	return REC_HEADER_BYTES + sel_align_up(8ull * tail_pages, SEL_BLOCK_BYTES) +
	       g->page_record_bytes * tail_pages + (row ? g->row_record_bytes : 0);
}
