/*
 * Record directories (record/dir.h, FORMAT.md R-DIR-*): the lock, the
 * startup scan's deletions with their reasons and counts, access order,
 * the rebuilt index, the buffered fallback, kills during the scan, and the
 * scan cache (R-DIR-10).
 */
#include "tests/testutil.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "record/catalog.h"
#include "record/io.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_dir *dir;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->base = tu_make_temp_dir("dir");
	tu_geometry(&f->g, 64, 2, 4096, 8192, 0, 1);
	f->dir = tu_dir_open(f->base, &f->g, false);
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_log_set_level(SEL_LOG_INFO);
	sel_failpoints_configure(NULL);
	rec_dir_close(f->dir);
	tu_remove_tree(f->base);
	free(f);
	return 0;
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
}

static bool has_key(const struct rec_scan *scan, const struct rec_key *key)
{
	for (size_t i = 0; i < scan->record_count; i++)
		if (rec_key_equal(&scan->records[i].key, key))
			return true;
	return false;
}

/* R-DIR-1: a second opener, in this process or another, is refused. */
static void test_dir_lock_refuses_second_opener(void **state)
{
	struct fixture *f = *state;
	struct rec_identity ns;
	struct rec_dir_options options = {
		.base_path = f->base, .namespace_id = &ns, .geometry = &f->g,
	};
	struct rec_dir *second = NULL;
	char err[512] = "";
	int status;
	pid_t pid;

	tu_identities(NULL, &ns);
	write_file(rec_dir_path(f->dir), "x.ckpt.tmp", "partial");
	assert_int_equal(rec_dir_open(&options, &second, err, sizeof(err)),
			 SEL_ELOCKED);
	assert_null(second);
	assert_non_null(strstr(err, "in use by another process"));
	assert_non_null(strstr(err, rec_dir_path(f->dir)));
	pid = fork();
	if (pid == 0) {
		struct rec_dir *d;

		/* the inherited fd shares the lock; close it as a new process would */
		close(rec_dir_fd(f->dir));
		_exit(rec_dir_open(&options, &d, err, sizeof(err)) == SEL_ELOCKED ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* Refused before touching a file: the temporary file is still there. */
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 1);
	rec_dir_close(f->dir);
	assert_int_equal(rec_dir_open(&options, &f->dir, err, sizeof(err)), 0);
}

/* R-DIR-2: temporary files go; foreign files stay, counted. */
static void test_dir_scan_deletes_temporary_files(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_scan scan;
	char name[REC_FILE_NAME_BYTES + 8];

	tu_record_make(&rec, &f->g, 1, 64 * 2, NULL, 1);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	rec_file_name(name, &rec.key);
	strcat(name, ".tmp");
	write_file(rec_dir_path(f->dir), name, "half a record");
	write_file(rec_dir_path(f->dir), "junk.tmp", "x");
	write_file(rec_dir_path(f->dir), "README", "not ours");
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 1);
	assert_int_equal(scan.tmp_deleted, 2);
	assert_int_equal(scan.ignored, 1);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), "README"), 1);
	rec_scan_free(&scan);
	tu_record_free(&rec);
}

/*
 * A file the scan must delete and cannot fails the scan, and the result
 * names it (failed_delete), so the startup message says which file to
 * look at; once it can be deleted, the scan passes and names nothing.
 */
static void test_dir_scan_names_the_file_it_cannot_delete(void **state)
{
	struct fixture *f = *state;
	struct rec_scan scan;
	char expected[REC_SCAN_PATH_BYTES], err[REC_SCAN_PATH_BYTES + 200];

	write_file(rec_dir_path(f->dir), "junk.tmp", "x");
	assert_int_equal(sel_failpoints_configure("disk.unlink=return(EROFS)"), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), -EROFS);
	sel_failpoints_configure(NULL);
	snprintf(expected, sizeof(expected), "%s/junk.tmp", rec_dir_path(f->dir));
	assert_string_equal(scan.failed_delete, expected);
	assert_int_equal(rec_dir_scan_failed(f->dir, &scan, -EROFS, err, sizeof(err)), -EROFS);
	assert_non_null(strstr(err, "cannot delete"));
	assert_non_null(strstr(err, expected));
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_string_equal(scan.failed_delete, "");
	assert_int_equal(scan.tmp_deleted, 1);
	rec_scan_free(&scan);
}

/*
 * The marker as the formation hears of it: a marked directory is marked,
 * empty or not, unless its scan kept no record and could not read some
 * (a disk that fails every read looks empty): then it reports unmarked,
 * and the formation refuses it instead of deleting every rank's copies.
 */
static void test_dir_scan_marked_unless_all_unreadable(void **state)
{
	struct fixture *f = *state;
	struct tu_record one, two;
	struct rec_scan scan;

	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_false(rec_dir_scan_marked(f->dir, &scan)); /* unmarked */
	rec_scan_free(&scan);
	assert_int_equal(rec_dir_mark(f->dir, 1), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_true(rec_dir_scan_marked(f->dir, &scan)); /* marked and empty */
	rec_scan_free(&scan);

	tu_record_make(&one, &f->g, 1, 64 * 2, NULL, 1);
	tu_record_make(&two, &f->g, 2, 64 * 2, NULL, 2);
	assert_int_equal(tu_record_write(f->dir, &one, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &two, 0), 0);
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	sel_failpoints_configure(NULL);
	assert_int_equal(scan.record_count, 0);
	assert_int_equal(scan.unreadable_skipped, 2);
	assert_false(rec_dir_scan_marked(f->dir, &scan)); /* all unreadable */
	rec_scan_free(&scan);
	assert_int_equal(sel_failpoints_configure("disk.read=1*return(EIO)"), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	sel_failpoints_configure(NULL);
	assert_int_equal(scan.record_count, 1);
	assert_true(rec_dir_scan_marked(f->dir, &scan)); /* one read: marked */
	rec_scan_free(&scan);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 2);
	assert_true(rec_dir_scan_marked(f->dir, &scan));
	rec_scan_free(&scan);
	tu_record_free(&one);
	tu_record_free(&two);
}

/* R-DIR-3: bad headers, lengths, names and identities are dropped. */
static void test_dir_scan_drops_invalid_files(void **state)
{
	struct fixture *f = *state;
	struct tu_record good, bits, length, renamed, foreign;
	struct rec_geometry *other = malloc(sizeof(*other));
	char *path, *other_path, *base2 = tu_make_temp_dir("foreign");
	struct rec_scan scan;
	struct rec_dir *dir2;

	tu_record_make(&good, &f->g, 2, 64 * 2, NULL, 2);
	tu_record_make(&bits, &f->g, 3, 64 * 2, NULL, 3);
	tu_record_make(&length, &f->g, 4, 64 * 2, NULL, 4);
	tu_record_make(&renamed, &f->g, 5, 64 * 2, NULL, 5);
	assert_int_equal(tu_record_write(f->dir, &good, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &bits, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &length, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &renamed, 0), 0);
	path = tu_record_path(f->dir, &bits.key);
	tu_flip_bit(path, 70);
	free(path);
	path = tu_record_path(f->dir, &length.key);
	assert_int_equal(truncate(path, 4096 * 3 + 100), 0);
	free(path);
	/* a valid file under another record's name */
	path = tu_record_path(f->dir, &renamed.key);
	renamed.key.digest.bytes[5] ^= 1;
	other_path = tu_record_path(f->dir, &renamed.key);
	assert_int_equal(rename(path, other_path), 0);
	free(path);
	free(other_path);
	/* a valid file of another rank's geometry, copied in */
	tu_geometry(other, 64, 2, 4096, 8192, 0, 2);
	dir2 = tu_dir_open(base2, other, false);
	tu_record_make(&foreign, other, 6, 64 * 2, NULL, 6);
	assert_int_equal(tu_record_write(dir2, &foreign, 0), 0);
	path = tu_record_path(dir2, &foreign.key);
	other_path = tu_record_path(f->dir, &foreign.key);
	assert_int_equal(link(path, other_path), 0);
	free(path);
	free(other_path);

	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.invalid_dropped, 4);
	assert_int_equal(scan.record_count, 1);
	assert_true(has_key(&scan, &good.key));
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 1);
	rec_scan_free(&scan);
	rec_dir_close(dir2);
	tu_remove_tree(base2);
	free(other);
	tu_record_free(&good);
	tu_record_free(&bits);
	tu_record_free(&length);
	tu_record_free(&renamed);
	tu_record_free(&foreign);
}

