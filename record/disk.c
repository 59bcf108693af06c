/*
 * The disk thread: see disk.h. One loop takes requests from a bounded
 * inbox, hands an urgent request's synchronous steps (open, close) to the
 * restore control thread and those of the others (create, commit, abort,
 * truncate, unlink) to the background control threads, and splits payload
 * requests into I/O requests of at most 8 MiB (2 MiB with kernel workers)
 * that it keeps in flight on the ring. An eventfd polled through the ring
 * wakes the loop when a request arrives while I/O is in flight.
 */
#include "record/disk.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "record/io.h"
#include "selene/selene.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <inttypes.h>
#include <liburing.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

/*
 * The user_data of the inbox eventfd's poll, and of an entry cancelled
 * before submission; ops use their own address.
 */
#define WAKE_TAG 1u
#define CANCELLED_TAG 2u

struct disk_op {
	struct rec_disk_request *req;
	int fd;
	bool write;
	uint32_t iov_count;
	uint64_t offset;
	struct iovec iov[REC_DISK_IOV_MAX];
};

/* Control threads sharing one queue, under the disk's lock. */
struct control {
	struct rec_disk *disk;
	pthread_t threads[REC_DISK_CONTROL_THREADS_MAX];
	uint32_t started;
	uint32_t joined; /* by rec_disk_stop, which may be retried */
	bool stopping;
	pthread_cond_t ready;
	struct rec_disk_request *queue[REC_DISK_QUEUE_MAX];
	uint32_t head;
	uint32_t count;
};

struct rec_disk {
	struct rec_dir *dir;
	bool use_ring;
	uint32_t io_workers;  /* 0: inline submissions; else IOSQE_ASYNC */
	uint64_t chunk_bytes; /* of one I/O request */
	struct io_uring ring;
	int wake_fd;
	bool wake_armed;
	pthread_t thread;
	pthread_mutex_t lock; /* inbox and stop */
	pthread_cond_t inbox_ready; /* fallback mode waits here */
	struct rec_disk_request *inbox[REC_DISK_QUEUE_MAX];
	uint32_t inbox_head;
	uint32_t inbox_count;
	bool stopping;
	/* Owned by the thread. */
	struct rec_disk_request *active[REC_DISK_QUEUE_MAX];
	uint32_t active_count;
	struct disk_op ops[REC_DISK_OPS_MAX];
	struct disk_op *free_ops[REC_DISK_OPS_MAX];
	uint32_t free_op_count;
	uint32_t ops_in_flight;
	/* Entries prepared since the last submission (op NULL: the wake poll). */
	struct {
		struct io_uring_sqe *sqe;
		struct disk_op *op;
	} unsubmitted[REC_DISK_OPS_MAX + 1];
	uint32_t unsubmitted_count;
	bool said_submit, said_wait;
	uint32_t background_ops_in_flight; /* of requests that are not urgent */
	/* Urgent requests among the active and on the restore control thread. */
	uint32_t urgent_active;
	/*
	 * The control threads, each queue's taken in arrival order:
	 * - background: the synchronous steps of background requests (create,
	 *   commit with its syncs, abort, truncate, unlink), so that none of
	 *   them holds the ring loop while a restore waits; one, or
	 *   REC_DISK_CONTROL_THREADS_MAX with kernel workers, where several
	 *   stores' creates (each preallocating its whole file) run at once;
	 * - restore: one thread for a restore's opens and closes, so the ring
	 *   loop keeps the restore's reads flowing while an open's header and
	 *   checksum reads wait behind them on the device.
	 */
	struct control background;
	struct control restore;
	bool thread_joined;
	/* Restore requests the restore control thread holds (atomic). */
	uint32_t urgent_in_control;
	/* Submitted and not yet replied, under lock: bounds every queue here. */
	uint32_t outstanding;
};

static int req_fail(struct rec_disk_request *req, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Records the first failure of a request; later ones keep the first. */
static int req_fail(struct rec_disk_request *req, int err, const char *fmt, ...)
{
	va_list ap;

	if (req->result)
		return req->result;
	req->result = err;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(req->why, sizeof(req->why), fmt, ap);
		va_end(ap);
	} else {
		snprintf(req->why, sizeof(req->why), "%s", sel_strerror(err));
	}
	return err;
}

static bool is_payload(enum rec_disk_op op)
{
	return op == REC_DISK_WRITE_PAGES || op == REC_DISK_WRITE_ROW ||
	       op == REC_DISK_READ_PAGES || op == REC_DISK_READ_ROW;
}

/* The buffers of a payload request, their sizes, fd and file offset. */
static void payload_shape(const struct rec_disk_request *req, uint32_t *count,
			  uint64_t *offset, int *fd)
{
	const struct rec_disk_file *f = req->file;
	bool write = req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_WRITE_ROW;
	const struct rec_header *h = write ? &f->writer.header : &f->reader.header;

	*fd = write ? f->writer.fd : f->reader.fd;
	if (req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_READ_PAGES) {
		/* A split page is its segments, each a buffer of its own here. */
		*count = req->count * (rec_page_spread_split(&req->spread) ?
					       req->spread.segment_count : 1);
		*offset = h->page_offset + h->page_stride * req->first;
	} else {
		*count = req->piece_count;
		*offset = h->row_offset;
	}
}

static uint64_t buffer_bytes(const struct rec_disk_request *req, uint32_t i)
{
	const struct rec_disk_file *f = req->file;
	bool write = req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_WRITE_ROW;
	const struct rec_header *h = write ? &f->writer.header : &f->reader.header;

	if (req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_READ_PAGES)
		return rec_page_spread_split(&req->spread) ? req->spread.segment_bytes :
							     h->page_stride;
	if (i + 1 < req->piece_count)
		return req->piece_bytes;
	return h->row_length - req->piece_bytes * (req->piece_count - 1);
}

