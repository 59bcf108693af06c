/*
 * The catalogue of a record directory and its scan cache (R-DIR-10).
 */
#include "record/catalog.h"

#include "common/base.h"
#include "common/limits.h"
#include "record/format.h"
#include "record/io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define CACHE_TMP_NAME REC_SCAN_CACHE_NAME ".tmp"

void rec_catalog_init(struct rec_catalog *c)
{
	memset(c, 0, sizeof(*c));
}

void rec_catalog_free(struct rec_catalog *c)
{
	free(c->entries);
	free(c->slots);
	rec_catalog_init(c);
}

void rec_catalog_clear(struct rec_catalog *c)
{
	c->count = 0;
	c->trust_before_ns = 0;
	if (c->slots)
		memset(c->slots, 0, c->slot_count * sizeof(*c->slots));
}

/* Keys are digests: their first bytes are already uniform. */
static size_t key_slot(const struct rec_catalog *c, const struct rec_key *key)
{
	uint64_t x;

	memcpy(&x, key->digest.bytes, sizeof(x));
	x ^= key->consumed * 0x9e3779b97f4a7c15ull;
	return (size_t)(x ^ x >> 29) & (c->slot_count - 1);
}

/* The slot holding key's entry, or the empty slot where it would go. */
static size_t find_slot(const struct rec_catalog *c, const struct rec_key *key)
{
	size_t i = key_slot(c, key);

	while (c->slots[i] && !rec_key_equal(&c->entries[c->slots[i] - 1].info.key, key))
		i = (i + 1) & (c->slot_count - 1);
	return i;
}

