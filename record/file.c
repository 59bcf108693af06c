/*
 * One record file: the write protocol (temporary name, preallocation,
 * payload, checksum segment, header last, sync, rename), verified reads,
 * truncation and unlink. Rules cited are in FORMAT.md.
 */
#include "record/file.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/xxh.h"
#include "record/io.h"
#include "selene/selene.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation */
#include <xxhash.h>

/* Evaluates a failpoint that may fail the step it guards. */
#define STEP_FAILPOINT(point)                       \
	do {                                        \
		int injected_ = SEL_FAILPOINT(point); \
		if (injected_ < 0)                  \
			return injected_;           \
	} while (0)

/*
 * A streaming state on the stack must be initialised before its first
 * reset: XXH3_64bits_reset_withSeed skips deriving its secret when the
 * stale seed field already equals the new seed, and then hashes with
 * whatever bytes the stack held (found as a row checksum that changed from
 * run to run, only when an earlier one-shot hash of the same seed had left
 * its seed at the same stack address).
 */
static void xxh3_stack_state_init(XXH3_state_t *state)
{
	XXH3_INITSTATE(state);
}

static void *alloc_blocks(uint64_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, SEL_BLOCK_BYTES, len ? (size_t)len : SEL_BLOCK_BYTES))
		return NULL;
	memset(p, 0, len ? (size_t)len : SEL_BLOCK_BYTES);
	return p;
}

static int writer_create(struct rec_writer *w)
{
	int ret;

	STEP_FAILPOINT(SEL_FP_RECORD_BEFORE_CREATE);
	/* A temporary file left by an earlier failure of this key goes first. */
	unlinkat(rec_dir_fd(w->dir), w->tmp_name, 0);
	ret = rec_io_open(rec_dir_fd(w->dir), w->tmp_name, O_CREAT | O_EXCL | O_WRONLY,
			  w->direct);
	if (ret < 0)
		return ret;
	w->fd = ret;
	/* R-WRITE-1: preallocate, so ENOSPC comes now and writes overlap. */
	ret = rec_io_fallocate(w->fd, w->layout.file_length);
	if (ret)
		return ret;
	STEP_FAILPOINT(SEL_FP_RECORD_AFTER_CREATE);
	return 0;
}

int rec_writer_begin(struct rec_writer *w, struct rec_dir *dir,
		     const struct rec_header *header)
{
	return rec_writer_begin_with(w, dir, header, NULL);
}

/* Takes the caller's buffers, or allocates them; 0, -ENOMEM or SEL_ETOOBIG. */
static int file_buffers(const struct rec_file_buffers *buffers,
			uint64_t checksum_length, uint64_t **checksums,
			uint8_t **header_block, bool *owns)
{
	if (buffers) {
		if (checksum_length > buffers->checksum_bytes)
			return SEL_ETOOBIG;
		*checksums = buffers->checksums;
		*header_block = buffers->header_block;
		*owns = false;
		return 0;
	}
	*checksums = alloc_blocks(checksum_length);
	*header_block = alloc_blocks(REC_HEADER_BYTES);
	*owns = true;
	return *checksums && *header_block ? 0 : -ENOMEM;
}

static void free_file_buffers(uint64_t **checksums, uint8_t **header_block,
			      bool owns)
{
	if (owns) {
		free(*checksums);
		free(*header_block);
	}
	*checksums = NULL;
	*header_block = NULL;
}

int rec_writer_begin_with(struct rec_writer *w, struct rec_dir *dir,
			  const struct rec_header *header,
			  const struct rec_file_buffers *buffers)
{
	int ret;

	memset(w, 0, sizeof(*w));
	w->dir = dir;
	w->fd = -1;
	w->direct = rec_dir_direct(dir);
	w->durable = rec_dir_durable(dir);
	w->header = *header;
	w->seed = rec_checksum_seed(&header->key);
	ret = rec_layout_from_header(header, &w->layout);
	if (ret)
		return ret;
	SEL_ASSERT(header->page_offset == w->layout.page_offset);
	rec_file_name(w->name, &header->key);
	snprintf(w->tmp_name, sizeof(w->tmp_name), "%s%s", w->name, REC_TMP_SUFFIX);
	ret = file_buffers(buffers, w->layout.checksum_length, &w->checksums,
			   &w->header_block, &w->owns_buffers);
	if (ret) {
		free_file_buffers(&w->checksums, &w->header_block, w->owns_buffers);
		return ret;
	}
	memset(w->checksums, 0, w->layout.checksum_length);
	ret = writer_create(w);
	if (ret)
		rec_writer_abort(w);
	return ret;
}