/* Where buffer i of payload_shape's count begins (a split page's segment). */
static uint8_t *buffer_at(const struct rec_disk_request *req, uint32_t i)
{
	uint32_t segments = req->spread.segment_count;

	if ((req->op != REC_DISK_WRITE_PAGES && req->op != REC_DISK_READ_PAGES) ||
	    !rec_page_spread_split(&req->spread))
		return req->buffers[i];
	return (uint8_t *)req->buffers[i / segments] + req->spread.pitch_bytes * (i % segments);
}

/* Checks a payload request against its file before any I/O (R-READ-1). */
static int payload_check(struct rec_disk_request *req)
{
	struct rec_disk_file *f = req->file;
	bool write = req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_WRITE_ROW;
	const struct rec_header *h = write ? &f->writer.header : &f->reader.header;

	if (write ? !f->writing : !f->reading)
		return req_fail(req, -EBADF, "no record is open for this request");
	if (req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_READ_PAGES) {
		if (req->count > REC_DISK_BUFFERS_MAX ||
		    (uint64_t)req->first + req->count > h->tail_page_count)
			return req_fail(req, SEL_ETOOBIG,
					"pages %u..+%u are outside the record's %u",
					req->first, req->count, h->tail_page_count);
		if (!rec_page_spread_valid(&req->spread, h->page_stride) ||
		    (uint64_t)req->count * (rec_page_spread_split(&req->spread) ?
						    req->spread.segment_count : 1) > UINT32_MAX)
			return req_fail(req, -EINVAL,
					"%u segments of %" PRIu64 " bytes do not hold a "
					"%" PRIu64 "-byte page",
					req->spread.segment_count, req->spread.segment_bytes,
					h->page_stride);
		return 0;
	}
	if (req->op == REC_DISK_READ_ROW && !f->reader.row_present)
		return req_fail(req, -ENODATA, "the record has no row");
	if (req->piece_count == 0 || req->piece_count > REC_DISK_BUFFERS_MAX ||
	    req->piece_bytes == 0 || !sel_is_aligned(req->piece_bytes, SEL_BLOCK_BYTES) ||
	    req->piece_bytes * (req->piece_count - 1) >= h->row_length ||
	    req->piece_bytes * req->piece_count < h->row_length)
		return req_fail(req, SEL_ETOOBIG,
				"%u pieces of %" PRIu64 " bytes do not hold a %" PRIu64
				"-byte row", req->piece_count, req->piece_bytes,
				h->row_length);
	return 0;
}

/* Runs the steps that are not payload I/O, synchronously. */
static void run_control(struct rec_disk *disk, struct rec_disk_request *req)
{
	struct rec_disk_file *f = req->file;
	char name[REC_FILE_NAME_BYTES];
	struct rec_expect expect;
	int ret;

	switch (req->op) {
	case REC_DISK_CREATE:
		SEL_ASSERT(!f->writing);
		ret = rec_writer_begin_with(&f->writer, disk->dir, &f->header,
					    &f->buffers);
		f->writing = ret == 0;
		if (ret)
			req_fail(req, ret, NULL);
		break;
	case REC_DISK_COMMIT:
		if (!f->writing || f->writer.pages_written != f->writer.header.tail_page_count ||
		    !f->writer.row_written) {
			req_fail(req, -EINVAL, "commit before every page and the row");
			break;
		}
		f->writing = false;
		ret = rec_writer_commit(&f->writer);
		if (ret)
			req_fail(req, ret, NULL);
		break;
	case REC_DISK_ABORT:
		if (f->writing)
			rec_writer_abort(&f->writer);
		f->writing = false;
		break;
	case REC_DISK_OPEN:
		SEL_ASSERT(!f->reading);
		rec_file_name(name, &req->key);
		rec_dir_expect(disk->dir, &req->key, &expect);
		ret = rec_reader_open_with(&f->reader, rec_dir_fd(disk->dir), name,
					   rec_dir_direct(disk->dir), &expect,
					   &f->buffers, req->why, sizeof(req->why));
		if (ret) {
			char reason[sizeof(req->why)];

			snprintf(reason, sizeof(reason), "%s",
				 sel_is_selene_error(ret) ? req->why : sel_strerror(ret));
			req->why[0] = '\0';
			req_fail(req, ret, "%s: %s", name, reason);
			break;
		}
		f->reading = true;
		if (f->reader.header.first_page_index != req->expect_first_page ||
		    f->reader.header.tail_page_count != req->expect_tail_pages ||
		    (req->expect_row && !f->reader.row_present))
			req_fail(req, SEL_EMISMATCH,
				 "%s: pages %u..+%u%s, expected %u..+%u%s", name,
				 f->reader.header.first_page_index,
				 f->reader.header.tail_page_count,
				 f->reader.row_present ? " with row" : "",
				 req->expect_first_page, req->expect_tail_pages,
				 req->expect_row ? " with row" : "");
		break;
	case REC_DISK_CLOSE:
		if (f->reading)
			rec_reader_close(&f->reader);
		f->reading = false;
		break;
	case REC_DISK_TRUNCATE:
		ret = rec_truncate_row(disk->dir, &req->key);
		if (ret)
			req_fail(req, ret, NULL);
		break;
	case REC_DISK_UNLINK:
		ret = rec_unlink(disk->dir, &req->key);
		if (ret)
			req_fail(req, ret, NULL);
		break;
	default:
		SEL_ASSERT(!"not a control request");
	}
}

