/*
 * Writing, reading, truncating and unlinking one record file (docs/DESIGN.md
 * section 4, FORMAT.md R-WRITE-*, R-READ-*), synchronously through io.h.
 * Buffers passed here are 4 KiB-aligned when the directory uses O_DIRECT.
 */
#ifndef SELENE_RECORD_FILE_H
#define SELENE_RECORD_FILE_H

#include "record/dir.h"
#include "record/format.h"
#include "record/io.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Buffers a writer or reader uses instead of allocating its own, so that
 * the disk thread allocates nothing per record. Both 4 KiB-aligned.
 */
struct rec_file_buffers {
	uint64_t *checksums;     /* checksum segment, checksum_bytes long */
	uint64_t checksum_bytes; /* a multiple of 4 KiB */
	uint8_t *header_block;   /* REC_HEADER_BYTES */
};

/* A record being written under its temporary name. */
struct rec_writer {
	struct rec_dir *dir; /* its directory, told of the commit (R-DIR-10) */
	int fd;
	bool direct;
	bool durable;
	struct rec_header header;
	struct rec_layout layout;
	uint64_t seed;
	uint64_t *checksums;      /* the checksum segment, 4 KiB-aligned */
	uint8_t *header_block;
	bool owns_buffers;
	uint32_t pages_written;
	bool pages_out_of_order; /* a page noted twice or out of turn */
	bool row_written;
	bool replaced;           /* the rename replaced a file of its name */
	char name[REC_FILE_NAME_BYTES];
	char tmp_name[REC_FILE_NAME_BYTES + 4];
};

/*
 * Creates <name>.tmp and preallocates it to the final length (R-WRITE-1).
 * header comes from rec_header_init. Returns 0, or a negative errno
 * (-ENOSPC on a full disk) with nothing left behind.
 */
int rec_writer_begin(struct rec_writer *w, struct rec_dir *dir,
		     const struct rec_header *header);

/*
 * The same with caller-owned buffers (valid until commit or abort);
 * SEL_ETOOBIG when the record's checksum segment does not fit them.
 */
int rec_writer_begin_with(struct rec_writer *w, struct rec_dir *dir,
			  const struct rec_header *header,
			  const struct rec_file_buffers *buffers);

/*
 * For writers whose payload is written elsewhere (the disk thread): notes
 * stored page index's bytes (stride long) and its checksum, or the row
 * segment's checksum streamed over its pieces, without writing.
 */
void rec_writer_note_page(struct rec_writer *w, uint32_t index, const void *page);
/* The same, for a page whose R-REC-9 checksum its writer computed already. */
void rec_writer_note_page_checksum(struct rec_writer *w, uint32_t index,
				   uint64_t checksum);
void rec_writer_note_row(struct rec_writer *w, const void *const *pieces,
			 const uint64_t *piece_bytes, uint32_t piece_count);

/*
 * Writes stored pages [first, first + count) from buf (count page records
 * of header.page_stride bytes, padding included), computing their
 * checksums. Pages go in order: first equals the count written so far.
 */
int rec_writer_put_pages(struct rec_writer *w, uint32_t first, uint32_t count,
			 const void *buf);

/* Writes the row segment (header.row_length bytes) and its checksum. */
int rec_writer_put_row(struct rec_writer *w, const void *row_segment);

/*
 * Writes the checksum segment and the header last, then fdatasync (when
 * durable), rename, and directory fsync (when durable) (R-WRITE-2..4).
 * Every page and the row must have been put. On any failure the record is
 * not committed: the temporary file is removed and the error returned; a
 * failed fdatasync or fsync is final (R-WRITE-5). A failure after the
 * rename unlinks the name, unless the rename replaced a file of that name:
 * then the new file, whole, stays in its place (R-WRITE-4), and the caller
 * decides. Either way the writer is finished.
 */
int rec_writer_commit(struct rec_writer *w);

/* Abandons an unfinished record, removing its temporary file. */
void rec_writer_abort(struct rec_writer *w);

