/*
 * The catalogue and its scan cache (record/catalog.h, FORMAT.md R-DIR-10):
 * the keyed set against a reference under random puts and removes, the
 * cache's round trip field by field, and every way a cache is refused.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/log.h"
#include "record/catalog.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_identity ns;
	int dirfd;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->base = tu_make_temp_dir("catalog");
	tu_geometry(&f->g, 64, 2, 4096, 8192, 0, 1);
	tu_identities(NULL, &f->ns);
	f->dirfd = open(f->base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(f->dirfd >= 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	close(f->dirfd);
	tu_remove_tree(f->base);
	free(f);
	return 0;
}

/* An entry for a record this geometry allows: key at consumed, a root or parent's child. */
static void make_entry(struct fixture *f, struct rec_catalog_entry *e, uint64_t seed,
		       uint64_t consumed, const struct rec_catalog_entry *parent, bool row)
{
	struct rec_header h;
	struct rec_key *p = parent ? (struct rec_key *)&parent->info.key : NULL;
	struct rec_digest bucket;

	memset(e, 0, sizeof(*e));
	e->info.key.consumed = consumed;
	tu_fill(e->info.key.digest.bytes, REC_DIGEST_BYTES, seed);
	tu_fill(bucket.bytes, REC_DIGEST_BYTES, seed + 1);
	assert_int_equal(rec_header_init(&h, &f->g, &f->ns, &e->info.key, p, &bucket,
					 p ? (uint32_t)(p->consumed / 64) : 0,
					 (uint32_t)(consumed / 64 - (p ? p->consumed / 64 : 0)),
					 1000 + seed),
			 0);
	e->info.parent = h.parent;
	e->info.bucket = bucket;
	e->info.first_page_index = h.first_page_index;
	e->info.tail_page_count = h.tail_page_count;
	e->info.row_present = row;
	e->info.created_ns = h.created_ns;
	rec_header_agreement_digest(&h, &e->info.agreement);
	e->stamp = (struct rec_file_stamp){
		.ino = 100 + seed, .bytes = row ? h.row_offset + h.row_length : h.row_offset,
		.mtime_ns = 5000 + seed, .ctime_ns = 6000 + seed,
	};
	e->info.file_bytes = e->stamp.bytes;
	e->info.mtime_ns = e->stamp.mtime_ns;
}

static void assert_entry_equal(const struct rec_catalog_entry *a,
			       const struct rec_catalog_entry *b)
{
	tu_assert_info_equal(&a->info, &b->info);
	assert_true(rec_file_stamp_equal(&a->stamp, &b->stamp));
}

/* Random puts, replacements and removes agree with a plain array throughout. */
static void test_catalog_set_matches_reference(void **state)
{
	enum { KEYS = 3000, STEPS = 20000 };
	struct fixture *f = *state;
	struct rec_catalog_entry *ref = calloc(KEYS, sizeof(*ref));
	bool *present = calloc(KEYS, sizeof(*present));
	struct rec_catalog c;
	uint64_t seed = 0xca7a106, x = seed;
	size_t count = 0;

	printf("seed %llu\n", (unsigned long long)seed);
	rec_catalog_init(&c);
	for (int i = 0; i < KEYS; i++)
		make_entry(f, &ref[i], (uint64_t)i, 64 * (1 + (uint64_t)(i % 7)), NULL, true);
	/* keys sharing one slot's run: equal digests' first bytes, other counts */
	for (int i = 0; i < 40; i++)
		memcpy(ref[i].info.key.digest.bytes, ref[0].info.key.digest.bytes, 8);
	for (int step = 0; step < STEPS; step++) {
		int k;

		x = x * 6364136223846793005ull + 1442695040888963407ull;
		k = (int)((x >> 33) % KEYS);
		if ((x >> 20) % 3 == 0) {
			rec_catalog_remove(&c, &ref[k].info.key);
			count -= present[k];
			present[k] = false;
		} else {
			ref[k].stamp.ctime_ns++; /* a replacement carries news */
			assert_int_equal(rec_catalog_put(&c, &ref[k]), 0);
			count += !present[k];
			present[k] = true;
		}
		if (step % 997 == 0 || step == STEPS - 1) {
			assert_int_equal(c.count, count);
			for (int i = 0; i < KEYS; i++) {
				const struct rec_catalog_entry *e = rec_catalog_find(&c, &ref[i].info.key);

				assert_int_equal(e != NULL, present[i]);
				if (e)
					assert_entry_equal(e, &ref[i]);
			}
		}
	}
	rec_catalog_clear(&c);
	assert_int_equal(c.count, 0);
	assert_null(rec_catalog_find(&c, &ref[0].info.key));
	rec_catalog_free(&c);
	free(ref);
	free(present);
}