/* R-DIR-5: a missing parent takes its descendants; other trees stay. */
static void test_dir_scan_removes_orphans_with_descendants(void **state)
{
	struct fixture *f = *state;
	struct tu_record a, b, c, c2, d, e;
	struct rec_scan scan;

	tu_record_make(&a, &f->g, 7, 64 * 1, NULL, 1);
	tu_record_make(&b, &f->g, 7, 64 * 2 + 5, &a, 2);
	tu_record_make(&c, &f->g, 7, 64 * 4, &b, 3);
	tu_record_make(&c2, &f->g, 7, 64 * 3, &b, 4);
	tu_record_make(&d, &f->g, 8, 64 * 2, NULL, 5);
	tu_record_make(&e, &f->g, 8, 64 * 3, &d, 6);
	assert_int_equal(tu_record_write(f->dir, &a, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &b, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &c, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &c2, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &d, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &e, 0), 0);
	assert_int_equal(rec_unlink(f->dir, &a.key), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.orphans_dropped, 3);
	assert_int_equal(scan.record_count, 2);
	assert_true(has_key(&scan, &d.key));
	assert_true(has_key(&scan, &e.key));
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 2);
	rec_scan_free(&scan);
	tu_record_free(&a);
	tu_record_free(&b);
	tu_record_free(&c);
	tu_record_free(&c2);
	tu_record_free(&d);
	tu_record_free(&e);
}

/* R-DIR-6: page-only records survive only while they have children. */
static void test_dir_scan_prunes_childless_page_only(void **state)
{
	struct fixture *f = *state;
	struct tu_record a, b, c, x, y;
	struct rec_scan scan;

	/* a (page-only) -> b (page-only) -> c (row): all kept */
	tu_record_make(&a, &f->g, 9, 64 * 1, NULL, 1);
	tu_record_make(&b, &f->g, 9, 64 * 2, &a, 2);
	tu_record_make(&c, &f->g, 9, 64 * 3, &b, 3);
	/* x (page-only) -> y (page-only, no child): both go */
	tu_record_make(&x, &f->g, 10, 64 * 1, NULL, 4);
	tu_record_make(&y, &f->g, 10, 64 * 2, &x, 5);
	assert_int_equal(tu_record_write(f->dir, &a, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &b, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &c, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &x, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &y, 0), 0);
	assert_int_equal(rec_truncate_row(f->dir, &a.key), 0);
	assert_int_equal(rec_truncate_row(f->dir, &b.key), 0);
	assert_int_equal(rec_truncate_row(f->dir, &x.key), 0);
	assert_int_equal(rec_truncate_row(f->dir, &y.key), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.page_only_dropped, 2);
	assert_int_equal(scan.record_count, 3);
	assert_true(has_key(&scan, &a.key) && has_key(&scan, &b.key) &&
		    has_key(&scan, &c.key));
	for (size_t i = 0; i < scan.record_count; i++)
		assert_true(scan.records[i].row_present ==
			    rec_key_equal(&scan.records[i].key, &c.key));
	rec_scan_free(&scan);
	tu_record_free(&a);
	tu_record_free(&b);
	tu_record_free(&c);
	tu_record_free(&x);
	tu_record_free(&y);
}

/* R-DIR-4: records come back oldest mtime first. */
static void test_dir_scan_access_order_from_mtime(void **state)
{
	struct fixture *f = *state;
	struct tu_record recs[5];
	static const int age_order[5] = { 3, 0, 4, 1, 2 };
	struct rec_scan scan;

	for (int i = 0; i < 5; i++) {
		struct timespec times[2];
		char *path;

		tu_record_make(&recs[i], &f->g, 20 + i, 64 * 2, NULL, i);
		assert_int_equal(tu_record_write(f->dir, &recs[i], 0), 0);
		path = tu_record_path(f->dir, &recs[i].key);
		times[0].tv_sec = times[1].tv_sec = 1000000 + age_order[i] * 10;
		times[0].tv_nsec = times[1].tv_nsec = 0;
		assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
		free(path);
	}
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 5);
	for (int rank = 0; rank < 5; rank++)
		for (int i = 0; i < 5; i++)
			if (age_order[i] == rank)
				assert_true(rec_key_equal(&scan.records[rank].key,
							  &recs[i].key));
	rec_scan_free(&scan);
	for (int i = 0; i < 5; i++)
		tu_record_free(&recs[i]);
}