/* Fills op with up to chunk_bytes of req's remaining buffers; false when done. */
static bool build_op(const struct rec_disk *disk, struct rec_disk_request *req,
		     struct disk_op *op)
{
	const uint64_t chunk = disk->chunk_bytes;
	uint32_t count;
	uint64_t base_offset, bytes = 0;
	int fd;

	payload_shape(req, &count, &base_offset, &fd);
	if (req->next_buffer >= count)
		return false;
	op->req = req;
	op->fd = fd;
	op->write = req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_WRITE_ROW;
	op->iov_count = 0;
	op->offset = base_offset + req->next_offset;
	for (uint32_t i = 0; i < req->next_buffer; i++)
		op->offset += buffer_bytes(req, i);
	while (req->next_buffer < count && op->iov_count < REC_DISK_IOV_MAX &&
	       bytes < chunk) {
		uint64_t size = buffer_bytes(req, req->next_buffer);
		uint64_t n = size - req->next_offset;

		if (n > chunk - bytes)
			n = chunk - bytes;
		op->iov[op->iov_count].iov_base = buffer_at(req, req->next_buffer) +
						  req->next_offset;
		op->iov[op->iov_count++].iov_len = (size_t)n;
		bytes += n;
		req->next_offset += n;
		if (req->next_offset == size) {
			req->next_buffer++;
			req->next_offset = 0;
		}
	}
	return true;
}

static uint64_t op_bytes(const struct disk_op *op)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < op->iov_count; i++)
		n += op->iov[i].iov_len;
	return n;
}

/* Drops done bytes from the front of op, for a resubmission. */
static void op_advance(struct disk_op *op, uint64_t done)
{
	uint32_t skip = 0;

	op->offset += done;
	while (done > 0 && done >= op->iov[skip].iov_len)
		done -= op->iov[skip++].iov_len;
	if (skip) {
		memmove(op->iov, op->iov + skip, (op->iov_count - skip) * sizeof(op->iov[0]));
		op->iov_count -= skip;
	}
	if (done) {
		op->iov[0].iov_base = (uint8_t *)op->iov[0].iov_base + done;
		op->iov[0].iov_len -= (size_t)done;
	}
}

/* The kernel's result for op, rewritten by a disk.* failpoint if armed. */
static int64_t op_result(const struct disk_op *op, int64_t res)
{
	int injected = SEL_FAILPOINT(op->write ? SEL_FP_DISK_WRITE : SEL_FP_DISK_READ);

	if (injected < 0)
		return injected;
	if (injected == SEL_FAILPOINT_SHORT && res > (int64_t)SEL_BLOCK_BYTES)
		return (int64_t)sel_align_up((uint64_t)res / 2, SEL_BLOCK_BYTES);
	return res;
}

static void op_release(struct rec_disk *disk, struct disk_op *op)
{
	op->req->ops_in_flight--;
	disk->ops_in_flight--;
	if (!op->req->urgent)
		disk->background_ops_in_flight--;
	disk->free_ops[disk->free_op_count++] = op;
}

static void op_issue(struct rec_disk *disk, struct disk_op *op);
static void op_complete(struct rec_disk *disk, struct disk_op *op, int64_t res);

static void note_unsubmitted(struct rec_disk *disk, struct io_uring_sqe *sqe,
			     struct disk_op *op)
{
	SEL_ASSERT(disk->unsubmitted_count < SEL_ARRAY_SIZE(disk->unsubmitted));
	disk->unsubmitted[disk->unsubmitted_count].sqe = sqe;
	disk->unsubmitted[disk->unsubmitted_count].op = op;
	disk->unsubmitted_count++;
}

/*
 * Submits what was prepared. A failed io_uring_submit consumed nothing, so
 * each entry still waiting is turned into a no-op (the kernel may take it
 * with a later submission, harmlessly) and its I/O request fails with the
 * error: the kernel never saw its buffers. The wake poll is re-armed later.
 * Returns 0 or the error. disk.submit can inject one where I/O is waiting.
 */
static int ring_submit(struct rec_disk *disk)
{
	bool carries_io = false;
	int ret = 0;

	for (uint32_t i = 0; i < disk->unsubmitted_count && !carries_io; i++)
		carries_io = disk->unsubmitted[i].op != NULL;
	if (carries_io)
		ret = SEL_FAILPOINT(SEL_FP_DISK_SUBMIT);
	if (ret >= 0) {
		do
			ret = io_uring_submit(&disk->ring);
		while (ret == -EINTR);
	}
	if (ret >= 0) {
		uint32_t taken = (uint32_t)ret < disk->unsubmitted_count ? (uint32_t)ret :
									   disk->unsubmitted_count;

		memmove(disk->unsubmitted, disk->unsubmitted + taken,
			(disk->unsubmitted_count - taken) * sizeof(disk->unsubmitted[0]));
		disk->unsubmitted_count -= taken;
		return 0;
	}
	if (!disk->said_submit) {
		disk->said_submit = true;
		sel_warn("disk thread: io_uring_submit: %s; failing the I/O it carried",
			 strerror(-ret));
	}
	for (uint32_t i = 0; i < disk->unsubmitted_count; i++) {
		struct disk_op *op = disk->unsubmitted[i].op;

		io_uring_prep_nop(disk->unsubmitted[i].sqe);
		io_uring_sqe_set_data64(disk->unsubmitted[i].sqe, CANCELLED_TAG);
		if (op)
			op_complete(disk, op, ret);
		else
			disk->wake_armed = false;
	}
	disk->unsubmitted_count = 0;
	return ret;
}

