/*
 * Record-file system calls behind failpoints: see io.h. Results are what
 * the kernel said, unless a disk.* failpoint rewrote them.
 */
#include "record/io.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int errno_or(int ret)
{
	return ret < 0 ? -errno : ret;
}

void rec_file_stamp_of(const struct stat *st, struct rec_file_stamp *out)
{
	out->ino = (uint64_t)st->st_ino;
	out->bytes = (uint64_t)st->st_size;
	out->mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000ull +
			(uint64_t)st->st_mtim.tv_nsec;
	out->ctime_ns = (uint64_t)st->st_ctim.tv_sec * 1000000000ull +
			(uint64_t)st->st_ctim.tv_nsec;
}

bool rec_file_stamp_equal(const struct rec_file_stamp *a, const struct rec_file_stamp *b)
{
	return a->ino == b->ino && a->bytes == b->bytes && a->mtime_ns == b->mtime_ns &&
	       a->ctime_ns == b->ctime_ns;
}

int rec_io_open(int dirfd, const char *name, int flags, bool direct)
{
	struct stat st;

	return rec_io_open_stat(dirfd, name, flags, direct, &st);
}

int rec_io_open_stat(int dirfd, const char *name, int flags, bool direct,
		     struct stat *out)
{
	int injected = SEL_FAILPOINT(SEL_FP_DISK_OPEN);

	if (injected < 0)
		return injected;
	int fd;
	struct stat st;