/* The rebuilt index equals what was written, field by field. */
static void test_dir_scan_rebuilds_index(void **state)
{
	enum { RECORD_COUNT = 60 };
	struct fixture *f = *state;
	struct tu_record *recs = calloc(RECORD_COUNT, sizeof(*recs));
	bool *truncated = calloc(RECORD_COUNT, sizeof(bool));
	bool *has_child = calloc(RECORD_COUNT, sizeof(bool));
	uint64_t seed = 0x5e1e7e;
	struct rec_scan scan;

	printf("seed %llu\n", (unsigned long long)seed);
	srand((unsigned)seed);
	/* Conversations: chains from a few roots, each step 1..3 pages on. */
	for (int i = 0; i < RECORD_COUNT; i++) {
		int parent = i % 6 == 0 ? -1 : i - 1;
		uint64_t consumed = parent < 0 ? 64 + (uint64_t)(rand() % 100) :
				    recs[parent].key.consumed + 1 + (uint64_t)(rand() % 190);

		tu_record_make(&recs[i], &f->g, 1000 + (uint64_t)(i / 6), consumed,
			       parent < 0 ? NULL : &recs[parent], (uint64_t)i);
		assert_int_equal(tu_record_write(f->dir, &recs[i], 0), 0);
		if (parent >= 0)
			has_child[parent] = true;
	}
	for (int i = 0; i < RECORD_COUNT; i++) {
		truncated[i] = has_child[i] && rand() % 2;
		if (truncated[i])
			assert_int_equal(rec_truncate_row(f->dir, &recs[i].key), 0);
	}
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, RECORD_COUNT);
	for (int i = 0; i < RECORD_COUNT; i++) {
		const struct rec_record_info *info = NULL;
		struct rec_header h;

		for (size_t j = 0; j < scan.record_count; j++)
			if (rec_key_equal(&scan.records[j].key, &recs[i].key))
				info = &scan.records[j];
		assert_non_null(info);
		tu_record_header(&h, f->dir, &recs[i]);
		assert_true(rec_key_equal(&info->parent, &h.parent));
		assert_true(rec_digest_equal(&info->bucket, &h.bucket));
		assert_int_equal(info->first_page_index, recs[i].first_page_index);
		assert_int_equal(info->tail_page_count, recs[i].tail_page_count);
		assert_true(info->row_present == !truncated[i]);
		assert_int_equal(info->file_bytes,
				 truncated[i] ? h.row_offset : h.row_offset + h.row_length);
		assert_int_equal(info->created_ns, h.created_ns);
	}
	rec_scan_free(&scan);
	for (int i = 0; i < RECORD_COUNT; i++)
		tu_record_free(&recs[i]);
	free(recs);
	free(truncated);
	free(has_child);
}

/*
 * On tmpfs (O_DIRECT refused by older kernels, accepted by newer) it works,
 * and the directory says it is memory-backed.
 */
static void test_dir_tmpfs_either_path(void **state)
{
	struct fixture *f = *state;
	struct rec_dir *dir;
	struct tu_record rec;
	struct rec_scan scan;
	char *base;

	(void)f;
	if (access("/dev/shm", W_OK) != 0) {
		skip(); /* no tmpfs to refuse O_DIRECT here */
	}
	setenv("TMPDIR", "/dev/shm", 1);
	base = tu_make_temp_dir("tmpfs");
	unsetenv("TMPDIR");
	dir = tu_dir_open(base, &f->g, true);
	tu_record_make(&rec, &f->g, 30, 64 * 3, NULL, 30);
	assert_int_equal(tu_record_write(dir, &rec, 1), 0);
	assert_int_equal(rec_dir_scan(dir, &scan), 0);
	assert_int_equal(scan.record_count, 1);
	printf("O_DIRECT on /dev/shm: %s\n", rec_dir_direct(dir) ? "yes" : "no");
	/* Its I/O is a CPU copy: the disk thread spreads it over workers. */
	assert_true(rec_dir_memory_backed(dir));
	assert_true(rec_io_memory_backed(rec_dir_fd(dir)));
	rec_scan_free(&scan);
	tu_record_free(&rec);
	rec_dir_close(dir);
	tu_remove_tree(base);
}

static void make_debris(struct fixture *f, struct tu_record *keep,
			struct tu_record *orphan_root, struct tu_record *orphan)
{
	char *path;

	tu_record_make(keep, &f->g, 40, 64 * 2, NULL, 1);
	tu_record_make(orphan_root, &f->g, 41, 64 * 2, NULL, 2);
	tu_record_make(orphan, &f->g, 41, 64 * 3, orphan_root, 3);
	assert_int_equal(tu_record_write(f->dir, keep, 0), 0);
	assert_int_equal(tu_record_write(f->dir, orphan_root, 0), 0);
	assert_int_equal(tu_record_write(f->dir, orphan, 0), 0);
	assert_int_equal(rec_unlink(f->dir, &orphan_root->key), 0);
	write_file(rec_dir_path(f->dir), "a.tmp", "x");
	path = tu_record_path(f->dir, &orphan_root->key);
	write_file(rec_dir_path(f->dir), strrchr(path, '/') + 1, "not a header");
	free(path);
}

/* A kill at any scan failpoint leaves a directory the next scan finishes. */
static void test_dir_kill_during_scan(void **state)
{
	static const enum sel_failpoint points[] = {
		SEL_FP_SCAN_BEFORE_DELETE_TMP,   SEL_FP_SCAN_AFTER_DELETE_TMP,
		SEL_FP_SCAN_BEFORE_DROP_INVALID, SEL_FP_SCAN_AFTER_DROP_INVALID,
		SEL_FP_SCAN_BEFORE_DROP_ORPHAN,  SEL_FP_SCAN_AFTER_DROP_ORPHAN,
	};
	struct fixture *f = *state;

	for (size_t i = 0; i < SEL_ARRAY_SIZE(points); i++) {
		struct tu_record keep, orphan_root, orphan;
		struct rec_scan scan;
		char config[96];
		int status;
		pid_t pid;

		make_debris(f, &keep, &orphan_root, &orphan);
		snprintf(config, sizeof(config), "%s=1*kill",
			 sel_failpoint_name(points[i]));
		pid = fork();
		if (pid == 0) {
			struct rec_scan child_scan;

			tu_failpoints_may_kill(); /* kill, deliberately */
			sel_failpoints_configure(config);
			rec_dir_scan(f->dir, &child_scan);
			_exit(4);
		}
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
		assert_int_equal(scan.record_count, 1);
		assert_true(has_key(&scan, &keep.key));
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 1);
		rec_scan_free(&scan);
		assert_int_equal(rec_unlink(f->dir, &keep.key), 0);
		tu_record_free(&keep);
		tu_record_free(&orphan_root);
		tu_record_free(&orphan);
	}
}

/*
 * R-DIR-7: a record the scan cannot read (EIO) is skipped with the reason,
 * never deleted, and held (out of the records, listed for the summary),
 * with whatever depends on it; the next scan that can read it keeps it.
 */
