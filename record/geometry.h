/*
 * Cache geometry of one rank (seed 2.1): the page planes in name order, the
 * row plane, unit sizes, page and row counts, and the two digests derived
 * from them: the layout digest (equal on every rank) and the shard
 * fingerprint (one per rank). Pure data; it knows nothing of devices.
 */
#ifndef SELENE_RECORD_GEOMETRY_H
#define SELENE_RECORD_GEOMETRY_H

#include "common/limits.h"
#include "record/key.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rec_plane {
	char name[REC_PLANE_NAME_BYTES_MAX + 1];
	uint64_t unit_bytes; /* one page (or one row) of this plane */
};

/* What an engine describes; page planes may come in any order. */
struct rec_geometry_spec {
	uint32_t page_tokens;
	uint32_t page_plane_count;
	const struct rec_plane *page_planes;
	struct rec_plane row_plane;
	uint32_t page_count; /* physical pages per page plane on the device */
	uint32_t row_count;  /* state slots in the row plane */
	uint32_t rank;
	uint32_t world_size;
};

struct rec_geometry {
	uint32_t page_tokens;
	uint32_t page_plane_count;
	uint32_t page_count;
	uint32_t row_count;
	uint32_t rank;
	uint32_t world_size;
	struct rec_plane page_planes[REC_PAGE_PLANES_MAX]; /* name order */
	struct rec_plane row_plane;
	uint64_t page_record_bytes; /* one page, every plane padded to 4 KiB */
	uint64_t row_record_bytes;  /* the row padded to 4 KiB */
	struct rec_digest layout_digest; /* R-KEY-3 */
	struct rec_digest fingerprint;   /* R-KEY-4 */
};

/*
 * Validates spec and fills g, planes sorted by name. Returns 0, or
 * SEL_EGEOMETRY with a message naming the problem in err (err_size bytes,
 * may be 0): an empty, overlong or duplicate name, a zero or oversized
 * size, more planes than a header can describe, a rank outside the world.
 */
int rec_geometry_init(struct rec_geometry *g,
		      const struct rec_geometry_spec *spec, char *err,
		      size_t err_size);

/*
 * The bytes of this rank's record file holding tail_pages stored pages,
 * with or without its row (R-REC-8, R-REC-10): the header, the checksum
 * segment, the pages and the row, each padded to 4 KiB.
 */
uint64_t rec_geometry_file_bytes(const struct rec_geometry *g, uint32_t tail_pages, bool row);

/* R-KEY-4: BLAKE2b-128("selene-shard-v1" || layout || u32 rank || u32 world). */
void rec_shard_fingerprint(struct rec_digest *out,
			   const struct rec_digest *layout_digest,
			   uint32_t rank, uint32_t world_size);

#endif