	/*
	 * Record files are regular files in the directory itself: never follow
	 * a symlink out of it, never block opening a FIFO that has a record's
	 * name.
	 */
	fd = openat(dirfd, name, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
				 (direct ? O_DIRECT : 0), 0644);
	if (fd < 0) {
		int err = errno;

		/*
		 * What the open says of a name that is not a regular file
		 * depends on its type and the flags (EINVAL for O_DIRECT on a
		 * FIFO, EISDIR, ELOOP for a symlink): one answer for all of
		 * them, so a caller can tell "not a record file" from a
		 * failing disk.
		 */
		if ((err == EINVAL || err == EISDIR || err == ENXIO || err == ELOOP) &&
		    fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
			return -ENXIO;
		return -err;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENXIO;
	}
	*out = st;
	return fd;
}

/*
 * One request's length after a "short" failpoint: half, block-aligned so
 * O_DIRECT still accepts it; a single block cannot be shortened.
 */
static uint64_t shortened(uint64_t len)
{
	if (len <= SEL_BLOCK_BYTES)
		return len;
	return sel_align_up(len / 2, SEL_BLOCK_BYTES);
}

int rec_io_write_full(int fd, const void *buf, uint64_t len, uint64_t offset)
{
	const uint8_t *p = buf;

	while (len > 0) {
		uint64_t request = len < REC_IO_CHUNK_BYTES ? len : REC_IO_CHUNK_BYTES;
		int injected = SEL_FAILPOINT(SEL_FP_DISK_WRITE);
		ssize_t n;

		if (injected < 0)
			return injected;
		if (injected == SEL_FAILPOINT_SHORT)
			request = shortened(request);
		n = request ? pwrite(fd, p, (size_t)request, (off_t)offset) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		offset += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

int rec_io_read_full(int fd, void *buf, uint64_t len, uint64_t offset)
{
	uint8_t *p = buf;

	while (len > 0) {
		uint64_t request = len < REC_IO_CHUNK_BYTES ? len : REC_IO_CHUNK_BYTES;
		struct iovec piece = { .iov_base = p, .iov_len = (size_t)request };
		int ret = rec_io_readv_full(fd, &piece, 1, offset);

		if (ret)
			return ret;
		p += request;
		offset += request;
		len -= request;
	}
	return 0;
}

int rec_io_readv_full(int fd, const struct iovec *iov, uint32_t count, uint64_t offset)
{
	struct iovec left[REC_IO_READV_MAX];
	uint32_t first = 0;

	SEL_ASSERT(count <= REC_IO_READV_MAX);
	if (count == 0)
		return 0;
	memcpy(left, iov, count * sizeof(*iov));
	for (;;) {
		int injected;
		uint32_t n_iov;
		size_t keep;
		ssize_t n;

		while (first < count && left[first].iov_len == 0)
			first++;
		if (first == count)
			return 0;
		injected = SEL_FAILPOINT(SEL_FP_DISK_READ);
		n_iov = count - first;
		keep = left[first].iov_len;
		if (injected < 0)
			return injected;
		if (injected == SEL_FAILPOINT_SHORT) {
			/* the first piece alone, shortened as a plain read's would be */
			n_iov = 1;
			left[first].iov_len = (size_t)shortened(keep);
		}
		n = preadv(fd, left + first, (int)n_iov, (off_t)offset);
		left[first].iov_len = keep;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ENODATA;
		offset += (uint64_t)n;
		while (n > 0 && first < count) {
			size_t take = (size_t)n < left[first].iov_len ? (size_t)n : left[first].iov_len;

			left[first].iov_base = (uint8_t *)left[first].iov_base + take;
			left[first].iov_len -= take;
			n -= (ssize_t)take;
			if (left[first].iov_len == 0)
				first++;
		}
	}
}

int rec_io_fallocate(int fd, uint64_t len)
{
	int injected = SEL_FAILPOINT(SEL_FP_DISK_FALLOCATE);

	if (injected < 0)
		return injected;
	if (len == 0)
		return 0;
	if (fallocate(fd, 0, 0, (off_t)len) == 0)
		return 0;
	if (errno != EOPNOTSUPP)
		return -errno;
	/* No preallocation here; the size still lets direct writes overlap. */
	return errno_or(ftruncate(fd, (off_t)len));
}

int rec_io_fdatasync(int fd)
{
	int injected = SEL_FAILPOINT(SEL_FP_DISK_FDATASYNC);

	if (injected < 0)
		return injected;
	return errno_or(fdatasync(fd));
}

int rec_io_fsync_dir(int dirfd)
{
	int injected = SEL_FAILPOINT(SEL_FP_DISK_FSYNC_DIR);

	if (injected < 0)
		return injected;
	return errno_or(fsync(dirfd));
}

int rec_io_truncate(int fd, uint64_t len)
{
	int injected = SEL_FAILPOINT(SEL_FP_DISK_TRUNCATE);

	if (injected < 0)
		return injected;
	return errno_or(ftruncate(fd, (off_t)len));
}

int rec_io_rename(int dirfd, const char *from, const char *to)
{
	int injected = SEL_FAILPOINT(SEL_FP_DISK_RENAME);

	if (injected < 0)
		return injected;
	/*
	 * Over whatever file bears the name, atomically (R-WRITE-4): rank
	 * zero's index decides a key is to be stored, and a file an unlink
	 * failed to remove on one rank must not block that key there forever.
	 */
	return errno_or(renameat(dirfd, from, dirfd, to));
}

int rec_io_unlink(int dirfd, const char *name)
{
	int injected = SEL_FAILPOINT(SEL_FP_DISK_UNLINK);

	if (injected < 0)
		return injected;
	return errno_or(unlinkat(dirfd, name, 0));
}

int rec_io_create_fresh(int dirfd, const char *name, int open_flags, mode_t mode)
{
	int fd;

	if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
		return -errno;
	fd = openat(dirfd, name, open_flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
	return fd < 0 ? -errno : fd;
}

int rec_io_probe_direct(int dirfd, int *reason)
{
	static const char probe[] = ".selene-direct-probe.tmp";
	void *block;
	int fd, ret = 1;

	*reason = 0;
	fd = rec_io_create_fresh(dirfd, probe, O_RDWR | O_DIRECT, 0600);
	if (fd < 0) {
		*reason = -fd;
		/* A full disk cannot say: buffered I/O is right either way. */
		if (fd != -EINVAL && fd != -ENOSPC && fd != -EDQUOT)
			return fd;
		unlinkat(dirfd, probe, 0);
		return 0;
	}
	if (posix_memalign(&block, SEL_BLOCK_BYTES, SEL_BLOCK_BYTES) != 0) {
		ret = -ENOMEM;
		goto out_close;
	}
	memset(block, 0, SEL_BLOCK_BYTES);
	errno = 0;
	if (pwrite(fd, block, SEL_BLOCK_BYTES, 0) != (ssize_t)SEL_BLOCK_BYTES) {
		*reason = errno ? errno : EIO;
		ret = *reason == EINVAL || *reason == ENOSPC || *reason == EDQUOT ? 0 : -*reason;
	}
	free(block);
out_close:
	close(fd);
	unlinkat(dirfd, probe, 0);
	return ret;
}

bool rec_io_memory_backed(int fd)
{
	struct statfs st;

	if (fstatfs(fd, &st) != 0)
		return false;
	return (unsigned long)st.f_type == TMPFS_MAGIC ||
	       (unsigned long)st.f_type == RAMFS_MAGIC;
}