static void test_dir_scan_skips_unreadable(void **state)
{
	struct fixture *f = *state;
	struct tu_record parent, child;
	struct rec_scan scan;

	tu_record_make(&parent, &f->g, 50, 64 * 2, NULL, 1);
	tu_record_make(&child, &f->g, 50, 64 * 3, &parent, 2);
	assert_int_equal(tu_record_write(f->dir, &parent, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &child, 0), 0);
	/* every read fails: both skipped, both kept on disk */
	assert_int_equal(sel_failpoints_configure("disk.read=return(EIO)"), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	sel_failpoints_configure(NULL);
	assert_int_equal(scan.record_count, 0);
	assert_int_equal(scan.unreadable_skipped, 2);
	assert_int_equal(scan.invalid_dropped + scan.orphans_dropped + scan.page_only_dropped, 0);
	/* both held, by key (ascending), for the summary (R-WIRE-18) */
	assert_int_equal(scan.held_count, 2);
	assert_true(rec_key_equal(&scan.held[0], &parent.key));
	assert_true(rec_key_equal(&scan.held[1], &child.key));
	rec_scan_free(&scan);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 2);
	/* the first file listed fails: parent or child, nothing is deleted */
	assert_int_equal(sel_failpoints_configure("disk.read=1*return(EIO)"), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	sel_failpoints_configure(NULL);
	assert_int_equal(scan.unreadable_skipped, 1);
	assert_true(scan.record_count <= 1); /* the parent alone, or nothing */
	assert_int_equal(scan.orphans_dropped + scan.page_only_dropped, 0);
	/* the child is held either way: unreadable, or its parent is */
	assert_int_equal(scan.record_count + scan.held_count, 2);
	assert_true(rec_key_equal(&scan.held[scan.held_count - 1], &child.key));
	rec_scan_free(&scan);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 2);
	/* readable again: both back */
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 2);
	assert_int_equal(scan.unreadable_skipped, 0);
	assert_int_equal(scan.held_count, 0);
	rec_scan_free(&scan);
	tu_record_free(&parent);
	tu_record_free(&child);
}

/*
 * Whichever read of the scan fails, parent or child, first file or second,
 * nothing is dropped: a child whose parent could not be read is held with
 * it (the held entry keeps its key, from the file name), never taken for
 * an orphan and deleted.
 */
static void test_dir_scan_unreadable_parent_holds_child(void **state)
{
	struct fixture *f = *state;
	struct tu_record parent, child;
	struct rec_scan scan;
	char config[64];

	tu_record_make(&parent, &f->g, 50, 64 * 2, NULL, 1);
	tu_record_make(&child, &f->g, 50, 64 * 3, &parent, 2);
	assert_int_equal(tu_record_write(f->dir, &parent, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &child, 0), 0);
	for (int skip = 0; skip < 8; skip++) {
		if (skip)
			snprintf(config, sizeof(config), "disk.read=%d*off->1*return(EIO)", skip);
		else
			snprintf(config, sizeof(config), "disk.read=1*return(EIO)");
		assert_int_equal(sel_failpoints_configure(config), 0);
		assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
		sel_failpoints_configure(NULL);
		assert_true(scan.unreadable_skipped <= 1);
		assert_int_equal(scan.invalid_dropped + scan.orphans_dropped +
					 scan.page_only_dropped, 0);
		rec_scan_free(&scan);
		assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), 2);
	}
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 2);
	rec_scan_free(&scan);
	tu_record_free(&parent);
	tu_record_free(&child);
}

/*
 * Issue 10 item 8: a directory, FIFO or symlink named like a record is
 * moved aside (NAME.aside), never followed nor deleted, so its key can be
 * stored again; other non-regular files are left alone.
 */
static void test_dir_scan_moves_non_regular_aside(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec, outside, blocked;
	struct rec_scan scan;
	char path[1024], name[REC_FILE_NAME_BYTES];
	char *target, *base2 = tu_make_temp_dir("outside");
	struct rec_dir *dir2 = tu_dir_open(base2, &f->g, false);
	const char *d = rec_dir_path(f->dir);
	struct stat st;

	tu_record_make(&rec, &f->g, 60, 64 * 2, NULL, 1);
	tu_record_make(&outside, &f->g, 61, 64 * 2, NULL, 2);
	tu_record_make(&blocked, &f->g, 62, 64 * 2, NULL, 3);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	assert_int_equal(tu_record_write(dir2, &outside, 0), 0);
	snprintf(path, sizeof(path), "%s/fifo.tmp", d);
	assert_int_equal(mkfifo(path, 0600), 0);
	snprintf(path, sizeof(path), "%s/000000000000abcd-00000000000000000000000000000000.ckpt", d);
	assert_int_equal(mkfifo(path, 0600), 0);
	snprintf(path, sizeof(path), "%s/sub.tmp", d);
	assert_int_equal(mkdir(path, 0700), 0);
	rec_file_name(name, &blocked.key);
	snprintf(path, sizeof(path), "%s/%s", d, name);
	assert_int_equal(mkdir(path, 0700), 0);
	target = tu_record_path(dir2, &outside.key);
	rec_file_name(name, &outside.key);
	snprintf(path, sizeof(path), "%s/%s", d, name);
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 1);
	assert_int_equal(scan.ignored, 2);     /* fifo.tmp, sub.tmp */
	assert_int_equal(scan.moved_aside, 3); /* the FIFO, directory and symlink */
	rec_scan_free(&scan);
	assert_int_equal(tu_count_suffix(d, ".aside"), 3);
	/* the symlink itself was moved, its target neither read nor changed */
	snprintf(path, sizeof(path), "%s/%s.aside", d, name);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	assert_int_equal(access(target, F_OK), 0);
	/* both keys can be stored again */
	assert_int_equal(tu_record_write(f->dir, &outside, 0), 0);
	assert_int_equal(tu_record_write(f->dir, &blocked, 0), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 3);
	assert_int_equal(scan.moved_aside, 0);
	rec_scan_free(&scan);
	free(target);
	tu_record_free(&rec);
	tu_record_free(&outside);
	tu_record_free(&blocked);
	rec_dir_close(dir2);
	tu_remove_tree(base2);
}

/*
 * A directory large enough that the scan reads headers on several threads
 * (1024 record files and up: 4 threads for 1100) keeps exactly what one
 * thread would: every valid record with its fields and access order, the
 * invalid ones dropped with their count (read again on the scan's own
 * thread, whatever thread read them first), orphans and temporary files
 * gone.
 */
