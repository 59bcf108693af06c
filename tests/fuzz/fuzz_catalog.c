/*
 * libFuzzer target for the scan cache decoder (record/catalog.c,
 * FORMAT.md R-DIR-10): any bytes as a cache file, then the same bytes with
 * the envelope made valid (magic, version, sizes, namespace, fingerprint,
 * count and checksums), so the entry checks behind it are reached. A
 * decoded cache must hold every entry it counts, each findable by its key.
 * Build and run with `make fuzz` (clang).
 */
#include "record/catalog.h"

#include "common/base.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The directory the cache is for: 2 planes of 4 KiB, 64 tokens a page. */
static void fuzz_directory(struct rec_geometry *g, struct rec_identity *ns)
{
	struct rec_plane planes[2] = { { .name = "k", .unit_bytes = 4096 },
				       { .name = "v", .unit_bytes = 4096 } };
	struct rec_geometry_spec spec = {
		.page_tokens = 64, .page_plane_count = 2, .page_planes = planes,
		.row_plane = { .name = "state", .unit_bytes = 8192 },
		.page_count = 64, .row_count = 8, .rank = 0, .world_size = 1,
	};
	char err[256];

	if (rec_geometry_init(g, &spec, err, sizeof(err)) != 0)
		__builtin_trap();
	memset(ns->bytes, 0x5a, sizeof(ns->bytes));
}

static void decode_checked(const uint8_t *buf, size_t size, const struct rec_geometry *g,
			   const struct rec_identity *ns)
{
	struct rec_catalog c;
	char why[256];

	rec_catalog_init(&c);
	if (rec_catalog_decode(&c, buf, size, g, ns, why, sizeof(why)) == 0) {
		if (c.count != sel_get_le64(buf + 16))
			__builtin_trap();
		for (size_t i = 0; i < c.count; i++)
			if (rec_catalog_find(&c, &c.entries[i].info.key) != &c.entries[i])
				__builtin_trap();
	} else if (c.count != 0) {
		__builtin_trap();
	}
	rec_catalog_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct rec_geometry g;
	static struct rec_identity ns;
	static int ready;
	size_t entries, bytes;
	uint8_t *buf;

	if (!ready) {
		fuzz_directory(&g, &ns);
		ready = 1;
	}
	decode_checked(data, size, &g, &ns);
	entries = size > REC_SCAN_CACHE_HEADER_BYTES ?
			  (size - REC_SCAN_CACHE_HEADER_BYTES) / REC_SCAN_CACHE_ENTRY_BYTES : 0;
	bytes = REC_SCAN_CACHE_HEADER_BYTES + entries * REC_SCAN_CACHE_ENTRY_BYTES;
	buf = calloc(1, bytes);
	if (!buf)
		return 0;
	memcpy(buf, data, size < bytes ? size : bytes);
	memcpy(buf, REC_SCAN_CACHE_MAGIC, 8);
	sel_put_le32(buf + 8, REC_SCAN_CACHE_VERSION);
	sel_put_le32(buf + 12, REC_SCAN_CACHE_ENTRY_BYTES);
	sel_put_le64(buf + 16, entries);
	sel_put_le64(buf + 24, XXH3_64bits(buf + REC_SCAN_CACHE_HEADER_BYTES,
					   bytes - REC_SCAN_CACHE_HEADER_BYTES));
	memcpy(buf + 32, ns.bytes, REC_IDENTITY_BYTES);
	memcpy(buf + 64, g.fingerprint.bytes, REC_DIGEST_BYTES);
	memset(buf + 80, 0, 40);
	sel_put_le64(buf + 120, XXH3_64bits(buf, 120));
	decode_checked(buf, bytes, &g, &ns);
	free(buf);
	return 0;
}
