/*
 * Record files (record/file.h, FORMAT.md R-WRITE-*, R-READ-*): round trips
 * over many geometries, suffix reads, a flipped bit in every segment,
 * truncation, unlink, every truncated length, injected I/O errors, and a
 * kill at every failpoint of writing, truncating and unlinking.
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_dir *dir;
};

static int setup_geometry(void **state, uint32_t page_tokens, uint32_t planes,
			  uint64_t unit, uint64_t row, bool durable)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->base = tu_make_temp_dir("file");
	tu_geometry(&f->g, page_tokens, planes, unit, row, 0, 2);
	f->dir = tu_dir_open(f->base, &f->g, durable);
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_geometry(state, 64, 3, 5000, 9000, true);
}

static int setup_small(void **state)
{
	return setup_geometry(state, 64, 1, 4096, 4096, false);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_failpoints_configure(NULL);
	rec_dir_close(f->dir);
	tu_remove_tree(f->base);
	free(f);
	return 0;
}

static int open_reader(struct fixture *f, const struct rec_key *key,
		       struct rec_reader *r, char *why, size_t why_size)
{
	char name[REC_FILE_NAME_BYTES];
	struct rec_expect expect;

	rec_file_name(name, key);
	rec_dir_expect(f->dir, key, &expect);
	return rec_reader_open(r, rec_dir_fd(f->dir), name, rec_dir_direct(f->dir),
			       &expect, why, why_size);
}

/* Reads the whole record back and compares it byte-exact with rec. */
static void assert_reads_back(struct fixture *f, const struct tu_record *rec)
{
	uint8_t *pages = tu_alloc(rec->stride * rec->tail_page_count);
	uint8_t *row = tu_alloc(rec->row_length);
	struct rec_reader r;
	char why[256];

	assert_int_equal(open_reader(f, &rec->key, &r, why, sizeof(why)), 0);
	assert_true(r.row_present);
	assert_int_equal(rec_reader_read_pages(&r, 0, rec->tail_page_count, pages,
					       why, sizeof(why)), 0);
	assert_memory_equal(pages, rec->pages, rec->stride * rec->tail_page_count);
	assert_int_equal(rec_reader_read_row(&r, row, why, sizeof(why)), 0);
	assert_memory_equal(row, rec->row, rec->row_length);
	rec_reader_close(&r);
	free(pages);
	free(row);
}

/* R-WRITE-*, R-READ-*: pages and row round-trip for many geometries. */
static void test_file_round_trip_geometries(void **state)
{
	static const struct {
		uint32_t page_tokens, planes;
		uint64_t unit, row, consumed, parent;
		uint32_t window;
	} cases[] = {
		{ 64, 1, 4096, 4096, 64 * 5 + 3, 0, 0 },
		{ 64, 36, 8192, 70000, 64 * 70 + 9, 64 * 2 + 1, 64 },
		{ 128, 4, 520, 1000, 128 * 3, 0, 2 },     /* planes under 4 KiB */
		{ 256, 3, 9000, 5000, 256 * 9, 256 * 4, 1 }, /* planes over 4 KiB */
		{ 64, 2, 4096, 4097, 64 * 3 + 10, 64 * 3 + 1, 0 }, /* no tail pages */
	};
	struct fixture *f = *state;

	for (size_t i = 0; i < SEL_ARRAY_SIZE(cases); i++) {
		struct tu_record parent, rec;
		char *base = tu_make_temp_dir("geom");
		struct fixture g = { .base = base };

		tu_geometry(&g.g, cases[i].page_tokens, cases[i].planes, cases[i].unit,
			    cases[i].row, 1, 2);
		/* Both I/O paths: O_DIRECT where it works, and buffered. */
		g.dir = i % 2 ? tu_dir_open_buffered(base, &g.g) :
				tu_dir_open(base, &g.g, false);
		assert_true(i % 2 == 0 || !rec_dir_direct(g.dir));
		if (cases[i].parent) {
			tu_record_make(&parent, &g.g, i, cases[i].parent, NULL, 100 + i);
			assert_int_equal(tu_record_write(g.dir, &parent, 0), 0);
		}
		tu_record_make(&rec, &g.g, i, cases[i].consumed,
			       cases[i].parent ? &parent : NULL, 200 + i);
		assert_int_equal(tu_record_write(g.dir, &rec, cases[i].window), 0);
		assert_reads_back(&g, &rec);
		if (cases[i].parent) {
			assert_reads_back(&g, &parent);
			tu_record_free(&parent);
		}
		assert_int_equal(tu_count_suffix(rec_dir_path(g.dir), ".tmp"), 0);
		tu_record_free(&rec);
		rec_dir_close(g.dir);
		tu_remove_tree(base);
	}
	(void)f;
}

