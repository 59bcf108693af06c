/*
 * The disk thread's stop (record/disk.h): rec_disk_stop gives up at its
 * deadline when a request's I/O on the ring, a background request's
 * synchronous step on its control thread, or a restore's open on the
 * restore control thread has not ended, leaves the threads and the disk as
 * they are, and a later call waits again and frees it. Held with sleep
 * failpoints; beyond the stop's own deadline, two tests take a step that
 * is not held (a one-page read, a create) to end within a hold of 1.5 to
 * 2 s. A refused thread (thread.start) fails the start with a reason and
 * leaves nothing running; a restore's open held on its control thread
 * lets the reads of another record flow; refused kernel workers
 * (disk.io_workers) leave a disk that submits inline and works; with
 * kernel workers, creates of different files run at once.
 */
#include "tests/testutil.h"

#include "common/failpoint.h"
#include "common/log.h"
#include "record/disk.h"
#include "record/format.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fixture {
	char *base;
	struct rec_geometry g;
	struct rec_identity ns;
	struct rec_dir *dir;
	struct rec_disk *disk;
	struct rec_disk_file file;
	struct rec_disk_replies replies;
	struct rec_disk_request create, write;
	uint8_t *page;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct rec_disk_options options = { 0 };
	struct rec_key key = { .consumed = 64 };
	char err[256];

	f->base = tu_make_temp_dir("disk");
	tu_geometry(&f->g, 64, 1, 4096, 4096, 0, 1);
	tu_identities(NULL, &f->ns);
	f->dir = tu_dir_open(f->base, &f->g, false);
	options.dir = f->dir;
	if (rec_disk_start(&options, &f->disk, err, sizeof(err)) != 0)
		fail_msg("disk: %s", err);
	assert_int_equal(rec_disk_file_init(&f->file, 4), 0);
	rec_disk_replies_init(&f->replies);
	memset(key.digest.bytes, 7, sizeof(key.digest.bytes));
	assert_int_equal(rec_header_init(&f->file.header, &f->g, &f->ns, &key, NULL,
					 &key.digest, 0, 1, 1), 0);
	f->page = tu_alloc(f->file.header.page_stride);
	f->create = (struct rec_disk_request){ .op = REC_DISK_CREATE, .file = &f->file,
					       .replies = &f->replies };
	f->write = (struct rec_disk_request){ .op = REC_DISK_WRITE_PAGES, .file = &f->file,
					      .replies = &f->replies, .first = 0, .count = 1,
					      .buffers = { f->page } };
	sel_log_set_level(SEL_LOG_ERROR);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	sel_failpoints_configure(NULL);
	sel_log_set_level(SEL_LOG_INFO);
	/* The disk is gone; what it left open of the record is closed here. */
	if (f->file.writing)
		rec_writer_abort(&f->file.writer);
	f->file.writing = false;
	rec_disk_file_destroy(&f->file);
	rec_disk_replies_destroy(&f->replies);
	rec_dir_close(f->dir);
	free(f->page);
	tu_remove_tree(f->base);
	free(f);
	return 0;
}

/* A write whose I/O is held 1.5 s on the disk thread outlasts a 100 ms stop. */
static void test_disk_stop_deadline_on_the_ring(void **state)
{
	struct fixture *f = *state;
	uint64_t fired;

	assert_int_equal(rec_disk_submit(f->disk, &f->create), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &f->create);
	assert_int_equal(f->create.result, 0);
	assert_int_equal(sel_failpoints_configure("disk.write=1*sleep(1500)"), 0);
	fired = sel_failpoint_fired(SEL_FP_DISK_WRITE);
	assert_int_equal(rec_disk_submit(f->disk, &f->write), 0);
	while (sel_failpoint_fired(SEL_FP_DISK_WRITE) == fired)
		usleep(1000);
	assert_int_equal(rec_disk_stop(f->disk, 100), -ETIMEDOUT);
	/* The request is the disk's still; the second stop waits it out. */
	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &f->write);
	assert_int_equal(f->write.result, 0);
}