static void test_dir_scan_many_records_on_threads(void **state)
{
	enum { COUNT = 1100, INVALID_EVERY = 300 };
	struct fixture *f = *state;
	struct tu_record rec, child;
	struct rec_scan scan;
	uint32_t invalid = 0;
	char name[REC_FILE_NAME_BYTES + 8];

	for (uint32_t i = 0; i < COUNT; i++) {
		struct timespec times[2] = { { .tv_sec = 2000000 + (COUNT - i) },
					     { .tv_sec = 2000000 + (COUNT - i) } };
		char *path;

		tu_record_make(&rec, &f->g, 1000 + i, 64, NULL, i);
		assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
		path = tu_record_path(f->dir, &rec.key);
		if (i % INVALID_EVERY == 7) {
			tu_flip_bit(path, 70);
			invalid++;
		}
		assert_int_equal(utimensat(AT_FDCWD, path, times, 0), 0);
		free(path);
		if (i == 1) { /* a child whose parent then goes: an orphan */
			tu_record_make(&child, &f->g, 1000 + i, 128, &rec, 9);
			assert_int_equal(tu_record_write(f->dir, &child, 0), 0);
			assert_int_equal(rec_unlink(f->dir, &rec.key), 0);
			rec_file_name(name, &child.key);
			strcat(name, ".tmp");
			write_file(rec_dir_path(f->dir), name, "partial");
			tu_record_free(&child);
		}
		tu_record_free(&rec);
	}
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.invalid_dropped, invalid);
	assert_int_equal(scan.orphans_dropped, 1);
	assert_int_equal(scan.tmp_deleted, 1);
	assert_int_equal(scan.record_count, COUNT - 1 - invalid);
	/* every file's header counted once, the invalid ones' second read not */
	assert_int_equal(scan.headers_read, COUNT);
	assert_int_equal(scan.cache_hits, 0);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".ckpt"), COUNT - 1 - invalid);
	/* Oldest first: written last (smallest mtime) first, fields intact. */
	for (size_t i = 0, k = 0; i < COUNT; i++) {
		uint32_t written = COUNT - 1 - (uint32_t)i;
		const struct rec_record_info *info;

		if (written == 1 || written % INVALID_EVERY == 7)
			continue;
		tu_record_make(&rec, &f->g, 1000 + written, 64, NULL, written);
		info = &scan.records[k++];
		assert_true(rec_key_equal(&info->key, &rec.key));
		assert_int_equal(info->mtime_ns, (2000000ull + (COUNT - written)) * 1000000000ull);
		assert_true(info->row_present);
		assert_int_equal(info->tail_page_count, 1);
		assert_int_equal(info->parent.consumed, 0);
		tu_record_free(&rec);
	}
	rec_scan_free(&scan);
}

/*
 * A record whose checksum segment is larger than the scan's reusable
 * buffers (over 8192 pages) is read with buffers of its own and kept.
 */
static void test_dir_scan_record_past_scan_buffers(void **state)
{
	struct fixture *f = *state;
	struct rec_geometry *g = malloc(sizeof(*g));
	char *base2 = tu_make_temp_dir("bigscan");
	struct rec_dir *dir2;
	struct tu_record big, small;
	struct rec_scan scan;

	(void)f;
	tu_geometry(g, 1, 1, 64, 64, 0, 1); /* one 4 KiB page per token */
	dir2 = tu_dir_open(base2, g, false);
	tu_record_make(&big, g, 70, 8300, NULL, 1);
	tu_record_make(&small, g, 71, 16, NULL, 2);
	assert_int_equal(tu_record_write(dir2, &big, 0), 0);
	assert_int_equal(tu_record_write(dir2, &small, 0), 0);
	assert_int_equal(rec_dir_scan(dir2, &scan), 0);
	assert_int_equal(scan.invalid_dropped, 0);
	assert_int_equal(scan.record_count, 2);
	assert_true(has_key(&scan, &big.key) && has_key(&scan, &small.key));
	for (size_t i = 0; i < 2; i++)
		assert_int_equal(scan.records[i].tail_page_count,
				 rec_key_equal(&scan.records[i].key, &big.key) ? 8300 : 16);
	rec_scan_free(&scan);
	tu_record_free(&big);
	tu_record_free(&small);
	rec_dir_close(dir2);
	tu_remove_tree(base2);
	free(g);
}

/* Warning lines, counted, and the last one kept. */
struct counted {
	unsigned lines;
	char last[1024];
};

static void count_line(enum sel_log_level level, const char *message, void *user)
{
	struct counted *c = user;

	if (level != SEL_LOG_WARN)
		return;
	c->lines++;
	snprintf(c->last, sizeof(c->last), "%s", message);
}

/*
 * R-DIR-2: thousands of stray files cost one warning per scan, with the
 * count and the first few names, not a line each; all are left in place.
 */
static void test_dir_scan_warns_once_for_stray_files(void **state)
{
	enum { STRAYS = 3000 };
	struct fixture *f = *state;
	struct counted c = { 0 };
	struct tu_record rec;
	struct rec_scan scan;
	char name[32];

	tu_record_make(&rec, &f->g, 1, 64 * 2, NULL, 1);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	for (int i = 0; i < STRAYS; i++) {
		snprintf(name, sizeof(name), "stray-%04d", i);
		write_file(rec_dir_path(f->dir), name, "x");
	}
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(count_line, &c);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
	assert_int_equal(scan.record_count, 1);
	assert_int_equal(scan.ignored, STRAYS);
	assert_int_equal(c.lines, 1);
	assert_non_null(strstr(c.last, "ignoring 3000 files that are not record files"));
	assert_non_null(strstr(c.last, "stray-"));
	assert_non_null(strstr(c.last, ", ..."));
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), "-0042"), 1);
	rec_scan_free(&scan);
	tu_record_free(&rec);
}

/* Warnings, caught while a test looks for one. */
struct caught {
	char text[4096];
};

static void catch_line(enum sel_log_level level, const char *message, void *user)
{
	struct caught *c = user;
	size_t used = strlen(c->text);

	if (level == SEL_LOG_WARN)
		snprintf(c->text + used, sizeof(c->text) - used, "%s\n", message);
}

static void catch_warnings(struct caught *c)
{
	c->text[0] = '\0';
	sel_log_set_level(SEL_LOG_WARN);
	sel_log_set_callback(catch_line, c);
}

static void release_warnings(void)
{
	sel_log_set_callback(NULL, NULL);
	sel_log_set_level(SEL_LOG_ERROR);
}

/*
 * File times move in ticks of the kernel's coarse clock (a few ms; a
 * second on some file systems): waits until a probe file's ctime moves on,
 * so every change made before is stamped in an earlier tick than any after.
 */
static void past_the_tick(const struct fixture *f)
{
	char path[600];
	struct stat st;
	struct timespec first;
	int fd;

	snprintf(path, sizeof(path), "%s/tick-probe", f->base);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(utimensat(AT_FDCWD, path, NULL, 0), 0);
	assert_int_equal(stat(path, &st), 0);
	first = st.st_ctim;
	for (int i = 0; i < 3000; i++) {
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		assert_int_equal(utimensat(AT_FDCWD, path, NULL, 0), 0);
		assert_int_equal(stat(path, &st), 0);
		if (st.st_ctim.tv_sec != first.tv_sec || st.st_ctim.tv_nsec != first.tv_nsec)
			return;
	}
	fail_msg("file times did not move in 3 s");
}

/* Closes f's directory (saving its scan cache) and opens it again. */
static void reopen(struct fixture *f)
{
	rec_dir_close(f->dir);
	f->dir = tu_dir_open(f->base, &f->g, false);
}

static char *cache_path(struct rec_dir *dir)
{
	char *path;

	if (asprintf(&path, "%s/%s", rec_dir_path(dir), REC_SCAN_CACHE_NAME) < 0)
		abort();
	return path;
}

static void assert_scans_equal(const struct rec_scan *a, const struct rec_scan *b)
{
	assert_int_equal(a->record_count, b->record_count);
	assert_int_equal(a->bytes, b->bytes);
	for (size_t i = 0; i < a->record_count; i++)
		tu_assert_info_equal(&a->records[i], &b->records[i]);
}