/* Accounts a finished I/O request: short counts resubmit the rest. */
static void op_complete(struct rec_disk *disk, struct disk_op *op, int64_t res)
{
	uint64_t bytes = op_bytes(op);

	res = op_result(op, res);
	if (res < 0) {
		req_fail(op->req, (int)res, "%s at offset %" PRIu64 ": %s",
			 op->write ? "write" : "read", op->offset, strerror((int)-res));
	} else if (res == 0 && !op->write) {
		/*
		 * The file ends before its header says: cut short since it was
		 * opened. A length check's failure, naming the file first, so
		 * rank zero drops the record (R-READ-1, R-READ-4).
		 */
		char name[REC_FILE_NAME_BYTES];

		rec_file_name(name, &op->req->file->reader.header.key);
		req_fail(op->req, SEL_EBADHEADER,
			 "%s: the file ends at offset %" PRIu64 ", before its header's length "
			 "(cut short while open)", name, op->offset);
	} else if (res == 0) {
		req_fail(op->req, -EIO, "write at offset %" PRIu64 " made no progress",
			 op->offset);
	} else if ((uint64_t)res < bytes && !op->req->result) {
		op_advance(op, (uint64_t)res);
		op_issue(disk, op);
		return;
	}
	op_release(disk, op);
}

/* Puts op on the ring, or runs it now on the fallback path. */
static void op_issue(struct rec_disk *disk, struct disk_op *op)
{
	struct io_uring_sqe *sqe;
	ssize_t n;

	if (disk->use_ring) {
		int ret = 0;

		sqe = io_uring_get_sqe(&disk->ring);
		if (!sqe) {
			ret = ring_submit(disk);
			sqe = ret ? NULL : io_uring_get_sqe(&disk->ring);
		}
		if (!sqe) {
			/* The kernel never saw it: failing it here is safe. */
			op_complete(disk, op, ret ? ret : -EBUSY);
			return;
		}
		if (op->write)
			io_uring_prep_writev(sqe, op->fd, op->iov, op->iov_count, op->offset);
		else
			io_uring_prep_readv(sqe, op->fd, op->iov, op->iov_count, op->offset);
		/* Straight to a kernel worker: several copies run at once. */
		if (disk->io_workers)
			io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
		io_uring_sqe_set_data(sqe, op);
		note_unsubmitted(disk, sqe, op);
		return;
	}
	do {
		n = op->write ? pwritev(op->fd, op->iov, (int)op->iov_count, (off_t)op->offset) :
				preadv(op->fd, op->iov, (int)op->iov_count, (off_t)op->offset);
	} while (n < 0 && errno == EINTR);
	op_complete(disk, op, n < 0 ? -errno : n);
}

static bool is_write(const struct rec_disk_request *req)
{
	return req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_WRITE_ROW;
}

static uint32_t sum_units(const struct rec_disk_request *req)
{
	/* The requester verifies the pages it asked to read itself. */
	if (req->op == REC_DISK_READ_PAGES && req->requester_checksums)
		return 0;
	/* A page is one unit; a row is one unit, streamed over its pieces. */
	return req->op == REC_DISK_WRITE_PAGES || req->op == REC_DISK_READ_PAGES ?
		       req->count : 1;
}

/*
 * One unit of checksum work: a write's page or row checksum (its bytes are
 * there from the start), or a read's verification (once its I/O is done).
 */
static void sum_one(struct rec_disk_request *req)
{
	uint64_t bytes[REC_DISK_BUFFERS_MAX];
	char name[REC_FILE_NAME_BYTES];
	uint32_t i = req->next_sum++;

	if (req->op == REC_DISK_WRITE_PAGES) {
		if (req->requester_checksums)
			rec_writer_note_page_checksum(&req->file->writer, req->first + i,
						      req->page_checksums[i]);
		else
			rec_writer_note_page_checksum(
				&req->file->writer, req->first + i,
				rec_page_checksum_spread(
					req->buffers[i], &req->spread,
					req->file->writer.layout.page_stride, req->file->writer.seed,
					(uint64_t)req->file->writer.header.first_page_index +
						req->first + i));
		return;
	}
	if (req->op == REC_DISK_READ_PAGES) {
		struct rec_reader *r = &req->file->reader;

		if (rec_reader_page_ok_spread(r, req->first + i, req->buffers[i], &req->spread))
			return;
		rec_file_name(name, &r->header.key);
		req_fail(req, SEL_ECHECKSUM, "%s: page %" PRIu64 " (stored page %u) fails "
			 "its checksum", name,
			 (uint64_t)r->header.first_page_index + req->first + i, req->first + i);
		return;
	}
	for (uint32_t k = 0; k < req->piece_count; k++)
		bytes[k] = buffer_bytes(req, k);
	if (req->op == REC_DISK_WRITE_ROW) {
		rec_writer_note_row(&req->file->writer, (const void *const *)req->buffers,
				    bytes, req->piece_count);
	} else if (!rec_reader_row_ok(&req->file->reader, (const void *const *)req->buffers,
				      bytes, req->piece_count)) {
		rec_file_name(name, &req->file->reader.header.key);
		req_fail(req, SEL_ECHECKSUM, "%s: the row fails its checksum", name);
	}
}

/* Whether req has checksum work it can do now. */
static bool sum_ready(const struct rec_disk_request *req)
{
	if (!req->started || !is_payload(req->op) || req->result ||
	    req->next_sum >= sum_units(req))
		return false;
	/* A read's bytes are there only when all of its I/O has completed. */
	return is_write(req) || req->ops_in_flight == 0;
}

/*
 * Does one unit of checksum work for the oldest request that has some, so
 * that between units the loop reaps completions and keeps the ring full: a
 * whole window's pass at once left the disk without new requests for its
 * duration (measured: fetch at 0.78 of raw reads, 1.03 without the pass).
 */