/* R-READ-2: every suffix of the pages reads back and verifies. */
static void test_file_suffix_reads(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_reader r;
	uint8_t *buf;
	char why[256];

	tu_record_make(&rec, &f->g, 1, 64 * 10, NULL, 5);
	assert_int_equal(tu_record_write(f->dir, &rec, 3), 0);
	buf = tu_alloc(rec.stride * rec.tail_page_count);
	assert_int_equal(open_reader(f, &rec.key, &r, why, sizeof(why)), 0);
	for (uint32_t skip = 0; skip <= rec.tail_page_count; skip++) {
		uint32_t count = rec.tail_page_count - skip;

		assert_int_equal(rec_reader_read_pages(&r, skip, count, buf, why,
						       sizeof(why)), 0);
		assert_memory_equal(buf, rec.pages + rec.stride * skip,
				    rec.stride * count);
	}
	rec_reader_close(&r);
	free(buf);
	tu_record_free(&rec);
}

/*
 * R-READ-2, a page read and hashed in chunks: every page of a 10-page
 * record reads back byte-exact and checks out, in chunks of 4 KiB, of 12
 * KiB (not dividing the stride) and larger than the page; a flipped bit
 * says not ok; a file cut short says -ENODATA; disk.read's failure is
 * returned.
 */
static void test_file_read_page_ok_in_chunks(void **state)
{
	static const uint64_t chunks[] = { 4096, 3 * 4096, 1u << 20 };
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_reader r;
	uint8_t *page;
	char why[256], *path;
	bool ok;

	tu_record_make(&rec, &f->g, 1, 64 * 10, NULL, 5);
	assert_int_equal(tu_record_write(f->dir, &rec, 3), 0);
	page = tu_alloc(rec.stride);
	assert_int_equal(open_reader(f, &rec.key, &r, why, sizeof(why)), 0);
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++)
		for (uint32_t i = 0; i < rec.tail_page_count; i++) {
			memset(page, 0xa5, rec.stride);
			assert_int_equal(rec_reader_read_page_ok(&r, i, page, chunks[c], &ok), 0);
			assert_true(ok);
			assert_memory_equal(page, rec.pages + rec.stride * i, rec.stride);
		}
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(rec_reader_read_page_ok(&r, 0, page, 4096, &ok), -EIO);
	assert_false(ok);
	sel_failpoints_configure(NULL);
	path = tu_record_path(f->dir, &rec.key);
	tu_flip_bit(path, r.header.page_offset + rec.stride * 4 + 5000);
	assert_int_equal(rec_reader_read_page_ok(&r, 4, page, 4096, &ok), 0);
	assert_false(ok);
	assert_int_equal(truncate(path, (off_t)(r.header.page_offset + rec.stride * 7 + 4096)), 0);
	assert_int_equal(rec_reader_read_page_ok(&r, 8, page, 4096, &ok), -ENODATA);
	assert_false(ok);
	rec_reader_close(&r);
	free(path);
	free(page);
	tu_record_free(&rec);
}