/* A create held 1.5 s on the control thread outlasts a 100 ms stop. */
static void test_disk_stop_deadline_on_the_control_thread(void **state)
{
	struct fixture *f = *state;
	uint64_t fired;

	assert_int_equal(sel_failpoints_configure("record.before_create=1*sleep(1500)"), 0);
	fired = sel_failpoint_fired(SEL_FP_RECORD_BEFORE_CREATE);
	assert_int_equal(rec_disk_submit(f->disk, &f->create), 0);
	while (sel_failpoint_fired(SEL_FP_RECORD_BEFORE_CREATE) == fired)
		usleep(1000);
	assert_int_equal(rec_disk_stop(f->disk, 100), -ETIMEDOUT);
	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &f->create);
	assert_int_equal(f->create.result, 0);
}

/*
 * At most REC_DISK_QUEUE_MAX requests are the disk's at once, wherever they
 * wait (inbox, ring, control thread): with the control thread held by a
 * slow unlink, the next submission past that is refused with
 * SEL_EQUEUEFULL, never an assertion; once the replies are taken, the disk
 * takes requests again.
 */
static void test_disk_submissions_bounded(void **state)
{
	struct fixture *f = *state;
	static struct rec_disk_request unlinks[REC_DISK_QUEUE_MAX + 1];
	uint64_t fired;

	assert_int_equal(sel_failpoints_configure("disk.unlink=1*sleep(1000)"), 0);
	fired = sel_failpoint_fired(SEL_FP_DISK_UNLINK);
	for (uint32_t i = 0; i <= REC_DISK_QUEUE_MAX; i++) {
		unlinks[i] = (struct rec_disk_request){ .op = REC_DISK_UNLINK, .file = &f->file,
							.replies = &f->replies };
		unlinks[i].key.consumed = 64 * (i + 1);
	}
	assert_int_equal(rec_disk_submit(f->disk, &unlinks[0]), 0);
	while (sel_failpoint_fired(SEL_FP_DISK_UNLINK) == fired)
		usleep(1000);
	for (uint32_t i = 1; i < REC_DISK_QUEUE_MAX; i++)
		assert_int_equal(rec_disk_submit(f->disk, &unlinks[i]), 0);
	usleep(100 * 1000); /* the disk thread has moved them on to the control thread */
	assert_int_equal(rec_disk_submit(f->disk, &unlinks[REC_DISK_QUEUE_MAX]), SEL_EQUEUEFULL);
	for (uint32_t i = 0; i < REC_DISK_QUEUE_MAX; i++)
		assert_non_null(rec_disk_wait(&f->replies));
	assert_int_equal(rec_disk_submit(f->disk, &unlinks[REC_DISK_QUEUE_MAX]), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &unlinks[REC_DISK_QUEUE_MAX]);
	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
}

/* Neither thread can start: each refusal is an error with its reason. */
static void test_disk_thread_start_refused(void **state)
{
	static const struct {
		const char *config;
		const char *reason;
	} cases[] = {
		{ "thread.start=1*return(EAGAIN)",
		  "cannot start the disk's background control thread" },
		{ "thread.start=1*off->1*return(EAGAIN)",
		  "cannot start the disk's restore control thread" },
		{ "thread.start=2*off->1*return(EAGAIN)", "cannot start the disk thread" },
	};
	struct fixture *f = *state;
	struct rec_disk_options options = { .dir = f->dir };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rec_disk *disk = (struct rec_disk *)1;
		char err[256] = "";

		assert_int_equal(sel_failpoints_configure(cases[i].config), 0);
		assert_int_equal(rec_disk_start(&options, &disk, err, sizeof(err)), -EAGAIN);
		assert_null(disk);
		assert_non_null(strstr(err, cases[i].reason));
		assert_int_equal(sel_failpoint_fired(SEL_FP_THREAD_START), 1);
	}
	/*
	 * With kernel workers the third thread started is the third background
	 * control thread; where the kernel refuses the workers' bound there is
	 * one, and the third is the disk thread.
	 */
	options.io_workers = 2;
	{
		struct rec_disk *disk = (struct rec_disk *)1;
		char err[256] = "";
		bool workers;

		sel_failpoints_configure(NULL);
		assert_int_equal(rec_disk_start(&options, &disk, err, sizeof(err)), 0);
		workers = rec_disk_io_workers(disk) > 0;
		assert_int_equal(rec_disk_stop(disk, 30000), 0);
		assert_int_equal(sel_failpoints_configure("thread.start=2*off->1*return(EAGAIN)"),
				 0);
		assert_int_equal(rec_disk_start(&options, &disk, err, sizeof(err)), -EAGAIN);
		assert_null(disk);
		assert_int_equal(sel_failpoint_fired(SEL_FP_THREAD_START), 1);
		assert_non_null(strstr(err, workers ? "cannot start the disk's background control "
						      "thread" :
						      "cannot start the disk thread"));
	}
	sel_failpoints_configure(NULL);
	/* The fixture's own disk still works. */
	assert_int_equal(rec_disk_submit(f->disk, &f->create), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &f->create);
	assert_int_equal(f->create.result, 0);
	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
}

