/*
 * The one layer every record-file system call goes through, so that a
 * failpoint can rewrite any request's result (docs/DESIGN.md section 10): EIO,
 * ENOSPC, a short count. Synchronous; the io_uring disk thread uses the same
 * failpoints on its completions. Every function returns 0 (or a count) or a
 * negative errno.
 */
#ifndef SELENE_RECORD_IO_H
#define SELENE_RECORD_IO_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * openat(2) of a record file; with direct, adds O_DIRECT. Returns an fd, or
 * a negative errno: -ENXIO when the name is not a regular file (a
 * directory, FIFO, device, socket or symlink; a symlink is never
 * followed), whatever the open itself said of it.
 */
int rec_io_open(int dirfd, const char *name, int flags, bool direct);

struct stat;

/*
 * What identifies a file's contents without reading them (R-DIR-10): a
 * write, a truncation, a change of its times or a rename over its name
 * changes its ctime (to the clock's tick) or its inode.
 */
struct rec_file_stamp {
	uint64_t ino;
	uint64_t bytes;
	uint64_t mtime_ns;
	uint64_t ctime_ns;
};

void rec_file_stamp_of(const struct stat *st, struct rec_file_stamp *out);
bool rec_file_stamp_equal(const struct rec_file_stamp *a, const struct rec_file_stamp *b);

/* rec_io_open, and the fstat it takes of the file in *st (saves a reader one). */
int rec_io_open_stat(int dirfd, const char *name, int flags, bool direct,
		     struct stat *st);

/*
 * Writes len bytes at offset in requests of at most 8 MiB, resuming after
 * short counts. Returns 0, or a negative errno (-EIO when a request wrote
 * nothing).
 */
int rec_io_write_full(int fd, const void *buf, uint64_t len, uint64_t offset);

/* Reads len bytes at offset; -ENODATA when the file ends first. */
int rec_io_read_full(int fd, void *buf, uint64_t len, uint64_t offset);

/* The most pieces rec_io_readv_full takes in one call. */
#define REC_IO_READV_MAX 64u

/*
 * Reads consecutive bytes at offset into count pieces (at most
 * REC_IO_READV_MAX, iov's lengths summed at most REC_IO_CHUNK_BYTES) with
 * one preadv, resuming after short counts; iov is left as it was.
 * -ENODATA when the file ends first, as rec_io_read_full.
 */
struct iovec;
int rec_io_readv_full(int fd, const struct iovec *iov, uint32_t count, uint64_t offset);

/* Preallocates [0, len); ftruncate where the filesystem cannot. */
int rec_io_fallocate(int fd, uint64_t len);

int rec_io_fdatasync(int fd);
int rec_io_fsync_dir(int dirfd);
int rec_io_truncate(int fd, uint64_t len);
/* Renames, atomically replacing a file named to (R-WRITE-4). */
int rec_io_rename(int dirfd, const char *from, const char *to);
int rec_io_unlink(int dirfd, const char *name);

/*
 * Creates name in dirfd anew for this process's own temporary file (a
 * scan cache, the cluster marker, the O_DIRECT probe): whatever holds the
 * name is unlinked first, so a symlink, FIFO or device file left there is
 * never followed, opened or blocked on. open_flags adds the access mode
 * (and O_DIRECT). Returns the descriptor, or a negative errno (-EISDIR
 * for a directory of that name, which stays).
 */
int rec_io_create_fresh(int dirfd, const char *name, int open_flags, mode_t mode);

/*
 * Whether files in dirfd accept O_DIRECT: creates, writes 4 KiB to and
 * removes a probe file. Returns 1 (yes), 0 (no: *reason says why) or a
 * negative errno when the probe itself could not run.
 */
int rec_io_probe_direct(int dirfd, int *reason);

/* Whether fd's file system keeps files in memory (tmpfs, ramfs): file I/O
 * there is a copy the CPU makes. */
bool rec_io_memory_backed(int fd);

#endif