/* Flips one bit at offset in a fresh copy of rec; returns what reading said. */
static int read_after_flip(struct fixture *f, const struct tu_record *rec,
			   uint64_t offset, int *stage)
{
	uint8_t *buf = tu_alloc(rec->stride * rec->tail_page_count + rec->row_length);
	char *path = tu_record_path(f->dir, &rec->key);
	struct rec_reader r;
	char why[256];
	int ret;

	rec_unlink(f->dir, &rec->key); /* a fresh copy each time */
	assert_int_equal(tu_record_write(f->dir, rec, 0), 0);
	tu_flip_bit(path, offset);
	*stage = 0;
	ret = open_reader(f, &rec->key, &r, why, sizeof(why));
	if (ret == 0) {
		*stage = 1;
		ret = rec_reader_read_pages(&r, 0, rec->tail_page_count, buf, why,
					    sizeof(why));
		if (ret == 0) {
			*stage = 2;
			ret = rec_reader_read_row(&r, buf, why, sizeof(why));
		}
		rec_reader_close(&r);
	}
	free(path);
	free(buf);
	return ret;
}

/* A flipped bit in each segment (and in plane padding) is detected. */
static void test_file_flipped_bit_each_segment(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_header h;
	int stage;

	tu_record_make(&rec, &f->g, 2, 64 * 4 + 7, NULL, 6);
	tu_record_header(&h, f->dir, &rec);
	/* header: the open fails before any payload read (R-READ-1) */
	assert_int_equal(read_after_flip(f, &rec, 100, &stage), SEL_EBADHEADER);
	assert_int_equal(stage, 0);
	/* checksum segment entry of page 2 */
	assert_int_equal(read_after_flip(f, &rec, 4096 + 16 + 3, &stage), SEL_ECHECKSUM);
	assert_int_equal(stage, 1);
	/* every page, in a plane's data and in its padding */
	for (uint32_t p = 0; p < rec.tail_page_count; p++) {
		uint64_t page = h.page_offset + h.page_stride * p;

		assert_int_equal(read_after_flip(f, &rec, page + 4999, &stage),
				 SEL_ECHECKSUM);
		assert_int_equal(stage, 1);
		assert_int_equal(read_after_flip(f, &rec, page + 8192 + 6000, &stage),
				 SEL_ECHECKSUM);
		assert_int_equal(stage, 1);
	}
	/* the row, in its data and in its padding */
	assert_int_equal(read_after_flip(f, &rec, h.row_offset + 10, &stage),
			 SEL_ECHECKSUM);
	assert_int_equal(stage, 2);
	assert_int_equal(read_after_flip(f, &rec, h.row_offset + h.row_length - 1,
					 &stage), SEL_ECHECKSUM);
	assert_int_equal(stage, 2);
	/* and unflipped, all of it reads */
	assert_int_equal(rec_unlink(f->dir, &rec.key), 0);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	assert_reads_back(f, &rec);
	tu_record_free(&rec);
}

/* R-REC-9: a page copied from another position fails its checksum. */
static void test_file_page_in_wrong_place(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_reader r;
	uint8_t *page;
	char why[256];

	tu_record_make(&rec, &f->g, 3, 64 * 3, NULL, 7);
	/* The same bytes in pages 0 and 1 still get different checksums. */
	memcpy(rec.pages + rec.stride, rec.pages, rec.stride);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	page = tu_alloc(rec.stride);
	assert_int_equal(open_reader(f, &rec.key, &r, why, sizeof(why)), 0);
	assert_int_equal(rec_reader_read_pages(&r, 1, 1, page, why, sizeof(why)), 0);
	assert_int_not_equal(r.checksums[0], r.checksums[1]);
	rec_reader_close(&r);
	free(page);
	tu_record_free(&rec);
}