static int writer_payload(struct rec_writer *w, const void *buf, uint64_t len,
			  uint64_t offset)
{
	int ret;

	STEP_FAILPOINT(SEL_FP_RECORD_BEFORE_WRITE);
	ret = rec_io_write_full(w->fd, buf, len, offset);
	if (ret)
		return ret;
	STEP_FAILPOINT(SEL_FP_RECORD_AFTER_WRITE);
	return 0;
}

void rec_writer_note_page(struct rec_writer *w, uint32_t index, const void *page)
{
	/* R-REC-9: seeded with s XOR the page's index in the prefix. */
	rec_writer_note_page_checksum(w, index,
				      rec_page_checksum(page, w->layout.page_stride, w->seed,
							(uint64_t)w->header.first_page_index +
								index));
}

void rec_writer_note_page_checksum(struct rec_writer *w, uint32_t index, uint64_t checksum)
{
	SEL_ASSERT(index < w->header.tail_page_count);
	/* Pages are noted in order, each once: a gap would commit a hole. */
	if (index != w->pages_written)
		w->pages_out_of_order = true;
	sel_put_le64((uint8_t *)&w->checksums[index], checksum);
	w->pages_written++;
}

void rec_writer_note_row(struct rec_writer *w, const void *const *pieces,
			 const uint64_t *piece_bytes, uint32_t piece_count)
{
	XXH3_state_t state;
	uint64_t total = 0;

	SEL_ASSERT(!w->row_written);
	xxh3_stack_state_init(&state);
	XXH3_64bits_reset_withSeed(&state, w->seed);
	for (uint32_t i = 0; i < piece_count; i++) {
		sel_xxh3_update(&state, pieces[i], (size_t)piece_bytes[i]);
		total += piece_bytes[i];
	}
	SEL_ASSERT(total == w->layout.row_length);
	w->header.row_checksum = XXH3_64bits_digest(&state);
	w->row_written = true;
}

int rec_writer_put_pages(struct rec_writer *w, uint32_t first, uint32_t count,
			 const void *buf)
{
	const uint8_t *page = buf;
	uint64_t stride = w->layout.page_stride;

	SEL_ASSERT(w->fd >= 0 && first == w->pages_written);
	SEL_ASSERT((uint64_t)first + count <= w->header.tail_page_count);
	SEL_ASSERT(!w->direct || sel_is_aligned((uintptr_t)buf, SEL_BLOCK_BYTES));
	for (uint32_t i = 0; i < count; i++)
		rec_writer_note_page(w, first + i, page + (uint64_t)i * stride);
	return writer_payload(w, buf, stride * count,
			      w->layout.page_offset + stride * first);
}

int rec_writer_put_row(struct rec_writer *w, const void *row_segment)
{
	SEL_ASSERT(w->fd >= 0 && !w->row_written);
	SEL_ASSERT(!w->direct ||
		   sel_is_aligned((uintptr_t)row_segment, SEL_BLOCK_BYTES));
	w->header.row_checksum = rec_row_checksum(row_segment,
						  w->layout.row_length, w->seed);
	w->row_written = true;
	return writer_payload(w, row_segment, w->layout.row_length,
			      w->layout.row_offset);
}

/* R-WRITE-2: the checksum segment, then the header, which makes it valid. */
static int writer_header(struct rec_writer *w)
{
	uint8_t *block;
	int ret;

	STEP_FAILPOINT(SEL_FP_RECORD_BEFORE_HEADER);
	ret = rec_io_write_full(w->fd, w->checksums, w->layout.checksum_length,
				w->layout.checksum_offset);
	if (ret)
		return ret;
	block = w->header_block;
	rec_header_encode(&w->header, block);
	ret = rec_io_write_full(w->fd, block, REC_HEADER_BYTES, 0);
	if (ret)
		return ret;
	STEP_FAILPOINT(SEL_FP_RECORD_AFTER_HEADER);
	return 0;
}