static bool sum_step(struct rec_disk *disk)
{
	for (uint32_t i = 0; i < disk->active_count; i++) {
		if (sum_ready(disk->active[i])) {
			sum_one(disk->active[i]);
			return true;
		}
	}
	return false;
}

/*
 * Issues as many of req's I/O requests as free ops allow, and submits them
 * at once: the checksum passes that follow must not hold them back.
 */
static void feed(struct rec_disk *disk, struct rec_disk_request *req)
{
	uint32_t issued = 0;

	while (!req->result && disk->free_op_count > 0) {
		struct disk_op *op = disk->free_ops[disk->free_op_count - 1];

		/* Restores first: a store keeps few writes in the device's way. */
		if (!req->urgent && disk->urgent_active > 0 &&
		    disk->background_ops_in_flight >= REC_DISK_BACKGROUND_OPS_MAX)
			break;
		if (!build_op(disk, req, op))
			break;
		disk->free_op_count--;
		req->ops_in_flight++;
		disk->ops_in_flight++;
		if (!req->urgent)
			disk->background_ops_in_flight++;
		op_issue(disk, op);
		issued++;
	}
	if (issued && disk->use_ring)
		ring_submit(disk);
}

/* All of req's I/O is done, and so is its checksum work, or it failed. */
static bool payload_done(const struct rec_disk_request *req)
{
	uint32_t count;
	uint64_t offset;
	int fd;

	if (req->ops_in_flight > 0)
		return false;
	payload_shape(req, &count, &offset, &fd);
	return req->result ||
	       (req->next_buffer >= count && req->next_sum >= sum_units(req));
}

/* Hands req back: it is no longer the disk's before its requester sees it. */
static void reply(struct rec_disk *disk, struct rec_disk_request *req)
{
	struct rec_disk_replies *replies = req->replies;

	pthread_mutex_lock(&disk->lock);
	disk->outstanding--;
	pthread_mutex_unlock(&disk->lock);

	pthread_mutex_lock(&replies->lock);
	SEL_ASSERT(replies->count < REC_DISK_QUEUE_MAX);
	replies->queue[(replies->head + replies->count++) % REC_DISK_QUEUE_MAX] = req;
	pthread_cond_signal(&replies->ready);
	pthread_mutex_unlock(&replies->lock);
}

/*
 * record.before_write and record.after_write around each payload write
 * request (a window of pages, or the row) of a record, as rec_writer's own
 * path evaluates them around each write: a point that fails, fails the
 * request (and so the store); kill and abort act here.
 */
static void write_failpoint(struct rec_disk_request *req, enum sel_failpoint point)
{
	int injected;

	if (req->result)
		return;
	injected = SEL_FAILPOINT(point);
	if (injected < 0)
		req_fail(req, injected, "%s: %s", sel_failpoint_name(point),
			 strerror(-injected));
}

/* Moves new requests from the inbox; true when the thread should stop. */
static bool take_inbox(struct rec_disk *disk, bool block)
{
	bool stop;

	pthread_mutex_lock(&disk->lock);
	while (block && !disk->use_ring && disk->inbox_count == 0 && !disk->stopping)
		pthread_cond_wait(&disk->inbox_ready, &disk->lock);
	while (disk->inbox_count > 0 && disk->active_count < REC_DISK_QUEUE_MAX) {
		struct rec_disk_request *req = disk->inbox[disk->inbox_head];
		uint32_t at = disk->active_count;

		disk->inbox_head = (disk->inbox_head + 1) % REC_DISK_QUEUE_MAX;
		disk->inbox_count--;
		/* Urgent requests go before every other, in arrival order. */
		while (req->urgent && at > 0 && !disk->active[at - 1]->urgent)
			at--;
		memmove(disk->active + at + 1, disk->active + at,
			(disk->active_count - at) * sizeof(disk->active[0]));
		disk->active[at] = req;
		disk->active_count++;
	}
	stop = disk->stopping && disk->inbox_count == 0;
	pthread_mutex_unlock(&disk->lock);
	return stop;
}

/* Hands a request's synchronous step to control threads c. */
static void control_push(struct control *c, struct rec_disk_request *req)
{
	struct rec_disk *disk = c->disk;

	if (req->urgent)
		__atomic_add_fetch(&disk->urgent_in_control, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&disk->lock);
	/* At most REC_DISK_QUEUE_MAX requests are the disk's (outstanding). */
	SEL_ASSERT(c->count < REC_DISK_QUEUE_MAX);
	c->queue[(c->head + c->count++) % REC_DISK_QUEUE_MAX] = req;
	pthread_cond_signal(&c->ready);
	pthread_mutex_unlock(&disk->lock);
}

/*
 * Takes control steps from its queue in arrival order until stopped and
 * drained; with several control threads, steps taken one after another may
 * run at once (their requesters wait for every step a later one depends on).
 */
static void *control_main(void *arg)
{
	struct control *c = arg;
	struct rec_disk *disk = c->disk;

	if (c == &disk->restore)
		sel_thread_lower_priority(1, "disk restore control"); /* as the transfer thread */
	else
		sel_thread_batch_priority("disk control");
	for (;;) {
		struct rec_disk_request *req;

		pthread_mutex_lock(&disk->lock);
		while (c->count == 0 && !c->stopping)
			pthread_cond_wait(&c->ready, &disk->lock);
		if (c->count == 0) {
			pthread_mutex_unlock(&disk->lock);
			break;
		}
		req = c->queue[c->head];
		c->head = (c->head + 1) % REC_DISK_QUEUE_MAX;
		c->count--;
		pthread_mutex_unlock(&disk->lock);
		run_control(disk, req);
		if (req->urgent)
			__atomic_sub_fetch(&disk->urgent_in_control, 1, __ATOMIC_RELAXED);
		reply(disk, req);
	}
	return NULL;
}