/*
 * io_uring refusing to bound its kernel workers: the disk says so, runs
 * without them (inline submission, rec_disk_io_workers 0), and a record's
 * page written and read back through it is the page.
 */
static void test_disk_io_workers_refused(void **state)
{
	struct fixture *f = *state;
	struct rec_disk_options options = { .dir = f->dir, .io_workers = 3 };
	struct rec_disk *disk;
	uint8_t *back = tu_alloc(f->file.header.page_stride);
	char err[256], path[64];
	int fd;

	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
	assert_int_equal(sel_failpoints_configure("disk.io_workers=return(EPERM)"), 0);
	assert_int_equal(rec_disk_start(&options, &disk, err, sizeof(err)), 0);
	assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_IO_WORKERS), 1);
	assert_int_equal(rec_disk_io_workers(disk), 0);
	sel_failpoints_configure(NULL);
	tu_fill(f->page, f->file.header.page_stride, 99);
	f->create.replies = f->write.replies = &f->replies;
	assert_int_equal(rec_disk_submit(disk, &f->create), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &f->create);
	assert_int_equal(f->create.result, 0);
	assert_int_equal(rec_disk_submit(disk, &f->write), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &f->write);
	assert_int_equal(f->write.result, 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", f->file.writer.fd);
	fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, back, f->file.header.page_stride,
			       (off_t)f->file.header.page_offset),
			 (ssize_t)f->file.header.page_stride);
	close(fd);
	assert_memory_equal(back, f->page, f->file.header.page_stride);
	assert_int_equal(rec_disk_stop(disk, 30000), 0);
	/* the fixture's disk is stopped; the teardown aborts the record */
	free(back);
}

/*
 * With kernel workers, creates of different files run at once on the
 * control threads: a create held 1.5 s does not hold up the next one, whose
 * reply comes first; both files are then written and aborted cleanly.
 */
static void test_disk_creates_run_at_once(void **state)
{
	struct fixture *f = *state;
	struct rec_disk_options options = { .dir = f->dir, .io_workers = 2 };
	struct rec_disk_file other;
	struct rec_disk_request second = { .op = REC_DISK_CREATE, .file = &other,
					   .replies = &f->replies };
	struct rec_key key = { .consumed = 128 };
	struct rec_disk *disk;
	uint64_t fired;
	char err[256];

	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
	assert_int_equal(rec_disk_start(&options, &disk, err, sizeof(err)), 0);
	if (rec_disk_io_workers(disk) == 0) {
		assert_int_equal(rec_disk_stop(disk, 30000), 0);
		skip(); /* the kernel refused the bound: one control thread */
	}
	assert_int_equal(rec_disk_file_init(&other, 4), 0);
	memset(key.digest.bytes, 9, sizeof(key.digest.bytes));
	assert_int_equal(rec_header_init(&other.header, &f->g, &f->ns, &key, NULL,
					 &key.digest, 0, 2, 1), 0);
	assert_int_equal(sel_failpoints_configure("record.before_create=1*sleep(1500)"), 0);
	fired = sel_failpoint_fired(SEL_FP_RECORD_BEFORE_CREATE);
	assert_int_equal(rec_disk_submit(disk, &f->create), 0);
	while (sel_failpoint_fired(SEL_FP_RECORD_BEFORE_CREATE) == fired)
		usleep(1000);
	assert_int_equal(rec_disk_submit(disk, &second), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &second);
	assert_int_equal(second.result, 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &f->create);
	assert_int_equal(f->create.result, 0);
	second.op = f->create.op = REC_DISK_ABORT;
	assert_int_equal(rec_disk_submit(disk, &second), 0);
	assert_int_equal(rec_disk_submit(disk, &f->create), 0);
	assert_non_null(rec_disk_wait(&f->replies));
	assert_non_null(rec_disk_wait(&f->replies));
	assert_int_equal(rec_disk_stop(disk, 30000), 0);
	rec_disk_file_destroy(&other);
	assert_int_equal(tu_count_suffix(rec_dir_path(f->dir), ".tmp"), 0);
}