/* R-REC-10: truncation drops the row and nothing else; it is idempotent. */
static void test_file_truncate_row(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_reader r;
	struct rec_header before;
	uint8_t *buf, head[2][REC_HEADER_BYTES];
	char why[256], *path;
	struct stat st;
	int fd;

	tu_record_make(&rec, &f->g, 4, 64 * 6, NULL, 8);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	tu_record_header(&before, f->dir, &rec);
	path = tu_record_path(f->dir, &rec.key);
	fd = open(path, O_RDONLY);
	assert_int_equal(pread(fd, head[0], REC_HEADER_BYTES, 0), REC_HEADER_BYTES);
	assert_int_equal(rec_truncate_row(f->dir, &rec.key), 0);
	assert_int_equal(pread(fd, head[1], REC_HEADER_BYTES, 0), REC_HEADER_BYTES);
	close(fd);
	assert_memory_equal(head[0], head[1], REC_HEADER_BYTES);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal((uint64_t)st.st_size, before.row_offset);
	assert_int_equal(rec_truncate_row(f->dir, &rec.key), 0);
	buf = tu_alloc(rec.stride * rec.tail_page_count + rec.row_length);
	assert_int_equal(open_reader(f, &rec.key, &r, why, sizeof(why)), 0);
	assert_false(r.row_present);
	assert_int_equal(rec_reader_read_pages(&r, 0, rec.tail_page_count, buf, why,
					       sizeof(why)), 0);
	assert_memory_equal(buf, rec.pages, rec.stride * rec.tail_page_count);
	assert_int_equal(rec_reader_read_row(&r, buf, why, sizeof(why)), -ENODATA);
	rec_reader_close(&r);
	free(buf);
	free(path);
	tu_record_free(&rec);
}

/* Unlink removes the record; a second unlink says it is gone. */
static void test_file_unlink(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_reader r;
	char why[256];

	tu_record_make(&rec, &f->g, 5, 64 * 2, NULL, 9);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	assert_int_equal(rec_unlink(f->dir, &rec.key), 0);
	assert_int_equal(rec_unlink(f->dir, &rec.key), -ENOENT);
	assert_int_equal(open_reader(f, &rec.key, &r, why, sizeof(why)), -ENOENT);
	assert_int_equal(rec_truncate_row(f->dir, &rec.key), -ENOENT);
	tu_record_free(&rec);
}

/* R-REC-10: every length but the two valid ones is refused on open. */
static void test_file_every_truncated_length(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_header h;
	struct rec_reader r;
	char why[256], *path;
	int fd;

	tu_record_make(&rec, &f->g, 6, 64 * 2, NULL, 10);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	tu_record_header(&h, f->dir, &rec);
	path = tu_record_path(f->dir, &rec.key);
	fd = open(path, O_RDWR);
	for (uint64_t len = h.row_offset + h.row_length + 1; len-- > 0;) {
		int ret;

		assert_int_equal(ftruncate(fd, (off_t)len), 0);
		ret = open_reader(f, &rec.key, &r, why, sizeof(why));
		if (len == h.row_offset || len == h.row_offset + h.row_length) {
			assert_int_equal(ret, 0);
			assert_true(r.row_present == (len != h.row_offset));
			rec_reader_close(&r);
		} else if (ret != SEL_EBADHEADER) {
			fail_msg("length %llu: got %d", (unsigned long long)len, ret);
		}
	}
	close(fd);
	free(path);
	tu_record_free(&rec);
}

static const enum sel_failpoint write_points[] = {
	SEL_FP_RECORD_BEFORE_CREATE,   SEL_FP_RECORD_AFTER_CREATE,
	SEL_FP_RECORD_BEFORE_WRITE,    SEL_FP_RECORD_AFTER_WRITE,
	SEL_FP_RECORD_BEFORE_HEADER,   SEL_FP_RECORD_AFTER_HEADER,
	SEL_FP_RECORD_BEFORE_FDATASYNC, SEL_FP_RECORD_AFTER_FDATASYNC,
	SEL_FP_RECORD_BEFORE_RENAME,   SEL_FP_RECORD_AFTER_RENAME,
	SEL_FP_RECORD_AFTER_DIR_FSYNC, SEL_FP_DISK_OPEN,
	SEL_FP_DISK_WRITE,             SEL_FP_DISK_FALLOCATE,
	SEL_FP_DISK_FDATASYNC,         SEL_FP_DISK_RENAME,
};