/* Saved and loaded, every field comes back; the file's mtime bounds the trusted stamps. */
static void test_catalog_save_load_round_trip(void **state)
{
	enum { KEYS = 500 };
	struct fixture *f = *state;
	struct rec_catalog c, back;
	struct rec_catalog_entry e;
	char why[256] = "";
	struct stat st;

	rec_catalog_init(&c);
	rec_catalog_init(&back);
	for (int i = 0; i < KEYS; i++) {
		struct rec_catalog_entry parent;

		make_entry(f, &parent, 10000 + (uint64_t)i, 128, NULL, i % 3 != 0);
		make_entry(f, &e, (uint64_t)i, 64 * 5 + (uint64_t)(i % 64), i % 2 ? &parent : NULL,
			   true);
		assert_int_equal(rec_catalog_put(&c, &parent), 0);
		assert_int_equal(rec_catalog_put(&c, &e), 0);
	}
	assert_int_equal(rec_catalog_save(&c, f->dirfd, &f->g, &f->ns, true), 0);
	assert_int_equal(tu_count_suffix(f->base, ".tmp"), 0);
	assert_int_equal(fstatat(f->dirfd, REC_SCAN_CACHE_NAME, &st, 0), 0);
	assert_int_equal(st.st_size, REC_SCAN_CACHE_HEADER_BYTES + c.count * REC_SCAN_CACHE_ENTRY_BYTES);
	assert_int_equal(rec_catalog_load(&back, f->dirfd, &f->g, &f->ns, why, sizeof(why)), 0);
	assert_int_equal(back.count, c.count);
	for (size_t i = 0; i < c.count; i++) {
		const struct rec_catalog_entry *got = rec_catalog_find(&back, &c.entries[i].info.key);

		assert_non_null(got);
		assert_entry_equal(got, &c.entries[i]);
	}
	assert_int_equal(back.trust_before_ns,
			 (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec);
	/* an empty catalogue saves and loads too */
	rec_catalog_clear(&c);
	assert_int_equal(rec_catalog_save(&c, f->dirfd, &f->g, &f->ns, false), 0);
	assert_int_equal(rec_catalog_load(&back, f->dirfd, &f->g, &f->ns, why, sizeof(why)), 0);
	assert_int_equal(back.count, 0);
	rec_catalog_free(&c);
	rec_catalog_free(&back);
}

static uint8_t *read_cache(struct fixture *f, size_t *bytes)
{
	char path[512];
	FILE *fp;
	uint8_t *buf;

	snprintf(path, sizeof(path), "%s/%s", f->base, REC_SCAN_CACHE_NAME);
	fp = fopen(path, "rb");
	assert_non_null(fp);
	fseek(fp, 0, SEEK_END);
	*bytes = (size_t)ftell(fp);
	rewind(fp);
	buf = malloc(*bytes);
	assert_int_equal(fread(buf, 1, *bytes, fp), *bytes);
	fclose(fp);
	return buf;
}

/* Writes buf as the cache, its checksums made right when reseal. */
static void write_cache(struct fixture *f, uint8_t *buf, size_t bytes, bool reseal)
{
	char path[512];
	FILE *fp;

	if (reseal && bytes >= REC_SCAN_CACHE_HEADER_BYTES) {
		sel_put_le64(buf + 24, XXH3_64bits(buf + REC_SCAN_CACHE_HEADER_BYTES,
						   bytes - REC_SCAN_CACHE_HEADER_BYTES));
		sel_put_le64(buf + 120, XXH3_64bits(buf, 120));
	}
	snprintf(path, sizeof(path), "%s/%s", f->base, REC_SCAN_CACHE_NAME);
	fp = fopen(path, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(buf, 1, bytes, fp), bytes);
	fclose(fp);
}

/* Loads the cache; expects a refusal whose reason holds text, and an empty catalogue. */
static void expect_refused(struct fixture *f, const char *text)
{
	struct rec_catalog c;
	struct rec_catalog_entry e;
	char why[256] = "";

	rec_catalog_init(&c);
	make_entry(f, &e, 999, 64, NULL, true);
	assert_int_equal(rec_catalog_put(&c, &e), 0);
	assert_int_equal(rec_catalog_load(&c, f->dirfd, &f->g, &f->ns, why, sizeof(why)),
			 SEL_EBADHEADER);
	if (!strstr(why, text))
		fail_msg("refused for \"%s\", not \"%s\"", why, text);
	assert_int_equal(c.count, 0);
	assert_int_equal(c.trust_before_ns, 0);
	rec_catalog_free(&c);
}

/* A missing, short, torn, flipped or lying cache is refused, never half-loaded. */
static void test_catalog_load_refuses_bad_caches(void **state)
{
	struct fixture *f = *state;
	struct rec_catalog c;
	struct rec_catalog_entry e[3];
	uint8_t *good, *buf;
	char why[256] = "";
	size_t bytes;
	uint8_t *entry1;

	rec_catalog_init(&c);
	assert_int_equal(rec_catalog_load(&c, f->dirfd, &f->g, &f->ns, why, sizeof(why)),
			 -ENOENT);
	make_entry(f, &e[0], 1, 128, NULL, true);
	make_entry(f, &e[1], 2, 64 * 4 + 3, &e[0], false);
	make_entry(f, &e[2], 3, 64 * 9, NULL, true);
	for (int i = 0; i < 3; i++)
		assert_int_equal(rec_catalog_put(&c, &e[i]), 0);
	assert_int_equal(rec_catalog_save(&c, f->dirfd, &f->g, &f->ns, false), 0);
	good = read_cache(f, &bytes);
	buf = malloc(bytes);

	write_cache(f, good, 10, false);
	expect_refused(f, "bytes long");
	memcpy(buf, good, bytes);
	write_cache(f, buf, bytes - 1, false);
	expect_refused(f, "do not hold");
	memcpy(buf, good, bytes);
	buf[REC_SCAN_CACHE_HEADER_BYTES + 77] ^= 4;
	write_cache(f, buf, bytes, false);
	expect_refused(f, "checksum fails");
	memcpy(buf, good, bytes);
	buf[3] ^= 1;
	write_cache(f, buf, bytes, false);
	expect_refused(f, "not a version 1");
	memcpy(buf, good, bytes);
	sel_put_le32(buf + 8, 2);
	write_cache(f, buf, bytes, true);
	expect_refused(f, "not a version 1");
	memcpy(buf, good, bytes);
	buf[100] = 1; /* the header's zero bytes */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "not a version 1");
	memcpy(buf, good, bytes);
	buf[32] ^= 1; /* another namespace's directory */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "another namespace or shard");
	memcpy(buf, good, bytes);
	buf[64] ^= 1; /* another rank's: its shard fingerprint */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "another namespace or shard");

	/* well sealed, but an entry no header could have written */
	entry1 = buf + REC_SCAN_CACHE_HEADER_BYTES + REC_SCAN_CACHE_ENTRY_BYTES;
	memcpy(buf, good, bytes);
	for (int i = 0; i < 3; i++) /* e[1], the page-only one, wherever the set put it */
		if (sel_get_le32(buf + REC_SCAN_CACHE_HEADER_BYTES +
				 (size_t)i * REC_SCAN_CACHE_ENTRY_BYTES + 72) == 0)
			entry1 = buf + REC_SCAN_CACHE_HEADER_BYTES + (size_t)i * REC_SCAN_CACHE_ENTRY_BYTES;
	sel_put_le32(entry1 + 68, sel_get_le32(entry1 + 68) + 1); /* one page too many */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "spans no record");
	memcpy(buf, good, bytes);
	sel_put_le32(entry1 + 72, 2); /* row presence is 0 or 1 */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "out of range");
	memcpy(buf, good, bytes);
	sel_put_le32(entry1 + 76, 1); /* a zero field */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "out of range");
	memcpy(buf, good, bytes);
	for (int i = 0; i < 3; i++) { /* a root, e[0] or e[2], given a parent digest */
		uint8_t *p = buf + REC_SCAN_CACHE_HEADER_BYTES + (size_t)i * REC_SCAN_CACHE_ENTRY_BYTES;

		if (sel_get_le64(p + 24) == 0) {
			p[24 + 8] = 1;
			break;
		}
	}
	write_cache(f, buf, bytes, true);
	expect_refused(f, "a root with a parent digest");
	memcpy(buf, good, bytes);
	sel_put_le32(entry1 + 72, 1); /* a row its length has no room for */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "has a row its length denies");
	memcpy(buf, good, bytes);
	sel_put_le64(entry1 + 112, sel_get_le64(entry1 + 112) + 4096); /* a length no record has */
	write_cache(f, buf, bytes, true);
	expect_refused(f, "R-REC-10");
	memcpy(buf, good, bytes);
	memcpy(buf + REC_SCAN_CACHE_HEADER_BYTES + REC_SCAN_CACHE_ENTRY_BYTES,
	       buf + REC_SCAN_CACHE_HEADER_BYTES, REC_SCAN_CACHE_ENTRY_BYTES);
	write_cache(f, buf, bytes, true);
	expect_refused(f, "two entries");
	/* and the good one still loads */
	write_cache(f, good, bytes, false);
	assert_int_equal(rec_catalog_load(&c, f->dirfd, &f->g, &f->ns, why, sizeof(why)), 0);
	assert_int_equal(c.count, 3);
	rec_catalog_free(&c);
	free(buf);
	free(good);
}