/* A restore's open of rec into file, checked against rec's pages and row. */
static struct rec_disk_request open_request(struct fixture *f, struct rec_disk_file *file,
					    const struct tu_record *rec)
{
	return (struct rec_disk_request){ .op = REC_DISK_OPEN, .file = file, .key = rec->key,
					  .expect_first_page = rec->first_page_index,
					  .expect_tail_pages = rec->tail_page_count,
					  .expect_row = true, .replies = &f->replies,
					  .urgent = true };
}

/*
 * A restore's open runs on the restore control thread, not in the ring
 * loop: with the open of one record held 2 s (disk.open), a read of another
 * record, already open, is answered first (before, the loop ran the open in
 * place and every read waited for it); the held open then completes, and
 * both records' pages read back as written.
 */
static void test_disk_reads_flow_while_an_open_waits(void **state)
{
	struct fixture *f = *state;
	struct tu_record recs[2];
	struct rec_disk_file files[2];
	struct rec_disk_request open[2], read[2], close[2];
	uint8_t *pages[2];
	uint64_t fired;

	for (uint32_t i = 0; i < 2; i++) {
		tu_record_make(&recs[i], &f->g, 100 + i, 64, NULL, 200 + i);
		assert_int_equal(tu_record_write(f->dir, &recs[i], 0), 0);
		assert_int_equal(rec_disk_file_init(&files[i], 4), 0);
		pages[i] = tu_alloc(recs[i].stride);
		open[i] = open_request(f, &files[i], &recs[i]);
		read[i] = (struct rec_disk_request){ .op = REC_DISK_READ_PAGES,
						     .file = &files[i], .first = 0, .count = 1,
						     .buffers = { pages[i] },
						     .replies = &f->replies, .urgent = true };
		close[i] = (struct rec_disk_request){ .op = REC_DISK_CLOSE, .file = &files[i],
						      .replies = &f->replies, .urgent = true };
	}
	assert_int_equal(rec_disk_submit(f->disk, &open[0]), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &open[0]);
	assert_int_equal(open[0].result, 0);

	assert_int_equal(sel_failpoints_configure("disk.open=1*sleep(2000)"), 0);
	fired = sel_failpoint_fired(SEL_FP_DISK_OPEN);
	assert_int_equal(rec_disk_submit(f->disk, &open[1]), 0);
	while (sel_failpoint_fired(SEL_FP_DISK_OPEN) == fired)
		usleep(1000);
	assert_int_equal(rec_disk_submit(f->disk, &read[0]), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &read[0]);
	assert_int_equal(read[0].result, 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &open[1]);
	assert_int_equal(open[1].result, 0);

	assert_int_equal(rec_disk_submit(f->disk, &read[1]), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &read[1]);
	assert_int_equal(read[1].result, 0);
	for (uint32_t i = 0; i < 2; i++) {
		assert_memory_equal(pages[i], recs[i].pages, recs[i].stride);
		assert_int_equal(rec_disk_submit(f->disk, &close[i]), 0);
		assert_ptr_equal(rec_disk_wait(&f->replies), &close[i]);
		assert_false(files[i].reading);
		rec_disk_file_destroy(&files[i]);
		tu_record_free(&recs[i]);
		free(pages[i]);
	}
	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
}

