/*
 * Record directories: open under an exclusive flock, and the startup scan.
 * Rules R-DIR-* are in FORMAT.md.
 */
#include "record/dir.h"

#include "common/base.h"
#include "common/failpoint.h"
#include "common/limits.h"
#include "common/log.h"
#include "record/catalog.h"
#include "record/file.h"
#include "record/io.h"
#include "selene/selene.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

struct rec_dir {
	int fd;
	bool direct;
	bool durable;
	bool memory_backed;
	struct rec_identity namespace_id;
	struct rec_geometry geometry;
	char path[PATH_MAX];
	/*
	 * R-DIR-10: the records as the scan found them and record/file.h's
	 * notes changed them since; saved at close once catalogued (a scan
	 * filled it). Read without the lock only by the scan's threads.
	 */
	pthread_mutex_t catalog_lock;
	struct rec_catalog catalog;
	bool catalogued;
};

/* mkdir -p: creates every missing component of path. */
static int make_path(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Says once per process that O_DIRECT is refused, and why. */
static void report_buffered(const char *path, int reason)
{
	static bool said;

	if (__atomic_exchange_n(&said, true, __ATOMIC_RELAXED))
		return;
	if (reason == ENOSPC || reason == EDQUOT)
		sel_warn("cannot probe O_DIRECT in %s (%s); using buffered I/O", path,
			 strerror(reason));
	else
		sel_warn("O_DIRECT refused in %s (%s); using buffered I/O", path,
			 strerror(reason));
}

static int dir_lock_and_probe(struct rec_dir *dir, bool no_direct, char *err,
			      size_t err_size)
{
	int reason, ret;

	dir->fd = open(dir->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir->fd < 0)
		return sel_fail(-errno, err, err_size, "cannot open %s: %s",
				dir->path, strerror(errno));
	/* R-DIR-1: the lock comes before any file is read or deleted. */
	if (flock(dir->fd, LOCK_EX | LOCK_NB) != 0)
		return errno == EWOULDBLOCK ?
			       sel_fail(SEL_ELOCKED, err, err_size,
					"record directory %s is in use by another "
					"process (its flock is held)", dir->path) :
			       sel_fail(-errno, err, err_size, "cannot lock %s: %s",
					dir->path, strerror(errno));
	dir->memory_backed = rec_io_memory_backed(dir->fd);
	if (no_direct)
		return 0;
	ret = rec_io_probe_direct(dir->fd, &reason);
	if (ret < 0)
		return sel_fail(ret, err, err_size, "cannot probe %s: %s",
				dir->path, strerror(-ret));
	dir->direct = ret == 1;
	if (!dir->direct)
		report_buffered(dir->path, reason);
	return 0;
}

int rec_dir_open(const struct rec_dir_options *options, struct rec_dir **out,
		 char *err, size_t err_size)
{
	char name[REC_DIR_NAME_BYTES];
	struct rec_dir *dir;
	int ret;

	*out = NULL;
	dir = calloc(1, sizeof(*dir));
	if (!dir)
		return sel_fail(-ENOMEM, err, err_size, "out of memory");
	dir->fd = -1;
	pthread_mutex_init(&dir->catalog_lock, NULL);
	rec_catalog_init(&dir->catalog);
	dir->durable = options->durable;
	dir->namespace_id = *options->namespace_id;
	dir->geometry = *options->geometry;
	rec_dir_name(name, options->namespace_id, &options->geometry->fingerprint);
	if (!options->base_path || !options->base_path[0]) {
		/* "" would put the directory at the filesystem's root */
		ret = sel_fail(-EINVAL, err, err_size, "the base path is empty");
		goto err_free;
	}
	if (snprintf(dir->path, sizeof(dir->path), "%s/%s", options->base_path,
		     name) >= (int)sizeof(dir->path)) {
		ret = sel_fail(-ENAMETOOLONG, err, err_size, "base path too long");
		goto err_free;
	}
	ret = make_path(dir->path);
	if (ret) {
		sel_fail(ret, err, err_size, "cannot create %s: %s", dir->path,
			 strerror(-ret));
		goto err_free;
	}
	ret = dir_lock_and_probe(dir, options->no_direct, err, err_size);
	if (ret)
		goto err_free;
	*out = dir;
	return 0;
err_free:
	rec_dir_close(dir);
	return ret;
}

/*
 * R-DIR-10: the cache must not reach the disk before the records it stands
 * for. Durable records are there at commit; where the file system keeps
 * them in memory a power cut takes the cache too; anywhere else the file
 * system is flushed first (a record written through the page cache lands
 * in preallocated space, its length and times final at once). A durable
 * directory is taken to have been durable in the runs before (a record an
 * earlier, non-durable run left unflushed is not flushed here).
 */
static int close_flush(struct rec_dir *dir)
{
	if (dir->durable || dir->memory_backed)
		return 0;
	return syncfs(dir->fd) == 0 ? 0 : -errno;
}

void rec_dir_close(struct rec_dir *dir)
{
	int ret;

	if (!dir)
		return;
	/* The engines are closed (or made the catalogue forgotten). */
	pthread_mutex_lock(&dir->catalog_lock);
	if (dir->catalogued) {
		ret = close_flush(dir);
		if (!ret)
			ret = rec_catalog_save(&dir->catalog, dir->fd, &dir->geometry,
					       &dir->namespace_id, dir->durable);
		if (ret)
			sel_warn("cannot save the scan cache of %s: %s; the next start reads "
				 "every header", dir->path, sel_strerror(ret));
	}
	pthread_mutex_unlock(&dir->catalog_lock);
	if (dir->fd >= 0)
		close(dir->fd);
	rec_catalog_free(&dir->catalog);
	pthread_mutex_destroy(&dir->catalog_lock);
	free(dir);
}

/* An entry that cannot be kept is dropped: its file is read at the next scan. */
static void catalog_put(struct rec_dir *dir, const struct rec_catalog_entry *e)
{
	if (rec_catalog_put(&dir->catalog, e))
		rec_catalog_remove(&dir->catalog, &e->info.key);
}

void rec_dir_note_record(struct rec_dir *dir, const struct rec_header *h, const struct stat *st)
{
	struct rec_catalog_entry e = {
		.info = { .key = h->key, .parent = h->parent, .bucket = h->bucket,
			  .first_page_index = h->first_page_index,
			  .tail_page_count = h->tail_page_count, .created_ns = h->created_ns },
	};
	bool known;

	rec_file_stamp_of(st, &e.stamp);
	e.info.file_bytes = e.stamp.bytes;
	e.info.mtime_ns = e.stamp.mtime_ns;
	/* row presence from the length stat saw (R-REC-10), as a scan would */
	known = rec_header_check_length(h, e.stamp.bytes, &e.info.row_present, NULL, 0) == 0;
	rec_header_agreement_digest(h, &e.info.agreement);
	pthread_mutex_lock(&dir->catalog_lock);
	if (dir->catalogued && known)
		catalog_put(dir, &e);
	else if (dir->catalogued)
		rec_catalog_remove(&dir->catalog, &h->key);
	pthread_mutex_unlock(&dir->catalog_lock);
}

void rec_dir_forget_catalog(struct rec_dir *dir)
{
	pthread_mutex_lock(&dir->catalog_lock);
	dir->catalogued = false;
	pthread_mutex_unlock(&dir->catalog_lock);
}

void rec_dir_note_unlinked(struct rec_dir *dir, const struct rec_key *key)
{
	pthread_mutex_lock(&dir->catalog_lock);
	if (dir->catalogued)
		rec_catalog_remove(&dir->catalog, key);
	pthread_mutex_unlock(&dir->catalog_lock);
}

int rec_dir_fd(const struct rec_dir *dir)
{
	return dir->fd;
}

const char *rec_dir_path(const struct rec_dir *dir)
{
	return dir->path;
}

bool rec_dir_direct(const struct rec_dir *dir)
{
	return dir->direct;
}

bool rec_dir_memory_backed(const struct rec_dir *dir)
{
	return dir->memory_backed;
}

bool rec_dir_durable(const struct rec_dir *dir)
{
	return dir->durable;
}

const struct rec_geometry *rec_dir_geometry(const struct rec_dir *dir)
{
	return &dir->geometry;
}

const struct rec_identity *rec_dir_namespace(const struct rec_dir *dir)
{
	return &dir->namespace_id;
}

void rec_dir_expect(const struct rec_dir *dir, const struct rec_key *key,
		    struct rec_expect *out)
{
	memset(out, 0, sizeof(*out));
	out->namespace_id = &dir->namespace_id;
	out->fingerprint = &dir->geometry.fingerprint;
	out->geometry = &dir->geometry;
	out->key = key;
}

bool rec_dir_marked(const struct rec_dir *dir)
{
	struct stat st;

	return fstatat(dir->fd, REC_CLUSTER_MARKER_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISREG(st.st_mode);
}

int rec_dir_mark(struct rec_dir *dir, uint32_t world_size)
{
	static const char tmp[] = REC_CLUSTER_MARKER_NAME ".tmp";
	char text[256], hex[2 * REC_DIGEST_BYTES + 1];
	int fd, len, ret = 0;

	for (uint32_t i = 0; i < REC_DIGEST_BYTES; i++)
		snprintf(hex + 2 * i, 3, "%02x", dir->geometry.layout_digest.bytes[i]);
	len = snprintf(text, sizeof(text), "selene cluster marker 1\nworld %u\nlayout %s\n",
		       world_size, hex);
	fd = rec_io_create_fresh(dir->fd, tmp, O_WRONLY, 0644);
	if (fd < 0)
		return fd;
	if (write(fd, text, (size_t)len) != len)
		ret = errno ? -errno : -EIO;
	if (!ret && dir->durable && fdatasync(fd) != 0)
		ret = -errno;
	close(fd);
	if (!ret && renameat(dir->fd, tmp, dir->fd, REC_CLUSTER_MARKER_NAME) != 0)
		ret = -errno;
	if (!ret && dir->durable && fsync(dir->fd) != 0)
		ret = -errno;
	if (ret)
		unlinkat(dir->fd, tmp, 0);
	return ret;
}

/* A scanned record and its fate while the scan decides. */
struct scan_entry {
	struct rec_record_info info;
	struct rec_file_stamp stamp; /* the file's when info was learned */
	uint32_t child_count;
	bool keep;
	bool orphan; /* dropped because its parent is missing */
	bool held;   /* left in place, out of the records, summarised as held:
			unreadable, or depends on a file that is */
};

/* A record file listed by the scan, read once the listing is done. */
struct scan_pending {
	char name[REC_FILE_NAME_BYTES];
	struct rec_key key;
};

struct scan_state {
	struct rec_dir *dir;
	struct rec_scan *out;
	struct scan_entry *entries;
	size_t count;
	size_t capacity;
	struct scan_pending *pending;
	size_t pending_count;
	size_t pending_capacity;
	struct rec_file_buffers buffers; /* the scan thread's reader buffers */
	char ignored_names[REC_SCAN_IGNORED_NAMED][NAME_MAX + 1]; /* the first ignored */
};

/* Deletes name; a failure names the file in the scan's result. */
static int scan_delete(struct scan_state *s, const char *name,
		       enum sel_failpoint before, enum sel_failpoint after)
{
	int ret = SEL_FAILPOINT(before);

	if (ret >= 0)
		ret = rec_io_unlink(s->dir->fd, name);
	if (ret < 0 && ret != -ENOENT) {
		snprintf(s->out->failed_delete, sizeof(s->out->failed_delete), "%s/%s",
			 s->dir->path, name);
		return ret;
	}
	ret = SEL_FAILPOINT(after);
	return ret < 0 ? ret : 0;
}

static int scan_push(struct scan_state *s, const struct rec_catalog_entry *file)
{
	if (s->count == s->capacity) {
		size_t capacity = s->capacity ? s->capacity * 2 : 256;
		struct scan_entry *grown;

		if (s->count >= REC_DIR_RECORDS_MAX)
			return SEL_ETOOBIG;
		grown = realloc(s->entries, capacity * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		s->entries = grown;
		s->capacity = capacity;
	}
	s->entries[s->count++] = (struct scan_entry){ .info = file->info, .stamp = file->stamp };
	return 0;
}

/*
 * Checksum segment bytes a scan's reader holds: records of up to 8192
 * pages; a larger one is read with buffers of its own.
 */
#define SCAN_CHECKSUM_BYTES (64u << 10)

static int scan_buffers_alloc(struct rec_file_buffers *b)
{
	void *checksums = NULL, *header = NULL;

	b->checksums = NULL;
	b->header_block = NULL;
	b->checksum_bytes = SCAN_CHECKSUM_BYTES;
	if (posix_memalign(&checksums, SEL_BLOCK_BYTES, SCAN_CHECKSUM_BYTES) ||
	    posix_memalign(&header, SEL_BLOCK_BYTES, REC_HEADER_BYTES)) {
		free(checksums);
		return -ENOMEM;
	}
	b->checksums = checksums;
	b->header_block = header;
	return 0;
}

static void scan_buffers_free(struct rec_file_buffers *b)
{
	free(b->checksums);
	free(b->header_block);
	b->checksums = NULL;
	b->header_block = NULL;
}

/*
 * R-DIR-10: the scan cache's entry for name when the file is the one it
 * describes (its stamp unchanged), without reading it.
 */
static bool scan_cached(struct rec_dir *dir, const char *name, const struct rec_key *key,
			struct rec_catalog_entry *file)
{
	const struct rec_catalog_entry *e = rec_catalog_find(&dir->catalog, key);
	struct rec_file_stamp stamp;
	struct stat st;

	if (!e || e->stamp.ctime_ns >= dir->catalog.trust_before_ns ||
	    fstatat(dir->fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
		return false;
	rec_file_stamp_of(&st, &stamp);
	if (!rec_file_stamp_equal(&stamp, &e->stamp))
		return false;
	*file = *e;
	return true;
}

/*
 * Learns one record file's header and length (R-READ-1, R-DIR-4) from the
 * scan cache, or by reading it with buffers (or buffers of its own when
 * its checksum segment is larger), counting each in *cache_hits or
 * *headers_read. Touches
 * nothing: 0, or what rec_reader_open returned (why says it).
 */
static int scan_read(struct rec_dir *dir, const char *name, const struct rec_key *key,
		     const struct rec_file_buffers *buffers, struct rec_catalog_entry *file,
		     uint64_t *cache_hits, uint64_t *headers_read, char *why, size_t why_size)
{
	struct rec_expect expect;
	struct rec_reader r;
	int ret;

	if (scan_cached(dir, name, key, file)) {
		__atomic_fetch_add(cache_hits, 1, __ATOMIC_RELAXED);
		return 0;
	}
	__atomic_fetch_add(headers_read, 1, __ATOMIC_RELAXED);
	rec_dir_expect(dir, key, &expect);
	ret = rec_reader_open_with(&r, dir->fd, name, false, &expect, buffers, why,
				   why_size);
	if (ret == -EOVERFLOW)
		ret = rec_reader_open(&r, dir->fd, name, false, &expect, why, why_size);
	if (ret)
		return ret;
	*file = (struct rec_catalog_entry){
		.info = { .key = *key, .parent = r.header.parent, .bucket = r.header.bucket,
			  .first_page_index = r.header.first_page_index,
			  .tail_page_count = r.header.tail_page_count,
			  .row_present = r.row_present, .file_bytes = r.file_length,
			  .mtime_ns = r.stamp.mtime_ns, .created_ns = r.header.created_ns },
		.stamp = r.stamp,
	};
	rec_header_agreement_digest(&r.header, &file->info.agreement);
	rec_reader_close(&r);
	return 0;
}

/* R-DIR-3, R-DIR-4: validates one record file; invalid ones are deleted. */
static int scan_record(struct scan_state *s, const char *name,
		       const struct rec_key *key)
{
	struct rec_catalog_entry file;
	char why[256];
	int ret;

	ret = scan_read(s->dir, name, key, &s->buffers, &file, &s->out->cache_hits,
			&s->out->headers_read, why, sizeof(why));
	if (sel_is_selene_error(ret)) {
		sel_warn("scan %s: dropping %s: %s", s->dir->path, name, why);
		s->out->invalid_dropped++;
		return scan_delete(s, name, SEL_FP_SCAN_BEFORE_DROP_INVALID,
				   SEL_FP_SCAN_AFTER_DROP_INVALID);
	}
	if (ret == -ENOENT || ret == -ENXIO)
		return 0; /* removed or replaced since it was listed */
	if (ret == -ENOMEM)
		return ret;
	if (ret) {
		/* Never delete what could not be read: it may be good tomorrow. */
		sel_warn("scan %s: skipping %s, cannot read it: %s; left in place and "
			 "listed as held", s->dir->path, name, sel_strerror(ret));
		s->out->unreadable_skipped++;
		/* its key, from its name: a child must find it (R-DIR-5) and be held */
		file = (struct rec_catalog_entry){ .info.key = *key };
		ret = scan_push(s, &file);
		if (!ret)
			s->entries[s->count - 1].held = true;
		return ret;
	}
	return scan_push(s, &file);
}

/* Notes a record file to read once the listing is done. */
static int scan_defer(struct scan_state *s, const char *name, const struct rec_key *key)
{
	if (s->pending_count == s->pending_capacity) {
		size_t capacity = s->pending_capacity ? s->pending_capacity * 2 : 256;
		struct scan_pending *grown;

		if (s->pending_count >= REC_DIR_RECORDS_MAX)
			return SEL_ETOOBIG;
		grown = realloc(s->pending, capacity * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		s->pending = grown;
		s->pending_capacity = capacity;
	}
	SEL_ASSERT(strlen(name) < sizeof(s->pending[0].name));
	strcpy(s->pending[s->pending_count].name, name);
	s->pending[s->pending_count++].key = *key;
	return 0;
}

/* Whether name is a regular file (not a directory, FIFO or symlink). */
static bool is_regular(struct scan_state *s, const struct dirent *entry)
{
	struct stat st;

	if (entry->d_type != DT_UNKNOWN)
		return entry->d_type == DT_REG;
	return fstatat(s->dir->fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	       S_ISREG(st.st_mode);
}

/*
 * A directory, symlink, FIFO or socket named like a record would block
 * every store of that key: renamed to NAME.aside (never deleted: it is not
 * Selene's) and reported, so the key is free again.
 */
static int scan_move_aside(struct scan_state *s, const char *name)
{
	char aside[NAME_MAX + sizeof(REC_ASIDE_SUFFIX)];

	snprintf(aside, sizeof(aside), "%s%s", name, REC_ASIDE_SUFFIX);
	if (renameat(s->dir->fd, name, s->dir->fd, aside) != 0) {
		sel_warn("scan %s: %s is not a regular file and cannot be moved aside (%s): "
			 "stores of its key will fail until it is removed", s->dir->path, name,
			 strerror(errno));
		s->out->ignored++;
		return 0;
	}
	sel_warn("scan %s: %s is not a regular file; moved aside to %s", s->dir->path, name,
		 aside);
	s->out->moved_aside++;
	return 0;
}

/*
 * R-DIR-2: a file that is not Selene's, left alone. Counted, and the first
 * few named, for the one warning scan_warn_ignored gives.
 */
static void scan_ignore(struct scan_state *s, const char *name)
{
	if (s->out->ignored < REC_SCAN_IGNORED_NAMED)
		snprintf(s->ignored_names[s->out->ignored], sizeof(s->ignored_names[0]), "%s",
			 name);
	s->out->ignored++;
}

/* One warning for every ignored file: the count and the first few names. */
static void scan_warn_ignored(const struct scan_state *s)
{
	char names[REC_SCAN_IGNORED_NAMED * (NAME_MAX + 3)];
	size_t used = 0;

	if (s->out->ignored == 0)
		return;
	names[0] = '\0';
	for (uint64_t i = 0; i < s->out->ignored && i < REC_SCAN_IGNORED_NAMED; i++) {
		int n = snprintf(names + used, sizeof(names) - used, "%s%s", i ? ", " : "",
				 s->ignored_names[i]);

		used += n > 0 ? (size_t)n : 0;
	}
	sel_warn("scan %s: ignoring %llu file%s that %s not record files, left in place: "
		 "%s%s", s->dir->path, (unsigned long long)s->out->ignored,
		 s->out->ignored == 1 ? "" : "s", s->out->ignored == 1 ? "is" : "are", names,
		 s->out->ignored > REC_SCAN_IGNORED_NAMED ? ", ..." : "");
}

/* R-DIR-2: classifies one directory entry. */
static int scan_entry(struct scan_state *s, const struct dirent *entry)
{
	const char *name = entry->d_name;
	size_t len = strlen(name);
	struct rec_key key;
	bool tmp;

	if (strcmp(name, REC_CLUSTER_MARKER_NAME) == 0 || strcmp(name, REC_SCAN_CACHE_NAME) == 0)
		return 0; /* the cluster marker or the scan cache: ours, not records */
	if (!is_regular(s, entry)) {
		if (rec_file_name_parse(name, &key, &tmp))
			return scan_move_aside(s, name);
		scan_ignore(s, name);
		return 0;
	}
	if (len > 4 && strcmp(name + len - 4, REC_TMP_SUFFIX) == 0) {
		s->out->tmp_deleted++;
		return scan_delete(s, name, SEL_FP_SCAN_BEFORE_DELETE_TMP,
				   SEL_FP_SCAN_AFTER_DELETE_TMP);
	}
	if (!rec_file_name_parse(name, &key, &tmp)) {
		scan_ignore(s, name);
		return 0;
	}
	return scan_defer(s, name, &key);
}

static int compare_entry_keys(const void *a, const void *b)
{
	return rec_key_compare(&((const struct scan_entry *)a)->info.key,
			    &((const struct scan_entry *)b)->info.key);
}

static struct scan_entry *find_entry(struct scan_state *s,
				     const struct rec_key *key)
{
	size_t lo = 0, hi = s->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = rec_key_compare(&s->entries[mid].info.key, key);

		if (c == 0)
			return &s->entries[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/*
 * R-DIR-5, R-DIR-6: entries are sorted by key, so a parent (whose consumed
 * count is smaller, R-REC-6) is decided before its children. Ascending:
 * keep roots and children of kept parents. Descending: drop page-only
 * records with no kept child, which may leave their parent childless.
 */
static void scan_decide(struct scan_state *s)
{
	if (s->count > 1)
		qsort(s->entries, s->count, sizeof(s->entries[0]), compare_entry_keys);
	for (size_t i = 0; i < s->count; i++) {
		struct scan_entry *e = &s->entries[i];
		struct scan_entry *parent;

		if (e->held)
			continue;
		if (e->info.parent.consumed != 0) {
			parent = find_entry(s, &e->info.parent);
			if (parent && parent->held) {
				e->held = true; /* its parent may be good tomorrow */
				continue;
			}
		}
		if (e->info.parent.consumed == 0) {
			e->keep = true;
			continue;
		}
		parent = find_entry(s, &e->info.parent);
		e->keep = parent && parent->keep;
		e->orphan = !e->keep;
		if (e->keep)
			parent->child_count++;
		else
			s->out->orphans_dropped++;
	}
	for (size_t i = s->count; i-- > 0;) {
		struct scan_entry *e = &s->entries[i];

		if (!e->keep || e->info.row_present || e->child_count > 0)
			continue;
		e->keep = false;
		/* an unreadable file may be its child: hold it (R-DIR-7) */
		e->held = s->out->unreadable_skipped > 0;
		s->out->page_only_dropped += !e->held;
		if (e->info.parent.consumed != 0)
			find_entry(s, &e->info.parent)->child_count--;
	}
}

/* Deletes what scan_decide dropped, children before parents. */
static int scan_remove_dropped(struct scan_state *s)
{
	char name[REC_FILE_NAME_BYTES];
	int ret;

	for (size_t i = s->count; i-- > 0;) {
		if (s->entries[i].keep || s->entries[i].held)
			continue;
		rec_file_name(name, &s->entries[i].info.key);
		sel_info("scan %s: dropping %s: %s", s->dir->path, name,
			 s->entries[i].orphan ? "its parent is missing" :
						"page-only with no children");
		ret = scan_delete(s, name, SEL_FP_SCAN_BEFORE_DROP_ORPHAN,
				  SEL_FP_SCAN_AFTER_DROP_ORPHAN);
		if (ret)
			return ret;
	}
	return 0;
}

static int compare_access(const void *a, const void *b)
{
	const struct rec_record_info *x = a, *y = b;

	if (x->mtime_ns != y->mtime_ns)
		return x->mtime_ns < y->mtime_ns ? -1 : 1;
	return rec_key_compare(&x->key, &y->key);
}

static int scan_collect(struct scan_state *s)
{
	struct rec_scan *out = s->out;

	out->records = malloc((s->count ? s->count : 1) * sizeof(*out->records));
	out->held = malloc((s->count ? s->count : 1) * sizeof(*out->held));
	if (!out->records || !out->held)
		return -ENOMEM;
	for (size_t i = 0; i < s->count; i++) {
		/* entries are sorted by key (scan_decide): so is held */
		if (s->entries[i].held)
			out->held[out->held_count++] = s->entries[i].info.key;
		if (!s->entries[i].keep)
			continue;
		out->records[out->record_count++] = s->entries[i].info;
		out->bytes += s->entries[i].info.file_bytes;
	}
	/* R-DIR-4: access order from mtime, oldest first. */
	if (out->record_count > 1)
		qsort(out->records, out->record_count, sizeof(out->records[0]),
		      compare_access);
	return 0;
}

/*
 * Listed record files at which the scan reads headers on several threads
 * (below it, thread start-up costs more than it saves), and the files each
 * thread takes at a time: a thread that is slow (preempted, or waiting on
 * the disk) holds up no share but its own batch.
 */
#define SCAN_PARALLEL_MIN 1024u
#define SCAN_BATCH 64u

/* The listed records the scan's threads read, touching nothing. */
struct scan_shared {
	struct scan_state *s;
	struct rec_catalog_entry *files; /* indexed like pending */
	int *results;                    /* the same; 0: files[i] was learned */
	size_t next;                   /* the first record no thread took */
};

struct scan_worker {
	struct scan_shared *shared;
	struct rec_file_buffers buffers;
	pthread_t thread;
	bool started;
};

static void *scan_worker_main(void *arg)
{
	struct scan_worker *w = arg;
	struct scan_shared *sh = w->shared;
	size_t count = sh->s->pending_count, first;
	char why[256];

	while ((first = __atomic_fetch_add(&sh->next, SCAN_BATCH, __ATOMIC_RELAXED)) < count)
		for (size_t i = first; i < count && i < first + SCAN_BATCH; i++) {
			uint64_t read = 0;

			sh->results[i] = scan_read(sh->s->dir, sh->s->pending[i].name,
						   &sh->s->pending[i].key, &w->buffers,
						   &sh->files[i], &sh->s->out->cache_hits,
						   &read, why, sizeof(why));
			/* A failed read is read again, and counted, by scan_record. */
			if (sh->results[i] == 0 && read)
				__atomic_fetch_add(&sh->s->out->headers_read, 1,
						   __ATOMIC_RELAXED);
		}
	return NULL;
}

/*
 * Every rank of a host scans at once, so a small machine is not flooded
 * with threads that only share its cores.
 */
uint32_t rec_dir_scan_threads(size_t pending)
{
	size_t threads = pending / 256, cores = 1;
	cpu_set_t cpus;

	if (pending < SCAN_PARALLEL_MIN)
		return 1;
	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 1)
		cores = (size_t)CPU_COUNT(&cpus);
	if (cores < 4)
		cores = 4;
	if (threads > cores)
		threads = cores;
	return threads < REC_SCAN_THREADS_MAX ? (uint32_t)threads : REC_SCAN_THREADS_MAX;
}

/*
 * Reads the listed records on several threads. Each record read whole is
 * pushed; any other, in listing order, goes through scan_record on this
 * thread as a single-threaded scan would: it is read again, and logged,
 * skipped, dropped or fatal there.
 */
static int scan_read_parallel(struct scan_state *s, uint32_t threads)
{
	struct rec_catalog_entry *files = malloc(s->pending_count * sizeof(*files));
	int *results = malloc(s->pending_count * sizeof(*results));
	struct scan_shared shared = { .s = s, .files = files, .results = results };
	struct scan_worker workers[REC_SCAN_THREADS_MAX] = { 0 };
	int ret = files && results ? 0 : -ENOMEM;

	for (uint32_t t = 0; !ret && t < threads; t++) {
		struct scan_worker *w = &workers[t];

		w->shared = &shared;
		ret = scan_buffers_alloc(&w->buffers);
		if (ret)
			break;
		w->started = sel_thread_start(&w->thread, scan_worker_main, w) == 0;
	}
	/* This thread reads too: whatever no thread took (all, if none started). */
	if (!ret)
		scan_worker_main(&(struct scan_worker){ .shared = &shared,
							.buffers = s->buffers });
	for (uint32_t t = 0; t < threads; t++) {
		if (workers[t].started)
			pthread_join(workers[t].thread, NULL);
		scan_buffers_free(&workers[t].buffers);
	}
	for (size_t i = 0; !ret && i < s->pending_count; i++)
		ret = results[i] == 0 ? scan_push(s, &files[i]) :
					scan_record(s, s->pending[i].name, &s->pending[i].key);
	free(results);
	free(files);
	return ret;
}

/* R-DIR-3, R-DIR-4: reads every listed record file. */
static int scan_read_pending(struct scan_state *s)
{
	uint32_t threads = rec_dir_scan_threads(s->pending_count);
	int ret = 0;

	if (threads > 1)
		return scan_read_parallel(s, threads);
	for (size_t i = 0; !ret && i < s->pending_count; i++)
		ret = scan_record(s, s->pending[i].name, &s->pending[i].key);
	return ret;
}

static int scan_directory(struct scan_state *s)
{
	struct dirent *entry;
	DIR *listing;
	int fd, ret = 0;

	fd = openat(s->dir->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	listing = fdopendir(fd);
	if (!listing) {
		close(fd);
		return -errno;
	}
	while (!ret && (errno = 0, entry = readdir(listing)) != NULL) {
		if (entry->d_name[0] == '.' &&
		    (entry->d_name[1] == '\0' ||
		     (entry->d_name[1] == '.' && entry->d_name[2] == '\0')))
			continue;
		ret = scan_entry(s, entry);
	}
	if (!ret && errno)
		ret = -errno;
	closedir(listing);
	scan_warn_ignored(s);
	if (!ret)
		ret = scan_read_pending(s);
	return ret;
}

/*
 * R-DIR-10: the scan cache a clean close left, taken in and deleted before
 * anything changes, so that only a clean close ever leaves one (a second
 * scan with one handle finds none). One that cannot be deleted is emptied,
 * so that no later scan takes it; failing that too, it is left, and said.
 */
static void scan_load_cache(struct rec_dir *dir)
{
	char why[256] = "";
	int fd, ret;

	ret = rec_catalog_load(&dir->catalog, dir->fd, &dir->geometry, &dir->namespace_id, why,
			       sizeof(why));
	if (ret && ret != -ENOENT)
		sel_warn("scan %s: ignoring its scan cache: %s; reading every header", dir->path,
			 sel_is_selene_error(ret) ? why : sel_strerror(ret));
	if (ret == -ENOENT)
		return;
	if (unlinkat(dir->fd, REC_SCAN_CACHE_NAME, 0) == 0 &&
	    (!dir->durable || fsync(dir->fd) == 0))
		return;
	sel_warn("scan %s: cannot delete its scan cache (%s); reading every header",
		 dir->path, strerror(errno));
	rec_catalog_clear(&dir->catalog);
	fd = openat(dir->fd, REC_SCAN_CACHE_NAME, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0 && (!dir->durable || fdatasync(fd) == 0)) {
		close(fd);
		return;
	}
	if (fd >= 0)
		close(fd);
	if (errno != ENOENT)
		sel_warn("scan %s: cannot empty its scan cache either (%s): remove %s/%s before "
			 "the next start after a crash", dir->path, strerror(errno), dir->path,
			 REC_SCAN_CACHE_NAME);
}

/* R-DIR-10: the records kept, as the catalogue the notes keep from now on. */
static void scan_catalogue(struct scan_state *s)
{
	struct rec_dir *dir = s->dir;
	int ret = 0;

	pthread_mutex_lock(&dir->catalog_lock);
	rec_catalog_clear(&dir->catalog);
	for (size_t i = 0; !ret && i < s->count; i++)
		if (s->entries[i].keep)
			ret = rec_catalog_put(&dir->catalog,
					      &(struct rec_catalog_entry){
						      .info = s->entries[i].info,
						      .stamp = s->entries[i].stamp });
	/* out of memory: no cache at close, and the next start reads every header */
	dir->catalogued = ret == 0;
	pthread_mutex_unlock(&dir->catalog_lock);
}

int rec_dir_scan(struct rec_dir *dir, struct rec_scan *out)
{
	struct scan_state s = { .dir = dir, .out = out };
	int ret;

	memset(out, 0, sizeof(*out));
	scan_load_cache(dir);
	ret = scan_buffers_alloc(&s.buffers);
	if (!ret)
		ret = scan_directory(&s);
	if (!ret) {
		scan_decide(&s);
		ret = scan_remove_dropped(&s);
	}
	if (!ret)
		ret = scan_collect(&s);
	if (!ret)
		scan_catalogue(&s);
	scan_buffers_free(&s.buffers);
	free(s.pending);
	free(s.entries);
	if (ret) {
		rec_scan_free(out);
		return ret;
	}
	sel_info("scan %s: %zu records kept (%llu bytes); deleted %llu temporary, "
		 "%llu invalid, %llu orphaned, %llu page-only; skipped %llu unreadable "
		 "(%zu records held); moved %llu aside; %llu headers read, %llu from the "
		 "scan cache",
		 dir->path, out->record_count, (unsigned long long)out->bytes,
		 (unsigned long long)out->tmp_deleted,
		 (unsigned long long)out->invalid_dropped,
		 (unsigned long long)out->orphans_dropped,
		 (unsigned long long)out->page_only_dropped,
		 (unsigned long long)out->unreadable_skipped, out->held_count,
		 (unsigned long long)out->moved_aside,
		 (unsigned long long)out->headers_read,
		 (unsigned long long)out->cache_hits);
	return 0;
}

void rec_scan_free(struct rec_scan *scan)
{
	free(scan->records);
	free(scan->held);
	scan->records = NULL;
	scan->record_count = 0;
	scan->held = NULL;
	scan->held_count = 0;
}

int rec_dir_scan_failed(const struct rec_dir *dir, const struct rec_scan *scan, int ret,
			char *err, size_t err_size)
{
	if (scan->failed_delete[0])
		return sel_fail(ret, err, err_size, "scanning %s: cannot delete %s: %s", dir->path,
				scan->failed_delete, sel_strerror(ret));
	return sel_fail(ret, err, err_size, "scanning %s: %s", dir->path, sel_strerror(ret));
}

bool rec_dir_scan_marked(const struct rec_dir *dir, const struct rec_scan *scan)
{
	if (scan->record_count == 0 && scan->unreadable_skipped > 0)
		return false;
	return rec_dir_marked(dir);
}
