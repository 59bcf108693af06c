/*
 * A record directory (docs/DESIGN.md section 4): <base>/<namespace prefix>-
 * <fingerprint>/, held under an exclusive non-blocking flock from open to
 * close, and the startup scan that makes its contents consistent. One
 * process per directory; the handle is used by one thread at a time, but
 * for the notes of changes (rec_dir_note_*), which any thread may make.
 */
#ifndef SELENE_RECORD_DIR_H
#define SELENE_RECORD_DIR_H

#include "record/format.h"
#include "record/geometry.h"
#include "record/key.h"

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct stat;

struct rec_dir;

struct rec_dir_options {
	const char *base_path;                  /* created when missing */
	const struct rec_identity *namespace_id;
	const struct rec_geometry *geometry;    /* copied */
	bool durable;   /* fdatasync files and fsync the directory on commit */
	bool no_direct; /* never try O_DIRECT (benchmarks of buffered I/O) */
};

/*
 * Creates the base and record directories when missing, takes the flock
 * (a second opener gets SEL_ELOCKED before any file is touched) and probes
 * O_DIRECT, saying once when it is refused. Returns 0 and *out (close with
 * rec_dir_close), or a negative code with a message in err.
 */
int rec_dir_open(const struct rec_dir_options *options, struct rec_dir **out,
		 char *err, size_t err_size);

/*
 * Saves the catalogue as the scan cache when a scan made one (R-DIR-10:
 * after a syncfs where the records are neither durable nor in memory; a
 * failure is logged, and the next scan reads every header), releases the
 * lock and frees the handle; NULL does nothing. Every engine writing into
 * dir must be closed first.
 */
void rec_dir_close(struct rec_dir *dir);

int rec_dir_fd(const struct rec_dir *dir);
const char *rec_dir_path(const struct rec_dir *dir);
bool rec_dir_direct(const struct rec_dir *dir);
/*
 * Whether dir is on a file system in memory (tmpfs, ramfs): reading or
 * writing a file there is a copy on the CPU of the thread that issues it,
 * O_DIRECT or not, so the disk thread spreads it over kernel workers
 * (record/disk.h, io_workers).
 */
bool rec_dir_memory_backed(const struct rec_dir *dir);
bool rec_dir_durable(const struct rec_dir *dir);
const struct rec_geometry *rec_dir_geometry(const struct rec_dir *dir);
const struct rec_identity *rec_dir_namespace(const struct rec_dir *dir);

/*
 * The cluster marker (docs/DESIGN.md section 7): a small text file in the record
 * directory, never matched by the record name pattern, naming the cluster
 * its records belong to (world size and layout digest). Every rank writes
 * it once the startup agreement is applied; a directory without it is new,
 * or not the one the records were written to (a missing mount).
 */
#define REC_CLUSTER_MARKER_NAME ".selene-cluster"

/* Whether dir holds the cluster marker (a regular file). */
bool rec_dir_marked(const struct rec_dir *dir);

/*
 * Writes the marker for a cluster of world_size ranks (atomically: a
 * temporary file renamed over it; fsynced when dir is durable). Returns 0
 * or a negative errno.
 */
int rec_dir_mark(struct rec_dir *dir, uint32_t world_size);

/* What a reader of this directory expects of every header (R-REC-12). */
void rec_dir_expect(const struct rec_dir *dir, const struct rec_key *key,
		    struct rec_expect *out);

/* One record the scan kept. */
struct rec_record_info {
	struct rec_key key;
	struct rec_key parent; /* consumed 0: a root record */
	struct rec_digest bucket;
	uint32_t first_page_index;
	uint32_t tail_page_count;
	bool row_present;
	uint64_t file_bytes;
	uint64_t mtime_ns;
	uint64_t created_ns;
	struct rec_digest agreement; /* R-AGREE-1, of the header read */
};

/* A path in the record directory: the directory's and one name. */
#define REC_SCAN_PATH_BYTES (PATH_MAX + NAME_MAX + 2)