/* An open record, its header validated before any payload read. */
struct rec_reader {
	int fd;
	bool direct;
	bool row_present;
	uint64_t file_length;
	struct rec_file_stamp stamp; /* the file's, when it was opened */
	uint64_t seed;
	struct rec_header header;
	uint64_t *checksums; /* the checksum segment, read at open */
	uint8_t *header_block;
	bool owns_buffers;
};

/*
 * Opens dirfd/name and validates its header against expect and its length
 * (R-READ-1). Returns 0, or SEL_EBADHEADER / SEL_EMISMATCH with why, or a
 * negative errno. Close with rec_reader_close().
 */
int rec_reader_open(struct rec_reader *r, int dirfd, const char *name,
		    bool direct, const struct rec_expect *expect, char *why,
		    size_t why_size);

/* The same with caller-owned buffers (valid until close). */
int rec_reader_open_with(struct rec_reader *r, int dirfd, const char *name,
			 bool direct, const struct rec_expect *expect,
			 const struct rec_file_buffers *buffers, char *why,
			 size_t why_size);

/* Whether stored page index's bytes match its checksum (R-READ-2). */
bool rec_reader_page_ok(const struct rec_reader *r, uint32_t index,
			const void *page);

/* The same for a page laid out as spread says (NULL: in one piece). */
bool rec_reader_page_ok_spread(const struct rec_reader *r, uint32_t index,
			       const void *page, const struct rec_page_spread *spread);

/*
 * Reads stored page index into page (page_stride bytes) in chunks of
 * chunk_bytes (a multiple of 4 KiB), hashing each as soon as it is read,
 * while it is still in this core's cache, and says in *ok whether the
 * page matches its checksum (R-READ-2). Returns 0, or a negative errno
 * from the read (-ENODATA where the file ends first; disk.read can inject
 * one). Safe on one reader from several threads at once.
 */
int rec_reader_read_page_ok(const struct rec_reader *r, uint32_t index, void *page,
			    uint64_t chunk_bytes, bool *ok);
/*
 * The same into a page laid out as spread says (NULL: in one piece): each
 * segment in chunks of at most chunk_bytes, the hash streamed over them in
 * file order.
 */
int rec_reader_read_page_ok_spread(const struct rec_reader *r, uint32_t index, void *page,
				   const struct rec_page_spread *spread, uint64_t chunk_bytes,
				   bool *ok);

/* Whether the row segment, in pieces, matches the row checksum (R-READ-3). */
bool rec_reader_row_ok(const struct rec_reader *r, const void *const *pieces,
		       const uint64_t *piece_bytes, uint32_t piece_count);

/*
 * Reads stored pages [first, first + count) into buf and verifies each
 * against its checksum (R-READ-2). Returns 0, SEL_ECHECKSUM naming the
 * first bad page in why, or a negative errno.
 */
int rec_reader_read_pages(struct rec_reader *r, uint32_t first, uint32_t count,
			  void *buf, char *why, size_t why_size);

/* Reads the row segment into buf and verifies it; -ENODATA without a row. */
int rec_reader_read_row(struct rec_reader *r, void *buf, char *why,
			size_t why_size);

/*
 * Verifies every page and the row, reading through buf (buf_bytes, a
 * multiple of 4 KiB) however large a page or row is. 0, SEL_ECHECKSUM
 * with why, or a negative errno.
 */
int rec_reader_verify_streaming(struct rec_reader *r, void *buf, uint64_t buf_bytes,
				char *why, size_t why_size);

void rec_reader_close(struct rec_reader *r);

/*
 * Drops a record's row: truncates at the row segment offset, changing
 * nothing else (R-REC-10; the mtime is kept), synced when the directory is
 * durable. Already page-only is success. Returns 0, -ENOENT, or another
 * negative code; after a failure the row may already be gone, so a caller
 * treats the record as page-only.
 */
int rec_truncate_row(struct rec_dir *dir, const struct rec_key *key);

/*
 * Unlinks a record (and syncs the directory when durable); -ENOENT if
 * absent. After a failure the file may already be gone: a caller treats
 * the record as gone.
 */
int rec_unlink(struct rec_dir *dir, const struct rec_key *key);

#endif