/*
 * R-DIR-10: after a clean close, every record file left as it was is taken
 * from the scan cache, on the scan's threads, and the scan says exactly
 * what reading every header says; stores, row truncations and unlinks made
 * after the scan reach the cache.
 */
static void test_dir_scan_cache_stands_for_unchanged_files(void **state)
{
	enum { ROOTS = 1100, CHILDREN = 20 };
	struct fixture *f = *state;
	struct tu_record *roots = calloc(ROOTS, sizeof(*roots)), child, late;
	struct rec_scan first, cached, full;
	struct stat st;
	char *path;

	for (int i = 0; i < ROOTS; i++) {
		tu_record_make(&roots[i], &f->g, 3000 + (uint64_t)i, 64, NULL, (uint64_t)i);
		assert_int_equal(tu_record_write(f->dir, &roots[i], 0), 0);
	}
	for (int i = 0; i < CHILDREN; i++) {
		tu_record_make(&child, &f->g, 3000 + (uint64_t)i, 64 * 3 + 5, &roots[i], 50);
		assert_int_equal(tu_record_write(f->dir, &child, 0), 0);
		tu_record_free(&child);
		if (i % 2)
			assert_int_equal(rec_truncate_row(f->dir, &roots[i].key), 0);
	}
	assert_int_equal(rec_dir_scan(f->dir, &first), 0);
	assert_int_equal(first.cache_hits, 0);
	assert_int_equal(first.record_count, ROOTS + CHILDREN);
	/* after the scan: one more record, a row dropped, a record gone */
	tu_record_make(&late, &f->g, 9999, 64 * 2, NULL, 7);
	assert_int_equal(tu_record_write(f->dir, &late, 0), 0);
	assert_int_equal(rec_truncate_row(f->dir, &roots[2].key), 0);
	assert_int_equal(rec_unlink(f->dir, &roots[ROOTS - 1].key), 0);
	assert_int_equal(tu_record_write(f->dir, &roots[3], 0), 0); /* its row back, a new file */
	past_the_tick(f);
	reopen(f);
	path = cache_path(f->dir);
	assert_int_equal(stat(path, &st), 0); /* one entry a record: none for the one unlinked */
	assert_int_equal(st.st_size, REC_SCAN_CACHE_HEADER_BYTES +
					     (ROOTS + CHILDREN) * REC_SCAN_CACHE_ENTRY_BYTES);

	assert_int_equal(rec_dir_scan(f->dir, &cached), 0);
	assert_int_equal(cached.record_count, ROOTS + CHILDREN);
	assert_int_equal(cached.cache_hits, cached.record_count);
	assert_int_equal(cached.headers_read, 0);
	assert_int_equal(cached.ignored, 0);
	/* taken in, the cache is gone: only a clean close leaves one */
	assert_int_equal(access(path, F_OK), -1);
	/* the same directory read header by header */
	reopen(f);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rec_dir_scan(f->dir, &full), 0);
	assert_int_equal(full.cache_hits, 0);
	assert_scans_equal(&cached, &full);
	for (size_t i = 0; i < full.record_count; i++) {
		if (rec_key_equal(&full.records[i].key, &roots[2].key))
			assert_false(full.records[i].row_present);
		if (rec_key_equal(&full.records[i].key, &roots[3].key))
			assert_true(full.records[i].row_present);
		assert_false(rec_key_equal(&full.records[i].key, &roots[ROOTS - 1].key));
	}
	assert_true(has_key(&full, &late.key));
	rec_scan_free(&first);
	rec_scan_free(&cached);
	rec_scan_free(&full);
	for (int i = 0; i < ROOTS; i++)
		tu_record_free(&roots[i]);
	tu_record_free(&late);
	free(roots);
	free(path);
}

/* Replaces path by a copy of itself with its mtime: only the inode and ctime tell. */
static void copy_over(const char *path)
{
	char copy[600], buf[4096];
	struct stat st;
	size_t n;
	FILE *in, *out;

	assert_int_equal(stat(path, &st), 0);
	snprintf(copy, sizeof(copy), "%s.copy", path);
	in = fopen(path, "rb");
	out = fopen(copy, "wb");
	assert_true(in && out);
	while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	fclose(out);
	assert_int_equal(utimensat(AT_FDCWD, copy, (struct timespec[2]){ st.st_atim, st.st_mtim },
				   0), 0);
	assert_int_equal(rename(copy, path), 0);
}

/*
 * R-DIR-10: a file changed while the directory was closed (a flipped bit,
 * older times, a copy renamed over it, a truncation, a deletion) or added
 * is read again, and the scan treats it as R-DIR-3 .. R-DIR-6 say.
 */
static void test_dir_scan_cache_rereads_changed_files(void **state)
{
	struct fixture *f = *state;
	struct tu_record r[9];
	struct timespec old[2] = { { .tv_sec = 1000000 }, { .tv_sec = 1000000 } };
	struct rec_scan scan;
	char *paths[9], swap[600];
	struct rec_header h;

	for (int i = 0; i < 9; i++) {
		tu_record_make(&r[i], &f->g, 4000 + (uint64_t)i, 64 * 2, NULL, (uint64_t)i);
		if (i == 6)
			continue; /* written later */
		assert_int_equal(tu_record_write(f->dir, &r[i], 0), 0);
		paths[i] = tu_record_path(f->dir, &r[i].key);
	}
	tu_record_header(&h, f->dir, &r[3]);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	past_the_tick(f);
	rec_dir_close(f->dir);
	f->dir = NULL;
	tu_flip_bit(paths[0], 70);                                 /* invalid now */
	assert_int_equal(utimensat(AT_FDCWD, paths[1], old, 0), 0); /* the oldest now */
	copy_over(paths[2]);                                       /* another inode */
	assert_int_equal(truncate(paths[3], (off_t)h.row_offset), 0); /* page-only, childless */
	assert_int_equal(unlink(paths[4]), 0);                     /* gone; r[5] as it was */
	snprintf(swap, sizeof(swap), "%s.swap", paths[7]);         /* r[7], r[8]: names swapped */
	assert_int_equal(rename(paths[7], swap), 0);
	assert_int_equal(rename(paths[8], paths[7]), 0);
	assert_int_equal(rename(swap, paths[8]), 0);
	f->dir = tu_dir_open(f->base, &f->g, false);
	assert_int_equal(tu_record_write(f->dir, &r[6], 0), 0);    /* not in the cache */

	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.cache_hits, 1);
	assert_int_equal(scan.invalid_dropped, 3);
	assert_int_equal(scan.page_only_dropped, 1);
	assert_int_equal(scan.record_count, 4);
	assert_true(rec_key_equal(&scan.records[0].key, &r[1].key));
	assert_int_equal(scan.records[0].mtime_ns, 1000000ull * 1000000000ull);
	for (int i = 1; i < 9; i++)
		assert_int_equal(has_key(&scan, &r[i].key), i != 3 && i != 4 && i < 7);
	rec_scan_free(&scan);
	for (int i = 0; i < 9; i++) {
		if (i != 6)
			free(paths[i]);
		tu_record_free(&r[i]);
	}
}