/* R-WRITE-5: an error at any step stores nothing and leaves nothing. */
static void test_file_error_at_every_write_step(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	char config[128];

	tu_record_make(&rec, &f->g, 7, 64 * 3 + 1, NULL, 11);
	sel_log_set_level(SEL_LOG_ERROR);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(write_points); i++) {
		const char *name = sel_failpoint_name(write_points[i]);

		snprintf(config, sizeof(config), "%s=return(%s)", name,
			 i % 2 ? "ENOSPC" : "EIO");
		assert_int_equal(sel_failpoints_configure(config), 0);
		assert_int_equal(tu_record_write(f->dir, &rec, 1),
				 i % 2 ? -ENOSPC : -EIO);
		if (sel_failpoint_fired(write_points[i]) == 0)
			fail_msg("%s never fired", name);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	}
	sel_failpoints_configure(NULL);
	sel_log_set_level(SEL_LOG_INFO);
	assert_int_equal(tu_record_write(f->dir, &rec, 1), 0);
	assert_reads_back(f, &rec);
	tu_record_free(&rec);
}

/*
 * SQLite-style: fail the 1st, 2nd, ... N-th I/O of a write until the write
 * succeeds; after every failure nothing is left, after success all reads.
 */
static void test_file_fail_nth_io(void **state)
{
	static const char *const points[] = { "disk.write", "disk.fdatasync" };
	struct fixture *f = *state;
	struct tu_record rec;
	char config[128];

	tu_record_make(&rec, &f->g, 8, 64 * 5, NULL, 12);
	sel_log_set_level(SEL_LOG_ERROR);
	for (size_t p = 0; p < SEL_ARRAY_SIZE(points); p++) {
		for (int n = 0;; n++) {
			int ret;

			snprintf(config, sizeof(config), "%s=%d*off->1*return(EIO)",
				 points[p], n);
			if (n == 0)
				snprintf(config, sizeof(config), "%s=1*return(EIO)",
					 points[p]);
			assert_int_equal(sel_failpoints_configure(config), 0);
			ret = tu_record_write(f->dir, &rec, 1);
			assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
			if (ret == 0)
				break;
			assert_int_equal(ret, -EIO);
			assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
			assert_true(n < 100);
		}
		sel_failpoints_configure(NULL);
		assert_reads_back(f, &rec);
		assert_int_equal(rec_unlink(f->dir, &rec.key), 0);
	}
	sel_log_set_level(SEL_LOG_INFO);
	tu_record_free(&rec);
}

/* Short counts from the kernel are resumed, reading and writing. */
static void test_file_short_counts(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;

	tu_record_make(&rec, &f->g, 9, 64 * 7, NULL, 13);
	assert_int_equal(sel_failpoints_configure("disk.write=3*short;disk.read=2*short"), 0);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	assert_reads_back(f, &rec);
	assert_true(sel_failpoint_fired(SEL_FP_DISK_WRITE) == 3);
	assert_true(sel_failpoint_fired(SEL_FP_DISK_READ) == 2);
	tu_record_free(&rec);
}