static int grow_slots(struct rec_catalog *c)
{
	size_t count = c->slot_count ? c->slot_count * 2 : 1024;
	uint32_t *slots = calloc(count, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	free(c->slots);
	c->slots = slots;
	c->slot_count = count;
	for (size_t e = 0; e < c->count; e++)
		c->slots[find_slot(c, &c->entries[e].info.key)] = (uint32_t)(e + 1);
	return 0;
}

int rec_catalog_put(struct rec_catalog *c, const struct rec_catalog_entry *e)
{
	size_t slot;
	int ret;

	if (c->count && c->slots[slot = find_slot(c, &e->info.key)]) {
		c->entries[c->slots[slot] - 1] = *e; /* a replacement needs no room */
		return 0;
	}
	if (c->slot_count < 2 * (c->count + 1)) {
		if (c->count >= REC_DIR_RECORDS_MAX)
			return SEL_ETOOBIG;
		ret = grow_slots(c);
		if (ret)
			return ret;
	}
	slot = find_slot(c, &e->info.key);
	if (c->count == c->capacity) {
		size_t capacity = c->capacity ? c->capacity * 2 : 256;
		struct rec_catalog_entry *grown = realloc(c->entries, capacity * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		c->entries = grown;
		c->capacity = capacity;
	}
	c->entries[c->count++] = *e;
	c->slots[slot] = (uint32_t)c->count;
	return 0;
}

/* Linear probing's deletion: later entries of the run move back a slot. */
static void empty_slot(struct rec_catalog *c, size_t hole)
{
	size_t mask = c->slot_count - 1;

	c->slots[hole] = 0;
	for (size_t i = (hole + 1) & mask; c->slots[i]; i = (i + 1) & mask) {
		size_t home = key_slot(c, &c->entries[c->slots[i] - 1].info.key);

		/* i's entry may fill the hole when its home is not in (hole, i]. */
		if (((i - home) & mask) >= ((i - hole) & mask)) {
			c->slots[hole] = c->slots[i];
			c->slots[i] = 0;
			hole = i;
		}
	}
}

void rec_catalog_remove(struct rec_catalog *c, const struct rec_key *key)
{
	size_t slot, index, last;

	if (!c->count)
		return;
	slot = find_slot(c, key);
	if (!c->slots[slot])
		return;
	index = c->slots[slot] - 1;
	empty_slot(c, slot);
	last = c->count - 1;
	if (index != last) {
		/* the last entry moves into the gap: its slot follows it */
		c->slots[find_slot(c, &c->entries[last].info.key)] = (uint32_t)(index + 1);
		c->entries[index] = c->entries[last];
	}
	c->count--;
}

const struct rec_catalog_entry *rec_catalog_find(const struct rec_catalog *c,
						 const struct rec_key *key)
{
	size_t slot;

	if (!c->count)
		return NULL;
	slot = find_slot(c, key);
	return c->slots[slot] ? &c->entries[c->slots[slot] - 1] : NULL;
}

/* R-DIR-10's layout: the header's fields, then an entry's. */
enum cache_offset {
	CACHE_MAGIC = 0,
	CACHE_VERSION = 8,
	CACHE_ENTRY_SIZE = 12,
	CACHE_COUNT = 16,
	CACHE_ENTRIES_SUM = 24,
	CACHE_NAMESPACE = 32,
	CACHE_FINGERPRINT = 64,
	CACHE_ZERO = 80,
	CACHE_HEADER_SUM = 120,
	ENTRY_KEY = 0,
	ENTRY_PARENT = 24,
	ENTRY_BUCKET = 48,
	ENTRY_FIRST_PAGE = 64,
	ENTRY_PAGES = 68,
	ENTRY_ROW = 72,
	ENTRY_ZERO = 76,
	ENTRY_CREATED = 80,
	ENTRY_AGREEMENT = 88,
	ENTRY_INO = 104,
	ENTRY_BYTES = 112,
	ENTRY_MTIME = 120,
	ENTRY_CTIME = 128,
};

_Static_assert(CACHE_NAMESPACE + REC_IDENTITY_BYTES == CACHE_FINGERPRINT, "cache header");
_Static_assert(CACHE_FINGERPRINT + REC_DIGEST_BYTES == CACHE_ZERO, "cache header");
_Static_assert(CACHE_HEADER_SUM + 8 == REC_SCAN_CACHE_HEADER_BYTES, "cache header");
_Static_assert(ENTRY_KEY + REC_KEY_BYTES == ENTRY_PARENT, "cache entry");
_Static_assert(ENTRY_PARENT + REC_KEY_BYTES == ENTRY_BUCKET, "cache entry");
_Static_assert(ENTRY_BUCKET + REC_DIGEST_BYTES == ENTRY_FIRST_PAGE, "cache entry");
_Static_assert(ENTRY_AGREEMENT + REC_DIGEST_BYTES == ENTRY_INO, "cache entry");
_Static_assert(ENTRY_CTIME + 8 == REC_SCAN_CACHE_ENTRY_BYTES, "cache entry");

static bool all_zero(const uint8_t *p, size_t bytes)
{
	for (size_t i = 0; i < bytes; i++)
		if (p[i])
			return false;
	return true;
}

static void encode_entry(uint8_t *p, const struct rec_catalog_entry *e)
{
	const struct rec_record_info *r = &e->info;

	memset(p, 0, REC_SCAN_CACHE_ENTRY_BYTES);
	rec_key_put(p + ENTRY_KEY, &r->key);
	rec_key_put(p + ENTRY_PARENT, &r->parent);
	memcpy(p + ENTRY_BUCKET, r->bucket.bytes, REC_DIGEST_BYTES);
	sel_put_le32(p + ENTRY_FIRST_PAGE, r->first_page_index);
	sel_put_le32(p + ENTRY_PAGES, r->tail_page_count);
	sel_put_le32(p + ENTRY_ROW, r->row_present);
	sel_put_le64(p + ENTRY_CREATED, r->created_ns);
	memcpy(p + ENTRY_AGREEMENT, r->agreement.bytes, REC_DIGEST_BYTES);
	sel_put_le64(p + ENTRY_INO, e->stamp.ino);
	sel_put_le64(p + ENTRY_BYTES, e->stamp.bytes);
	sel_put_le64(p + ENTRY_MTIME, e->stamp.mtime_ns);
	sel_put_le64(p + ENTRY_CTIME, e->stamp.ctime_ns);
}

/* False when the row field is neither 0 nor 1 or the zero field is not. */
static bool decode_entry(const uint8_t *p, struct rec_catalog_entry *e)
{
	struct rec_record_info *r = &e->info;
	uint32_t row = sel_get_le32(p + ENTRY_ROW);

	memset(e, 0, sizeof(*e));
	rec_key_get(p + ENTRY_KEY, &r->key);
	rec_key_get(p + ENTRY_PARENT, &r->parent);
	memcpy(r->bucket.bytes, p + ENTRY_BUCKET, REC_DIGEST_BYTES);
	r->first_page_index = sel_get_le32(p + ENTRY_FIRST_PAGE);
	r->tail_page_count = sel_get_le32(p + ENTRY_PAGES);
	r->row_present = row == 1;
	r->created_ns = sel_get_le64(p + ENTRY_CREATED);
	memcpy(r->agreement.bytes, p + ENTRY_AGREEMENT, REC_DIGEST_BYTES);
	e->stamp.ino = sel_get_le64(p + ENTRY_INO);
	e->stamp.bytes = sel_get_le64(p + ENTRY_BYTES);
	e->stamp.mtime_ns = sel_get_le64(p + ENTRY_MTIME);
	e->stamp.ctime_ns = sel_get_le64(p + ENTRY_CTIME);
	r->file_bytes = e->stamp.bytes;
	r->mtime_ns = e->stamp.mtime_ns;
	return row <= 1 && sel_get_le32(p + ENTRY_ZERO) == 0;
}

static void encode_header(uint8_t *p, uint64_t count, uint64_t entries_sum,
			  const struct rec_geometry *g, const struct rec_identity *namespace_id)
{
	memset(p, 0, REC_SCAN_CACHE_HEADER_BYTES);
	memcpy(p + CACHE_MAGIC, REC_SCAN_CACHE_MAGIC, 8);
	sel_put_le32(p + CACHE_VERSION, REC_SCAN_CACHE_VERSION);
	sel_put_le32(p + CACHE_ENTRY_SIZE, REC_SCAN_CACHE_ENTRY_BYTES);
	sel_put_le64(p + CACHE_COUNT, count);
	sel_put_le64(p + CACHE_ENTRIES_SUM, entries_sum);
	memcpy(p + CACHE_NAMESPACE, namespace_id->bytes, REC_IDENTITY_BYTES);
	memcpy(p + CACHE_FINGERPRINT, g->fingerprint.bytes, REC_DIGEST_BYTES);
	sel_put_le64(p + CACHE_HEADER_SUM, XXH3_64bits(p, CACHE_HEADER_SUM));
}

/*
 * The cache's reads and writes go through record/io.h, so that the disk
 * failpoints reach its failure paths too (a cache not saved, or not read,
 * costs a full scan and nothing else).
 */
int rec_catalog_save(const struct rec_catalog *c, int dirfd, const struct rec_geometry *g,
		     const struct rec_identity *namespace_id, bool durable)
{
	size_t bytes = REC_SCAN_CACHE_HEADER_BYTES + c->count * REC_SCAN_CACHE_ENTRY_BYTES;
	uint8_t *buf = malloc(bytes);
	int fd, ret;

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < c->count; i++)
		encode_entry(buf + REC_SCAN_CACHE_HEADER_BYTES + i * REC_SCAN_CACHE_ENTRY_BYTES,
			     &c->entries[i]);
	encode_header(buf, c->count,
		      XXH3_64bits(buf + REC_SCAN_CACHE_HEADER_BYTES,
				  bytes - REC_SCAN_CACHE_HEADER_BYTES),
		      g, namespace_id);
	fd = rec_io_create_fresh(dirfd, CACHE_TMP_NAME, O_WRONLY, 0644);
	ret = fd < 0 ? fd : rec_io_write_full(fd, buf, bytes, 0);
	if (!ret && durable && fdatasync(fd) != 0)
		ret = -errno;
	if (fd >= 0)
		close(fd);
	if (!ret && renameat(dirfd, CACHE_TMP_NAME, dirfd, REC_SCAN_CACHE_NAME) != 0)
		ret = -errno;
	else if (!ret && durable && fsync(dirfd) != 0) {
		ret = -errno;
		unlinkat(dirfd, REC_SCAN_CACHE_NAME, 0); /* renamed, but not for sure */
	}
	if (ret && fd >= 0)
		unlinkat(dirfd, CACHE_TMP_NAME, 0);
	free(buf);
	return ret;
}

/*
 * One entry as a valid header of this directory could give it: R-REC-6 and
 * R-REC-10 for its row presence. (Its agreement digest is not recomputed:
 * a BLAKE2b of 4 KiB an entry would double a warm restart's scan; the
 * checksums and the cache header's namespace and fingerprint bind it.)
 */
static int check_entry(const struct rec_catalog_entry *e, const struct rec_geometry *g,
		       const struct rec_identity *namespace_id, char *why, size_t why_size)
{
	const struct rec_record_info *r = &e->info;
	struct rec_header h;
	bool row_present;
	int ret;

	if (r->parent.consumed == 0 && !rec_digest_is_zero(&r->parent.digest))
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"an entry of key %" PRIu64 " is a root with a parent digest",
				r->key.consumed);
	ret = rec_header_init(&h, g, namespace_id, &r->key,
			      r->parent.consumed ? &r->parent : NULL, &r->bucket,
			      r->first_page_index, r->tail_page_count, r->created_ns);
	if (ret)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"an entry of key %" PRIu64 " spans no record (R-REC-6)",
				r->key.consumed);
	ret = rec_header_check_length(&h, e->stamp.bytes, &row_present, why, why_size);
	if (ret)
		return ret;
	if (row_present != r->row_present)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"an entry of key %" PRIu64 " has a row its length denies",
				r->key.consumed);
	return 0;
}