static int writer_publish(struct rec_writer *w)
{
	struct stat st;
	int ret;

	if (w->durable) {
		STEP_FAILPOINT(SEL_FP_RECORD_BEFORE_FDATASYNC);
		ret = rec_io_fdatasync(w->fd);
		if (ret)
			return ret;
		STEP_FAILPOINT(SEL_FP_RECORD_AFTER_FDATASYNC);
	}
	STEP_FAILPOINT(SEL_FP_RECORD_BEFORE_RENAME);
	w->replaced = fstatat(rec_dir_fd(w->dir), w->name, &st, AT_SYMLINK_NOFOLLOW) == 0;
	ret = rec_io_rename(rec_dir_fd(w->dir), w->tmp_name, w->name);
	if (ret)
		return ret;
	STEP_FAILPOINT(SEL_FP_RECORD_AFTER_RENAME);
	if (w->durable) {
		ret = rec_io_fsync_dir(rec_dir_fd(w->dir));
		if (ret)
			return ret;
		STEP_FAILPOINT(SEL_FP_RECORD_AFTER_DIR_FSYNC);
	}
	return 0;
}

/*
 * R-DIR-10: the committed file's stamp, after the rename (which changes
 * its ctime), into the directory's catalogue; without one, the entry goes
 * and the next scan reads the file.
 */
static void writer_note(struct rec_writer *w)
{
	struct stat st;

	if (fstat(w->fd, &st) == 0)
		rec_dir_note_record(w->dir, &w->header, &st);
	else
		rec_dir_note_unlinked(w->dir, &w->header.key);
}

int rec_writer_commit(struct rec_writer *w)
{
	bool renamed = false;
	int ret;

	SEL_ASSERT(w->fd >= 0);
	if (w->pages_written != w->header.tail_page_count || w->pages_out_of_order ||
	    !w->row_written) {
		sel_warn("record %s not stored: %u of %u pages written%s%s", w->name,
			 w->pages_written, w->header.tail_page_count,
			 w->pages_out_of_order ? ", out of order" : "",
			 w->row_written ? "" : ", no row");
		rec_writer_abort(w);
		return -EINVAL;
	}
	ret = writer_header(w);
	if (!ret) {
		ret = writer_publish(w);
		renamed = ret == 0 || faccessat(rec_dir_fd(w->dir), w->tmp_name, F_OK, 0) != 0;
	}
	/*
	 * R-WRITE-5: the rename happened but a later step failed (the
	 * directory fsync): the record must not be reported stored, so it must
	 * not survive either. Unless the rename replaced a file of that key
	 * (R-WRITE-4), which may be a committed record (a row rewrite puts a
	 * page-only record's row back): unlinking would destroy it on this
	 * rank. The new file is as whole a record of that key as the old one;
	 * it is not reported stored, and the caller unlinks it (a failed
	 * store's cleanup) or truncates its row (a failed rewrite's undo).
	 */
	if (ret && renamed && !w->replaced) {
		if (rec_io_unlink(rec_dir_fd(w->dir), w->name) == 0 && w->durable)
			rec_io_fsync_dir(rec_dir_fd(w->dir));
	}
	if (ret)
		sel_warn("record %s not stored: %s", w->name, sel_strerror(ret));
	else
		writer_note(w);
	rec_writer_abort(w);
	return ret;
}

void rec_writer_abort(struct rec_writer *w)
{
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
		unlinkat(rec_dir_fd(w->dir), w->tmp_name, 0);
	}
	free_file_buffers(&w->checksums, &w->header_block, w->owns_buffers);
}