/* Runs fn in a child with config armed; expects the child to be killed. */
static void run_killed(struct fixture *f, const char *config,
		       void (*fn)(struct fixture *, const struct tu_record *),
		       const struct tu_record *rec)
{
	pid_t pid = fork();
	int status;

	assert_true(pid >= 0);
	if (pid == 0) {
		sel_log_set_level(SEL_LOG_ERROR);
		tu_failpoints_may_kill(); /* kill, deliberately */
		if (sel_failpoints_configure(config) != 0)
			_exit(3);
		fn(f, rec);
		_exit(4); /* the failpoint did not kill */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("'%s': child was not killed (status %d)", config, status);
}

static void child_write(struct fixture *f, const struct tu_record *rec)
{
	tu_record_write(f->dir, rec, 1);
}

static void child_truncate(struct fixture *f, const struct tu_record *rec)
{
	rec_truncate_row(f->dir, &rec->key);
}

static void child_unlink(struct fixture *f, const struct tu_record *rec)
{
	rec_unlink(f->dir, &rec->key);
}

/* Scans and returns whether key is kept and with its row. */
static bool scan_has(struct fixture *f, const struct rec_key *key, bool *row,
		     size_t *count)
{
	struct rec_scan scan;
	bool found = false;

	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	sel_log_set_level(SEL_LOG_INFO);
	for (size_t i = 0; i < scan.record_count; i++) {
		if (rec_key_equal(&scan.records[i].key, key)) {
			found = true;
			*row = scan.records[i].row_present;
		}
	}
	*count = scan.record_count;
	rec_scan_free(&scan);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	return found;
}

/*
 * Kill at each write failpoint, then rescan: a record survives exactly when
 * it was renamed into place, a committed record always survives, and no
 * temporary file is left.
 */
static void test_file_kill_at_every_write_point(void **state)
{
	struct fixture *f = *state;
	struct tu_record committed, rec;
	char config[128];
	size_t count;
	bool row;

	tu_record_make(&committed, &f->g, 10, 64 * 2, NULL, 14);
	tu_record_make(&rec, &f->g, 11, 64 * 4 + 3, NULL, 15);
	assert_int_equal(tu_record_write(f->dir, &committed, 0), 0);
	for (size_t i = 0; i < SEL_ARRAY_SIZE(write_points); i++) {
		enum sel_failpoint point = write_points[i];
		bool renamed = point == SEL_FP_RECORD_AFTER_RENAME ||
			       point == SEL_FP_RECORD_AFTER_DIR_FSYNC;

		snprintf(config, sizeof(config), "%s=1*kill", sel_failpoint_name(point));
		run_killed(f, config, child_write, &rec);
		assert_true(scan_has(f, &committed.key, &row, &count));
		if (scan_has(f, &rec.key, &row, &count) != renamed)
			fail_msg("after a kill at %s the record is %s", config,
				 renamed ? "missing" : "present");
		if (renamed) {
			assert_reads_back(f, &rec);
			assert_int_equal(rec_unlink(f->dir, &rec.key), 0);
		}
	}
	tu_record_free(&committed);
	tu_record_free(&rec);
}

/* Kill around truncation and unlink: the rescan sees before or after. */
static void test_file_kill_truncate_and_unlink(void **state)
{
	struct fixture *f = *state;
	struct tu_record parent, child;
	size_t count;
	bool row;

	tu_record_make(&parent, &f->g, 12, 64 * 2, NULL, 16);
	tu_record_make(&child, &f->g, 12, 64 * 3, &parent, 17);
	assert_int_equal(tu_record_write(f->dir, &parent, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &child, 0), 0);
	run_killed(f, "record.before_truncate=1*kill", child_truncate, &parent);
	assert_true(scan_has(f, &parent.key, &row, &count) && row);
	run_killed(f, "disk.truncate=1*kill", child_truncate, &parent);
	assert_true(scan_has(f, &parent.key, &row, &count) && row);
	run_killed(f, "record.after_truncate=1*kill", child_truncate, &parent);
	assert_true(scan_has(f, &parent.key, &row, &count) && !row);
	run_killed(f, "record.before_unlink=1*kill", child_unlink, &child);
	assert_true(scan_has(f, &child.key, &row, &count));
	run_killed(f, "record.after_unlink=1*kill", child_unlink, &child);
	assert_false(scan_has(f, &child.key, &row, &count));
	/* The page-only parent has no child left: R-DIR-6 removes it too. */
	assert_false(scan_has(f, &parent.key, &row, &count));
	assert_int_equal(count, 0);
	tu_record_free(&parent);
	tu_record_free(&child);
}

/*
 * R-WRITE-4: storing a key whose file exists replaces it atomically; a
 * failure after that rename is reported (R-WRITE-5) but leaves the new
 * file whole in its place: the old one may have been a committed record
 * (a row rewrite), and unlinking the name lost it on that rank.
 */
static void test_file_existing_key_replaced(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec, other;

	tu_record_make(&rec, &f->g, 13, 64 * 3, NULL, 20);
	tu_record_make(&other, &f->g, 13, 64 * 3, NULL, 21); /* same key, other bytes */
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &other, 0), 0);
	assert_reads_back(f, &other);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 1);
	/* the directory fsync fails after the rename: the new file stays */
	assert_int_equal(sel_failpoints_configure("disk.fsync_dir=return(EIO)"), 0);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), -EIO);
	sel_failpoints_configure(NULL);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 1);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_reads_back(f, &rec);
	/* so does any failure after it */
	assert_int_equal(sel_failpoints_configure("record.after_rename=return(EIO)"), 0);
	assert_int_equal(tu_record_write(f->dir, &other, 0), -EIO);
	sel_failpoints_configure(NULL);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 1);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_reads_back(f, &other);
	/* a failure after the rename of a new name still leaves nothing */
	assert_int_equal(rec_unlink(f->dir, &other.key), 0);
	assert_int_equal(sel_failpoints_configure("record.after_rename=return(EIO)"), 0);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), -EIO);
	sel_failpoints_configure(NULL);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	tu_record_free(&rec);
	tu_record_free(&other);
}