static int decode_entries(struct rec_catalog *c, const uint8_t *p, uint64_t count,
			  const struct rec_geometry *g, const struct rec_identity *namespace_id,
			  char *why, size_t why_size)
{
	struct rec_catalog_entry e;
	int ret;

	for (uint64_t i = 0; i < count; i++) {
		ret = decode_entry(p + i * REC_SCAN_CACHE_ENTRY_BYTES, &e) ? 0 :
		      sel_fail(SEL_EBADHEADER, why, why_size,
			       "entry %" PRIu64 " has a field out of range", i);
		if (!ret)
			ret = check_entry(&e, g, namespace_id, why, why_size);
		if (!ret && rec_catalog_find(c, &e.info.key))
			ret = sel_fail(SEL_EBADHEADER, why, why_size,
				       "key %" PRIu64 " has two entries", e.info.key.consumed);
		if (!ret)
			ret = rec_catalog_put(c, &e);
		if (ret)
			return ret;
	}
	return 0;
}

int rec_catalog_decode(struct rec_catalog *c, const uint8_t *buf, uint64_t bytes,
		       const struct rec_geometry *g, const struct rec_identity *namespace_id,
		       char *why, size_t why_size)
{
	uint64_t count;
	int ret;

	rec_catalog_clear(c);
	if (bytes < REC_SCAN_CACHE_HEADER_BYTES)
		return sel_fail(SEL_EBADHEADER, why, why_size, "%" PRIu64 " bytes long", bytes);
	count = sel_get_le64(buf + CACHE_COUNT);
	if (memcmp(buf + CACHE_MAGIC, REC_SCAN_CACHE_MAGIC, 8) != 0 ||
	    sel_get_le32(buf + CACHE_VERSION) != REC_SCAN_CACHE_VERSION ||
	    sel_get_le32(buf + CACHE_ENTRY_SIZE) != REC_SCAN_CACHE_ENTRY_BYTES ||
	    !all_zero(buf + CACHE_ZERO, CACHE_HEADER_SUM - CACHE_ZERO) ||
	    sel_get_le64(buf + CACHE_HEADER_SUM) != XXH3_64bits(buf, CACHE_HEADER_SUM))
		ret = sel_fail(SEL_EBADHEADER, why, why_size, "its header is not a version %u "
			       "scan cache's", REC_SCAN_CACHE_VERSION);
	else if (memcmp(buf + CACHE_NAMESPACE, namespace_id->bytes, REC_IDENTITY_BYTES) != 0 ||
		 memcmp(buf + CACHE_FINGERPRINT, g->fingerprint.bytes, REC_DIGEST_BYTES) != 0)
		ret = sel_fail(SEL_EBADHEADER, why, why_size, "it was written for another "
			       "namespace or shard (R-REC-12)");
	else if (count > REC_DIR_RECORDS_MAX ||
		 bytes != REC_SCAN_CACHE_HEADER_BYTES + count * REC_SCAN_CACHE_ENTRY_BYTES)
		ret = sel_fail(SEL_EBADHEADER, why, why_size, "%" PRIu64 " bytes do not hold "
			       "%" PRIu64 " entries", bytes, count);
	else if (sel_get_le64(buf + CACHE_ENTRIES_SUM) !=
		 XXH3_64bits(buf + REC_SCAN_CACHE_HEADER_BYTES, bytes - REC_SCAN_CACHE_HEADER_BYTES))
		ret = sel_fail(SEL_EBADHEADER, why, why_size, "its entries' checksum fails");
	else
		ret = decode_entries(c, buf + REC_SCAN_CACHE_HEADER_BYTES, count, g,
				     namespace_id, why, why_size);
	if (ret)
		rec_catalog_clear(c);
	return ret;
}