static int control_start(struct rec_disk *disk, struct control *c, const char *name,
			 uint32_t threads, char *err, size_t err_size)
{
	c->disk = disk;
	for (uint32_t i = 0; i < threads; i++) {
		int ret = sel_thread_start(&c->threads[i], control_main, c);

		if (ret) {
			snprintf(err, err_size, "cannot start the disk's %s control thread: %s",
				 name, strerror(-ret));
			return ret;
		}
		c->started++;
	}
	return 0;
}

/* Tells c's threads to stop once their queue is drained. */
static void control_stop(struct control *c)
{
	pthread_mutex_lock(&c->disk->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->ready);
	pthread_mutex_unlock(&c->disk->lock);
}

/* Stops and joins c's threads by deadline (NULL: no bound). */
static int control_join(struct control *c, const struct timespec *deadline)
{
	if (!c->disk)
		return 0;
	control_stop(c);
	for (; c->joined < c->started; c->joined++) {
		int ret = deadline ? pthread_timedjoin_np(c->threads[c->joined], NULL, deadline) :
				     pthread_join(c->threads[c->joined], NULL);

		if (ret)
			return -ret;
	}
	return 0;
}

/*
 * Advances every active request in order. A request that depends on an
 * earlier one (a commit after its writes) is held back by its requester,
 * which sends it only after the earlier replies; so order here is only
 * priority: urgent requests (restores) first, then the rest in arrival order.
 */
static void advance(struct rec_disk *disk)
{
	uint32_t kept = 0;

	/* A restore's open on its control thread still holds back stores. */
	disk->urgent_active = __atomic_load_n(&disk->urgent_in_control, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < disk->active_count; i++)
		disk->urgent_active += disk->active[i]->urgent;

	for (uint32_t i = 0; i < disk->active_count; i++) {
		struct rec_disk_request *req = disk->active[i];

		if (!req->started) {
			req->started = true;
			if (!is_payload(req->op)) {
				struct control *c = req->urgent ? &disk->restore :
								  &disk->background;

				/* Each group has a thread once the disk has started. */
				SEL_ASSERT(c->started > 0);
				control_push(c, req);
				continue;
			}
			payload_check(req);
			if (is_write(req))
				write_failpoint(req, SEL_FP_RECORD_BEFORE_WRITE);
		}
		feed(disk, req);
		if (payload_done(req)) {
			if (is_write(req))
				write_failpoint(req, SEL_FP_RECORD_AFTER_WRITE);
			reply(disk, req);
			continue;
		}
		disk->active[kept++] = req;
	}
	disk->active_count = kept;
}

static void arm_wake(struct rec_disk *disk)
{
	struct io_uring_sqe *sqe;

	if (disk->wake_armed)
		return;
	sqe = io_uring_get_sqe(&disk->ring);
	if (!sqe && ring_submit(disk) == 0)
		sqe = io_uring_get_sqe(&disk->ring);
	if (!sqe)
		return; /* reap polls instead */
	io_uring_prep_poll_add(sqe, disk->wake_fd, POLLIN);
	io_uring_sqe_set_data64(sqe, WAKE_TAG);
	note_unsubmitted(disk, sqe, NULL);
	disk->wake_armed = true;
}

/* Processes every completion already posted, without waiting. */
static void reap_ready(struct rec_disk *disk)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(&disk->ring, head, cqe) {
		uint64_t tag = io_uring_cqe_get_data64(cqe);

		seen++;
		if (tag == CANCELLED_TAG)
			continue;
		if (tag == WAKE_TAG) {
			uint64_t value;

			disk->wake_armed = false;
			if (read(disk->wake_fd, &value, sizeof(value)) < 0 && errno != EAGAIN)
				sel_warn("disk thread: eventfd read: %s", strerror(errno));
			continue;
		}
		op_complete(disk, (struct disk_op *)(uintptr_t)tag, cqe->res);
	}
	io_uring_cq_advance(&disk->ring, seen);
}

/*
 * Waits for at least one completion (an op or the wake poll) and reaps all.
 * A failed wait (disk.wait can inject one) is logged once and becomes a
 * 1 ms pause: the loop reaps whatever completed and waits again. It fails
 * no request, since the kernel may still be writing that request's buffers;
 * one whose I/O never completes is the stop deadline's to report.
 */