/* A page noted twice (and another never) cannot be committed. */
static void test_file_pages_out_of_order(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_header h;
	struct rec_writer w;

	tu_record_make(&rec, &f->g, 14, 64 * 2, NULL, 22);
	tu_record_header(&h, f->dir, &rec);
	assert_int_equal(rec_writer_begin(&w, f->dir, &h), 0);
	rec_writer_note_page(&w, 0, rec.pages);
	rec_writer_note_page(&w, 0, rec.pages);
	rec_writer_note_row(&w, (const void *const[]){ rec.row },
			    (const uint64_t[]){ rec.row_length }, 1);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(rec_writer_commit(&w), -EINVAL);
	sel_log_set_level(SEL_LOG_INFO);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 0);
	tu_record_free(&rec);
}

/* R-REC-8: a bit flipped in the checksum segment's padding is caught. */
static void test_file_checksum_padding(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_reader r;
	char why[256], *path;

	tu_record_make(&rec, &f->g, 15, 64 * 2, NULL, 23);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	path = tu_record_path(f->dir, &rec.key);
	tu_flip_bit(path, 4096 + 8 * 2 + 40);
	assert_int_equal(open_reader(f, &rec.key, &r, why, sizeof(why)), SEL_ECHECKSUM);
	assert_non_null(strstr(why, "padding"));
	free(path);
	tu_record_free(&rec);
}

/* Dropping a row keeps the mtime: it is no use of the record (R-DIR-4). */
static void test_file_truncate_keeps_mtime(void **state)
{
	struct fixture *f = *state;
	struct timespec old[2] = { { 1000000, 0 }, { 1000000, 0 } };
	struct tu_record rec;
	struct stat st;
	char *path;

	tu_record_make(&rec, &f->g, 16, 64 * 2, NULL, 24);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	path = tu_record_path(f->dir, &rec.key);
	assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
	assert_int_equal(rec_truncate_row(f->dir, &rec.key), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mtim.tv_sec, 1000000);
	free(path);
	tu_record_free(&rec);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_file_round_trip_geometries, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_suffix_reads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_read_page_ok_in_chunks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_flipped_bit_each_segment, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_page_in_wrong_place, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_truncate_row, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_unlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_every_truncated_length, setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_file_error_at_every_write_step, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_fail_nth_io, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_short_counts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_kill_at_every_write_point, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_kill_truncate_and_unlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_existing_key_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_pages_out_of_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_checksum_padding, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_truncate_keeps_mtime, setup, teardown),
	};

	return cmocka_run_group_tests_name("file", tests, NULL, NULL);
}