int rec_catalog_load(struct rec_catalog *c, int dirfd, const struct rec_geometry *g,
		     const struct rec_identity *namespace_id, char *why, size_t why_size)
{
	uint8_t *buf = NULL;
	uint64_t bytes;
	struct stat st;
	int fd, ret;

	rec_catalog_clear(c);
	fd = openat(dirfd, REC_SCAN_CACHE_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		ret = -errno;
		goto out;
	}
	bytes = (uint64_t)st.st_size;
	if (!S_ISREG(st.st_mode))
		ret = sel_fail(SEL_EBADHEADER, why, why_size, "not a regular file");
	else if (bytes > REC_SCAN_CACHE_HEADER_BYTES +
				 (uint64_t)REC_DIR_RECORDS_MAX * REC_SCAN_CACHE_ENTRY_BYTES)
		ret = sel_fail(SEL_EBADHEADER, why, why_size, "%" PRIu64 " bytes long", bytes);
	else if (!(buf = malloc(bytes ? bytes : 1)))
		ret = -ENOMEM;
	else
		ret = rec_io_read_full(fd, buf, bytes, 0);
	if (!ret)
		ret = rec_catalog_decode(c, buf, bytes, g, namespace_id, why, why_size);
	if (!ret)
		c->trust_before_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
				     (uint64_t)st.st_mtim.tv_nsec;
out:
	free(buf);
	close(fd);
	return ret;
}