static int reader_check(struct rec_reader *r, const struct stat *st,
			const struct rec_expect *expect,
			const struct rec_file_buffers *buffers, char *why,
			size_t why_size)
{
	uint8_t *block = r->header_block;
	struct rec_layout layout = { 0 };
	int ret;

	r->file_length = (uint64_t)st->st_size;
	rec_file_stamp_of(st, &r->stamp);
	if (r->file_length < REC_HEADER_BYTES)
		return sel_fail(SEL_EBADHEADER, why, why_size,
				"file is %" PRIu64 " bytes, shorter than a header (R-REC-10)",
				r->file_length);
	ret = rec_io_read_full(r->fd, block, REC_HEADER_BYTES, 0);
	if (!ret)
		ret = rec_header_decode(block, &r->header, why, why_size);
	if (!ret)
		ret = rec_header_check_expected(&r->header, expect, why, why_size);
	if (!ret)
		ret = rec_header_check_length(&r->header, r->file_length,
					      &r->row_present, why, why_size);
	if (!ret)
		ret = rec_layout_from_header(&r->header, &layout);
	/* Not SEL_ETOOBIG: a scan must not take a record it cannot hold for
	 * an invalid one. */
	if (!ret && buffers && layout.checksum_length > buffers->checksum_bytes)
		ret = sel_fail(-EOVERFLOW, why, why_size,
			       "%u pages are more than this reader holds",
			       r->header.tail_page_count);
	if (!ret && !buffers) {
		r->checksums = alloc_blocks(layout.checksum_length);
		if (!r->checksums)
			ret = -ENOMEM;
	}
	if (!ret)
		ret = rec_io_read_full(r->fd, r->checksums, layout.checksum_length,
				       layout.checksum_offset);
	/* A read met the end of a file stat called long enough: cut short since. */
	if (ret == -ENODATA)
		ret = sel_fail(SEL_EBADHEADER, why, why_size,
			       "the file ends before the %" PRIu64 " bytes it had at its open: "
			       "cut short while read (R-REC-10)", r->file_length);
	/* R-REC-8: the checksum segment's padding is zeros. */
	for (uint64_t i = r->header.tail_page_count;
	     !ret && i < layout.checksum_length / 8; i++)
		if (r->checksums[i] != 0)
			ret = sel_fail(SEL_ECHECKSUM, why, why_size,
				       "checksum segment padding is not zero (R-REC-8)");
	return ret;
}

int rec_reader_open(struct rec_reader *r, int dirfd, const char *name,
		    bool direct, const struct rec_expect *expect, char *why,
		    size_t why_size)
{
	return rec_reader_open_with(r, dirfd, name, direct, expect, NULL, why,
				    why_size);
}

int rec_reader_open_with(struct rec_reader *r, int dirfd, const char *name,
			 bool direct, const struct rec_expect *expect,
			 const struct rec_file_buffers *buffers, char *why,
			 size_t why_size)
{
	struct stat st;
	int ret;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->direct = direct;
	if (buffers) {
		r->checksums = buffers->checksums;
		r->header_block = buffers->header_block;
	} else {
		r->header_block = alloc_blocks(REC_HEADER_BYTES);
		r->owns_buffers = true;
		if (!r->header_block)
			return -ENOMEM;
	}
	r->fd = rec_io_open_stat(dirfd, name, O_RDONLY, direct, &st);
	if (r->fd < 0) {
		ret = r->fd;
		rec_reader_close(r);
		return ret;
	}
	ret = reader_check(r, &st, expect, buffers, why, why_size);
	if (ret) {
		rec_reader_close(r);
		return ret;
	}
	r->seed = rec_checksum_seed(&r->header.key);
	return 0;
}

int rec_reader_read_pages(struct rec_reader *r, uint32_t first, uint32_t count,
			  void *buf, char *why, size_t why_size)
{
	uint64_t stride = r->header.page_stride;
	uint8_t *page = buf;
	int ret;

	SEL_ASSERT((uint64_t)first + count <= r->header.tail_page_count);
	SEL_ASSERT(!r->direct || sel_is_aligned((uintptr_t)buf, SEL_BLOCK_BYTES));
	ret = rec_io_read_full(r->fd, buf, stride * count,
			       r->header.page_offset + stride * first);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < count; i++)
		if (!rec_reader_page_ok(r, first + i, page + stride * i))
			return sel_fail(SEL_ECHECKSUM, why, why_size,
					"page %" PRIu64 " (stored page %u) fails its "
					"checksum (R-READ-2)",
					(uint64_t)r->header.first_page_index + first + i,
					first + i);
	return 0;
}

bool rec_reader_page_ok(const struct rec_reader *r, uint32_t index,
			const void *page)
{
	return rec_reader_page_ok_spread(r, index, page, NULL);
}

bool rec_reader_page_ok_spread(const struct rec_reader *r, uint32_t index,
			       const void *page, const struct rec_page_spread *spread)
{
	SEL_ASSERT(index < r->header.tail_page_count);
	return rec_page_checksum_spread(page, spread, r->header.page_stride, r->seed,
					(uint64_t)r->header.first_page_index + index) ==
	       sel_get_le64((const uint8_t *)&r->checksums[index]);
}

int rec_reader_read_page_ok(const struct rec_reader *r, uint32_t index, void *page,
			    uint64_t chunk_bytes, bool *ok)
{
	return rec_reader_read_page_ok_spread(r, index, page, NULL, chunk_bytes, ok);
}