/*
 * R-DIR-10's tick rule: a record whose ctime is not before the cache's
 * mtime (a store in the tick of the close) is read, not taken.
 */
static void test_dir_scan_cache_distrusts_its_last_tick(void **state)
{
	struct fixture *f = *state;
	struct tu_record early, late;
	struct rec_scan scan;
	char *path, *cache;
	struct stat st;

	tu_record_make(&early, &f->g, 5000, 64, NULL, 1);
	assert_int_equal(tu_record_write(f->dir, &early, 0), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	past_the_tick(f);
	tu_record_make(&late, &f->g, 5001, 64, NULL, 2);
	assert_int_equal(tu_record_write(f->dir, &late, 0), 0);
	path = tu_record_path(f->dir, &late.key);
	cache = cache_path(f->dir);
	rec_dir_close(f->dir);
	/* the cache written in late's tick, as a close right after a store can be */
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(utimensat(AT_FDCWD, cache, (struct timespec[2]){ st.st_ctim, st.st_ctim },
				   0), 0);
	f->dir = tu_dir_open(f->base, &f->g, false);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.record_count, 2);
	assert_int_equal(scan.cache_hits, 1);
	rec_scan_free(&scan);
	free(path);
	free(cache);
	tu_record_free(&early);
	tu_record_free(&late);
}

/*
 * R-DIR-10: a damaged cache is ignored (every header read), a temporary one
 * a close left is deleted as any temporary file, and neither is counted as
 * a foreign file; the next clean close writes a good cache again.
 */
static void test_dir_scan_cache_damaged(void **state)
{
	struct fixture *f = *state;
	struct tu_record r[3];
	struct rec_scan scan;
	struct caught caught = { 0 };
	char *cache, tmp[600];

	for (int i = 0; i < 3; i++) {
		tu_record_make(&r[i], &f->g, 6000 + (uint64_t)i, 64, NULL, (uint64_t)i);
		assert_int_equal(tu_record_write(f->dir, &r[i], 0), 0);
	}
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	past_the_tick(f);
	cache = cache_path(f->dir);
	reopen(f);
	tu_flip_bit(cache, REC_SCAN_CACHE_HEADER_BYTES + 5);
	snprintf(tmp, sizeof(tmp), "%s.tmp", REC_SCAN_CACHE_NAME);
	write_file(rec_dir_path(f->dir), tmp, "partial");
	catch_warnings(&caught);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	release_warnings();
	assert_non_null(strstr(caught.text, "ignoring its scan cache: its entries' checksum fails"));
	assert_int_equal(scan.cache_hits, 0);
	assert_int_equal(scan.headers_read, 3);
	assert_int_equal(scan.record_count, 3);
	assert_int_equal(scan.tmp_deleted, 1);
	assert_int_equal(scan.ignored, 0);
	rec_scan_free(&scan);
	past_the_tick(f);
	reopen(f);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.cache_hits, 3);
	rec_scan_free(&scan);
	free(cache);
	for (int i = 0; i < 3; i++)
		tu_record_free(&r[i]);
}

/*
 * R-DIR-10 and R-REC-12: a directory that moved to another rank's name
 * (its scan cache written for the first rank's shard) is read header by
 * header, and every record of the other shard is dropped.
 */
static void test_dir_scan_cache_of_another_shard(void **state)
{
	struct fixture *f = *state;
	struct rec_geometry *other = malloc(sizeof(*other));
	char *base2 = tu_make_temp_dir("othershard"), *moved;
	struct caught caught = { 0 };
	struct tu_record r[3];
	struct rec_scan scan;
	struct rec_dir *dir2;

	for (int i = 0; i < 3; i++) {
		tu_record_make(&r[i], &f->g, 7000 + (uint64_t)i, 64, NULL, (uint64_t)i);
		assert_int_equal(tu_record_write(f->dir, &r[i], 0), 0);
	}
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	past_the_tick(f);
	tu_geometry(other, 64, 2, 4096, 8192, 0, 2); /* the same layout, another shard */
	dir2 = tu_dir_open(base2, other, false);
	if (asprintf(&moved, "%s/%s", f->base, strrchr(rec_dir_path(dir2), '/') + 1) < 0)
		abort();
	rec_dir_close(dir2);
	assert_int_equal(rename(rec_dir_path(f->dir), moved), 0);
	rec_dir_close(f->dir); /* saves into the directory, now under the other name */
	f->dir = tu_dir_open(f->base, other, false);
	assert_string_equal(rec_dir_path(f->dir), moved);
	catch_warnings(&caught);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	release_warnings();
	assert_non_null(strstr(caught.text, "another namespace or shard"));
	assert_int_equal(scan.cache_hits, 0);
	assert_int_equal(scan.headers_read, 3);
	assert_int_equal(scan.invalid_dropped, 3);
	assert_int_equal(scan.record_count, 0);
	rec_scan_free(&scan);
	rec_dir_close(f->dir);
	f->dir = tu_dir_open(f->base, &f->g, false); /* for the teardown */
	for (int i = 0; i < 3; i++)
		tu_record_free(&r[i]);
	tu_remove_tree(base2);
	free(moved);
	free(other);
}

/*
 * R-DIR-10: a process killed after it took the cache in and changed the
 * directory leaves no cache, so the next scan reads every header; a
 * second scan with one handle reads every header too.
 */
static void test_dir_scan_cache_after_kill_and_rescan(void **state)
{
	struct fixture *f = *state;
	struct tu_record r[4];
	struct rec_scan scan;
	char *cache;
	int status;
	pid_t pid;

	for (int i = 0; i < 3; i++) {
		tu_record_make(&r[i], &f->g, 8000 + (uint64_t)i, 64 * 2, NULL, (uint64_t)i);
		assert_int_equal(tu_record_write(f->dir, &r[i], 0), 0);
	}
	tu_record_make(&r[3], &f->g, 8003, 64 * 2, NULL, 3);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	past_the_tick(f);
	cache = cache_path(f->dir);
	rec_dir_close(f->dir);
	f->dir = NULL;
	assert_int_equal(access(cache, F_OK), 0);
	pid = fork();
	if (pid == 0) {
		struct rec_dir *d = tu_dir_open(f->base, &f->g, false);
		struct rec_scan s;

		if (rec_dir_scan(d, &s) != 0 || s.cache_hits != 3 ||
		    rec_unlink(d, &r[0].key) != 0 || tu_record_write(d, &r[3], 0) != 0)
			_exit(1);
		kill(getpid(), SIGKILL);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	assert_int_equal(access(cache, F_OK), -1);
	f->dir = tu_dir_open(f->base, &f->g, false);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	assert_int_equal(scan.cache_hits, 0);
	assert_int_equal(scan.headers_read, 3);
	assert_int_equal(scan.record_count, 3);
	assert_false(has_key(&scan, &r[0].key));
	assert_true(has_key(&scan, &r[3].key));
	rec_scan_free(&scan);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0); /* again, with this handle */
	assert_int_equal(scan.cache_hits, 0);
	assert_int_equal(scan.headers_read, 3);
	rec_scan_free(&scan);
	/* an engine that could not stop its disk thread: no cache at close */
	rec_dir_forget_catalog(f->dir);
	rec_dir_close(f->dir);
	assert_int_equal(access(cache, F_OK), -1);
	f->dir = tu_dir_open(f->base, &f->g, false);
	free(cache);
	for (int i = 0; i < 4; i++)
		tu_record_free(&r[i]);
}