struct rec_scan {
	struct rec_record_info *records; /* oldest mtime first; caller frees */
	size_t record_count;
	/*
	 * The records held (R-DIR-7): left in place and out of records,
	 * because their file could not be read or one they depend on could
	 * not (or, while any could not, page-only without children), by key,
	 * ascending; caller frees (rec_scan_free). The summary says so, so
	 * that no rank deletes its copies of them (cluster/PROTOCOL.md
	 * R-WIRE-18, coordinator/agreement.h rule 7).
	 */
	struct rec_key *held;
	size_t held_count;
	uint64_t bytes;            /* file bytes of the records kept */
	uint64_t tmp_deleted;      /* *.tmp files removed */
	uint64_t invalid_dropped;  /* headers or lengths that failed */
	uint64_t orphans_dropped;  /* parent missing, and their descendants */
	uint64_t page_only_dropped; /* page-only records left without children */
	uint64_t ignored;          /* files that are not Selene's, left alone
				      (one warning names the count and the
				      first REC_SCAN_IGNORED_NAMED) */
	uint64_t unreadable_skipped; /* records that could not be read (EACCES,
					EIO): left in place, held */
	uint64_t moved_aside;      /* non-regular files named like records,
				      renamed to NAME.aside */
	uint64_t cache_hits;       /* record files the scan cache stood for,
				      their headers not read (R-DIR-10) */
	uint64_t headers_read;     /* record files whose header was read */
	/*
	 * Set when the scan failed because a file it had to delete (a
	 * temporary, invalid, orphaned or page-only one) could not be: that
	 * file's path, for the caller's message. Empty otherwise.
	 */
	char failed_delete[REC_SCAN_PATH_BYTES];
};

/*
 * Names of ignored files the scan's one warning about them quotes: a
 * directory of stray files costs one line per start, not one per file.
 */
#define REC_SCAN_IGNORED_NAMED 5

/* What a non-regular file named like a record is renamed to, at the end. */
#define REC_ASIDE_SUFFIX ".aside"

/*
 * The startup scan (R-DIR-1 .. R-DIR-10): deletes *.tmp, drops invalid files
 * (each logged with its reason), derives row presence from length and
 * access order from mtime, deletes records whose parent is missing with
 * their descendants, and childless page-only records. A record file it
 * cannot read (EACCES, EIO) is skipped with the reason: never deleted, held
 * (out->held, for the summary) with the records that depend on it (and, while any is
 * unreadable, page-only records are not pruned: one may be its parent). A
 * directory, symlink, FIFO or socket named like a record is renamed to
 * NAME.aside and reported, so it never blocks a store of that key. A record
 * file whose stamp (record/io.h) equals its entry in the scan cache is
 * taken from the cache, unread (R-DIR-10); the cache is deleted once taken
 * in, and one that is not whole and valid for this directory is ignored,
 * with a warning. Returns 0 and fills out, or a negative
 * errno (listing the directory failed, a file it had to delete could not
 * be, named in out->failed_delete, out of memory). Free with
 * rec_scan_free(). From then on dir keeps the catalogue of its records
 * and saves it as the scan cache when it closes.
 */
int rec_dir_scan(struct rec_dir *dir, struct rec_scan *out);

void rec_scan_free(struct rec_scan *scan);

/*
 * What this rank tells the formation about its marker (HELLO's marked
 * flag, docs/DESIGN.md section 7), after scan, its directory's scan:
 * rec_dir_marked, except that a directory whose record files were all
 * unreadable (none kept, some skipped) is reported unmarked. A marked
 * empty directory forms, so one that only looks empty because its disk
 * cannot be read must be refused as an unmarked one is, instead of the
 * agreement deleting every rank's copies of records it still holds.
 */
bool rec_dir_scan_marked(const struct rec_dir *dir, const struct rec_scan *scan);

/*
 * The message for a scan of dir that returned ret (negative), naming the
 * file it could not delete when that was why: written into err (err_size
 * bytes, may be 0). Returns ret.
 */
int rec_dir_scan_failed(const struct rec_dir *dir, const struct rec_scan *scan, int ret,
			char *err, size_t err_size);

/*
 * The directory may change behind the catalogue (an engine that could not
 * stop its disk thread): the close saves no scan cache. Any thread.
 */
void rec_dir_forget_catalog(struct rec_dir *dir);

/*
 * The catalogue's news (R-DIR-10), from record/file.h as each change lands:
 * a record whose header is h committed or had its row truncated (st: its
 * file's stat after the change; row presence comes from its length), or a
 * record unlinked. Any thread; nothing before the scan. A scan never runs
 * while anything else changes the directory (it reads the catalogue
 * without the lock).
 */
void rec_dir_note_record(struct rec_dir *dir, const struct rec_header *h,
			 const struct stat *st);
void rec_dir_note_unlinked(struct rec_dir *dir, const struct rec_key *key);

/*
 * Threads the scan reads pending record files on: 1 under 1024 files, else
 * one per 256 files and per core it may run on, at least 4 (reads in flight
 * for a cold cache), at most REC_SCAN_THREADS_MAX.
 */
uint32_t rec_dir_scan_threads(size_t pending);

#endif