static void reap(struct rec_disk *disk)
{
	struct io_uring_cqe *cqe;
	int ret;

	arm_wake(disk);
	ring_submit(disk);
	if (!disk->wake_armed && disk->ops_in_flight == 0) {
		/* Nothing could wake a wait: poll the inbox again shortly. */
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		return;
	}
	ret = SEL_FAILPOINT(SEL_FP_DISK_WAIT);
	if (ret >= 0) {
		do
			ret = io_uring_wait_cqe(&disk->ring, &cqe);
		while (ret == -EINTR);
	}
	if (ret < 0) {
		if (!disk->said_wait) {
			disk->said_wait = true;
			sel_warn("disk thread: io_uring_wait_cqe: %s; polling instead",
				 strerror(-ret));
		}
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	reap_ready(disk);
}

static void *disk_main(void *arg)
{
	struct rec_disk *disk = arg;

	sel_thread_batch_priority("disk"); /* the model's threads always go first */
	for (;;) {
		bool idle, stop;

		/*
		 * Completions (and the wake-up's eventfd read) first, then the
		 * inbox: a request whose wake-up was just consumed is taken
		 * here, before the loop can block again.
		 */
		if (disk->use_ring)
			reap_ready(disk);
		idle = disk->active_count == 0 && disk->ops_in_flight == 0;
		stop = take_inbox(disk, idle);
		if (stop && disk->active_count == 0 && disk->ops_in_flight == 0)
			break;
		advance(disk);
		/* Checksum work one unit at a time, the ring refilled between. */
		if (sum_step(disk))
			continue;
		advance(disk);
		if (disk->use_ring && (disk->ops_in_flight > 0 ||
				       (disk->active_count == 0 && !stop)))
			reap(disk);
	}
	return NULL;
}

int rec_disk_start(const struct rec_disk_options *options, struct rec_disk **out,
		   char *err, size_t err_size)
{
	static bool said;
	struct rec_disk *disk = calloc(1, sizeof(*disk));
	int ret;

	*out = NULL;
	if (!disk)
		return -ENOMEM;
	disk->dir = options->dir;
	disk->wake_fd = -1;
	disk->chunk_bytes = REC_IO_CHUNK_BYTES;
	pthread_mutex_init(&disk->lock, NULL);
	pthread_cond_init(&disk->inbox_ready, NULL);
	pthread_cond_init(&disk->background.ready, NULL);
	pthread_cond_init(&disk->restore.ready, NULL);
	for (uint32_t i = 0; i < REC_DISK_OPS_MAX; i++)
		disk->free_ops[disk->free_op_count++] = &disk->ops[i];
	if (!options->no_uring) {
		ret = io_uring_queue_init(REC_DISK_OPS_MAX * 2, &disk->ring, 0);
		if (ret == 0) {
			disk->use_ring = true;
		} else if (!__atomic_exchange_n(&said, true, __ATOMIC_RELAXED)) {
			sel_warn("io_uring unavailable (%s); the disk thread uses "
				 "pread/pwrite", strerror(-ret));
		}
	}
	if (disk->use_ring && options->io_workers) {
		/* Bounded work (file I/O) and unbounded alike. */
		unsigned int workers[2] = { options->io_workers, options->io_workers };

		ret = SEL_FAILPOINT(SEL_FP_DISK_IO_WORKERS);
		if (ret >= 0)
			ret = io_uring_register_iowq_max_workers(&disk->ring, workers);
		if (ret == 0) {
			disk->io_workers = options->io_workers;
			disk->chunk_bytes = REC_DISK_WORKER_CHUNK_BYTES;
		} else {
			sel_warn("io_uring cannot bound its kernel workers (%s); the disk "
				 "thread submits its I/O inline", strerror(-ret));
		}
	}
	if (disk->use_ring) {
		disk->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (disk->wake_fd < 0) {
			ret = -errno;
			snprintf(err, err_size, "eventfd: %s", strerror(errno));
			goto err_free;
		}
	}
	ret = control_start(disk, &disk->background, "background",
			    disk->io_workers ? REC_DISK_CONTROL_THREADS_MAX : 1, err, err_size);
	if (!ret)
		ret = control_start(disk, &disk->restore, "restore", 1, err, err_size);
	if (ret)
		goto err_free;
	ret = sel_thread_start(&disk->thread, disk_main, disk);
	if (ret) {
		snprintf(err, err_size, "cannot start the disk thread: %s", strerror(-ret));
		goto err_free;
	}
	*out = disk;
	return 0;
err_free:
	control_join(&disk->background, NULL);
	control_join(&disk->restore, NULL);
	if (disk->wake_fd >= 0)
		close(disk->wake_fd);
	if (disk->use_ring)
		io_uring_queue_exit(&disk->ring);
	pthread_cond_destroy(&disk->inbox_ready);
	pthread_cond_destroy(&disk->background.ready);
	pthread_cond_destroy(&disk->restore.ready);
	pthread_mutex_destroy(&disk->lock);
	free(disk);
	return ret;
}

static void wake(struct rec_disk *disk)
{
	uint64_t one = 1;

	if (disk->use_ring) {
		if (write(disk->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			sel_warn("disk thread: eventfd write: %s", strerror(errno));
	} else {
		pthread_cond_signal(&disk->inbox_ready);
	}
}

int rec_disk_submit(struct rec_disk *disk, struct rec_disk_request *req)
{
	SEL_ASSERT(req->replies && req->file);
	req->result = 0;
	req->why[0] = '\0';
	req->next_buffer = 0;
	req->next_offset = 0;
	req->ops_in_flight = 0;
	req->started = false;
	req->next_sum = 0;
	pthread_mutex_lock(&disk->lock);
	if (disk->outstanding == REC_DISK_QUEUE_MAX || disk->stopping) {
		pthread_mutex_unlock(&disk->lock);
		return disk->stopping ? SEL_ESTOPPED : SEL_EQUEUEFULL;
	}
	disk->inbox[(disk->inbox_head + disk->inbox_count++) % REC_DISK_QUEUE_MAX] = req;
	disk->outstanding++;
	wake(disk);
	pthread_mutex_unlock(&disk->lock);
	return 0;
}

int rec_disk_stop(struct rec_disk *disk, uint32_t timeout_ms)
{
	struct timespec deadline;
	int ret;

	if (!disk)
		return 0;
	pthread_mutex_lock(&disk->lock);
	disk->stopping = true;
	wake(disk);
	pthread_mutex_unlock(&disk->lock);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (deadline.tv_nsec >= 1000000000) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000;
	}
	ret = disk->thread_joined ? 0 : pthread_timedjoin_np(disk->thread, NULL, &deadline);
	if (ret) {
		uint32_t outstanding;

		/* The ring's counts are the running thread's: the lock's is ours. */
		pthread_mutex_lock(&disk->lock);
		outstanding = disk->outstanding;
		pthread_mutex_unlock(&disk->lock);
		/* Its I/O may still land in the requesters' buffers: keep all. */
		sel_error("disk thread: still running %u ms after the stop (%u requests not "
			  "answered); leaving it", timeout_ms, outstanding);
		return -ETIMEDOUT;
	}
	disk->thread_joined = true;
	/* The ring loop is done; the control threads finish what they hold. */
	ret = control_join(&disk->background, &deadline);
	if (ret) {
		sel_error("disk thread: a create, commit, truncate or unlink still runs "
			  "%u ms after the stop; leaving it", timeout_ms);
		return -ETIMEDOUT;
	}
	ret = control_join(&disk->restore, &deadline);
	if (ret) {
		sel_error("disk thread: a restore's open or close still runs %u ms after the "
			  "stop; leaving it", timeout_ms);
		return -ETIMEDOUT;
	}
	if (disk->use_ring)
		io_uring_queue_exit(&disk->ring);
	if (disk->wake_fd >= 0)
		close(disk->wake_fd);
	pthread_cond_destroy(&disk->inbox_ready);
	pthread_cond_destroy(&disk->background.ready);
	pthread_cond_destroy(&disk->restore.ready);
	pthread_mutex_destroy(&disk->lock);
	free(disk);
	return 0;
}

const char *rec_disk_engine(const struct rec_disk *disk)
{
	return disk->use_ring ? "io_uring" : "pread/pwrite";
}

uint32_t rec_disk_io_workers(const struct rec_disk *disk)
{
	return disk->io_workers;
}

uint32_t rec_disk_default_io_workers(const struct rec_dir *dir)
{
	return rec_disk_default_io_workers_for(rec_dir_memory_backed(dir), rec_dir_direct(dir));
}

uint32_t rec_disk_default_io_workers_for(bool memory_backed, bool direct)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t n;

	if (sel_env_count("SELENE_IO_THREADS", REC_DISK_IO_WORKERS_MAX, &n))
		return n;
	/*
	 * Where the disk's queue does the work (O_DIRECT on a block device),
	 * inline submissions are already asynchronous: no workers. Where the
	 * kernel copies on the CPU (tmpfs, buffered I/O), half the cores, at
	 * most 8 (measured on the H200's 16 cores: one thread reads tmpfs at
	 * 3.1 GB/s, eight at 15-17).
	 */
	if (!memory_backed && direct)
		return 0;
	cores /= 2;
	return cores < 1 ? 1 : cores > 8 ? 8 : (uint32_t)cores;
}

void rec_disk_replies_init(struct rec_disk_replies *replies)
{
	memset(replies, 0, sizeof(*replies));
	pthread_mutex_init(&replies->lock, NULL);
	pthread_cond_init(&replies->ready, NULL);
}

void rec_disk_replies_destroy(struct rec_disk_replies *replies)
{
	pthread_cond_destroy(&replies->ready);
	pthread_mutex_destroy(&replies->lock);
}

/* The next reply, waiting for one; with pokable, NULL once poked instead. */
static struct rec_disk_request *next_reply(struct rec_disk_replies *replies, bool pokable)
{
	struct rec_disk_request *req = NULL;

	pthread_mutex_lock(&replies->lock);
	while (replies->count == 0 && !(pokable && replies->poked))
		pthread_cond_wait(&replies->ready, &replies->lock);
	if (replies->count > 0) {
		req = replies->queue[replies->head];
		replies->head = (replies->head + 1) % REC_DISK_QUEUE_MAX;
		replies->count--;
	} else {
		replies->poked = false;
	}
	pthread_mutex_unlock(&replies->lock);
	return req;
}

struct rec_disk_request *rec_disk_wait(struct rec_disk_replies *replies)
{
	return next_reply(replies, false);
}

struct rec_disk_request *rec_disk_take(struct rec_disk_replies *replies)
{
	struct rec_disk_request *req = NULL;

	pthread_mutex_lock(&replies->lock);
	if (replies->count > 0) {
		req = replies->queue[replies->head];
		replies->head = (replies->head + 1) % REC_DISK_QUEUE_MAX;
		replies->count--;
	}
	pthread_mutex_unlock(&replies->lock);
	return req;
}

struct rec_disk_request *rec_disk_wait_or_poke(struct rec_disk_replies *replies)
{
	return next_reply(replies, true);
}

void rec_disk_replies_poke(struct rec_disk_replies *replies)
{
	pthread_mutex_lock(&replies->lock);
	replies->poked = true;
	pthread_cond_broadcast(&replies->ready);
	pthread_mutex_unlock(&replies->lock);
}

int rec_disk_file_init(struct rec_disk_file *file, uint32_t max_pages)
{
	uint64_t bytes = sel_align_up(8ull * (max_pages ? max_pages : 1), SEL_BLOCK_BYTES);
	void *checksums = NULL, *header = NULL;

	memset(file, 0, sizeof(*file));
	file->writer.fd = -1;
	file->reader.fd = -1;
	if (max_pages > REC_RECORD_PAGES_MAX)
		return SEL_ETOOBIG;
	if (posix_memalign(&checksums, SEL_BLOCK_BYTES, (size_t)bytes) ||
	    posix_memalign(&header, SEL_BLOCK_BYTES, REC_HEADER_BYTES)) {
		free(checksums);
		return -ENOMEM;
	}
	file->buffers.checksums = checksums;
	file->buffers.checksum_bytes = bytes;
	file->buffers.header_block = header;
	return 0;
}

void rec_disk_file_destroy(struct rec_disk_file *file)
{
	SEL_ASSERT(!file->writing && !file->reading);
	free(file->buffers.checksums);
	free(file->buffers.header_block);
	file->buffers.checksums = NULL;
	file->buffers.header_block = NULL;
}