/*
 * R-DIR-10's failure paths: something not a file under the cache's name is
 * refused, cannot be deleted nor emptied, and says so; the scan reads every
 * header; the close cannot save over it, says so, and leaves no temporary
 * file.
 */
static void test_dir_scan_cache_name_taken(void **state)
{
	struct fixture *f = *state;
	struct caught caught = { 0 };
	struct tu_record rec;
	struct rec_scan scan;
	char *cache, inside[700];

	tu_record_make(&rec, &f->g, 9100, 64, NULL, 1);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	cache = cache_path(f->dir);
	assert_int_equal(mkdir(cache, 0755), 0);
	snprintf(inside, sizeof(inside), "%s/keep", cache);
	write_file(cache, "keep", "not a cache");
	catch_warnings(&caught);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	release_warnings();
	assert_non_null(strstr(caught.text, "ignoring its scan cache: not a regular file"));
	assert_non_null(strstr(caught.text, "cannot delete its scan cache"));
	assert_non_null(strstr(caught.text, "cannot empty its scan cache either"));
	assert_int_equal(scan.record_count, 1);
	assert_int_equal(scan.headers_read, 1);
	assert_int_equal(scan.ignored, 0);
	rec_scan_free(&scan);
	catch_warnings(&caught);
	rec_dir_close(f->dir);
	release_warnings();
	assert_non_null(strstr(caught.text, "cannot save the scan cache"));
	assert_int_equal(access(inside, F_OK), 0);
	f->dir = tu_dir_open(f->base, &f->g, false);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
	free(cache);
	tu_record_free(&rec);
}

/* Whether the file at path holds exactly text. */
static bool file_holds(const char *path, const char *text)
{
	char buf[64] = "";
	FILE *fp = fopen(path, "r");
	size_t n;

	if (!fp)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	return n == strlen(text) && memcmp(buf, text, n) == 0;
}

/*
 * The directory's own temporary names (the scan cache's, the cluster
 * marker's, the O_DIRECT probe's) taken by a FIFO or by symlinks to files
 * outside: saving the cache does not block on the FIFO, and neither the
 * marker nor the probe writes through a symlink (both are replaced).
 */
static void test_dir_temporary_names_taken(void **state)
{
	struct fixture *f = *state;
	char path[700], victim[600];
	struct rec_scan scan;

	snprintf(victim, sizeof(victim), "%s/victim", f->base);
	write_file(f->base, "victim", "precious");
	snprintf(path, sizeof(path), "%s/.selene-scan-cache.tmp", rec_dir_path(f->dir));
	assert_int_equal(mkfifo(path, 0600), 0);
	snprintf(path, sizeof(path), "%s/.selene-direct-probe.tmp", rec_dir_path(f->dir));
	assert_int_equal(symlink(victim, path), 0);
	snprintf(path, sizeof(path), "%s/%s.tmp", rec_dir_path(f->dir), REC_CLUSTER_MARKER_NAME);
	assert_int_equal(symlink(victim, path), 0);
	assert_int_equal(rec_dir_scan(f->dir, &scan), 0);
	rec_scan_free(&scan);
	assert_int_equal(rec_dir_mark(f->dir, 2), 0);
	alarm(30); /* a save blocked on the FIFO fails the test, not the run */
	rec_dir_close(f->dir);
	f->dir = tu_dir_open(f->base, &f->g, false); /* probes O_DIRECT again */
	alarm(0);
	assert_true(file_holds(victim, "precious"));
	snprintf(path, sizeof(path), "%s/.selene-scan-cache.tmp", rec_dir_path(f->dir));
	assert_int_equal(access(path, F_OK), -1);
	assert_true(rec_dir_marked(f->dir));
}

/* An empty base path is refused (it would put the directory at the root). */
static void test_dir_empty_base_refused(void **state)
{
	struct fixture *f = *state;
	struct rec_identity namespace_id;
	struct rec_dir_options options = { .base_path = "", .namespace_id = &namespace_id,
					   .geometry = &f->g };
	struct rec_dir *dir = NULL;
	char err[256] = "";

	tu_identities(NULL, &namespace_id);
	assert_int_equal(rec_dir_open(&options, &dir, err, sizeof(err)), -EINVAL);
	assert_null(dir);
	assert_non_null(strstr(err, "the base path is empty"));
}

/*
 * A full filesystem cannot say whether it takes O_DIRECT: the directory
 * still opens (buffered), and its records stay readable. Skips where a
 * tmpfs cannot be mounted (no privilege).
 */
static void test_dir_opens_on_a_full_disk(void **state)
{
	struct fixture *f = *state;
	char mnt[600], fill[700];
	struct rec_dir *full;
	int fd;

	snprintf(mnt, sizeof(mnt), "%s/full", f->base);
	assert_int_equal(mkdir(mnt, 0755), 0);
	if (mount("selene-test", mnt, "tmpfs", 0, "size=64k") != 0)
		skip();
	full = tu_dir_open(mnt, &f->g, false);
	rec_dir_close(full);
	snprintf(fill, sizeof(fill), "%s/fill", mnt);
	fd = open(fill, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	while (write(fd, fill, sizeof(fill)) > 0)
		;
	assert_int_equal(errno, ENOSPC);
	close(fd);
	full = tu_dir_open(mnt, &f->g, false);
	assert_non_null(full);
	rec_dir_close(full);
	umount(mnt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dir_lock_refuses_second_opener, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_temporary_names_taken, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_opens_on_a_full_disk, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_empty_base_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_deletes_temporary_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_names_the_file_it_cannot_delete, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_drops_invalid_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_removes_orphans_with_descendants, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_prunes_childless_page_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_access_order_from_mtime, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_rebuilds_index, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_tmpfs_either_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_kill_during_scan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_warns_once_for_stray_files, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_skips_unreadable, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_marked_unless_all_unreadable, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_unreadable_parent_holds_child, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_moves_non_regular_aside, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_many_records_on_threads, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_cache_stands_for_unchanged_files, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_cache_rereads_changed_files, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_cache_distrusts_its_last_tick, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_cache_damaged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_cache_of_another_shard, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_cache_after_kill_and_rescan, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_cache_name_taken, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dir_scan_record_past_scan_buffers, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("dir", tests, NULL, NULL);
}