/* A save that cannot land leaves nothing behind and says why. */
static void test_catalog_save_failure(void **state)
{
	struct fixture *f = *state;
	struct rec_catalog c;
	struct rec_catalog_entry e;
	char gone[600];
	int fd;

	rec_catalog_init(&c);
	make_entry(f, &e, 1, 128, NULL, true);
	assert_int_equal(rec_catalog_put(&c, &e), 0);
	snprintf(gone, sizeof(gone), "%s/gone", f->base);
	assert_int_equal(mkdir(gone, 0755), 0);
	fd = open(gone, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(rmdir(gone), 0);
	assert_int_equal(rec_catalog_save(&c, fd, &f->g, &f->ns, true), -ENOENT);
	close(fd);
	/* the cache's name taken by a directory: the rename fails, the temporary goes */
	snprintf(gone, sizeof(gone), "%s/%s", f->base, REC_SCAN_CACHE_NAME);
	assert_int_equal(mkdir(gone, 0755), 0);
	snprintf(gone, sizeof(gone), "%s/%s/x", f->base, REC_SCAN_CACHE_NAME);
	assert_int_equal(mkdir(gone, 0755), 0);
	assert_true(rec_catalog_save(&c, f->dirfd, &f->g, &f->ns, false) < 0);
	assert_int_equal(tu_count_suffix(f->base, ".tmp"), 0);
	rec_catalog_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_catalog_set_matches_reference, setup, teardown),
		cmocka_unit_test_setup_teardown(test_catalog_save_load_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_catalog_load_refuses_bad_caches, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_catalog_save_failure, setup, teardown),
	};

	sel_log_set_level(SEL_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