/* A restore's open held 1.5 s on its control thread outlasts a 100 ms stop. */
static void test_disk_stop_deadline_on_the_restore_control_thread(void **state)
{
	struct fixture *f = *state;
	struct tu_record rec;
	struct rec_disk_file file;
	struct rec_disk_request open;
	uint64_t fired;

	tu_record_make(&rec, &f->g, 300, 64, NULL, 301);
	assert_int_equal(tu_record_write(f->dir, &rec, 0), 0);
	assert_int_equal(rec_disk_file_init(&file, 4), 0);
	open = open_request(f, &file, &rec);
	assert_int_equal(sel_failpoints_configure("disk.open=1*sleep(1500)"), 0);
	fired = sel_failpoint_fired(SEL_FP_DISK_OPEN);
	assert_int_equal(rec_disk_submit(f->disk, &open), 0);
	while (sel_failpoint_fired(SEL_FP_DISK_OPEN) == fired)
		usleep(1000);
	assert_int_equal(rec_disk_stop(f->disk, 100), -ETIMEDOUT);
	assert_int_equal(rec_disk_stop(f->disk, 100), -ETIMEDOUT);
	assert_int_equal(rec_disk_stop(f->disk, 30000), 0);
	assert_ptr_equal(rec_disk_wait(&f->replies), &open);
	assert_int_equal(open.result, 0);
	assert_true(file.reading);
	rec_reader_close(&file.reader);
	file.reading = false;
	rec_disk_file_destroy(&file);
	tu_record_free(&rec);
}

/* Submits req and waits for its reply, which must be its own. */
static int disk_run(struct rec_disk *disk, struct rec_disk_replies *replies,
		    struct rec_disk_request *req)
{
	assert_int_equal(rec_disk_submit(disk, req), 0);
	assert_ptr_equal(rec_disk_wait(replies), req);
	return req->result;
}

/* Copies page i of pages (in one piece, segments of 8 KiB) into spread memory. */
static void spread_copy(uint8_t *to, const struct rec_page_spread *sp, const uint8_t *pages,
			uint32_t i, bool into)
{
	for (uint32_t k = 0; k < sp->segment_count; k++) {
		uint8_t *at = to + 8192ull * i + sp->pitch_bytes * k;
		const uint8_t *plain = pages + (uint64_t)i * sp->segment_count * 8192 + 8192ull * k;

		if (into)
			memcpy(at, plain, 8192);
		else
			assert_memory_equal(at, plain, 8192);
	}
}

/*
 * Pages written from, and read into, spread memory (each page's 3 planes
 * of 8 KiB 8 pages apart, as a group of 8 warm slots lays them out): the
 * file is the record in one piece (read back plainly, the disk thread's
 * own checksums of the spread pages verify), a spread read lands each
 * plane where the spread says and verifies, the verifying threads' own
 * read (rec_reader_read_page_ok_spread) does the same in chunks within a
 * plane, across planes (one preadv into several planes, its short counts
 * resumed) and of the whole page, and a spread that
 * does not hold a page is refused with -EINVAL.
 */
