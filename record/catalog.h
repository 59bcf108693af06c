/*
 * A record directory's catalogue (docs/DESIGN.md section 4, "The scan
 * cache"; record/FORMAT.md R-DIR-10): for every record file, what the scan
 * would learn by reading its header (struct rec_record_info) and the file's
 * stamp when that was learned, keyed by record key. rec_dir (record/dir.h)
 * keeps one current through its scan, commits, row truncations and unlinks,
 * and saves it at a clean close as the scan cache, REC_SCAN_CACHE_NAME; the
 * next scan takes an entry instead of reading a header only where the
 * file's stamp is unchanged. Not thread-safe: its owner locks.
 */
#ifndef SELENE_RECORD_CATALOG_H
#define SELENE_RECORD_CATALOG_H

#include "record/dir.h"
#include "record/io.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The scan cache, in the record directory; never matched by a record name. */
#define REC_SCAN_CACHE_NAME ".selene-scan-cache"
#define REC_SCAN_CACHE_MAGIC "SELSCAN1"
#define REC_SCAN_CACHE_VERSION 1u
#define REC_SCAN_CACHE_HEADER_BYTES 128u
#define REC_SCAN_CACHE_ENTRY_BYTES 136u

/* One record file; info.file_bytes and info.mtime_ns equal the stamp's. */
struct rec_catalog_entry {
	struct rec_record_info info;
	struct rec_file_stamp stamp;
};

struct rec_catalog {
	struct rec_catalog_entry *entries; /* dense, in no order */
	size_t count;
	size_t capacity;
	uint32_t *slots;   /* entry index + 1, 0 empty; open addressing */
	size_t slot_count; /* 0, or a power of two above twice count */
	/*
	 * R-DIR-10's tick rule: an entry stands for its file only when its
	 * ctime is before this, the loaded cache file's mtime (a change in the
	 * tick the cache was written may have left the stamp as it was); 0
	 * trusts none.
	 */
	uint64_t trust_before_ns;
};

/* Zeroes c: an empty catalogue. */
void rec_catalog_init(struct rec_catalog *c);
void rec_catalog_free(struct rec_catalog *c);
/* Empties c, keeping its memory. */
void rec_catalog_clear(struct rec_catalog *c);

/* Adds e, or replaces the entry of its key. 0, -ENOMEM or SEL_ETOOBIG. */
int rec_catalog_put(struct rec_catalog *c, const struct rec_catalog_entry *e);
/* Removes key's entry; nothing when it has none. */
void rec_catalog_remove(struct rec_catalog *c, const struct rec_key *key);
/* key's entry, valid until c changes, or NULL. */
const struct rec_catalog_entry *rec_catalog_find(const struct rec_catalog *c,
						 const struct rec_key *key);

/*
 * Writes c to dirfd/REC_SCAN_CACHE_NAME, for the directory of namespace_id
 * and g's shard fingerprint, through a temporary file and a rename
 * (fdatasync before, directory fsync after, when durable). 0 or a negative
 * errno, with no temporary file left.
 */
int rec_catalog_save(const struct rec_catalog *c, int dirfd, const struct rec_geometry *g,
		     const struct rec_identity *namespace_id, bool durable);

/*
 * Replaces c's contents with the cache encoded in buf (bytes long), written
 * for namespace_id and g's fingerprint: every entry must be one a valid
 * header of this directory could give (R-REC-6, its length R-REC-10).
 * Returns 0, or SEL_EBADHEADER with why when buf is not a whole, valid
 * cache for them (c is then empty), or -ENOMEM.
 */
int rec_catalog_decode(struct rec_catalog *c, const uint8_t *buf, uint64_t bytes,
		       const struct rec_geometry *g, const struct rec_identity *namespace_id,
		       char *why, size_t why_size);

/*
 * rec_catalog_decode of dirfd/REC_SCAN_CACHE_NAME, and trust_before_ns set
 * to that file's mtime. Returns 0; -ENOENT when there is none;
 * SEL_EBADHEADER with why; or another negative errno.
 */
int rec_catalog_load(struct rec_catalog *c, int dirfd, const struct rec_geometry *g,
		     const struct rec_identity *namespace_id, char *why, size_t why_size);

#endif