int rec_reader_read_page_ok_spread(const struct rec_reader *r, uint32_t index, void *page,
				   const struct rec_page_spread *spread, uint64_t chunk_bytes,
				   bool *ok)
{
	uint64_t stride = r->header.page_stride;
	uint64_t at = r->header.page_offset + stride * index;
	bool split = rec_page_spread_split(spread);
	uint64_t segment = split ? spread->segment_bytes : stride;
	uint64_t total = split ? segment * spread->segment_count : stride;
	int injected = SEL_FAILPOINT(SEL_FP_DISK_READ);
	XXH3_state_t state;
	uint64_t n;

	SEL_ASSERT(index < r->header.tail_page_count && chunk_bytes > 0);
	SEL_ASSERT(rec_page_spread_valid(spread, stride));
	*ok = false;
	if (injected < 0)
		return injected;
	if (chunk_bytes > REC_IO_CHUNK_BYTES)
		chunk_bytes = REC_IO_CHUNK_BYTES;
	xxh3_stack_state_init(&state);
	XXH3_64bits_reset_withSeed(&state, r->seed ^ ((uint64_t)r->header.first_page_index +
						      index));
	/*
	 * In chunks of the page's file bytes, each read with one preadv into
	 * the segments it covers, then hashed while in cache, in file order.
	 */
	for (uint64_t off = 0; off < total; off += n) {
		struct iovec iov[REC_IO_READV_MAX];
		uint32_t count = 0;
		int ret;

		n = 0;
		while (off + n < total && n < chunk_bytes && count < REC_IO_READV_MAX) {
			uint64_t x = off + n, k = x / segment, within = x % segment;
			uint64_t piece = segment - within;

			if (piece > chunk_bytes - n)
				piece = chunk_bytes - n;
			iov[count++] = (struct iovec){
				.iov_base = (uint8_t *)page + (split ? spread->pitch_bytes * k : 0) +
					    within,
				.iov_len = (size_t)piece,
			};
			n += piece;
		}
		ret = rec_io_readv_full(r->fd, iov, count, at + off);
		if (ret)
			return ret;
		for (uint32_t i = 0; i < count; i++)
			sel_xxh3_update(&state, iov[i].iov_base, iov[i].iov_len);
	}
	*ok = XXH3_64bits_digest(&state) == sel_get_le64((const uint8_t *)&r->checksums[index]);
	return 0;
}

bool rec_reader_row_ok(const struct rec_reader *r, const void *const *pieces,
		       const uint64_t *piece_bytes, uint32_t piece_count)
{
	XXH3_state_t state;
	uint64_t total = 0;

	xxh3_stack_state_init(&state);
	XXH3_64bits_reset_withSeed(&state, r->seed);
	for (uint32_t i = 0; i < piece_count; i++) {
		sel_xxh3_update(&state, pieces[i], (size_t)piece_bytes[i]);
		total += piece_bytes[i];
	}
	return total == r->header.row_length &&
	       XXH3_64bits_digest(&state) == r->header.row_checksum;
}

int rec_reader_verify_streaming(struct rec_reader *r, void *buf, uint64_t buf_bytes,
				char *why, size_t why_size)
{
	uint64_t stride = r->header.page_stride;
	XXH3_state_t state;
	int ret;

	SEL_ASSERT(buf_bytes >= SEL_BLOCK_BYTES && sel_is_aligned(buf_bytes, SEL_BLOCK_BYTES));
	for (uint32_t j = 0; j <= r->header.tail_page_count; j++) {
		bool row = j == r->header.tail_page_count;
		uint64_t offset = row ? r->header.row_offset : r->header.page_offset + stride * j;
		uint64_t length = row ? r->header.row_length : stride;
		uint64_t seed = row ? r->seed : r->seed ^ (r->header.first_page_index + (uint64_t)j);
		uint64_t expected = row ? r->header.row_checksum :
			sel_get_le64((const uint8_t *)&r->checksums[j]);

		if (row && !r->row_present)
			break;
		xxh3_stack_state_init(&state);
		XXH3_64bits_reset_withSeed(&state, seed);
		for (uint64_t done = 0; done < length;) {
			uint64_t n = length - done < buf_bytes ? length - done : buf_bytes;

			ret = rec_io_read_full(r->fd, buf, n, offset + done);
			if (ret)
				return ret;
			sel_xxh3_update(&state, buf, (size_t)n);
			done += n;
		}
		if (XXH3_64bits_digest(&state) != expected)
			return row ? sel_fail(SEL_ECHECKSUM, why, why_size,
					      "the row fails its checksum (R-READ-3)") :
				     sel_fail(SEL_ECHECKSUM, why, why_size,
					      "page %" PRIu64 " (stored page %u) fails its "
					      "checksum (R-READ-2)",
					      (uint64_t)r->header.first_page_index + j, j);
	}
	return 0;
}