static void test_disk_spread_pages(void **state)
{
	struct fixture *f = *state;
	const struct rec_page_spread sp = { .segment_count = 3, .segment_bytes = 8192,
					    .pitch_bytes = 8 * 8192 };
	struct rec_geometry g;
	struct rec_disk_options options = { 0 };
	struct rec_disk *disk;
	struct rec_disk_file file;
	struct rec_disk_request req;
	struct tu_record rec;
	struct rec_dir *dir;
	uint8_t *spread_in = tu_alloc(8 * 3 * 8192), *spread_out = tu_alloc(8 * 3 * 8192);
	uint8_t *plain = tu_alloc(5 * 3 * 8192);
	char *base, err[256];
	bool ok;

	assert_true(asprintf(&base, "%s/spread", f->base) > 0);
	assert_int_equal(mkdir(base, 0700), 0);
	tu_geometry(&g, 64, 3, 8192, 4096, 0, 1);
	dir = tu_dir_open(base, &g, false);
	options.dir = dir;
	if (rec_disk_start(&options, &disk, err, sizeof(err)) != 0)
		fail_msg("disk: %s", err);
	assert_int_equal(rec_disk_file_init(&file, 8), 0);
	tu_record_make(&rec, &g, 5, 64 * 5, NULL, 77);
	assert_int_equal(rec.stride, 3 * 8192);
	for (uint32_t i = 0; i < 5; i++)
		spread_copy(spread_in, &sp, rec.pages, i, true);

	tu_record_header(&file.header, dir, &rec);
	req = (struct rec_disk_request){ .op = REC_DISK_CREATE, .file = &file,
					 .replies = &f->replies };
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	req = (struct rec_disk_request){ .op = REC_DISK_WRITE_PAGES, .file = &file,
					 .replies = &f->replies, .first = 0, .count = 3,
					 .spread = { 3, 4096, 8 * 8192 } };
	for (uint32_t i = 0; i < 3; i++)
		req.buffers[i] = spread_in + 8192ull * i;
	assert_int_equal(disk_run(disk, &f->replies, &req), -EINVAL);
	req.result = 0;
	req.spread = sp;
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	req.first = 3;
	req.count = 2;
	for (uint32_t i = 0; i < 2; i++)
		req.buffers[i] = spread_in + 8192ull * (3 + i);
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	req = (struct rec_disk_request){ .op = REC_DISK_WRITE_ROW, .file = &file,
					 .replies = &f->replies, .piece_count = 1,
					 .piece_bytes = rec.row_length, .buffers = { rec.row } };
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	req = (struct rec_disk_request){ .op = REC_DISK_COMMIT, .file = &file,
					 .replies = &f->replies };
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);

	req = (struct rec_disk_request){ .op = REC_DISK_OPEN, .file = &file, .key = rec.key,
					 .expect_tail_pages = 5, .replies = &f->replies };
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	req = (struct rec_disk_request){ .op = REC_DISK_READ_PAGES, .file = &file,
					 .replies = &f->replies, .first = 0, .count = 5,
					 .buffers = { plain } };
	for (uint32_t i = 0; i < 5; i++)
		req.buffers[i] = plain + rec.stride * i;
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	assert_memory_equal(plain, rec.pages, 5 * rec.stride);
	req.spread = sp;
	for (uint32_t i = 0; i < 5; i++)
		req.buffers[i] = spread_out + 8192ull * i;
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	for (uint32_t i = 0; i < 5; i++)
		spread_copy(spread_out, &sp, rec.pages, i, false);
	/* in chunks within a plane, across planes (one preadv each), the whole page */
	for (uint32_t c = 0; c < 3; c++) {
		static const uint64_t chunks[] = { 4096, 3 * 4096, 1u << 20 };

		memset(spread_out, 0, 8 * 3 * 8192);
		if (c == 1)
			assert_int_equal(sel_failpoints_configure("disk.read=4*short"), 0);
		for (uint32_t i = 0; i < 5; i++) {
			assert_int_equal(rec_reader_read_page_ok_spread(&file.reader, i,
									spread_out + 8192ull * i,
									&sp, chunks[c], &ok), 0);
			assert_true(ok);
			spread_copy(spread_out, &sp, rec.pages, i, false);
			assert_true(rec_reader_page_ok_spread(&file.reader, i,
							      spread_out + 8192ull * i, &sp));
		}
		if (c == 1)
			assert_int_equal(sel_failpoint_fired(SEL_FP_DISK_READ), 4);
		sel_failpoints_configure(NULL);
	}
	req = (struct rec_disk_request){ .op = REC_DISK_CLOSE, .file = &file,
					 .replies = &f->replies };
	assert_int_equal(disk_run(disk, &f->replies, &req), 0);
	assert_int_equal(rec_disk_stop(disk, 30000), 0);
	rec_disk_file_destroy(&file);
	tu_record_free(&rec);
	rec_dir_close(dir);
	free(base);
	free(spread_in);
	free(spread_out);
	free(plain);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_disk_stop_deadline_on_the_ring, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_disk_stop_deadline_on_the_control_thread,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_submissions_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_thread_start_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_io_workers_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_creates_run_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_reads_flow_while_an_open_waits, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_disk_stop_deadline_on_the_restore_control_thread,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_disk_spread_pages, setup, teardown),
	};

	return cmocka_run_group_tests_name("disk", tests, NULL, NULL);
}