int rec_reader_read_row(struct rec_reader *r, void *buf, char *why,
			size_t why_size)
{
	int ret;

	SEL_ASSERT(!r->direct || sel_is_aligned((uintptr_t)buf, SEL_BLOCK_BYTES));
	if (!r->row_present)
		return sel_fail(-ENODATA, why, why_size,
				"the record has no row (it was truncated)");
	ret = rec_io_read_full(r->fd, buf, r->header.row_length,
			       r->header.row_offset);
	if (ret)
		return ret;
	if (rec_row_checksum(buf, r->header.row_length, r->seed) !=
	    r->header.row_checksum)
		return sel_fail(SEL_ECHECKSUM, why, why_size,
				"the row fails its checksum (R-READ-3)");
	return 0;
}

void rec_reader_close(struct rec_reader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	free_file_buffers(&r->checksums, &r->header_block, r->owns_buffers);
}

int rec_truncate_row(struct rec_dir *dir, const struct rec_key *key)
{
	char name[REC_FILE_NAME_BYTES], why[256];
	uint8_t block[REC_HEADER_BYTES]; /* buffered I/O: no alignment, no allocation */
	struct rec_expect expect;
	struct rec_header h;
	struct stat st;
	bool row_present;
	int fd, ret;

	rec_file_name(name, key);
	rec_dir_expect(dir, key, &expect);
	fd = rec_io_open(rec_dir_fd(dir), name, O_RDWR, false);
	if (fd < 0)
		return fd;
	/* The header says where the row begins; trust it only once valid. */
	ret = fstat(fd, &st) ? -errno : 0;
	if (!ret && (uint64_t)st.st_size < REC_HEADER_BYTES)
		ret = sel_fail(SEL_EBADHEADER, why, sizeof(why), "shorter than a header");
	if (!ret)
		ret = rec_io_read_full(fd, block, REC_HEADER_BYTES, 0);
	if (!ret)
		ret = rec_header_decode(block, &h, why, sizeof(why));
	if (!ret)
		ret = rec_header_check_expected(&h, &expect, why, sizeof(why));
	if (!ret)
		ret = rec_header_check_length(&h, (uint64_t)st.st_size, &row_present, why,
					      sizeof(why));
	if (ret) {
		sel_warn("cannot truncate %s: %s", name,
			 sel_is_selene_error(ret) ? why : sel_strerror(ret));
		goto out_close;
	}
	if (!row_present)
		goto out_close;
	ret = SEL_FAILPOINT(SEL_FP_RECORD_BEFORE_TRUNCATE);
	if (ret < 0)
		goto out_close;
	ret = rec_io_truncate(fd, h.row_offset);
	if (!ret) {
		/*
		 * Keep the mtime: it is the record's place in the LRU order after
		 * a restart (R-DIR-4), and dropping a row is not a use.
		 */
		struct timespec times[2] = { st.st_atim, st.st_mtim };

		futimens(fd, times);
	}
	if (!ret && rec_dir_durable(dir))
		ret = rec_io_fdatasync(fd);
	if (!ret && fstat(fd, &st) == 0)
		rec_dir_note_record(dir, &h, &st); /* R-DIR-10 */
	if (!ret)
		ret = SEL_FAILPOINT(SEL_FP_RECORD_AFTER_TRUNCATE);
	ret = ret < 0 ? ret : 0;
out_close:
	close(fd);
	return ret;
}

int rec_unlink(struct rec_dir *dir, const struct rec_key *key)
{
	char name[REC_FILE_NAME_BYTES];
	int ret;

	rec_file_name(name, key);
	STEP_FAILPOINT(SEL_FP_RECORD_BEFORE_UNLINK);
	ret = rec_io_unlink(rec_dir_fd(dir), name);
	if (ret)
		return ret;
	rec_dir_note_unlinked(dir, key); /* R-DIR-10 */
	if (rec_dir_durable(dir)) {
		ret = rec_io_fsync_dir(rec_dir_fd(dir));
		if (ret)
			return ret;
	}
	STEP_FAILPOINT(SEL_FP_RECORD_AFTER_UNLINK);
	return 0;
}
